/* engine/kernels/dispatch.c — the ISA and thread choice of the kernels; see dispatch.h. */
#include "engine/kernels/dispatch.h"

#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define DF_HAVE_X86 1
#else
#define DF_HAVE_X86 0
#endif

static int g_isa = -1, g_isa_hw = -1;

df_isa df_k_isa_hw(void) {
  if (g_isa_hw < 0) {
    int isa = DF_ISA_SCALAR;
#if DF_HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      isa = DF_ISA_AVX2;
      if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl"))
        isa = DF_ISA_AVX512;
    }
#endif
    g_isa_hw = isa;
  }
  return (df_isa)g_isa_hw;
}

df_isa df_k_isa(void) {
  if (g_isa < 0) {
    int isa = df_k_isa_hw();
    const char *env = getenv("DF_ISA");
    if (env && *env) {
      int want = !strcmp(env, "scalar") ? DF_ISA_SCALAR
                 : !strcmp(env, "avx2") ? DF_ISA_AVX2
                 : !strcmp(env, "avx512") ? DF_ISA_AVX512 : -1;
      if (want < 0)
        fprintf(stderr, "deltafin: DF_ISA=%s ignored (expected scalar, avx2 or avx512)\n", env);
      else if (want < isa)
        isa = want;
    }
    g_isa = isa;
  }
  return (df_isa)g_isa;
}

df_isa df_k_set_isa(df_isa isa) {
  df_isa hw = df_k_isa_hw();
  g_isa = (int)(isa < hw ? isa : hw);
  return (df_isa)g_isa;
}

const char *df_k_isa_name(df_isa isa) {
  return isa == DF_ISA_AVX512 ? "avx512" : isa == DF_ISA_AVX2 ? "avx2" : "scalar";
}

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

