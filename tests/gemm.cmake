# The prefill GEMM tiles (AVX-512; engine/kernels/kernels_gemm.c): bitwise equal to df_k_linear's
# AVX2 and scalar paths and to one-row products for BF16 / F16 / F32 weights over edge shapes,
# 1-4 threads, mixed df_k_linear_multi jobs; a correct product against double precision. The
# AVX2 multi-row tile (2-17 rows) bitwise equal to the scalar path and to one-row products. The
# blocked attention (GQA and MLA, kernels_attn.c) bitwise equal to rows alone, every lower ISA
# and 1-3 threads, and correct against double precision.
df_add_cmocka_test(test_gemm SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_gemm.c LIBS dfengine)
