/* engine/kernels.c — placeholder until the CPU kernels land. */
int df_k_placeholder(void) { return 0; }
