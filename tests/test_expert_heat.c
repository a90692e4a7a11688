/* tests/test_expert_heat.c — the heat file (coordinator/cluster/expert_heat.h): a table of
 * malformed files, each ignored with one note naming the file and what is wrong; files that
 * are not regular (a FIFO must not block), cannot be opened, or a state directory of "" ;
 * saves that add to the stored counts, replace a corrupt file or one for another pair count
 * (and say so once), leave an unusable one alone, saturate at UINT64_MAX, wait for another
 * holder of the lock, and lose no update when 8 processes save at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "coordinator/cluster/expert_heat.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

#define MODEL DF_FIXTURES "/tiny-moe-sparse"

/* The folder under test (fresh per test) and the heat file path in it. */
typedef struct fx {
  char state[256];
  char dir[300];  /* state/heat */
  char path[512]; /* state/heat/KEY.u64 */
} fx;

static void rm_rf(const char *p) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
  assert_int_equal(system(cmd), 0);
}

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  snprintf(f->state, sizeof f->state, "%s/df-heat-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  assert_non_null(mkdtemp(f->state));
  snprintf(f->dir, sizeof f->dir, "%s/heat", f->state);
  char real[PATH_MAX];
  assert_non_null(realpath(MODEL, real));
  uint64_t h = 1469598103934665603ull;
  for (const char *p = real; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  snprintf(f->path, sizeof f->path, "%s/%016llx.u64", f->dir, (unsigned long long)h);
  assert_int_equal(mkdir(f->dir, 0755), 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  rm_rf(f->state);
  free(f);
  return 0;
}

static void put_le64(unsigned char *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static void write_file(const char *path, const void *b, size_t n) {
  unlink(path);
  FILE *o = fopen(path, "wb");
  assert_non_null(o);
  assert_int_equal(fwrite(b, 1, n, o), n);
  fclose(o);
}

/* A well-formed heat file of `n` counts v (NULL: 1, 2, 3, ...) plus `extra` bytes 'j' at the
 * end, its first `keep` bytes written (-1: all). */
static void write_heat(const char *path, uint64_t n_hdr, int64_t n, const uint64_t *v,
                       size_t extra, int64_t keep) {
  size_t len = 16 + 8 * (size_t)n + extra;
  unsigned char *b = malloc(len);
  memcpy(b, "DFHEAT1\0", 8);
  put_le64(b + 8, n_hdr);
  for (int64_t i = 0; i < n; i++) put_le64(b + 16 + 8 * i, v ? v[i] : (uint64_t)i + 1);
  memset(b + 16 + 8 * n, 'j', extra);
  write_file(path, b, keep < 0 ? len : (size_t)keep);
  free(b);
}

/* The counts of a well-formed file at path ([*n], malloc'd; the caller frees), read here
 * independently of df_heat_load; NULL when there is none. */
static uint64_t *read_heat(const char *path, int64_t *n) {
  *n = 0;
  FILE *i = fopen(path, "rb");
  if (!i) return NULL;
  unsigned char hdr[16];
  if (fread(hdr, 1, 16, i) != 16 || memcmp(hdr, "DFHEAT1\0", 8)) {
    fclose(i);
    return NULL;
  }
  uint64_t c = 0;
  for (int k = 7; k >= 0; k--) c = c << 8 | hdr[8 + k];
  uint64_t *v = calloc(c, sizeof *v);
  for (uint64_t j = 0; j < c; j++) {
    unsigned char e[8];
    assert_int_equal(fread(e, 1, 8, i), 8);
    for (int k = 7; k >= 0; k--) v[j] = v[j] << 8 | e[k];
  }
  assert_int_equal(fgetc(i), EOF);
  fclose(i);
  *n = (int64_t)c;
  return v;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "df_heat blocked on the heat file\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(3);
}

/* Malformed files: each NULL, n 0, one note naming the file and the fault; replaced later. */
static void test_load_malformed(void **state) {
  fx *f = *state;
  static const struct {
    const char *what;
    uint64_t n_hdr;
    int64_t n;
    size_t extra;
    int64_t keep;
    const char *raw; /* written instead when not NULL */
    const char *expect;
  } cases[] = {
      {"empty", 0, 0, 0, 0, NULL, "expected at least 16 bytes (the header), found 0"},
      {"shorter than the header", 8, 8, 0, 11, NULL, "expected at least 16 bytes (the header), found 11"},
      {"truncated counts", 8, 8, 0, 16 + 8 * 5 + 3, NULL, "expected 80 bytes for 8 counts, found 59"},
      {"trailing junk", 8, 8, 3, -1, NULL, "expected 80 bytes for 8 counts, found 83"},
      {"header says more", 9, 8, 0, -1, NULL, "expected 88 bytes for 9 counts, found 80"},
      {"zero counts", 0, 0, 0, -1, NULL, "header claims 0 counts (expected 1 to 16777216)"},
      {"absurd count", 1ull << 61, 2, 0, -1, NULL,
       "header claims 2305843009213693952 counts (expected 1 to 16777216)"},
      {"garbage", 0, 0, 0, 0, "this is not a heat file at all, just text\n",
       "not a heat file (no DFHEAT1 header)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    if (cases[i].raw) write_file(f->path, cases[i].raw, strlen(cases[i].raw));
    else write_heat(f->path, cases[i].n_hdr, cases[i].n, NULL, cases[i].extra, cases[i].keep);
    char note[DF_HEAT_NOTE_MAX], want[DF_HEAT_NOTE_MAX];
    int64_t n = -1;
    uint64_t *v = df_heat_load(f->state, MODEL, &n, note, sizeof note);
    snprintf(want, sizeof want, "heat file %s: %s; ignored, this run's counts replace it",
             f->path, cases[i].expect);
    if (v || n != 0 || strcmp(note, want))
      fail_msg("%s: got %p n=%lld note '%s', expected '%s'", cases[i].what, (void *)v,
               (long long)n, note, want);
    assert_null(strchr(note, '\n')); /* one line */
  }
  /* the good file: its counts, no note; no file: nothing, no note */
  write_heat(f->path, 8, 8, NULL, 0, -1);
  char note[DF_HEAT_NOTE_MAX] = "stale";
  int64_t n = 0;
  uint64_t *v = df_heat_load(f->state, MODEL, &n, note, sizeof note);
  assert_non_null(v);
  assert_int_equal(n, 8);
  for (int i = 0; i < 8; i++) assert_int_equal(v[i], i + 1);
  assert_string_equal(note, "");
  free(v);
  unlink(f->path);
  strcpy(note, "stale");
  assert_null(df_heat_load(f->state, MODEL, &n, note, sizeof note));
  assert_int_equal(n, 0);
  assert_string_equal(note, "");
  /* NULL note, 0 bytes: allowed */
  write_heat(f->path, 8, 8, NULL, 1, -1);
  assert_null(df_heat_load(f->state, MODEL, &n, NULL, 0));
}

/* Present but unusable: a FIFO (no writer: a blocking open would hang), a folder, a
 * symlink loop, a file without read permission (not as root). Never blocks; the note says
 * it stays as it is. */
static void test_load_unusable(void **state) {
  fx *f = *state;
  signal(SIGALRM, on_alarm);
  alarm(10);
  struct {
    const char *what, *expect;
  } cases[] = {{"fifo", "not a regular file"},
               {"folder", "not a regular file"},
               {"symlink loop", "cannot open: Too many levels of symbolic links"},
               {"no read permission", "cannot open: Permission denied"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    rm_rf(f->path);
    if (i == 0) assert_int_equal(mkfifo(f->path, 0600), 0);
    if (i == 1) assert_int_equal(mkdir(f->path, 0700), 0);
    if (i == 2) assert_int_equal(symlink(f->path, f->path), 0);
    if (i == 3) {
      if (geteuid() == 0) continue; /* root reads anything */
      write_heat(f->path, 8, 8, NULL, 0, -1);
      assert_int_equal(chmod(f->path, 0), 0);
    }
    char note[DF_HEAT_NOTE_MAX], want[DF_HEAT_NOTE_MAX];
    int64_t n = -1;
    uint64_t *v = df_heat_load(f->state, MODEL, &n, note, sizeof note);
    snprintf(want, sizeof want,
             "heat file %s: %s; ignored and left as it is (this run's counts are not saved)",
             f->path, cases[i].expect);
    if (v || n != 0 || strcmp(note, want))
      fail_msg("%s: got %p n=%lld note '%s', expected '%s'", cases[i].what, (void *)v,
               (long long)n, note, want);
  }
  alarm(0);
}

/* --state-dir "" must never mean "/": nothing read, a note; a save is an error. */
static void test_empty_state(void **state) {
  (void)state;
  char note[DF_HEAT_NOTE_MAX], err[256];
  int64_t n = -1;
  assert_null(df_heat_load("", MODEL, &n, note, sizeof note));
  assert_int_equal(n, 0);
  assert_non_null(strstr(note, "the state directory is ''"));
  df_model *m = NULL;
  df_model_opts o = {0};
  assert_int_equal(df_model_load(MODEL, &o, &m, err, sizeof err), 0);
  note[0] = 0;
  assert_int_equal(df_heat_save("", MODEL, m, note, sizeof note, err, sizeof err), -1);
  assert_non_null(strstr(err, "the state directory is ''"));
  df_model_destroy(&m);
}

/* A CPU model of the fixture after a 3-token forward: nonzero routing counts. */
static df_model *counted_model(const uint64_t **rc, int64_t *n) {
  df_model *m = NULL;
  df_model_opts o = {0};
  char err[256];
  if (df_model_load(MODEL, &o, &m, err, sizeof err) != 0) fail_msg("load: %s", err);
  df_kv_cache *kv = df_model_kv_new(m, 16, err, sizeof err);
  assert_non_null(kv);
  int32_t ids[3] = {1, 2, 3};
  if (df_model_forward(m, kv, ids, 3, DF_LOGITS_NONE, NULL, err, sizeof err) != 0)
    fail_msg("forward: %s", err);
  df_kv_destroy(&kv);
  const df_model_config *c = df_model_cfg(m);
  *n = c->num_hidden_layers * c->num_experts;
  *rc = df_model_route_counts(m);
  uint64_t sum = 0;
  for (int64_t i = 0; i < *n; i++) sum += (*rc)[i];
  assert_true(sum > 0);
  return m;
}

static void assert_file_is(const char *path, const uint64_t *rc, int64_t n, uint64_t times,
                           const uint64_t *base) {
  int64_t got_n = 0;
  uint64_t *v = read_heat(path, &got_n);
  assert_non_null(v);
  assert_int_equal(got_n, n);
  for (int64_t i = 0; i < n; i++)
    if (v[i] != (base ? base[i] : 0) + times * rc[i])
      fail_msg("count %lld: %llu, expected %llu", (long long)i, (unsigned long long)v[i],
               (unsigned long long)((base ? base[i] : 0) + times * rc[i]));
  free(v);
}

static void test_save(void **state) {
  fx *f = *state;
  const uint64_t *rc;
  int64_t n;
  df_model *m = counted_model(&rc, &n);
  char note[DF_HEAT_NOTE_MAX] = "", err[512];

  /* no file, then the sum of two saves */
  assert_int_equal(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err), 0);
  assert_string_equal(note, "");
  assert_file_is(f->path, rc, n, 1, NULL);
  assert_int_equal(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err), 0);
  assert_file_is(f->path, rc, n, 2, NULL);
  struct stat sb;
  assert_int_equal(stat(f->path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);

  /* another stored history: added to */
  uint64_t *base = calloc((size_t)n, sizeof *base);
  assert_non_null(base);
  for (int64_t i = 0; i < n; i++) base[i] = 1000 + (uint64_t)i;
  write_heat(f->path, (uint64_t)n, n, base, 0, -1);
  assert_int_equal(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err), 0);
  assert_file_is(f->path, rc, n, 1, base);

  /* near UINT64_MAX: saturates */
  for (int64_t i = 0; i < n; i++) base[i] = UINT64_MAX - (rc[i] ? rc[i] - 1 : 0);
  write_heat(f->path, (uint64_t)n, n, base, 0, -1);
  assert_int_equal(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err), 0);
  {
    int64_t k;
    uint64_t *v = read_heat(f->path, &k);
    for (int64_t i = 0; i < n; i++) assert_true(v[i] == (rc[i] ? UINT64_MAX : base[i]));
    free(v);
  }

  /* corrupt, reported by the load: replaced by this run's counts, not reported again */
  write_heat(f->path, (uint64_t)n, n, NULL, 0, 100);
  int64_t ln;
  assert_null(df_heat_load(f->state, MODEL, &ln, note, sizeof note));
  assert_non_null(strstr(note, "expected"));
  assert_int_equal(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err), 0);
  assert_string_equal(note, "");
  assert_file_is(f->path, rc, n, 1, NULL);

  /* corrupt only by the time of the save (not reported before): the save says it */
  write_file(f->path, "garbage garbage garbage", 23);
  note[0] = 0;
  assert_int_equal(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err), 0);
  char want[DF_HEAT_NOTE_MAX];
  snprintf(want, sizeof want, "heat file %s: not a heat file (no DFHEAT1 header); ignored, "
           "this run's counts replace it", f->path);
  assert_string_equal(note, want);
  assert_file_is(f->path, rc, n, 1, NULL);

  /* a well-formed file for another pair count: replaced, with a note */
  write_heat(f->path, 5, 5, NULL, 0, -1);
  note[0] = 0;
  assert_int_equal(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err), 0);
  const df_model_config *c = df_model_cfg(m);
  snprintf(want, sizeof want, "heat file %s: holds 5 counts, the model has %lld (%lld layers x "
           "%lld experts); replaced by this run's counts", f->path, (long long)n,
           (long long)c->num_hidden_layers, (long long)c->num_experts);
  assert_string_equal(note, want);
  assert_file_is(f->path, rc, n, 1, NULL);

  /* unusable: left as it is (1), whether reported by the load or found by the save */
  signal(SIGALRM, on_alarm);
  alarm(10);
  unlink(f->path);
  assert_int_equal(mkfifo(f->path, 0600), 0);
  assert_null(df_heat_load(f->state, MODEL, &ln, note, sizeof note));
  assert_non_null(strstr(note, "not a regular file"));
  assert_int_equal(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err), 1);
  assert_string_equal(note, ""); /* already said */
  note[0] = 0;
  assert_int_equal(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err), 1);
  assert_non_null(strstr(note, "not a regular file; ignored and left as it is"));
  assert_int_equal(lstat(f->path, &sb), 0);
  assert_true(S_ISFIFO(sb.st_mode));
  unlink(f->path);
  assert_int_equal(symlink(f->path, f->path), 0);
  note[0] = 0;
  assert_int_equal(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err), 1);
  assert_non_null(strstr(note, "Too many levels of symbolic links"));
  assert_int_equal(lstat(f->path, &sb), 0);
  assert_true(S_ISLNK(sb.st_mode));
  alarm(0);
  unlink(f->path);

  /* the heat folder itself is created */
  rm_rf(f->dir);
  assert_int_equal(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err), 0);
  assert_file_is(f->path, rc, n, 1, NULL);
  free(base);
  df_model_destroy(&m);
}

/* A save waits while another process holds the lock, then adds to what that one wrote. */
static void test_save_waits_for_lock(void **state) {
  fx *f = *state;
  const uint64_t *rc;
  int64_t n;
  df_model *m = counted_model(&rc, &n);
  char lock[600];
  snprintf(lock, sizeof lock, "%s/.lock", f->dir);
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(flock(fd, LOCK_EX), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fd); /* the parent's copy of the locked description keeps the lock */
    char note[DF_HEAT_NOTE_MAX] = "", err[512];
    _exit(df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err) == 0 ? 0 : 1);
  }
  usleep(300 * 1000);
  struct stat sb;
  assert_int_equal(stat(f->path, &sb), -1); /* the child waits */
  int st = 0;
  assert_int_equal(waitpid(pid, &st, WNOHANG), 0);
  close(fd); /* release */
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_file_is(f->path, rc, n, 1, NULL);
  df_model_destroy(&m);
}

/* 8 processes x 25 saves, released together: every one of the 200 sums is kept. */
static void test_save_concurrent(void **state) {
  fx *f = *state;
  const uint64_t *rc;
  int64_t n;
  df_model *m = counted_model(&rc, &n);
  enum { PROCS = 8, SAVES = 25 };
  int go[2];
  assert_int_equal(pipe(go), 0);
  pid_t pids[PROCS];
  for (int p = 0; p < PROCS; p++) {
    pids[p] = fork();
    assert_true(pids[p] >= 0);
    if (pids[p] == 0) {
      close(go[1]);
      char c;
      (void)!read(go[0], &c, 1); /* EOF when the parent closes: all start at once */
      int bad = 0;
      for (int s = 0; s < SAVES; s++) {
        char note[DF_HEAT_NOTE_MAX] = "", err[512];
        if (df_heat_save(f->state, MODEL, m, note, sizeof note, err, sizeof err) != 0 || note[0]) {
          fprintf(stderr, "save: %s %s\n", err, note);
          bad = 1;
        }
      }
      _exit(bad);
    }
  }
  close(go[0]);
  close(go[1]);
  for (int p = 0; p < PROCS; p++) {
    int st = 0;
    assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  assert_file_is(f->path, rc, n, PROCS * SAVES, NULL);
  df_model_destroy(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_load_malformed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_load_unusable, setup, teardown),
      cmocka_unit_test(test_empty_state),
      cmocka_unit_test_setup_teardown(test_save, setup, teardown),
      cmocka_unit_test_setup_teardown(test_save_waits_for_lock, setup, teardown),
      cmocka_unit_test_setup_teardown(test_save_concurrent, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
