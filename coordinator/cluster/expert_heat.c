/* coordinator/cluster/expert_heat.c — the heat file of expert_heat.h. */
#define _GNU_SOURCE
#include "coordinator/cluster/expert_heat.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/fsutil.h"
#include "transport/keys.h"

static const char k_magic[8] = {'D', 'F', 'H', 'E', 'A', 'T', '1', 0};
#define HEAT_MAX_PAIRS (1ull << 24) /* far more (layer, expert) pairs than any model has */

/* What heat_read found at the path. */
enum { HEAT_NONE, HEAT_OK, HEAT_CORRUPT, HEAT_UNUSABLE };

/* STATE/heat/KEY.u64 into out (cap bytes); -1 with a message when the state directory is
 * unknown or "", or the path does not fit. */
static int heat_path(const char *state, const char *model_dir, char *out, size_t cap, char *err,
                     size_t errlen) {
  char st[PATH_MAX], real[PATH_MAX];
  if (state && !state[0]) {
    snprintf(err, errlen, "the state directory is '' (expected a folder path)");
    return -1;
  }
  if (state) snprintf(st, sizeof st, "%s", state);
  else if (df_proto_state_default("deltafin", st, sizeof st, err, errlen) != 0) return -1;
  const char *p = realpath(model_dir, real) ? real : model_dir;
  uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
  for (; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  int w = snprintf(out, cap, "%s/heat/%016llx.u64", st, (unsigned long long)h);
  if (w < 0 || (size_t)w >= cap) {
    snprintf(err, errlen, "heat file path too long (state directory %.200s...)", st);
    return -1;
  }
  return 0;
}

static uint64_t get_le64(const unsigned char *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

static void put_le64(unsigned char *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

/* Read up to len bytes; the count read (short only at end of file), or -1 (errno set). */
static ssize_t read_full(int fd, unsigned char *b, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t r = read(fd, b + got, len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

/* Read the heat file at `path` without ever blocking on it. HEAT_OK: *v is a malloc'd [*n]
 * (caller frees). HEAT_NONE: no file. HEAT_CORRUPT / HEAT_UNUSABLE (expert_heat.h): *v NULL,
 * `why` says what is wrong. */
static int heat_read(const char *path, uint64_t **v, int64_t *n, char *why, size_t whylen) {
  *v = NULL;
  *n = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return HEAT_NONE;
    snprintf(why, whylen, "cannot open: %s", strerror(errno));
    return HEAT_UNUSABLE;
  }
  int kind = HEAT_CORRUPT;
  unsigned char hdr[16], *raw = NULL;
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    snprintf(why, whylen, "cannot stat: %s", strerror(errno));
    kind = HEAT_UNUSABLE;
    goto done;
  }
  if (!S_ISREG(sb.st_mode)) {
    snprintf(why, whylen, "not a regular file");
    kind = HEAT_UNUSABLE;
    goto done;
  }
  ssize_t got = read_full(fd, hdr, sizeof hdr);
  if (got < 0) {
    snprintf(why, whylen, "read error: %s", strerror(errno));
    kind = HEAT_UNUSABLE;
    goto done;
  }
  if (got < (ssize_t)sizeof hdr) {
    snprintf(why, whylen, "expected at least 16 bytes (the header), found %lld", (long long)got);
    goto done;
  }
  if (memcmp(hdr, k_magic, 8) != 0) {
    snprintf(why, whylen, "not a heat file (no DFHEAT1 header)");
    goto done;
  }
  uint64_t cnt = get_le64(hdr + 8);
  if (cnt == 0 || cnt > HEAT_MAX_PAIRS) {
    snprintf(why, whylen, "header claims %llu counts (expected 1 to %llu)",
             (unsigned long long)cnt, HEAT_MAX_PAIRS);
    goto done;
  }
  uint64_t want = 16 + 8 * cnt;
  if ((uint64_t)sb.st_size != want) {
    snprintf(why, whylen, "expected %llu bytes for %llu counts, found %lld",
             (unsigned long long)want, (unsigned long long)cnt, (long long)sb.st_size);
    goto done;
  }
  /* one byte more than needed: a file that grew since fstat is caught as well */
  raw = malloc((size_t)(want - 16) + 1);
  *v = raw ? malloc((size_t)cnt * sizeof **v) : NULL;
  if (!*v) {
    snprintf(why, whylen, "out of memory for %llu counts", (unsigned long long)cnt);
    kind = HEAT_UNUSABLE;
    goto done;
  }
  got = read_full(fd, raw, (size_t)(want - 16) + 1);
  if (got < 0) {
    snprintf(why, whylen, "read error: %s", strerror(errno));
    kind = HEAT_UNUSABLE;
    goto done;
  }
  if ((uint64_t)got != want - 16) {
    snprintf(why, whylen, "expected %llu bytes for %llu counts, found %s%llu",
             (unsigned long long)want, (unsigned long long)cnt,
             (uint64_t)got > want - 16 ? "more than " : "", (unsigned long long)(16 + got));
    goto done;
  }
  for (uint64_t i = 0; i < cnt; i++) (*v)[i] = get_le64(raw + 8 * i);
  *n = (int64_t)cnt;
  kind = HEAT_OK;
done:
  if (kind != HEAT_OK) {
    free(*v);
    *v = NULL;
  }
  free(raw);
  close(fd);
  return kind;
}

/* The one-line note about a corrupt or unusable file at `path`. */
static void heat_note(char *note, size_t notelen, const char *path, int kind, const char *why) {
  if (!notelen) return;
  snprintf(note, notelen, "heat file %s: %s; %s", path, why,
           kind == HEAT_CORRUPT ? "ignored, this run's counts replace it"
                                : "ignored and left as it is (this run's counts are not saved)");
}

uint64_t *df_heat_load(const char *state, const char *model_dir, int64_t *n, char *note,
                       size_t notelen) {
  char path[PATH_MAX + 64], why[512];
  uint64_t *v = NULL;
  *n = 0;
  if (notelen) note[0] = 0;
  if (heat_path(state, model_dir, path, sizeof path, why, sizeof why) != 0) {
    /* "" is refused by every --state-dir option; an unset HOME just means no history */
    if (state && notelen) snprintf(note, notelen, "no heat file: %s", why);
    return NULL;
  }
  int kind = heat_read(path, &v, n, why, sizeof why);
  if (kind == HEAT_CORRUPT || kind == HEAT_UNUSABLE) heat_note(note, notelen, path, kind, why);
  return v;
}

/* Exclusive flock of DIR/.lock, waiting at most DF_HEAT_LOCK_WAIT_S; the fd (close to
 * release) or -1 with a message. */
static int heat_lock(const char *dir, char *err, size_t errlen) {
  char p[PATH_MAX + 64];
  if (snprintf(p, sizeof p, "%s/.lock", dir) >= (int)sizeof p) {
    snprintf(err, errlen, "path too long: %s/.lock", dir);
    return -1;
  }
  int fd = open(p, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0600);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    snprintf(err, errlen, "cannot open lock file %s: %s", p, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  if (!S_ISREG(sb.st_mode)) {
    snprintf(err, errlen, "lock file %s: not a regular file", p);
    close(fd);
    return -1;
  }
  for (int waited_ms = 0;; waited_ms += 10) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK && errno != EINTR) {
      snprintf(err, errlen, "cannot lock %s: %s", p, strerror(errno));
      break;
    }
    if (waited_ms >= DF_HEAT_LOCK_WAIT_S * 1000) {
      snprintf(err, errlen, "%s held by another process for %d s", p, DF_HEAT_LOCK_WAIT_S);
      break;
    }
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  close(fd);
  return -1;
}

int df_heat_save(const char *state, const char *model_dir, const df_model *m, char *note,
                 size_t notelen, char *err, size_t errlen) {
  const df_model_config *c = df_model_cfg(m);
  const uint64_t *rc = df_model_route_counts(m);
  int64_t n = c->num_hidden_layers * c->num_experts;
  char path[PATH_MAX + 64], dir[PATH_MAX + 64], why[512], found[DF_HEAT_NOTE_MAX] = "";
  uint64_t *old = NULL;
  unsigned char *buf = NULL;
  int64_t old_n = 0;
  int lk = -1, r = -1;
  if (!rc || n <= 0) {
    snprintf(err, errlen, "no routing counts (the model has no routed experts)");
    goto done;
  }
  if (heat_path(state, model_dir, path, sizeof path, err, errlen) != 0) goto done;
  snprintf(dir, sizeof dir, "%s", path);
  *strrchr(dir, '/') = 0;
  /* mode 700 as the rest of the state directory (transport/keys.h) */
  if (df_proto_state_mkdir(dir, err, errlen) != 0 || (lk = heat_lock(dir, err, errlen)) < 0)
    goto done;
  int kind = heat_read(path, &old, &old_n, why, sizeof why);
  if (kind == HEAT_CORRUPT || kind == HEAT_UNUSABLE) heat_note(found, sizeof found, path, kind, why);
  if (kind == HEAT_UNUSABLE) {
    r = 1; /* present but unreadable: replacing it would hide whatever it is */
    goto done;
  }
  if (kind == HEAT_OK && old_n != n)
    snprintf(found, sizeof found,
             "heat file %s: holds %lld counts, the model has %lld (%lld layers x %lld experts); "
             "replaced by this run's counts", path, (long long)old_n, (long long)n,
             (long long)c->num_hidden_layers, (long long)c->num_experts);
  buf = malloc(16 + (size_t)n * 8);
  if (!buf) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  memcpy(buf, k_magic, 8);
  put_le64(buf + 8, (uint64_t)n);
  for (int64_t i = 0; i < n; i++) {
    uint64_t a = old_n == n ? old[i] : 0, b = rc[i];
    put_le64(buf + 16 + 8 * i, a > UINT64_MAX - b ? UINT64_MAX : a + b);
  }
  r = df_fs_write_atomic(path, buf, 16 + (size_t)n * 8, 0600, err, errlen);
done:
  if (lk >= 0) close(lk); /* after the rename: the next process reads this sum */
  free(old);
  free(buf);
  if (notelen) {
    if (found[0] && strcmp(found, note) != 0) snprintf(note, notelen, "%s", found);
    else note[0] = 0;
  }
  return r;
}
