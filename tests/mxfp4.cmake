# MXFP4 (OCP MX v1.0, E2M1 + E8M0 per 32) linear weights as Kimi K3's routed experts store them:
# decode table and the real-weight vector of docs/K3.md §4, kernels bitwise equal to
# df_k_linear over the de-quantised matrix (scalar and AVX2, 1 and 2 threads), mixed
# df_k_linear_multi jobs, the tensor layer's FFNs, and df_bind_linear's binding and errors.
df_add_cmocka_test(test_mxfp4 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_mxfp4.c LIBS dfengine)
