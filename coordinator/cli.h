/* coordinator/cli.h — shared helpers of the deltafin subcommands.
 *
 * Owns: option parsing helpers with clear messages, and the subcommand entry points
 * (each `int df_cmd_X(int argc, char **argv)` gets argv after the subcommand name and
 * returns the process exit status: 0 ok, 1 runtime error, 2 usage error).
 */
#ifndef DF_COORD_CLI_H
#define DF_COORD_CLI_H

#include <stdbool.h>
#include <stdint.h>

int df_cmd_run(int argc, char **argv);
int df_cmd_inspect(int argc, char **argv);

/* Parse a decimal integer option value in [lo, hi]; on failure prints
 * "deltafin: --NAME: expected an integer in [lo, hi], got 'V'" and returns -1. */
int df_cli_int(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out);
/* Parse a finite float option value in [lo, hi]; same error shape. */
int df_cli_double(const char *name, const char *v, double lo, double hi, double *out);
/* Check a folder option value (--state-dir): "" is refused, since a file path built on it
 * would land at the filesystem root ("/heat/...", "/coordinator.key"); prints "deltafin:
 * --NAME: expected a folder path, got ''" and returns -1 (usage error, exit 2); 0 for any
 * other value (NULL included: option absent). Allocates nothing. */
int df_cli_dir(const char *name, const char *v);
/* Parse "1,2,3" into a malloc'd int32 array (caller frees); ids must be >= 0.
 * Returns count, or -1 with a message naming the bad element. */
int64_t df_cli_ids(const char *name, const char *v, int32_t **out);
struct df_model_opts;
/* --device VALUE for a model about to be loaded from `model_dir` (docs/GPU.md): parses
 * cpu | cuda | cuda:N | auto | torch-cpu into mo->device, and keeps the routed experts of a
 * folder pulled with --stream off the device (their bytes are holes until fetched, so only
 * the streaming backend may read them). On a bad value prints "deltafin: --device: ..." and
 * returns -1 (usage error). */
int df_cli_device(const char *v, const char *model_dir, struct df_model_opts *mo);
/* Monotonic clock in seconds. */
double df_cli_now(void);

#endif
