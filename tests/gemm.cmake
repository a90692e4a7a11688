# The prefill GEMM tiles (AVX2 and AVX-512; engine/kernels/kernels_gemm.c): bitwise equal to
# df_k_linear on every other ISA the CPU has, the scalar path included, and to one-row products for BF16 / F16 / F32 weights over edge shapes,
# 1-4 threads, mixed df_k_linear_multi jobs; a correct product against double precision.
df_add_cmocka_test(test_gemm SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_gemm.c LIBS dfengine)
