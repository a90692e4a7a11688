# KV-cache snapshots (engine/kv_cache.h df_kv_snap): a kimi_linear sequence continues from a
# snapshot past its recurrent states' rollback window bitwise as a fresh one (also restored
# into another cache, after truncation and decode), GQA / MLA caches (length only), snapshot
# bytes vs the cache's per-sequence state, and layout mismatches refused.
df_add_cmocka_test(test_kv_snapshot SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kv_snapshot.c
  LIBS dfengine)
