/* engine/kernels/dispatch.h — the kernels' runtime choices: which instruction set runs and
 * how many threads every parallel region uses (engine/kernels/dispatch.c).
 *
 * Owns: the ISA, detected once and forceable by tests, and the process-wide team size.
 * Every kernel file reads them from here, so no kernel file depends on another. Does not
 * own: the kernels (engine/kernels/kernels.h).
 */
#ifndef DF_ENGINE_KERNELS_DISPATCH_H
#define DF_ENGINE_KERNELS_DISPATCH_H

/* Instruction set used by the kernels. */
typedef enum { DF_ISA_SCALAR = 0, DF_ISA_AVX2 = 1 } df_isa;

/* The ISA chosen at first use: AVX2 when the CPU has AVX2+FMA+F16C, else scalar. */
df_isa df_k_isa(void);
/* Force an ISA (tests compare paths). Requesting AVX2 on a CPU without it keeps scalar.
 * Returns the ISA now in effect. Not thread-safe: call before running kernels. */
df_isa df_k_set_isa(df_isa isa);
const char *df_k_isa_name(df_isa isa);

/* Set the team size of every kernel's OpenMP parallel region, process-wide: it holds for
 * kernels called from any thread (unlike omp_set_num_threads, which sets only the calling
 * thread's count). n <= 0 means omp_get_num_procs(); n may exceed the cores (the threads
 * then share them). Results never depend on it (reduction orders are fixed). Scratch sized
 * from df_k_max_threads() stays large enough until a later call sets a larger count.
 * Returns the count now in effect (>= 1); no errors. Thread-safe (atomic). */
int df_k_set_threads(int n);

/* Upper bound on the threads one kernel's parallel region uses (sizes attention scratch):
 * the count of the last df_k_set_threads, else the calling thread's omp_get_max_threads().
 * Always >= 1; no errors. */
int df_k_max_threads(void);

#endif
