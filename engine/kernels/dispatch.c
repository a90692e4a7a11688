/* engine/kernels/dispatch.c — the ISA and thread choice of the kernels; see dispatch.h. */
#include "engine/kernels/dispatch.h"

#include <omp.h>
#include <stdatomic.h>

#if defined(__x86_64__) || defined(__i386__)
#define DF_HAVE_X86 1
#else
#define DF_HAVE_X86 0
#endif

static int g_isa = -1;

df_isa df_k_isa(void) {
  if (g_isa < 0) {
    g_isa = DF_ISA_SCALAR;
#if DF_HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) g_isa = DF_ISA_AVX2;
#endif
  }
  return (df_isa)g_isa;
}

df_isa df_k_set_isa(df_isa isa) {
  g_isa = -1;
  df_isa best = df_k_isa();
  g_isa = (isa == DF_ISA_AVX2 && best == DF_ISA_AVX2) ? DF_ISA_AVX2 : DF_ISA_SCALAR;
  return (df_isa)g_isa;
}

const char *df_k_isa_name(df_isa isa) { return isa == DF_ISA_AVX2 ? "avx2" : "scalar"; }

/* Team size of every kernel's parallel region, process-wide; 0 until df_k_set_threads. Not
 * OpenMP's nthreads ICV: omp_set_num_threads() sets it for the calling thread only, so a
 * count set at load on the main thread would not reach kernels run on another thread (the
 * server's scheduler), whose regions would then use OpenMP's default instead. */
static atomic_int g_threads;

int df_k_set_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  atomic_store_explicit(&g_threads, n, memory_order_relaxed);
  return n;
}

int df_k_max_threads(void) {
  int n = atomic_load_explicit(&g_threads, memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}

