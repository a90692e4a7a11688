# deepseek_v3 / kimi_k2: MLA, sigmoid group-limited routing, shared experts and FP8 block
# weights against tests/reference/deepseek_ref.py's golden fixtures (tiny-ds-bf16,
# tiny-ds-fp8), batch invariance, ISA agreement, latent-cache rollback, FP8 kernels.
df_add_cmocka_test(test_deepseek SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_deepseek.c
  LIBS dfengine PkgConfig::JANSSON)
