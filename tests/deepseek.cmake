# deepseek_v3 / kimi_k2: MLA, sigmoid group-limited routing, shared experts and FP8 block
# weights against tests/reference/deepseek_ref.py's golden fixtures (tiny-ds-bf16,
# tiny-ds-fp8), batch invariance, ISA agreement, latent-cache rollback, FP8 kernels.
df_add_cmocka_test(test_deepseek SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_deepseek.c
  LIBS dfengine PkgConfig::JANSSON)

# Resident memory after loading and running an FP8 checkpoint stays near its FP8 size.
add_test(NAME ckpt_rss_ds_fp8 COMMAND ${DF_PYTHON} ${DF_REFERENCE}/make_checkpoint.py
  --preset rss-ds-fp8 --out ${PROJECT_BINARY_DIR}/ckpt/rss-ds-fp8)
set_tests_properties(ckpt_rss_ds_fp8 PROPERTIES FIXTURES_SETUP ckpt_rss_ds_fp8)
df_add_cmocka_test(test_deepseek_rss SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_deepseek_rss.c
  LIBS dfengine)
set_tests_properties(test_deepseek_rss PROPERTIES FIXTURES_REQUIRED ckpt_rss_ds_fp8)

# deltafin inspect reports the MLA cache per token: 3 layers x (kv_lora_rank 36 + qk_rope 8) x 4 B.
add_test(NAME inspect_deepseek COMMAND deltafin inspect ${DF_FIXTURES}/tiny-ds-fp8)
set_tests_properties(inspect_deepseek PROPERTIES PASS_REGULAR_EXPRESSION
  "KV cache per token +528 bytes \\(all layers; their state: fp32 latent c_kv \\+ shared k_rope, MLA")

# Speculative decoding over a deepseek target with a tiny qwen3 draft: identical greedy ids.
df_add_cmocka_test(test_deepseek_spec SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_deepseek_spec.c
  LIBS dfcoord)
