/* engine/kernels/dispatch.h — the kernels' runtime choices: which instruction set runs and
 * how many threads every parallel region uses (engine/kernels/dispatch.c).
 *
 * Owns: the ISA, detected once and forceable by tests, and the process-wide team size.
 * Every kernel file reads them from here, so no kernel file depends on another. Does not
 * own: the kernels (engine/kernels/kernels.h).
 */
#ifndef DF_ENGINE_KERNELS_DISPATCH_H
#define DF_ENGINE_KERNELS_DISPATCH_H

/* Instruction set used by the kernels, ordered: each level includes the one below. AVX512 is
 * AVX2 + FMA + AVX-512F + AVX-512VL; a kernel without a path of its own for a level runs the
 * highest one it has (every path gives the same bits, so the level only changes speed). */
typedef enum { DF_ISA_SCALAR = 0, DF_ISA_AVX2 = 1, DF_ISA_AVX512 = 2 } df_isa;

/* The ISA in effect, chosen at first use: the highest level the CPU has (df_k_isa_hw), capped
 * by the environment variable DF_ISA ("scalar", "avx2" or "avx512"; a level above the CPU's
 * is capped to the CPU's; any other value is reported once on stderr and ignored). */
df_isa df_k_isa(void);
/* The highest level this CPU supports (detected once; ignores DF_ISA and df_k_set_isa). */
df_isa df_k_isa_hw(void);
/* Force an ISA (tests compare paths): the lower of `isa` and df_k_isa_hw(). Returns the ISA
 * now in effect. Not thread-safe: call before running kernels. */
df_isa df_k_set_isa(df_isa isa);
/* "scalar", "avx2" or "avx512"; static storage. */
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
