/* coordinator/cli/cli.h — the deltafin subcommands' entry points and shared helpers.
 *
 * Owns: the subcommand entry points, one per coordinator/cli/cmd_X.c (each
 * `int df_cmd_X(int argc, char **argv)` gets argv after the subcommand name and returns the
 * process exit status: 0 ok, 1 runtime error, 2 usage error), and option parsing helpers
 * with clear messages.
 */
#ifndef DF_COORD_CLI_H
#define DF_COORD_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int df_cmd_run(int argc, char **argv);
int df_cmd_inspect(int argc, char **argv);
/* `deltafin plan --model DIR --node MEM,DISK_GBPS,LINK_GBITPS[,MEM_GBPS[,DISK_SIZE]] ...`:
 * placement and predicted time per token (coordinator/cluster/plan_model.h); 0 a feasible plan,
 * 1 an infeasible one (shortfall on stderr) or a load error, 2 usage. */
int df_cmd_plan(int argc, char **argv);
/* deltafin tokenize [--model DIR] [--ids-only] [--no-special] [--add-special] TEXT
 * argv[0] is the subcommand name ("tokenize"); options follow. Without --model the bundled
 * demo model's tokenizer is used, as run and serve do; when it is missing, a usage error
 * (exit 2) says so and asks for --model. TEXT may also be given as "-" to read standard
 * input. Prints one line per token, "ID<TAB>PIECE" (PIECE is the text the token decodes to
 * as a JSON string, with bytes of an incomplete character as \xNN), or, with --ids-only,
 * the ids on one line separated by spaces. --no-special encodes TEXT as plain text (added
 * tokens such as "<|im_end|>" are not matched); --add-special applies the tokenizer's
 * post-processor (BOS/EOS). Tokenization itself is engine/text/tokenizer.h. Nothing is
 * left for the caller to free. Returns the exit status: 0 ok, 1 runtime error (message on
 * stderr naming the file), 2 usage error (message on stderr). */
int df_cmd_tokenize(int argc, char **argv);
/* `deltafin serve`: returns 0 after a clean shutdown on SIGINT/SIGTERM, 1 runtime error,
 * 2 usage. */
int df_cmd_serve(int argc, char **argv);
/* `deltafin pull`: 0 ok, 1 failed, 2 usage. */
int df_cmd_pull(int argc, char **argv);
/* `deltafin setup --full | --stream [ORG/NAME]`: pull (default DF_SETUP_DEFAULT_MODEL), then
 * load the folder and print its memory plan, the host admission verdict and the command to
 * run next. 0 ready, 1 failed (pull, load, or the resident part does not fit), 2 usage. */
int df_cmd_setup(int argc, char **argv);
#define DF_SETUP_DEFAULT_MODEL "moonshotai/Kimi-K3"
/* The block drafter `setup` fetches beside a Kimi K3 folder (docs/K3.md §6.2). */
#define DF_SETUP_K3_DRAFTER "Inferact/Kimi-K3-DSpark"
struct df_pull_opts;
/* setup's own options: the drafter repository (NULL = the model's known drafter, if any),
 * none at all, and where it goes (NULL = beside the model folder, named after the repo). */
typedef struct df_cli_setup_opts {
  const char *drafter;
  bool no_drafter;
  const char *drafter_dir;
} df_cli_setup_opts;
/* The options of `deltafin pull` (setup NULL: one ORG/NAME required; --json allowed) or of
 * `deltafin setup` (setup non-NULL, filled here: --full or --stream required, *full says
 * which; the id is optional, default DF_SETUP_DEFAULT_MODEL; no --json; --drafter ORG/NAME,
 * --no-drafter, --drafter-dir DIR) into *o (initialised here). Returns -1 to go on, else the
 * exit status to return: 0 after --help, 2 after a usage error (message on stderr). */
int df_cli_pull_args(int argc, char **argv, df_cli_setup_opts *setup, struct df_pull_opts *o,
                     bool *full);
/* `deltafin verify`: 0 when no problem, 1 otherwise, 2 usage. */
int df_cmd_verify(int argc, char **argv);
/* `deltafin cluster init|token|status|revoke` (coordinator/cli/cmd_cluster.c): init prints
 * the coordinator key's fingerprint, token prints the token on stdout and its expiry time on
 * stderr. Nothing is left for the caller to free. 0 ok, 1 error (message on stderr), 2 usage. */
int df_cmd_cluster(int argc, char **argv);
/* `deltafin doctor [--model DIR] [--state-dir DIR] [--json]` (coordinator/cli/cmd_doctor.c):
 * offline checks of the installation (kernels' ISA, libraries, CUDA, the model folder against
 * its manifest, memory and disk headroom for it, state directory modes, the recorded
 * coordinator's reachability), one `OK|WARN|FAIL  CHECK: FINDING` line each (plus a `fix:`
 * line) on stdout, or one JSON object with --json. Nothing is written and nothing is left
 * for the caller to free. Returns 0 when every check is OK, 1 when the worst is a WARN, 2
 * when the worst is a FAIL or on a usage error (message on stderr). */
int df_cmd_doctor(int argc, char **argv);
/* `deltafin upgrade [--check] [--yes] [--jobs N] [--record FILE]` (coordinator/cli/cmd_upgrade.c,
 * docs/UPGRADE.md): fast-forwards the source checkout named by the build record (default: the
 * one this binary's build folder wrote at configure time, tools/cmake/build_record.cmake) to its
 * upstream and rebuilds it with the recorded configuration, ignoring the environment's build
 * variables. Touches only that checkout and its build folder; runs git and cmake without a
 * shell. Nothing is left for the caller to free. Returns the exit status: 0 upgraded or already
 * up to date, 1 could not proceed (record, git, fetch; nothing changed), 2 usage, 3 refused
 * (changes, detached HEAD, no upstream, diverged or ahead, not confirmed; nothing changed),
 * 4 git merge --ff-only failed, 5 the checkout moved but the configure or build failed, 10
 * --check found an upgrade or an unfinished rebuild; on a stop the state left and the
 * recovery commands are on stderr. */
int df_cmd_upgrade(int argc, char **argv);

/* Parse a decimal integer option value in [lo, hi]; on failure prints
 * "deltafin: --NAME: expected an integer in [lo, hi], got 'V'" and returns -1. */
int df_cli_int(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out);
/* Parse a finite float option value in [lo, hi]; same error shape. */
int df_cli_double(const char *name, const char *v, double lo, double hi, double *out);
/* `s` as one POSIX shell word for display (a command the user may copy): s itself when it
 * holds only characters a shell takes literally, else single-quoted with each ' written as
 * '\''; cut to fit buf[cap] (cap >= 8). Returns s or buf (caller-owned); no errors. */
const char *df_cli_shell_word(const char *s, char *buf, size_t cap);
/* Check a folder option value (--state-dir): "" is refused, since a file path built on it
 * would land at the filesystem root ("/heat/...", "/coordinator.key"); prints "deltafin:
 * --NAME: expected a folder path, got ''" and returns -1 (usage error, exit 2); 0 for any
 * other value (NULL included: option absent). Allocates nothing. */
int df_cli_dir(const char *name, const char *v);
/* A byte size of n chars at s: a number (>= 0, may be fractional) with an optional K/M/G/T
 * suffix (powers of 1024) and an optional i / iB / B, as "64G", "512MiB", "1.5T": 0 and *out
 * set, or -1 when malformed or >= 1.8e19. */
int df_cli_size(const char *s, size_t n, uint64_t *out);
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
/* The bundled demo pair, used by run, serve, tokenize and doctor without --model: an installed
 * deltafin's copy, BINDIR/../share/deltafin/models/demo-moe (/usr/bin/deltafin ->
 * /usr/share/deltafin/models/demo-moe, as the .deb installs it) when that folder has a
 * config.json, else the source tree's models/ this binary was built from (DF_DEFAULT_MODEL,
 * DF_DEFAULT_DRAFT), which the callers' errors then name. A path in a static buffer, valid
 * until the next call of the same function; no errors. */
const char *df_cli_default_model(void);
const char *df_cli_default_draft(void);
/* The bundled block drafter for the demo model (demo-dspark), found as above
 * (DF_DEFAULT_BLOCK). */
const char *df_cli_default_block(void);

/* The drafters a run or serve was given: at most one draft model (`text`, a folder of a
 * language model) and one block drafter (`block`, a DSpark folder: engine/draft/dspark.h
 * df_dspark_is_folder), each NULL when absent. */
typedef struct df_cli_drafters {
  const char *text;
  const char *block;
  bool recorded;       /* block came from the model folder's record (setup fetched it) */
  char recorded_dir[4096];
} df_cli_drafters;

/* The file in a model folder that names the block drafter `deltafin setup` fetched for it:
 * one line, the drafter folder's path (relative paths from the model folder). */
#define DF_CLI_DRAFTER_RECORD ".deltafin/drafter"

/* Sort the --draft folders dirs[0..n) (n 0..2) into *out; with n = 0 and use_bundled, the
 * bundled demo draft and block drafter that exist; with n = 0, model_dir non-NULL and
 * use_recorded, the block drafter model_dir's DF_CLI_DRAFTER_RECORD names when that folder
 * is a DSpark folder (out->recorded; a record naming anything else is ignored). A folder
 * that is neither kind's is taken as a draft model (its load then says what is wrong). Two of
 * one kind: prints "deltafin CMD: ..." naming both and returns -1 (usage error); else 0. */
int df_cli_drafters_sort(const char *cmd, const char *const *dirs, int n, bool use_bundled,
                         const char *model_dir, bool use_recorded, df_cli_drafters *out);

#endif
