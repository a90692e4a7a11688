/* OpenMP thread-waiting default for Deltafin's executables.
 *
 * Why: a libgomp thread waiting at a barrier spins for 300000 iterations by default before
 * it sleeps on a futex. When another process holds the other core (a browser, a build, a
 * neighbour's job) the spinning thread burns the quantum the working thread needs and every
 * barrier of a decode step waits for the scheduler: measured here under load, decode of the
 * demo target was 2-10x slower than with a spin of 1000 iterations (a few microseconds) or
 * OMP_WAIT_POLICY=passive (docs/PERFORMANCE.md, "Thread waiting").
 *
 * How: libgomp reads its environment once, in its own shared-library constructor, and
 * exports no call that changes the wait policy afterwards. The one hook that runs before
 * any shared library's constructor is the executable's .preinit_array (System V gABI,
 * "Initialization and Termination Functions"); there libc's `environ` is not set yet and is
 * overwritten right after, so a setenv() would be lost. So, when the user has set neither
 * OMP_WAIT_POLICY nor GOMP_SPINCOUNT, a process that will run parallel kernels re-executes
 * itself (/proc/self/exe, same argv) once with GOMP_SPINCOUNT=1000 appended to its
 * environment. It happens before libtorch's static initialisers run, so the cost is one more
 * load and relocation of the binary: ~0.3 CPU-s measured here, paid only by `deltafin run`,
 * `serve` and `cluster`, df-node and the engine benchmark, never by the quick commands
 * (--version, tokenize, inspect, pull, verify). A user's own OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT always wins; child processes inherit the variable.
 *
 * Link this file into every executable that runs kernels, not into a library: the section
 * is only honoured in the executable, and a static library's object would not be pulled in.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char df_spin_default[] = "GOMP_SPINCOUNT=1000";

static int df_env_has(char **envp, const char *name) {
  size_t n = strlen(name);
  for (char **e = envp; *e; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return 1;
  return 0;
}

/* deltafin's commands that run kernels; every other executable always does */
static int df_runs_kernels(int argc, char **argv) {
  const char *slash = strrchr(argv[0], '/');
  const char *prog = slash ? slash + 1 : argv[0];
  if (strcmp(prog, "deltafin") != 0) return 1;
  return argc > 1 && (!strcmp(argv[1], "run") || !strcmp(argv[1], "serve") ||
                      !strcmp(argv[1], "cluster"));
}

static void df_omp_preinit(int argc, char **argv, char **envp) {
  if (argc < 1 || !argv || !argv[0] || !envp) return;
  if (df_env_has(envp, "OMP_WAIT_POLICY") || df_env_has(envp, "GOMP_SPINCOUNT")) return;
  if (!df_runs_kernels(argc, argv)) return;
  size_t n = 0;
  while (envp[n]) n++;
  /* malloc and environ are not usable yet: the new array lives on this stack frame */
  char *env2[n + 2];
  memcpy(env2, envp, n * sizeof *env2);
  env2[n] = (char *)df_spin_default;
  env2[n + 1] = NULL;
  execve("/proc/self/exe", argv, env2);
  /* no /proc, or exec refused: carry on with libgomp's default */
}

__attribute__((section(".preinit_array"), used)) static void (*const df_omp_preinit_entry)(
    int, char **, char **) = df_omp_preinit;
