/* coordinator/cli/cmd_upgrade.c — `deltafin upgrade [--check] [--yes]`: brings a source install
 * up to date. It reads the build record its build folder's configure wrote
 * (tools/cmake/build_record.cmake: the checkout, the build folder, cmake, the generator and the cache
 * settings that matter), refuses a checkout with changes, a detached HEAD, a branch without an
 * upstream or one that is not an ancestor of its upstream after `git fetch`, fast-forwards
 * (`git merge --ff-only`), then reconfigures with exactly the recorded settings (the
 * environment's CC, CXX, *FLAGS, CMAKE_*, Torch_DIR, <package>_ROOT and CUDA_* variables are
 * removed from the build's environment: build_env_drop) and rebuilds. It
 * touches only the checkout and its build folder. git and cmake run through posix_spawnp with
 * argument vectors (no shell). On any stop it prints the state it left and how to recover.
 * User documentation and the exit codes: docs/UPGRADE.md. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "coordinator/cli/cli.h"

extern char **environ;

/* The build record of the build folder this binary was built in (coordinator/CMakeLists.txt). */
#ifndef DF_BUILD_RECORD
#define DF_BUILD_RECORD ""
#endif

#define PENDING_NAME "deltafin-upgrade.pending"

enum {
  UP_OK = 0,           /* upgraded and rebuilt, or already up to date */
  UP_ERROR = 1,        /* could not proceed (record, git, fetch); nothing changed */
  UP_USAGE = 2,        /* usage error */
  UP_REFUSED = 3,      /* the checkout does not qualify, or not confirmed; nothing changed */
  UP_FF_FAILED = 4,    /* git merge --ff-only failed */
  UP_BUILD_FAILED = 5, /* the checkout moved, the configure or build failed */
  UP_AVAILABLE = 10,   /* --check: an upgrade (or an unfinished rebuild) is waiting */
};

typedef struct rec_set {
  char *name, *type, *value;
} rec_set;

typedef struct build_record {
  char *source_dir, *build_dir, *cmake, *generator, *compiler;
  rec_set *sets;
  size_t n_sets;
} build_record;

typedef struct upg {
  const char *record_path, *record_opt;
  build_record rec;
  char **git_env, **build_env;
  const char *src, *bld;
  char branch[1024], upstream[1024], old[128], new_[128], from[128];
  char pending[PATH_MAX + 64];
  char **configure_argv, **build_argv; /* make_commands; the -D entries from n_fixed on and
                                         * build_argv[4] (the job count) are allocated */
  size_t n_fixed;
  long jobs;
  bool resuming; /* finishing the rebuild of an earlier run that fast-forwarded from `from` */
} upg;

/* ---- small helpers ---- */


static void print_argv(FILE *f, const char *indent, char *const argv[]) {
  char buf[8192];
  fputs(indent, f);
  for (size_t i = 0; argv[i]; i++)
    fprintf(f, "%s%s", i ? " " : "", df_cli_shell_word(argv[i], buf, sizeof buf));
  fputc('\n', f);
}

/* snprintf into dst[cap], truncating long paths silently (messages only). */
static void msgf(char *dst, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst, cap, fmt, ap);
  va_end(ap);
}

static char *trim(char *s) {
  if (!s) return s;
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) s[--n] = 0;
  return s;
}

/* Runs argv (argv[0] looked up in PATH when it holds no '/', as execvp does) with environment
 * envp and waits for it. With out non-NULL its standard output is captured into *out
 * (malloc'd, NUL-terminated, caller frees; *out_len its length when out_len is non-NULL), else
 * it writes to ours. err_null sends its standard error to /dev/null. Returns its exit status
 * (0..255), 128 + N when signal N ended it, or -1 when it could not be started (a message on
 * stderr names the program). */
static int spawn_wait(char *const argv[], char *const envp[], char **out, size_t *out_len,
                      bool err_null) {
  if (out) *out = NULL;
  int p[2] = {-1, -1};
  if (out && pipe2(p, O_CLOEXEC) != 0) {
    fprintf(stderr, "deltafin upgrade: pipe: %s\n", strerror(errno));
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out) posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  if (err_null) posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid;
  int e = posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  if (out) close(p[1]);
  if (e != 0) {
    if (out) close(p[0]);
    fprintf(stderr, "deltafin upgrade: cannot start %s: %s\n", argv[0], strerror(e));
    return -1;
  }
  if (out) {
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    for (;;) {
      if (buf && len + 1 >= cap) {
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
          free(buf);
          buf = NULL;
        } else {
          buf = nb;
          cap *= 2;
        }
      }
      char sink[4096];
      ssize_t r = buf ? read(p[0], buf + len, cap - 1 - len) : read(p[0], sink, sizeof sink);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      if (buf) len += (size_t)r;
    }
    close(p[0]);
    if (buf) buf[len] = 0;
    *out = buf;
    if (out_len) *out_len = len;
  }
  int st;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) {
      fprintf(stderr, "deltafin upgrade: waitpid: %s\n", strerror(errno));
      return -1;
    }
  }
  int rc = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  if (out && !*out && rc == 0) return -1; /* out of memory while capturing */
  return rc;
}

/* `git --no-pager -C SRC ARGS...` (NULL-terminated ARGS) in the git environment; see
 * spawn_wait for out and the return value. */
static int git(upg *u, char **out, bool err_null, ...) {
  char *argv[24] = {"git", "--no-pager", "-C", (char *)u->src};
  size_t n = 4;
  va_list ap;
  va_start(ap, err_null);
  for (const char *a; (a = va_arg(ap, const char *)) && n < 23;) argv[n++] = (char *)a;
  va_end(ap);
  argv[n] = NULL;
  return spawn_wait(argv, u->git_env, out, NULL, err_null);
}

/* One line of git's output (trimmed) into buf; 0, or the failing status (-1 when empty). */
static int git_line(upg *u, char *buf, size_t cap, ...) {
  char *argv[24] = {"git", "--no-pager", "-C", (char *)u->src};
  size_t n = 4;
  va_list ap;
  va_start(ap, cap);
  for (const char *a; (a = va_arg(ap, const char *)) && n < 23;) argv[n++] = (char *)a;
  va_end(ap);
  argv[n] = NULL;
  char *o = NULL;
  int rc = spawn_wait(argv, u->git_env, &o, NULL, true);
  if (rc == 0 && (!o || !*trim(o))) rc = -1;
  if (rc == 0) snprintf(buf, cap, "%s", o);
  else if (cap) buf[0] = 0;
  free(o);
  return rc;
}

/* Variables that select what git operates on: the upgrade always names the checkout. */
static bool git_env_drop(const char *name, size_t n) {
  static const char *drop[] = {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE",
                               "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                               "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_PREFIX", NULL};
  for (int i = 0; drop[i]; i++)
    if (strlen(drop[i]) == n && !strncmp(name, drop[i], n)) return true;
  return false;
}

/* Variables through which the environment would change the configure or the build; the
 * recorded settings replace them (docs/UPGRADE.md lists them). */
static bool build_env_drop(const char *name, size_t n) {
  static const char *drop[] = {
      "CC",        "CXX",        "CFLAGS",     "CXXFLAGS",         "CPPFLAGS",
      "LDFLAGS",   "CUDACXX",    "CUDAFLAGS",  "CUDAHOSTCXX",      "CUDA_PATH",
      "CUDA_HOME", "CUDA_ROOT",  "Torch_DIR",  "Torch_ROOT",       "TORCH_ROOT",
      "Python3_ROOT", "PYTHON3_ROOT", "CUDAToolkit_ROOT", "OpenMP_ROOT", NULL};
  for (int i = 0; drop[i]; i++)
    if (strlen(drop[i]) == n && !strncmp(name, drop[i], n)) return true;
  return n > 6 && !strncmp(name, "CMAKE_", 6);
}

/* A copy of environ's pointer array without the variables drop() names (the strings are
 * environ's own; free only the array). NULL when out of memory. */
static char **env_without(bool (*drop)(const char *, size_t)) {
  size_t n = 0;
  while (environ[n]) n++;
  char **e = calloc(n + 1, sizeof *e);
  if (!e) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const char *eq = strchr(environ[i], '=');
    size_t len = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
    if (!drop(environ[i], len)) e[k++] = environ[i];
  }
  e[k] = NULL;
  return e;
}

/* ---- the build record ---- */

static void record_free(build_record *r) {
  free(r->source_dir);
  free(r->build_dir);
  free(r->cmake);
  free(r->generator);
  free(r->compiler);
  for (size_t i = 0; i < r->n_sets; i++) {
    free(r->sets[i].name);
    free(r->sets[i].type);
    free(r->sets[i].value);
  }
  free(r->sets);
  memset(r, 0, sizeof *r);
}

/* The string member `key` of o, strdup'd into *dst; an error names it when it is missing, not a
 * string, holds a NUL, or (abs) is not an absolute path. */
static int rec_str(json_t *o, const char *key, bool required, bool abs, char **dst, char *err,
                   size_t cap) {
  json_t *v = json_object_get(o, key);
  if (!v && !required) {
    *dst = strdup("");
    return *dst ? 0 : -1;
  }
  if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
    snprintf(err, cap, "\"%s\": expected a string", key);
    return -1;
  }
  const char *s = json_string_value(v);
  if (abs && s[0] != '/') {
    snprintf(err, cap, "\"%s\": expected an absolute path, got '%s'", key, s);
    return -1;
  }
  if (required && !*s) {
    snprintf(err, cap, "\"%s\" is empty", key);
    return -1;
  }
  *dst = strdup(s);
  if (!*dst) {
    snprintf(err, cap, "out of memory");
    return -1;
  }
  return 0;
}

/* Reads the build record at path into *r (fields allocated, free with record_free; *r is
 * cleared on failure). -1 with a message in err naming the file and the fault. */
static int record_load(const char *path, build_record *r, char *err, size_t cap) {
  memset(r, 0, sizeof *r);
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) {
    msgf(err, cap, "%s: %s", path, je.text);
    return -1;
  }
  char why[2048] = "";
  int rc = -1;
  json_t *ver = json_object_get(root, "deltafin_build_record");
  if (!json_is_object(root) || !json_is_integer(ver) || json_integer_value(ver) != 1) {
    snprintf(why, sizeof why, "not a build record of format 1 (\"deltafin_build_record\": 1)");
    goto out;
  }
  if (rec_str(root, "source_dir", true, true, &r->source_dir, why, sizeof why) ||
      rec_str(root, "build_dir", true, true, &r->build_dir, why, sizeof why) ||
      rec_str(root, "cmake", true, false, &r->cmake, why, sizeof why) ||
      rec_str(root, "generator", false, false, &r->generator, why, sizeof why) ||
      rec_str(root, "compiler", false, false, &r->compiler, why, sizeof why))
    goto out;
  json_t *cache = json_object_get(root, "cache");
  if (!json_is_array(cache)) {
    snprintf(why, sizeof why, "\"cache\": expected an array");
    goto out;
  }
  r->n_sets = json_array_size(cache);
  r->sets = calloc(r->n_sets ? r->n_sets : 1, sizeof *r->sets);
  if (!r->sets) {
    snprintf(why, sizeof why, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < r->n_sets; i++) {
    json_t *e = json_array_get(cache, i);
    rec_set *s = &r->sets[i];
    char sub[1024] = "";
    if (!json_is_object(e) || rec_str(e, "name", true, false, &s->name, sub, sizeof sub) ||
        rec_str(e, "type", true, false, &s->type, sub, sizeof sub) ||
        rec_str(e, "value", false, false, &s->value, sub, sizeof sub)) {
      snprintf(why, sizeof why, "\"cache\"[%zu]: %s", i, *sub ? sub : "expected an object");
      goto out;
    }
    const char *nm = s->name;
    static const char word[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789";
    if (!strchr(word, nm[0]) || (nm[0] >= '0' && nm[0] <= '9') ||
        strspn(nm, word) != strlen(nm)) {
      snprintf(why, sizeof why, "\"cache\"[%zu]: '%s' is not a cache variable name", i, nm);
      goto out;
    }
    if (strcmp(s->type, "BOOL") && strcmp(s->type, "STRING") && strcmp(s->type, "PATH") &&
        strcmp(s->type, "FILEPATH")) {
      snprintf(why, sizeof why, "\"cache\"[%zu] (%s): type '%s' is not BOOL, STRING, PATH or FILEPATH",
               i, nm, s->type);
      goto out;
    }
  }
  rc = 0;
out:
  json_decref(root);
  if (rc) {
    msgf(err, cap, "%s: %s", path, why);
    record_free(r);
  }
  return rc;
}

/* The record to use without --record: the one compiled in (this binary's build folder), else
 * deltafin-build.json one folder above the binary's own folder (BUILD/coordinator/deltafin),
 * else the compiled-in path (which then names the missing file in the error). */
static void default_record(char *out, size_t cap) {
  if (*DF_BUILD_RECORD && access(DF_BUILD_RECORD, F_OK) == 0) {
    snprintf(out, cap, "%s", DF_BUILD_RECORD);
    return;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char *sl = strrchr(exe, '/');
    if (sl) {
      *sl = 0;
      char cand[PATH_MAX + 64];
      snprintf(cand, sizeof cand, "%s/../deltafin-build.json", exe);
      if (access(cand, F_OK) == 0) {
        msgf(out, cap, "%s", cand);
        return;
      }
    }
  }
  snprintf(out, cap, "%s", *DF_BUILD_RECORD ? DF_BUILD_RECORD : "deltafin-build.json");
}

static const char *rec_value(const build_record *r, const char *name) {
  for (size_t i = 0; i < r->n_sets; i++)
    if (!strcmp(r->sets[i].name, name)) return r->sets[i].value;
  return NULL;
}

/* The configure and build commands of the record (malloc'd NULL-terminated vectors). */
static int make_commands(upg *u) {
  const build_record *r = &u->rec;
  size_t n = 0;
  char **c = calloc(8 + r->n_sets, sizeof *c);
  char **b = calloc(10, sizeof *b);
  u->configure_argv = c;
  u->build_argv = b;
  if (!c || !b) goto oom;
  c[n++] = r->cmake;
  c[n++] = "-S";
  c[n++] = r->source_dir;
  c[n++] = "-B";
  c[n++] = r->build_dir;
  if (*r->generator) {
    c[n++] = "-G";
    c[n++] = r->generator;
  }
  u->n_fixed = n;
  for (size_t i = 0; i < r->n_sets; i++, n++)
    if (asprintf(&c[n], "-D%s:%s=%s", r->sets[i].name, r->sets[i].type, r->sets[i].value) < 0) {
      c[n] = NULL;
      goto oom;
    }
  c[n] = NULL;
  char *jobs = NULL;
  if (asprintf(&jobs, "%ld", u->jobs) < 0) goto oom;
  size_t k = 0;
  b[k++] = r->cmake;
  b[k++] = "--build";
  b[k++] = r->build_dir;
  b[k++] = "--parallel";
  b[k++] = jobs;
  const char *bt = rec_value(r, "CMAKE_BUILD_TYPE");
  if (bt && *bt) {
    b[k++] = "--config";
    b[k++] = (char *)bt;
  }
  b[k] = NULL;
  return 0;
oom:
  fprintf(stderr, "deltafin upgrade: out of memory\n");
  return -1;
}

/* ---- reporting ---- */

static void print_reuse(const upg *u) {
  const build_record *r = &u->rec;
  printf("deltafin upgrade: build record %s\n"
         "deltafin upgrade: the rebuild reuses exactly this recorded configuration, not the "
         "current environment's:\n",
         u->record_path);
  printf("  checkout      %s\n  build folder  %s\n  cmake         %s\n", r->source_dir,
         r->build_dir, r->cmake);
  if (*r->generator) printf("  generator     %s\n", r->generator);
  if (*r->compiler) printf("  compiler      %s (recorded; CMAKE_C_COMPILER below is used)\n",
                           r->compiler);
  for (size_t i = 0; i < r->n_sets; i++)
    printf("  %s=%s\n", r->sets[i].name, r->sets[i].value);
  printf("  ignored from the environment:");
  int shown = 0;
  for (size_t i = 0; environ[i]; i++) {
    const char *eq = strchr(environ[i], '=');
    size_t len = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
    if (build_env_drop(environ[i], len)) printf("%s %.*s", shown++ ? "," : "", (int)len, environ[i]);
  }
  printf("%s\n", shown ? "" : " nothing (none of CC, CXX, *FLAGS, CMAKE_*, Torch_DIR, "
                             "<package>_ROOT, CUDA_* is set)");
}

/* The rerun command (with --record when one was given), for recovery lines. */
static void print_rerun(const upg *u, FILE *f) {
  char buf[PATH_MAX * 2];
  fprintf(f, "deltafin upgrade");
  if (u->record_opt) fprintf(f, " --record %s", df_cli_shell_word(u->record_opt, buf, sizeof buf));
}

/* The stop report on stderr: why, where the checkout is now, what the build folder holds. */
static void print_state(upg *u, const char *why, const char *build_state) {
  char head[128] = "", br[1024] = "";
  int hr = git_line(u, head, sizeof head, "rev-parse", "--verify", "-q", "HEAD", NULL);
  int brc = git_line(u, br, sizeof br, "symbolic-ref", "--quiet", "--short", "HEAD", NULL);
  fprintf(stderr, "deltafin upgrade: stopped: %s\n", why);
  fprintf(stderr, "  checkout      %s: ", u->src);
  if (hr != 0) {
    fprintf(stderr, "its commit is unknown (git rev-parse HEAD failed)\n");
  } else {
    if (brc == 0) fprintf(stderr, "branch %s at %s", br, head);
    else fprintf(stderr, "detached HEAD at %s", head);
    if (u->resuming && *u->from && strcmp(head, u->from) && !strcmp(head, u->old))
      fprintf(stderr, " (fast-forwarded from %s by an earlier run)\n", u->from);
    else if (!*u->old || !strcmp(head, u->old)) fprintf(stderr, " (unchanged)\n");
    else if (*u->new_ && !strcmp(head, u->new_))
      fprintf(stderr, " (fast-forwarded from %s)\n", u->old);
    else fprintf(stderr, " (was %s)\n", u->old);
  }
  fprintf(stderr, "  build folder  %s: %s\n", u->bld, build_state);
}

/* ---- the pending marker ---- */

static int mkdir_p(const char *dir) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
    *s = '/';
  }
  if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
  return 0;
}

static int write_pending(upg *u, const char *from, const char *to) {
  if (mkdir_p(u->bld) != 0) return -1;
  char tmp[PATH_MAX + 80];
  snprintf(tmp, sizeof tmp, "%s.tmp", u->pending);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f, "from %s\nto %s\n", from, to);
  if (fclose(f) != 0 || rename(tmp, u->pending) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* The "from" commit of an unfinished rebuild into u->from; true when the marker exists. */
static bool read_pending(upg *u) {
  FILE *f = fopen(u->pending, "r");
  if (!f) return false;
  char line[256];
  u->from[0] = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "from ", 5)) snprintf(u->from, sizeof u->from, "%s", trim(line + 5));
  fclose(f);
  return true;
}

/* ---- the command ---- */

static void upgrade_usage(FILE *f) {
  char rec[PATH_MAX];
  default_record(rec, sizeof rec);
  fprintf(f,
          "usage: deltafin upgrade [--check] [--yes] [--jobs N] [--record FILE]\n"
          "  updates the source checkout this binary was built from and rebuilds it:\n"
          "  refuses unless the checkout has no modified or untracked (not ignored) files and\n"
          "  is on a branch with an upstream; runs git fetch; refuses unless the branch is an\n"
          "  ancestor of its upstream (already there: says so, exit 0); then git merge\n"
          "  --ff-only, reconfigures the build folder with exactly the configuration its\n"
          "  configure recorded (build type, compilers and flags, CMAKE_PREFIX_PATH / Torch_DIR,\n"
          "  DF_CUDA, DF_TORCH_ROOT and every other DF_* option; the environment's CC, CXX,\n"
          "  *FLAGS, CMAKE_*, Torch_DIR, <package>_ROOT and CUDA_* variables are ignored) and\n"
          "  rebuilds. Models, caches, keys and state are not touched. On a stop it prints\n"
          "  where the checkout is, whether the build folder was rebuilt, and how to recover.\n"
          "  (docs/UPGRADE.md)\n"
          "  --check        report what it would do (runs git fetch; changes nothing else)\n"
          "  --yes, -y      do not ask before changing the checkout (needed without a terminal)\n"
          "  --jobs N       parallel build jobs (default: the online CPUs)\n"
          "  --record FILE  use this build record instead of this binary's own\n"
          "                 (now: %s)\n"
          "  exit: 0 upgraded and rebuilt, or already up to date; 1 could not proceed (build\n"
          "  record, not a git checkout, git or fetch failed), nothing changed; 2 usage;\n"
          "  3 refused (changes in the checkout, detached HEAD, no upstream, diverged or\n"
          "  ahead, not confirmed), nothing changed; 4 git merge --ff-only failed; 5 the\n"
          "  checkout moved but the configure or build failed (run it again to finish);\n"
          "  10 --check: an upgrade or an unfinished rebuild is waiting.\n",
          rec);
}

static int do_build(upg *u, const char *from) {
  char why[256];
  printf("deltafin upgrade: reconfiguring with the recorded configuration:\n");
  print_argv(stdout, "  $ ", u->configure_argv);
  int rc = spawn_wait(u->configure_argv, u->build_env, NULL, NULL, false);
  const char *stage = "configure";
  if (rc == 0) {
    printf("deltafin upgrade: building:\n");
    print_argv(stdout, "  $ ", u->build_argv);
    rc = spawn_wait(u->build_argv, u->build_env, NULL, NULL, false);
    stage = "build";
  }
  if (rc == 0) {
    if (unlink(u->pending) != 0 && errno != ENOENT)
      fprintf(stderr, "deltafin upgrade: note: cannot remove %s: %s\n", u->pending,
              strerror(errno));
    return 0;
  }
  snprintf(why, sizeof why, "the %s failed (%s %d; its messages are above)", stage,
           rc < 0 ? "could not start," : "exit status", rc);
  print_state(u, why,
              !strcmp(stage, "configure")
                  ? "NOT rebuilt: the configure failed, so it still holds the previous build"
                  : "NOT rebuilt: the build failed part way; its files may mix the previous "
                    "and the new commit");
  char b1[PATH_MAX * 2];
  fprintf(stderr,
          "  marker        %s (the rebuild is unfinished)\n"
          "  to recover: fix what stopped the %s, then run\n    $ ",
          u->pending, stage);
  print_rerun(u, stderr);
  fprintf(stderr, " --yes\n"
                  "  (the checkout is already at the new commit; it sees the marker and reruns\n"
                  "  the configure and the build), or run the recorded commands yourself:\n");
  print_argv(stderr, "    $ ", u->configure_argv);
  print_argv(stderr, "    $ ", u->build_argv);
  if (from && *from && strcmp(from, u->new_)) {
    fprintf(stderr, "  or go back to the commit you had and rebuild it with those two commands:\n"
                    "    $ git -C %s reset --keep %s\n",
            df_cli_shell_word(u->src, b1, sizeof b1), from);
  }
  return UP_BUILD_FAILED;
}

/* Ask `question` on stderr and read the answer from a terminal: true for y/Y. Without a
 * terminal on stdin, or any other answer, says why on stderr ("run it with --yes to VERB
 * without asking") and returns false; nothing is changed either way. */
static bool confirmed(const char *verb, const char *question) {
  if (!isatty(STDIN_FILENO)) {
    fprintf(stderr, "deltafin upgrade: refused: standard input is not a terminal; run it with "
                    "--yes to %s without asking. Nothing changed.\n", verb);
    return false;
  }
  fprintf(stderr, "%s [y/N] ", question);
  char ans[64] = "";
  if (!fgets(ans, sizeof ans, stdin) || (ans[0] != 'y' && ans[0] != 'Y')) {
    fprintf(stderr, "deltafin upgrade: not confirmed; nothing changed\n");
    return false;
  }
  return true;
}

int df_cmd_upgrade(int argc, char **argv) {
  static const struct option opts[] = {{"check", no_argument, 0, 'c'},
                                       {"yes", no_argument, 0, 'y'},
                                       {"jobs", required_argument, 0, 'j'},
                                       {"record", required_argument, 0, 'r'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  upg u = {0};
  bool check = false, yes = false;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  u.jobs = ncpu > 0 ? ncpu : 1;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "y", opts, NULL)) != -1) {
    switch (c) {
    case 'c': check = true; break;
    case 'y': yes = true; break;
    case 'j': {
      int64_t v;
      if (df_cli_int("jobs", optarg, 1, 4096, &v) != 0) return UP_USAGE;
      u.jobs = (long)v;
      break;
    }
    case 'r':
      if (!*optarg) {
        fprintf(stderr, "deltafin upgrade: --record: expected a file, got ''\n");
        return UP_USAGE;
      }
      u.record_opt = optarg;
      break;
    case 'h': upgrade_usage(stdout); return UP_OK;
    default:
      fprintf(stderr, "deltafin upgrade: unknown option '%s'\n", argv[optind - 1]);
      upgrade_usage(stderr);
      return UP_USAGE;
    }
  }
  if (optind != argc) {
    fprintf(stderr, "deltafin upgrade: unexpected argument '%s'\n", argv[optind]);
    upgrade_usage(stderr);
    return UP_USAGE;
  }

  char recpath[PATH_MAX];
  if (u.record_opt) {
    /* Absolute, so that the recovery commands printed work from any folder. */
    if (!realpath(u.record_opt, recpath)) snprintf(recpath, sizeof recpath, "%s", u.record_opt);
    u.record_opt = recpath;
  } else {
    default_record(recpath, sizeof recpath);
  }
  u.record_path = recpath;
  char err[4096];
  if (record_load(recpath, &u.rec, err, sizeof err) != 0) {
    fprintf(stderr,
            "deltafin upgrade: cannot use the build record: %s\n"
            "deltafin upgrade: nothing changed. `deltafin upgrade` is for a source install: its "
            "build folder's configure writes deltafin-build.json (configure it again to write "
            "one, or name one with --record).\n",
            err);
    return UP_ERROR;
  }
  int ret = UP_ERROR;
  u.src = u.rec.source_dir;
  u.bld = u.rec.build_dir;
  snprintf(u.pending, sizeof u.pending, "%s/" PENDING_NAME, u.bld);
  u.git_env = env_without(git_env_drop);
  u.build_env = env_without(build_env_drop);
  if (!u.git_env || !u.build_env || make_commands(&u) != 0) goto done;
  print_reuse(&u);

  char qsrc[PATH_MAX * 2];
  const char *qs = df_cli_shell_word(u.src, qsrc, sizeof qsrc);
  char line[1024];
  if (git_line(&u, line, sizeof line, "rev-parse", "--is-inside-work-tree", NULL) != 0 ||
      strcmp(line, "true")) {
    fprintf(stderr, "deltafin upgrade: %s is not a git checkout (git rev-parse failed); nothing "
                    "changed\n", u.src);
    goto done;
  }
  if (git_line(&u, u.old, sizeof u.old, "rev-parse", "--verify", "-q", "HEAD^{commit}", NULL)) {
    fprintf(stderr, "deltafin upgrade: %s: git cannot resolve HEAD; nothing changed\n", u.src);
    goto done;
  }

  /* On a branch, with an upstream. */
  int rc = git_line(&u, u.branch, sizeof u.branch, "symbolic-ref", "--quiet", "--short", "HEAD",
                    NULL);
  if (rc != 0) {
    print_state(&u, "the checkout is on a detached HEAD: there is no branch and no upstream to "
                    "follow",
                "not touched");
    fprintf(stderr, "  to recover: put the checkout back on the branch it follows, e.g.\n"
                    "    $ git -C %s switch main\n  then run `", qs);
    print_rerun(&u, stderr);
    fprintf(stderr, "` again. Nothing changed.\n");
    ret = UP_REFUSED;
    goto done;
  }
  rc = git_line(&u, u.upstream, sizeof u.upstream, "rev-parse", "--abbrev-ref",
                "--symbolic-full-name", "@{upstream}", NULL);
  if (rc != 0) {
    char why[1400];
    snprintf(why, sizeof why, "branch %s has no upstream (or its upstream branch is missing)",
             u.branch);
    print_state(&u, why, "not touched");
    /* suggest origin/BRANCH only where it exists; else pushing the branch there */
    char ref[1100], sha[128], qbuf[2100], rem[4096] = "";
    snprintf(ref, sizeof ref, "refs/remotes/origin/%s", u.branch);
    const char *qb = df_cli_shell_word(u.branch, qbuf, sizeof qbuf);
    bool has_origin_branch = git_line(&u, sha, sizeof sha, "rev-parse", "--verify", "-q", ref,
                                      NULL) == 0;
    bool has_origin = git_line(&u, rem, sizeof rem, "remote", "get-url", "origin", NULL) == 0;
    if (has_origin_branch)
      fprintf(stderr, "  to recover: give it the upstream it should follow, e.g.\n"
                      "    $ git -C %s branch --set-upstream-to=origin/%s %s\n  then run `",
              qs, qb, qb);
    else if (has_origin)
      fprintf(stderr, "  to recover: origin has no branch %s; push it there and follow it\n"
                      "    $ git -C %s push -u origin %s\n"
                      "  or follow a remote branch that exists (git -C %s branch -r lists them):\n"
                      "    $ git -C %s branch --set-upstream-to=REMOTE/BRANCH %s\n  then run `",
              qb, qs, qb, qs, qs, qb);
    else
      fprintf(stderr, "  to recover: the checkout has no remote 'origin'; add the repository it "
                      "comes from and follow its branch\n"
                      "    $ git -C %s remote add origin URL && git -C %s fetch origin\n"
                      "    $ git -C %s branch --set-upstream-to=origin/BRANCH %s\n  then run `",
              qs, qs, qs, qb);
    print_rerun(&u, stderr);
    fprintf(stderr, "` again. Nothing changed.\n");
    ret = UP_REFUSED;
    goto done;
  }

  /* Clean: nothing modified, nothing untracked that is not ignored. */
  char *st = NULL;
  size_t st_len = 0;
  {
    char *sargv[] = {"git", "--no-pager", "-C", (char *)u.src, "status", "--porcelain=v1", "-z",
                     "--untracked-files=all", "--ignore-submodules=none", NULL};
    rc = spawn_wait(sargv, u.git_env, &st, &st_len, false);
  }
  if (rc != 0) {
    free(st);
    print_state(&u, "git status failed (its message is above)", "not touched");
    fprintf(stderr, "  to recover: see `git -C %s status`, then run `", qs);
    print_rerun(&u, stderr);
    fprintf(stderr, "` again. Nothing changed.\n");
    goto done;
  }
  if (st_len) {
    fprintf(stderr, "deltafin upgrade: refused: the checkout %s has changes an upgrade could lose "
                    "or mix in:\n", u.src);
    for (size_t i = 0; i < st_len;) {
      const char *ent = st + i;
      size_t el = strlen(ent);
      i += el + 1;
      if (el < 4) continue;
      const char *what = !strncmp(ent, "??", 2) ? "untracked" : "modified";
      fprintf(stderr, "  %-9s %s (git status: %.2s)\n", what, ent + 3, ent);
      if (ent[0] == 'R' || ent[0] == 'C') i += strlen(st + i) + 1; /* the rename's source */
    }
    free(st);
    print_state(&u, "the checkout is not clean", "not touched");
    fprintf(stderr, "  to recover: commit, stash (git -C %s stash --include-untracked) or remove "
                    "those files,\n  or add build outputs to .gitignore; then run `", qs);
    print_rerun(&u, stderr);
    fprintf(stderr, "` again. Nothing changed.\n");
    ret = UP_REFUSED;
    goto done;
  }
  free(st);

  /* Fetch the upstream's remote (a local upstream, remote ".", needs none). */
  char remote[1024], key[1200];
  snprintf(key, sizeof key, "branch.%s.remote", u.branch);
  if (git_line(&u, remote, sizeof remote, "config", "--get", key, NULL) != 0)
    snprintf(remote, sizeof remote, ".");
  if (strcmp(remote, ".")) {
    printf("deltafin upgrade: fetching %s\n", remote);
    rc = git(&u, NULL, false, "fetch", "--", remote, NULL);
    if (rc != 0) {
      print_state(&u, "git fetch failed (its message is above)", "not touched");
      fprintf(stderr, "  to recover: make %s reachable (try `git -C %s fetch %s`), then run `",
              remote, qs, remote);
      print_rerun(&u, stderr);
      fprintf(stderr, "` again. The checkout is unchanged.\n");
      goto done;
    }
  }
  if (git_line(&u, u.new_, sizeof u.new_, "rev-parse", "--verify", "-q", "@{upstream}^{commit}",
               NULL)) {
    print_state(&u, "git cannot resolve the upstream after the fetch", "not touched");
    fprintf(stderr, "  to recover: see `git -C %s status`, then run `", qs);
    print_rerun(&u, stderr);
    fprintf(stderr, "` again. Nothing changed.\n");
    goto done;
  }
  bool pending = read_pending(&u);

  if (!strcmp(u.old, u.new_)) {
    if (!pending) {
      printf("deltafin upgrade: already up to date: %s is at %s, the same commit as %s; nothing "
             "to do\n", u.branch, u.old, u.upstream);
      ret = UP_OK;
      goto done;
    }
    printf("deltafin upgrade: %s is up to date at %s, but the rebuild of the last upgrade did "
           "not finish (%s)\n", u.branch, u.old, u.pending);
    if (check) {
      printf("deltafin upgrade --check: would reconfigure and rebuild with the recorded "
             "configuration:\n");
      print_argv(stdout, "  $ ", u.configure_argv);
      print_argv(stdout, "  $ ", u.build_argv);
      printf("deltafin upgrade --check: nothing changed\n");
      ret = UP_AVAILABLE;
      goto done;
    }
    if (!yes) {
      char q[8192];
      snprintf(q, sizeof q, "Rebuild %s now?", u.bld);
      if (!confirmed("rebuild", q)) {
        ret = UP_REFUSED;
        goto done;
      }
    }
    u.resuming = true;
    ret = do_build(&u, u.from);
    if (ret == 0)
      printf("deltafin upgrade: done: %s at %s, %s rebuilt with the recorded configuration\n",
             u.branch, u.new_, u.bld);
    goto done;
  }

  /* Behind only: the branch must be an ancestor of its upstream. */
  char behind[64] = "?", ahead[64] = "?", range[300];
  snprintf(range, sizeof range, "%s..%s", u.old, u.new_);
  git_line(&u, behind, sizeof behind, "rev-list", "--count", range, NULL);
  snprintf(range, sizeof range, "%s..%s", u.new_, u.old);
  git_line(&u, ahead, sizeof ahead, "rev-list", "--count", range, NULL);
  rc = git(&u, NULL, true, "merge-base", "--is-ancestor", u.old, u.new_, NULL);
  if (rc != 0) {
    char why[3000];
    if (rc != 1)
      snprintf(why, sizeof why, "git merge-base failed (status %d)", rc);
    else if (!strcmp(behind, "0"))
      snprintf(why, sizeof why, "%s is %s commit(s) ahead of %s: its local commits are not "
               "upstream, so there is nothing to fast-forward to", u.branch, ahead, u.upstream);
    else
      snprintf(why, sizeof why, "%s has diverged from %s: %s local commit(s) not upstream, %s "
               "upstream commit(s) not here; a fast-forward is impossible", u.branch,
               u.upstream, ahead, behind);
    print_state(&u, why, "not touched");
    char qb[2200], qu[2200];
    const char *wu = df_cli_shell_word(u.upstream, qu, sizeof qu);
    const char *wb = df_cli_shell_word(u.branch, qb, sizeof qb);
    fprintf(stderr, "  to recover: see the local commits with\n"
                    "    $ git -C %s log --oneline %s..%s\n"
                    "  move them onto the upstream (git -C %s rebase %s) or drop them\n"
                    "  (git -C %s reset --keep %s), then run `",
            qs, wu, wb, qs, wu, qs, wu);
    print_rerun(&u, stderr);
    fprintf(stderr, "` again. Nothing changed.\n");
    ret = rc == 1 ? UP_REFUSED : UP_ERROR;
    goto done;
  }

  printf("deltafin upgrade: %s at %s is %s commit(s) behind %s at %s:\n", u.branch, u.old, behind,
         u.upstream, u.new_);
  snprintf(range, sizeof range, "%s..%s", u.old, u.new_);
  git(&u, NULL, true, "log", "--oneline", "--no-decorate", "-n", "20", range, NULL);
  if (check) {
    char qn[200];
    printf("deltafin upgrade --check: would fast-forward %s to %s:\n  $ git -C %s merge "
           "--ff-only %s\nthen reconfigure and rebuild with the recorded configuration:\n",
           u.branch, u.new_, qs, df_cli_shell_word(u.new_, qn, sizeof qn));
    print_argv(stdout, "  $ ", u.configure_argv);
    print_argv(stdout, "  $ ", u.build_argv);
    printf("deltafin upgrade --check: nothing changed\n");
    ret = UP_AVAILABLE;
    goto done;
  }
  if (!yes) {
    char q[8192];
    snprintf(q, sizeof q, "Fast-forward %s to %s and rebuild %s?", u.branch, u.new_, u.bld);
    if (!confirmed("upgrade", q)) {
      ret = UP_REFUSED;
      goto done;
    }
  }

  /* From here on a stop says where things are. The marker first, so an interruption between
   * the fast-forward and the end of the build is finished by the next run. */
  if (write_pending(&u, u.old, u.new_) != 0) {
    fprintf(stderr, "deltafin upgrade: cannot write %s: %s; nothing changed\n", u.pending,
            strerror(errno));
    goto done;
  }
  printf("deltafin upgrade: fast-forwarding %s to %s\n", u.branch, u.new_);
  rc = git(&u, NULL, false, "merge", "--ff-only", "--no-stat", u.new_, NULL);
  char head[128] = "";
  git_line(&u, head, sizeof head, "rev-parse", "--verify", "-q", "HEAD", NULL);
  if (rc != 0 || strcmp(head, u.new_)) {
    bool moved = strcmp(head, u.old) != 0;
    if (!moved) unlink(u.pending);
    print_state(&u, rc != 0 ? "git merge --ff-only failed (its message is above)"
                            : "after git merge --ff-only the checkout is not at the upstream "
                              "commit",
                moved ? "not rebuilt" : "not touched");
    fprintf(stderr, "  to recover: `git -C %s status` shows what stopped it; ", qs);
    if (moved)
      fprintf(stderr, "go back with\n    $ git -C %s reset --keep %s\n  or ", qs, u.old);
    fprintf(stderr, "fix it, then run `");
    print_rerun(&u, stderr);
    fprintf(stderr, " --yes` again.\n");
    ret = UP_FF_FAILED;
    goto done;
  }
  ret = do_build(&u, u.old);
  if (ret == 0)
    printf("deltafin upgrade: done: %s fast-forwarded from %s to %s, %s rebuilt with the "
           "recorded configuration\n", u.branch, u.old, u.new_, u.bld);

done:
  if (u.configure_argv)
    for (size_t i = u.n_fixed; i && u.configure_argv[i]; i++) free(u.configure_argv[i]);
  free(u.configure_argv);
  if (u.build_argv) free(u.build_argv[4]);
  free(u.build_argv);
  free(u.git_env);
  free(u.build_env);
  record_free(&u.rec);
  return ret;
}
