/* coordinator/hub/pull.c — list, plan, download, verify and publish a hub repo; see pull.h.
 *
 * Threads: the calling thread lists, plans and draws progress; `jobs` workers take files
 * from a shared cursor and download them, each with its own connection. Workers touch only
 * their own entry, plus atomic byte counters the progress reads.
 */
#define _GNU_SOURCE
#include "coordinator/hub/pull.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "coordinator/hub/pull_manifest.h"
#include "coordinator/hub/pull_util.h"
#include "engine/safetensors.h"

void df_pull_opts_init(df_pull_opts *o) {
  memset(o, 0, sizeof *o);
  o->jobs = 4;
  o->progress_interval_s = 10;
  df_pull_net_defaults(&o->net);
}

bool df_pull_is_expert_tensor(const char *name) {
  const char *p = strstr(name, ".mlp.experts.");
  if (!p || !strstr(name, "layers.")) return false;
  p += strlen(".mlp.experts.");
  if (*p < '0' || *p > '9') return false;
  while (*p >= '0' && *p <= '9') p++;
  return *p == '.';
}

/* ---------------------------------------------------------------- entries */

enum { E_TODO, E_SKIP, E_EXCLUDED, E_DONE, E_FAILED };

typedef struct span {
  uint64_t off, len;
} span;

typedef struct entry {
  char *path;
  uint64_t size;                       /* listed size, bytes */
  char lfs[DF_PULL_SHA256_HEX];        /* hub LFS oid or "" */
  char git[DF_PULL_SHA1_HEX];          /* hub blob id or "" */
  bool sparse;                         /* stream mode: write header + non-expert ranges */
  int state;
  char partial[4300];                  /* temp path under .deltafin/partial */
  /* sparse plan */
  uint8_t *head;                       /* [head_len] first bytes: 8 + header */
  uint64_t head_len;
  span *spans;                         /* non-expert data ranges after the header */
  int n_spans;
  uint64_t omitted;                    /* expert bytes left as holes */
  uint64_t need;                       /* bytes still to download */
  /* progress (written by the worker) */
  _Atomic uint64_t done;               /* bytes of `need` done */
  _Atomic int active;
  uint64_t resumed;                    /* bytes already present from an earlier run */
  double t0;
  df_pull_mfile out;                   /* the manifest record on success */
  char err[768];
} entry;

typedef struct pull {
  const df_pull_opts *o;
  char dir[4096];
  char commit[96];
  char rev[256];
  entry *e;
  int n;
  pthread_mutex_t mu;
  int next;
  _Atomic int workers_done;
  _Atomic uint64_t total_done;
  uint64_t total_need;
  /* output */
  bool tty;
  int cols;        /* terminal width; live lines are cut to fit so redraws stay aligned */
  int drawn_lines;
  char **notes;  /* lines to print above the live bar */
  int n_notes;
  double t_start, last_plain;
} pull;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- output */

static void json_event(json_t *ev) {
  char *s = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (s) {
    flockfile(stdout);
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    funlockfile(stdout);
    free(s);
  }
  json_decref(ev);
}

/* A line for the user: stderr in plain/TTY mode (queued above the live bar on a TTY). */
static void note(pull *p, bool is_error, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(pull *p, bool is_error, const char *fmt, ...) {
  if (p->o->json || (p->o->quiet && !is_error)) return;
  char line[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&p->mu);
  if (p->tty) {
    char **nn = realloc(p->notes, (size_t)(p->n_notes + 1) * sizeof *nn);
    if (nn) {
      p->notes = nn;
      if ((p->notes[p->n_notes] = strdup(line))) p->n_notes++;
    }
  } else {
    fprintf(stderr, "%s\n", line);
  }
  pthread_mutex_unlock(&p->mu);
}

static void fmt_eta(double s, char *buf, size_t cap) {
  if (!(s >= 0) || s > 360000) {
    snprintf(buf, cap, "--:--");
    return;
  }
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else
    snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static void progress_line(char *buf, size_t cap, const char *label, uint64_t done, uint64_t need,
                          double rate, int bar_w) {
  char a[32], b[32], r[32], eta[32];
  double frac = need ? (double)done / (double)need : 1.0;
  char bar[64];
  int w = bar_w < 60 ? bar_w : 60, k = (int)(frac * w);
  for (int i = 0; i < w; i++) bar[i] = i < k ? '#' : '.';
  bar[w] = 0;
  fmt_eta(rate > 0 ? (double)(need - done) / rate : -1, eta, sizeof eta);
  snprintf(buf, cap, "%-32.32s %s%s%s %3d%% %10s / %-10s %10s/s  ETA %s", label, w ? "[" : "",
           bar, w ? "]" : "", (int)(frac * 100), df_pull_fmt_bytes(done, a, sizeof a),
           df_pull_fmt_bytes(need, b, sizeof b), df_pull_fmt_bytes((uint64_t)rate, r, sizeof r),
           eta);
}

static void draw(pull *p, bool final) {
  const df_pull_opts *o = p->o;
  double t = now_s(), el = t - p->t_start;
  uint64_t done = atomic_load(&p->total_done);
  double rate = el > 0.2 ? (double)done / el : 0;
  int files_done = 0, files = 0;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < p->n; i++) {
    files_done += p->e[i].state == E_DONE || p->e[i].state == E_SKIP;
    files += p->e[i].state != E_EXCLUDED;
  }
  if (o->json || o->quiet) pthread_mutex_unlock(&p->mu);
  if (o->json) {
    if (final || t - p->last_plain >= o->progress_interval_s) {
      p->last_plain = t;
      json_event(json_pack("{s:s, s:I, s:I, s:f, s:i, s:i}", "event", "progress", "done",
                           (json_int_t)done, "total", (json_int_t)p->total_need, "rate", rate,
                           "files_done", files_done, "files", files));
    }
    return;
  }
  if (o->quiet) return;
  char line[512];
  if (p->tty) {
    if (p->drawn_lines) fprintf(stderr, "\x1b[%dA", p->drawn_lines);
    fprintf(stderr, "\r\x1b[J");
    for (int i = 0; i < p->n_notes; i++) {
      fprintf(stderr, "%s\n", p->notes[i]);
      free(p->notes[i]);
    }
    p->n_notes = 0;
    p->drawn_lines = 0;
    if (!final) {
      for (int i = 0; i < p->n; i++) {
        entry *e = &p->e[i];
        if (!atomic_load(&e->active)) continue;
        uint64_t d = atomic_load(&e->done);
        double fe = t - e->t0;
        progress_line(line, sizeof line, e->path, d, e->need, fe > 0.2 ? (double)d / fe : 0, 0);
        if (p->cols > 3 && (int)strlen(line) > p->cols - 3) line[p->cols - 3] = 0;
        fprintf(stderr, "  %s\n", line);
        p->drawn_lines++;
      }
    }
    char label[64];
    snprintf(label, sizeof label, "total (%d/%d files)", files_done, files);
    progress_line(line, sizeof line, label, done, p->total_need, rate,
                  p->cols >= 120 ? 24 : 0);
    if (p->cols > 1 && (int)strlen(line) > p->cols - 1) line[p->cols - 1] = 0;
    fprintf(stderr, "%s\n", line);
    p->drawn_lines++;
    if (final) p->drawn_lines = 0;
  } else if (final || t - p->last_plain >= o->progress_interval_s) {
    p->last_plain = t;
    char a[32], b[32], r[32], eta[32];
    fmt_eta(rate > 0 ? (double)(p->total_need - done) / rate : -1, eta, sizeof eta);
    fprintf(stderr, "pull: %d/%d files, %s of %s, %s/s, ETA %s\n", files_done, files,
            df_pull_fmt_bytes(done, a, sizeof a), df_pull_fmt_bytes(p->total_need, b, sizeof b),
            df_pull_fmt_bytes((uint64_t)rate, r, sizeof r), eta);
  }
  fflush(stderr);
  pthread_mutex_unlock(&p->mu);
}

/* ---------------------------------------------------------------- listing */

static bool hex_ok(const char *s, size_t n) {
  if (strlen(s) != n) return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

static int list_repo(pull *p, char *err, size_t errlen) {
  const df_pull_opts *o = p->o;
  char rev[800], url[2400];
  df_pull_urlenc(p->rev, false, rev, sizeof rev);
  snprintf(url, sizeof url, "%s/api/models/%s/revision/%s?blobs=True", o->net.endpoint, o->repo,
           rev);
  char *body = NULL, herr[1024];
  size_t len = 0;
  df_pull_resp resp;
  int rc = -1;
  json_t *root = NULL;
  if (df_pull_http_get_small(&o->net, url, (size_t)64 << 20, &body, &len, &resp, herr,
                             sizeof herr) != 0) {
    const char *code = resp.error_code;
    const char *tok = o->net.token[0] ? "the token in HF_TOKEN was not accepted"
                                      : "set HF_TOKEN to a token with access";
    if (!strcmp(code, "RepoNotFound")) {
      snprintf(err, errlen, "%s: repository not found at %s (HTTP %ld; if it is private, %s)",
               o->repo, o->net.endpoint, resp.status, tok);
    } else if (resp.status == 401 || resp.status == 403) {
      snprintf(err, errlen, "%s: HTTP %ld: access is restricted (gated or private repository): "
               "%s", o->repo, resp.status, tok);
    } else if (resp.status == 404) {
      if (!strcmp(code, "RevisionNotFound"))
        snprintf(err, errlen, "%s: revision '%s' not found (HTTP 404)", o->repo, p->rev);
      else
        snprintf(err, errlen, "%s: repository not found at %s (HTTP 404%s%s)", o->repo,
                 o->net.endpoint, resp.error_msg[0] ? ": " : "", resp.error_msg);
    } else {
      snprintf(err, errlen, "listing %s: %s", o->repo, herr);
    }
    goto done;
  }
  json_error_t je;
  root = json_loadb(body, len, 0, &je);
  json_t *sha = root ? json_object_get(root, "sha") : NULL;
  json_t *sib = root ? json_object_get(root, "siblings") : NULL;
  if (!root || !json_is_string(sha) || !json_is_array(sib)) {
    snprintf(err, errlen, "%s: the hub's listing is not the expected JSON (need \"sha\" and "
             "\"siblings\")", url);
    goto done;
  }
  snprintf(p->commit, sizeof p->commit, "%s", json_string_value(sha));
  if (!df_pull_revision_ok(p->commit)) {
    snprintf(err, errlen, "%s: bad commit id in the listing", url);
    goto done;
  }
  size_t n = json_array_size(sib);
  p->e = calloc(n ? n : 1, sizeof *p->e);
  if (!p->e) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  size_t i;
  json_t *s;
  json_array_foreach(sib, i, s) {
    json_t *fn = json_object_get(s, "rfilename"), *sz = json_object_get(s, "size");
    json_t *blob = json_object_get(s, "blobId"), *lfs = json_object_get(s, "lfs");
    if (!json_is_string(fn) || !df_pull_path_ok(json_string_value(fn))) {
      snprintf(err, errlen, "%s: siblings[%zu].rfilename: refusing an unsafe or missing path",
               url, i);
      goto done;
    }
    const char *path = json_string_value(fn);
    if (!json_is_integer(sz) || json_integer_value(sz) < 0) {
      snprintf(err, errlen, "%s: %s: the listing gives no size (the endpoint must support "
               "?blobs=true)", url, path);
      goto done;
    }
    for (int k = 0; k < p->n; k++)
      if (!strcmp(p->e[k].path, path)) {
        snprintf(err, errlen, "%s: %s listed twice", url, path);
        goto done;
      }
    entry *e = &p->e[p->n];
    if (!(e->path = strdup(path))) {
      snprintf(err, errlen, "out of memory");
      goto done;
    }
    p->n++;
    e->size = (uint64_t)json_integer_value(sz);
    if (json_is_string(blob) && hex_ok(json_string_value(blob), 40))
      snprintf(e->git, sizeof e->git, "%s", json_string_value(blob));
    if (json_is_object(lfs)) {
      json_t *oid = json_object_get(lfs, "sha256");
      if (!oid) oid = json_object_get(lfs, "oid");
      json_t *lsz = json_object_get(lfs, "size");
      if (!json_is_string(oid) || !hex_ok(json_string_value(oid), 64)) {
        snprintf(err, errlen, "%s: %s: lfs.sha256 is not 64 lowercase hex digits", url, path);
        goto done;
      }
      snprintf(e->lfs, sizeof e->lfs, "%s", json_string_value(oid));
      if (json_is_integer(lsz) && (uint64_t)json_integer_value(lsz) != e->size) {
        snprintf(err, errlen, "%s: %s: size %llu disagrees with lfs.size %lld", url, path,
                 (unsigned long long)e->size, (long long)json_integer_value(lsz));
        goto done;
      }
    }
  }
  rc = 0;
done:
  json_decref(root);
  free(body);
  return rc;
}

static bool selected(const df_pull_opts *o, const char *path) {
  bool in = o->n_include == 0;
  for (int i = 0; i < o->n_include && !in; i++) in = fnmatch(o->include[i], path, 0) == 0;
  for (int i = 0; i < o->n_exclude && in; i++) in = fnmatch(o->exclude[i], path, 0) != 0;
  return in;
}

static bool ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* ---------------------------------------------------------------- downloads */

typedef struct fdsink {
  int fd;
  uint64_t pos;        /* next file offset expected */
  uint64_t limit;      /* one past the last byte allowed */
  bool allow_restart;  /* a 200 at offset 0 restarts the file (full downloads) */
  df_pull_sha256 *sha;
  df_pull_gitsha *git;
  uint64_t git_size;
  bool hashing_reset;  /* set when a restart re-initialised the hashes */
  entry *e;
  pull *p;
  char *err;
  size_t errlen;
} fdsink;

static int fd_sink(void *ud, uint64_t at, const void *data, size_t n) {
  fdsink *s = ud;
  if (at != s->pos) {
    if (at == 0 && s->allow_restart) {
      /* the server ignored Range: start the file over */
      if (ftruncate(s->fd, 0) != 0) {
        snprintf(s->err, s->errlen, "%s: cannot truncate: %s", s->e->partial, strerror(errno));
        return -1;
      }
      atomic_fetch_sub(&s->p->total_done, atomic_load(&s->e->done));
      atomic_store(&s->e->done, 0);
      s->e->need = s->e->size;
      s->pos = 0;
      df_pull_sha256_init(s->sha);
      if (s->git) df_pull_gitsha_init(s->git, s->git_size);
      s->hashing_reset = true;
    } else {
      snprintf(s->err, s->errlen, "server sent bytes from offset %llu, expected %llu",
               (unsigned long long)at, (unsigned long long)s->pos);
      return -1;
    }
  }
  if (n > s->limit - s->pos) {
    snprintf(s->err, s->errlen, "server sent more than the %llu bytes listed",
             (unsigned long long)s->limit);
    return -1;
  }
  const uint8_t *b = data;
  size_t left = n;
  uint64_t off = s->pos;
  while (left) {
    ssize_t w = pwrite(s->fd, b, left, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      snprintf(s->err, s->errlen, "%s: write failed: %s", s->e->partial, strerror(errno));
      return -1;
    }
    b += w;
    off += (uint64_t)w;
    left -= (size_t)w;
  }
  df_pull_sha256_update(s->sha, data, n);
  if (s->git) df_pull_gitsha_update(s->git, data, n);
  s->pos += n;
  atomic_fetch_add(&s->e->done, n);
  atomic_fetch_add(&s->p->total_done, n);
  return 0;
}

/* Download bytes [s->pos, end) of url into s->fd with retries (resuming after what arrived).
 * end == e->size for full files. */
static int fetch_span(pull *p, void *h, const char *url, fdsink *s, uint64_t end, long *status,
                      char *err, size_t errlen) {
  const df_pull_net *net = &p->o->net;
  df_pull_resp resp;
  *status = 0;
  for (int attempt = 0;; attempt++) {
    if (s->pos >= end) return 0;
    err[0] = 0;
    int rc = df_pull_http_get(net, h, url, s->pos, s->allow_restart ? 0 : end, fd_sink, s,
                              &resp, err, errlen);
    *status = resp.status;
    if (rc == 0) {
      if (s->pos == end) return 0;
      snprintf(err, errlen, "%s: the server sent %llu bytes, the listing says %llu", url,
               (unsigned long long)s->pos, (unsigned long long)end);
      if (s->pos > end || (resp.total_size && resp.total_size != end)) return -1;
      resp.retryable = true;
    }
    if (!resp.retryable || attempt >= net->retries) return -1;
    note(p, false, "pull: %s: %s; retry %d of %d from byte %llu", s->e->path, err, attempt + 1,
         net->retries, (unsigned long long)s->pos);
    df_pull_http_backoff(net, attempt, resp.retry_after_s);
  }
}

static void http_refusal_hint(const entry *e, long status, const df_pull_opts *o, char *err,
                              size_t errlen) {
  char tmp[768];
  snprintf(tmp, sizeof tmp, "%s", err);
  if (status == 401 || status == 403)
    snprintf(err, errlen, "%.300s: %.400s (%s)", e->path, tmp,
             o->net.token[0] ? "the token in HF_TOKEN was not accepted"
                             : "the repository needs a token: set HF_TOKEN");
  else if (status == 404)
    snprintf(err, errlen, "%.300s: not found on the hub: %.400s", e->path, tmp);
  else
    snprintf(err, errlen, "%.300s: %.400s", e->path, tmp);
}

static int download_full(pull *p, void *h, entry *e) {
  const df_pull_opts *o = p->o;
  char url[4400], final[4400], err[768];
  int fd = -1, rc = -1;
  df_pull_sha256 sha;
  df_pull_gitsha git;
  bool use_git = !e->lfs[0] && e->git[0];
  bool fresh_retry = false;
  snprintf(final, sizeof final, "%.2048s/%.1100s", p->dir, e->path);
  if (df_pull_resolve_url(o->net.endpoint, o->repo, p->commit, e->path, url, sizeof url) != 0) {
    snprintf(e->err, sizeof e->err, "%s: URL too long", e->path);
    return -1;
  }
restart:
  fd = open(e->partial, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(e->err, sizeof e->err, "%.200s: cannot open %.300s: %s", e->path, e->partial, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) goto io_fail;
  uint64_t have = (uint64_t)st.st_size;
  if (have > e->size) {
    if (ftruncate(fd, 0) != 0) goto io_fail;
    have = 0;
  }
  df_pull_sha256_init(&sha);
  if (use_git) df_pull_gitsha_init(&git, e->size);
  if (have > 0) {
    /* hash what an earlier run left, then continue from there */
    char tmp[DF_PULL_SHA256_HEX];
    uint8_t *buf = malloc(1 << 20);
    uint64_t off = 0;
    if (!buf) goto io_fail;
    while (off < have) {
      size_t want = have - off < (1 << 20) ? (size_t)(have - off) : (1 << 20);
      ssize_t r = pread(fd, buf, want, (off_t)off);
      if (r <= 0) {
        free(buf);
        goto io_fail;
      }
      df_pull_sha256_update(&sha, buf, (size_t)r);
      if (use_git) df_pull_gitsha_update(&git, buf, (size_t)r);
      off += (uint64_t)r;
    }
    free(buf);
    (void)tmp;
  }
  e->resumed = have;
  e->need = e->size - have;
  atomic_store(&e->done, 0);
  if (have > 0 && !fresh_retry)
    note(p, false, "pull: %s: resuming at byte %llu of %llu", e->path, (unsigned long long)have,
         (unsigned long long)e->size);
  fdsink s = {.fd = fd, .pos = have, .limit = e->size, .allow_restart = true, .sha = &sha,
              .git = use_git ? &git : NULL, .git_size = e->size, .e = e, .p = p, .err = err,
              .errlen = sizeof err};
  long status = 0;
  if (fetch_span(p, h, url, &s, e->size, &status, err, sizeof err) != 0) {
    if (status == 416 && have > 0 && !fresh_retry) {
      /* the partial file does not fit the remote file: start over once */
      close(fd);
      unlink(e->partial);
      fresh_retry = true;
      goto restart;
    }
    http_refusal_hint(e, status, o, err, sizeof err);
    snprintf(e->err, sizeof e->err, "%s", err);
    close(fd);
    if (status >= 400 && status < 500) unlink(e->partial); /* refused: nothing to resume */
    return -1;
  }
  char got[DF_PULL_SHA256_HEX], got_git[DF_PULL_SHA1_HEX] = "";
  df_pull_sha256_final(&sha, got);
  if (use_git) df_pull_gitsha_final(&git, got_git);
  const char *want = e->lfs[0] ? e->lfs : e->git;
  const char *have_hash = e->lfs[0] ? got : got_git;
  if (want[0] && strcmp(want, have_hash) != 0) {
    close(fd);
    unlink(e->partial);
    atomic_fetch_sub(&p->total_done, atomic_load(&e->done));
    if (e->resumed > 0 && !s.hashing_reset && !fresh_retry) {
      note(p, false, "pull: %s: the resumed download does not verify; downloading it again",
           e->path);
      fresh_retry = true;
      goto restart;
    }
    snprintf(e->err, sizeof e->err,
             "%s: %s mismatch: the hub lists %s, the download has %s; corrupt download, not "
             "published",
             e->path, e->lfs[0] ? "SHA-256" : "git blob SHA-1", want, have_hash);
    return -1;
  }
  if (fchmod(fd, 0644) != 0) goto io_fail;
  if (df_fs_publish(fd, e->partial, final, err, sizeof err) != 0) {
    fd = -1;
    snprintf(e->err, sizeof e->err, "%.300s: %.400s", e->path, err);
    return -1;
  }
  fd = -1;
  e->out.path = e->path;
  e->out.size = e->size;
  snprintf(e->out.sha256, sizeof e->out.sha256, "%s", got);
  snprintf(e->out.lfs_sha256, sizeof e->out.lfs_sha256, "%s", e->lfs);
  snprintf(e->out.git_oid, sizeof e->out.git_oid, "%s", e->git);
  rc = 0;
  return rc;
io_fail:
  snprintf(e->err, sizeof e->err, "%.200s: I/O error on %.300s: %s", e->path, e->partial, strerror(errno));
  if (fd >= 0) close(fd);
  return -1;
}

/* Stream mode, planning (calling thread): fetch the header, lay out the sparse partial file,
 * and list the non-expert spans to download. A shard without experts becomes a full file. */
static int plan_sparse(pull *p, void *h, entry *e, char *err, size_t errlen) {
  const df_pull_opts *o = p->o;
  char url[4400], herr[768];
  uint8_t len8[8];
  int fd = -1, rc = -1;
  df_st_model *st = NULL;
  if (df_pull_resolve_url(o->net.endpoint, o->repo, p->commit, e->path, url, sizeof url) != 0) {
    snprintf(err, errlen, "%s: URL too long", e->path);
    return -1;
  }
  if (e->size < 8) {
    snprintf(err, errlen, "%s: %llu bytes is too short for a safetensors file", e->path,
             (unsigned long long)e->size);
    return -1;
  }
  if (df_pull_http_get_range(&o->net, h, url, 0, 8, len8, herr, sizeof herr) != 0) {
    snprintf(err, errlen, "%s: reading the safetensors header: %s", e->path, herr);
    return -1;
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | len8[i];
  if (n > (100u << 20) || 8 + n > e->size) {
    snprintf(err, errlen, "%s: safetensors header length %llu is invalid for a %llu-byte file",
             e->path, (unsigned long long)n, (unsigned long long)e->size);
    return -1;
  }
  e->head_len = 8 + n;
  e->head = malloc(e->head_len);
  if (!e->head) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  memcpy(e->head, len8, 8);
  if (df_pull_http_get_range(&o->net, h, url, 8, n, e->head + 8, herr, sizeof herr) != 0) {
    snprintf(err, errlen, "%s: reading the safetensors header: %s", e->path, herr);
    return -1;
  }
  /* validate through the engine's own parser on a sparse image of the file */
  unlink(e->partial);
  fd = open(e->partial, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ftruncate(fd, (off_t)e->size) != 0 ||
      pwrite(fd, e->head, e->head_len, 0) != (ssize_t)e->head_len) {
    snprintf(err, errlen, "%s: cannot write %s: %s", e->path, e->partial, strerror(errno));
    goto done;
  }
  if (df_st_open_file(e->partial, &st, herr, sizeof herr) != 0) {
    snprintf(err, errlen, "%s: %s", e->path, herr);
    goto done;
  }
  size_t nt = df_st_count(st);
  span *sp = calloc(nt ? nt : 1, sizeof *sp);
  if (!sp) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  int ns = 0;
  uint64_t omitted = 0, need = 0;
  for (size_t i = 0; i < nt; i++) {
    const df_st_tensor *t = df_st_at(st, i);
    if (t->nbytes == 0) continue;
    if (df_pull_is_expert_tensor(t->name)) {
      omitted += t->nbytes;
      continue;
    }
    sp[ns++] = (span){t->file_offset, t->nbytes};
    need += t->nbytes;
  }
  /* ascending offsets, adjacent spans merged into one request */
  for (int i = 1; i < ns; i++)
    for (int j = i; j > 0 && sp[j].off < sp[j - 1].off; j--) {
      span t = sp[j];
      sp[j] = sp[j - 1];
      sp[j - 1] = t;
    }
  int m = 0;
  for (int i = 0; i < ns; i++) {
    if (m > 0 && sp[m - 1].off + sp[m - 1].len == sp[i].off)
      sp[m - 1].len += sp[i].len;
    else
      sp[m++] = sp[i];
  }
  e->spans = sp;
  e->n_spans = m;
  e->omitted = omitted;
  if (omitted == 0) {
    /* nothing to leave out: an ordinary verified download */
    e->sparse = false;
    free(e->spans);
    e->spans = NULL;
    e->n_spans = 0;
    close(fd);
    fd = -1;
    unlink(e->partial);
    size_t pl = strlen(e->partial);
    e->partial[pl - strlen("sparse")] = 0;
    strcat(e->partial, "incomplete");
    e->need = e->size;
    rc = 0;
    goto done;
  }
  e->need = need;
  rc = 0;
done:
  df_st_close(&st);
  if (fd >= 0) close(fd);
  return rc;
}

static int download_sparse(pull *p, void *h, entry *e) {
  const df_pull_opts *o = p->o;
  char url[4400], final[4400], err[768];
  int fd = -1;
  df_pull_resolve_url(o->net.endpoint, o->repo, p->commit, e->path, url, sizeof url);
  snprintf(final, sizeof final, "%.2048s/%.1100s", p->dir, e->path);
  fd = open(e->partial, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size != e->size) {
    snprintf(e->err, sizeof e->err, "%.200s: %.300s vanished or changed size", e->path, e->partial);
    if (fd >= 0) close(fd);
    return -1;
  }
  df_pull_range *rs = calloc((size_t)e->n_spans + 1, sizeof *rs);
  if (!rs) {
    snprintf(e->err, sizeof e->err, "out of memory");
    close(fd);
    return -1;
  }
  rs[0].off = 0;
  rs[0].len = e->head_len;
  df_pull_sha256_buf(e->head, e->head_len, rs[0].sha256);
  int nr = 1;
  e->need = 0;
  for (int i = 0; i < e->n_spans; i++) e->need += e->spans[i].len;
  for (int i = 0; i < e->n_spans; i++) {
    df_pull_sha256 sha;
    df_pull_sha256_init(&sha);
    fdsink s = {.fd = fd, .pos = e->spans[i].off, .limit = e->spans[i].off + e->spans[i].len,
                .sha = &sha, .e = e, .p = p, .err = err, .errlen = sizeof err};
    long status = 0;
    if (fetch_span(p, h, url, &s, s.limit, &status, err, sizeof err) != 0) {
      http_refusal_hint(e, status, o, err, sizeof err);
      snprintf(e->err, sizeof e->err, "%s", err);
      df_pull_sha256_final(&sha, rs[nr].sha256);
      free(rs);
      close(fd);
      unlink(e->partial);
      return -1;
    }
    rs[nr].off = e->spans[i].off;
    rs[nr].len = e->spans[i].len;
    df_pull_sha256_final(&sha, rs[nr].sha256);
    /* the header range and the first span may touch: keep them separate records */
    nr++;
  }
  if (df_fs_publish(fd, e->partial, final, err, sizeof err) != 0) {
    snprintf(e->err, sizeof e->err, "%.300s: %.400s", e->path, err);
    free(rs);
    return -1;
  }
  e->out.path = e->path;
  e->out.size = e->size;
  e->out.sparse = true;
  e->out.omitted = e->omitted;
  e->out.ranges = rs;
  e->out.n_ranges = nr;
  snprintf(e->out.lfs_sha256, sizeof e->out.lfs_sha256, "%s", e->lfs);
  snprintf(e->out.git_oid, sizeof e->out.git_oid, "%s", e->git);
  return 0;
}

static void *worker(void *arg) {
  pull *p = arg;
  void *h = df_pull_http_handle_new();
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int i = p->next;
    while (i < p->n && p->e[i].state != E_TODO) i++;
    p->next = i + 1;
    pthread_mutex_unlock(&p->mu);
    if (i >= p->n) break;
    entry *e = &p->e[i];
    e->t0 = now_s();
    atomic_store(&e->active, 1);
    int rc;
    if (!h) {
      snprintf(e->err, sizeof e->err, "%s: cannot create an HTTP handle", e->path);
      rc = -1;
    } else {
      rc = e->sparse ? download_sparse(p, h, e) : download_full(p, h, e);
    }
    atomic_store(&e->active, 0);
    pthread_mutex_lock(&p->mu);
    e->state = rc == 0 ? E_DONE : E_FAILED;
    pthread_mutex_unlock(&p->mu);
    char sz[32];
    if (rc == 0) {
      if (p->o->json)
        json_event(json_pack("{s:s, s:s, s:s, s:I, s:s, s:b}", "event", "file", "path", e->path,
                             "status", "ok", "size", (json_int_t)e->size, "sha256",
                             e->out.sha256, "sparse", e->sparse));
      else if (e->sparse)
        note(p, false, "pull: %s: header and non-expert tensors written, %s of routed experts "
             "left to stream", e->path, df_pull_fmt_bytes(e->omitted, sz, sizeof sz));
      else
        note(p, false, "pull: %s: %s, %s verified", e->path, df_pull_fmt_bytes(e->size, sz, sizeof sz),
             e->lfs[0] ? "SHA-256" : e->git[0] ? "git blob id" : "size");
    } else {
      if (p->o->json)
        json_event(json_pack("{s:s, s:s, s:s, s:s}", "event", "file", "path", e->path, "status",
                             "error", "message", e->err));
      else
        note(p, true, "deltafin pull: %s", e->err);
    }
  }
  df_pull_http_handle_destroy(&h);
  atomic_fetch_add(&p->workers_done, 1);
  return NULL;
}

/* ---------------------------------------------------------------- the pull */

static void utc_now(char *buf, size_t cap) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Remove partial downloads that belong to no file of this listing (an older revision's). */
static void sweep_partials(pull *p) {
  char dir[2200];
  snprintf(dir, sizeof dir, "%.2048s/.deltafin/partial", p->dir);
  DIR *d = opendir(dir);
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    bool keep = false;
    for (int i = 0; i < p->n && !keep; i++) {
      const char *oid = p->e[i].lfs[0] ? p->e[i].lfs : p->e[i].git;
      size_t n = strlen(oid);
      keep = n && !strncmp(de->d_name, oid, n) && de->d_name[n] == '.' &&
             p->e[i].state != E_DONE && p->e[i].state != E_SKIP;
    }
    if (!keep) {
      char f[2600];
      snprintf(f, sizeof f, "%s/%.255s", dir, de->d_name);
      unlink(f);
    }
  }
  if (d) closedir(d);
}

static bool file_has_size(const char *path, uint64_t size) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == size;
}

int df_pull_run(const df_pull_opts *o, char *dir_out, size_t dir_cap, char *err, size_t errlen) {
  pull P = {.o = o};
  pull *p = &P;
  df_pull_manifest man = {0};
  int rc = -1, lock_fd = -1, nthreads = 0;
  pthread_t th[64];
  void *h = NULL;
  char path[4400];
  pthread_mutex_init(&p->mu, NULL);
  p->tty = !o->quiet && !o->json && isatty(STDERR_FILENO);
  struct winsize ws;
  p->cols = p->tty && ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col : 80;
  p->t_start = now_s();

  if (!df_pull_repo_id_ok(o->repo)) {
    snprintf(err, errlen, "'%s' is not a repository id: expected ORG/NAME (letters, digits, "
             "'.', '_', '-')", o->repo ? o->repo : "");
    goto done;
  }
  snprintf(p->rev, sizeof p->rev, "%s", o->revision ? o->revision : "main");
  if (!df_pull_revision_ok(p->rev)) {
    snprintf(err, errlen, "--revision '%s': expected a branch, tag or commit id", p->rev);
    goto done;
  }
  if (o->jobs < 1 || o->jobs > 64) {
    snprintf(err, errlen, "--jobs %d: expected 1..64", o->jobs);
    goto done;
  }
  if (o->dir) {
    snprintf(p->dir, sizeof p->dir, "%s", o->dir);
  } else if (df_pull_default_dir(o->repo, p->dir, sizeof p->dir, err, errlen) != 0) {
    goto done;
  }
  if (dir_out) snprintf(dir_out, dir_cap, "%s", p->dir);

  /* the listing first: a refused or missing repo leaves no folder behind */
  if (list_repo(p, err, errlen) != 0) goto done;
  if (o->json)
    json_event(json_pack("{s:s, s:s, s:s, s:s, s:i}", "event", "list", "repo", o->repo,
                         "revision", p->rev, "commit", p->commit, "files", p->n));

  snprintf(path, sizeof path, "%.2048s/.deltafin/partial", p->dir);
  if (df_fs_mkdirs(path, err, errlen) != 0) goto done;
  snprintf(path, sizeof path, "%.2048s/.deltafin/lock", p->dir);
  lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    snprintf(err, errlen, "%s: another deltafin pull is writing this folder (%s)", p->dir,
             lock_fd < 0 ? strerror(errno) : "lock held");
    goto done;
  }

  int mr = df_pull_manifest_read(p->dir, &man, err, errlen);
  if (mr < 0) goto done;
  if (mr == 0 && strcmp(man.repo, o->repo) != 0) {
    snprintf(err, errlen, "%s already holds %s (see its %s); choose another --dir", p->dir,
             man.repo, DF_PULL_MANIFEST_NAME);
    goto done;
  }

  /* plan: select, skip what is already here, build temp names */
  int n_sel = 0, n_skip = 0;
  for (int i = 0; i < p->n; i++) {
    entry *e = &p->e[i];
    if (!selected(o, e->path)) {
      e->state = E_EXCLUDED;
      continue;
    }
    n_sel++;
    e->sparse = o->stream && ends_with(e->path, ".safetensors");
    df_pull_mfile *old = df_pull_manifest_find(&man, e->path);
    snprintf(path, sizeof path, "%.2048s/%.1100s", p->dir, e->path);
    bool same_remote = old && old->size == e->size && !strcmp(old->lfs_sha256, e->lfs) &&
                       (!e->git[0] || !old->git_oid[0] || !strcmp(old->git_oid, e->git));
    if (same_remote && file_has_size(path, e->size) && (!old->sparse || e->sparse)) {
      e->state = E_SKIP;
      n_skip++;
      continue;
    }
    char key[DF_PULL_SHA256_HEX];
    if (e->lfs[0])
      snprintf(key, sizeof key, "%s", e->lfs);
    else if (e->git[0])
      snprintf(key, sizeof key, "%s", e->git);
    else {
      char id[4400];
      snprintf(id, sizeof id, "%s@%s:%s", o->repo, p->commit, e->path);
      df_pull_sha256_buf(id, strlen(id), key);
    }
    snprintf(e->partial, sizeof e->partial, "%.2048s/.deltafin/partial/%.64s.%s", p->dir, key,
             e->sparse ? "sparse" : "incomplete");
  }
  if (n_sel == 0) {
    snprintf(err, errlen, "%s@%s: no file matches the --include/--exclude patterns (%d files "
             "in the repository)", o->repo, p->rev, p->n);
    goto done;
  }
  if (o->stream) {
    h = df_pull_http_handle_new();
    for (int i = 0; i < p->n; i++) {
      entry *e = &p->e[i];
      if (e->state != E_TODO || !e->sparse) continue;
      if (!h || plan_sparse(p, h, e, err, errlen) != 0) {
        if (!h) snprintf(err, errlen, "cannot create an HTTP handle");
        goto done;
      }
    }
    df_pull_http_handle_destroy(&h);
  }
  /* free disk: what is still to download, plus the expert cache budget in stream mode */
  uint64_t need = 0;
  for (int i = 0; i < p->n; i++) {
    entry *e = &p->e[i];
    if (e->state != E_TODO) continue;
    if (!e->sparse) {
      struct stat st;
      uint64_t have = stat(e->partial, &st) == 0 && (uint64_t)st.st_size <= e->size
                          ? (uint64_t)st.st_size : 0;
      e->need = e->size - have;
    }
    need += e->need;
  }
  p->total_need = need;
  uint64_t budget = o->cache_budget ? o->cache_budget
                    : man.cache_budget ? man.cache_budget : DF_PULL_DEFAULT_CACHE_BUDGET;
  struct statvfs vfs;
  if (statvfs(p->dir, &vfs) == 0) {
    uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    uint64_t want = need + ((uint64_t)64 << 20); /* headroom for metadata */
    if (o->stream && o->cache_budget) want += o->cache_budget;
    if (want > avail) {
      char a[32], b[32], c[32];
      snprintf(err, errlen, "not enough free disk in %s: %s needed (%s to download%s), %s "
               "available", p->dir, df_pull_fmt_bytes(want, a, sizeof a),
               df_pull_fmt_bytes(need, b, sizeof b),
               o->stream && o->cache_budget ? " plus the --cache-budget" : "",
               df_pull_fmt_bytes(avail, c, sizeof c));
      goto done;
    }
  }
  {
    char a[32];
    note(p, false, "pull: %s@%s (commit %.12s): %d files selected, %d already present, %s to "
         "download into %s", o->repo, p->rev, p->commit, n_sel, n_skip,
         df_pull_fmt_bytes(need, a, sizeof a), p->dir);
  }

  /* download */
  int jobs = o->jobs;
  int todo = n_sel - n_skip;
  if (jobs > todo) jobs = todo > 0 ? todo : 1;
  for (int i = 0; i < jobs; i++) {
    if (pthread_create(&th[i], NULL, worker, p) != 0) break;
    nthreads++;
  }
  if (nthreads == 0) {
    snprintf(err, errlen, "cannot start download threads");
    goto done;
  }
  while (atomic_load(&p->workers_done) < nthreads) {
    draw(p, false);
    struct timespec ts = {0, p->tty ? 200000000L : 100000000L};
    nanosleep(&ts, NULL);
  }
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  nthreads = 0;
  draw(p, true);

  /* manifest: keep entries still valid for this listing, add what was published */
  df_pull_manifest nm = {0};
  snprintf(nm.endpoint, sizeof nm.endpoint, "%s", o->net.endpoint);
  snprintf(nm.repo, sizeof nm.repo, "%s", o->repo);
  snprintf(nm.revision, sizeof nm.revision, "%.255s", p->rev);
  snprintf(nm.commit, sizeof nm.commit, "%.95s", p->commit);
  utc_now(nm.created, sizeof nm.created);
  int failed = 0, first_failed = -1, pending = 0;
  for (int i = 0; i < p->n; i++) {
    entry *e = &p->e[i];
    df_pull_mfile *old = df_pull_manifest_find(&man, e->path);
    if (e->state == E_DONE) {
      if (df_pull_manifest_put(&nm, &e->out) != 0) goto oom;
    } else if (e->state == E_SKIP || (e->state == E_EXCLUDED && old)) {
      snprintf(path, sizeof path, "%.2048s/%.1100s", p->dir, e->path);
      if (old && old->size == e->size && !strcmp(old->lfs_sha256, e->lfs) &&
          file_has_size(path, e->size) && df_pull_manifest_put(&nm, old) != 0)
        goto oom;
    }
    if (e->state == E_FAILED) {
      failed++;
      if (first_failed < 0) first_failed = i;
    }
    if (e->state == E_FAILED || e->state == E_TODO) pending++;
  }
  for (int i = 0; i < nm.n_files; i++) nm.stream |= nm.files[i].sparse;
  nm.cache_budget = nm.stream ? budget : 0;
  if (pending) {
    nm.pending = calloc((size_t)pending, sizeof *nm.pending);
    if (!nm.pending) goto oom;
    for (int i = 0; i < p->n; i++)
      if ((p->e[i].state == E_FAILED || p->e[i].state == E_TODO) &&
          (nm.pending[nm.n_pending] = strdup(p->e[i].path)))
        nm.n_pending++;
  }
  nm.complete = pending == 0;
  int wr = df_pull_manifest_write(p->dir, &nm, err, errlen);
  df_pull_manifest_free(&nm);
  if (wr != 0) goto done;
  sweep_partials(p);
  if (failed) {
    snprintf(err, errlen, "%d of %d files failed; first: %s", failed, n_sel - n_skip,
             p->e[first_failed].err);
    goto done;
  }
  if (o->json)
    json_event(json_pack("{s:s, s:s, s:s, s:s}", "event", "done", "dir", p->dir, "repo", o->repo,
                         "commit", p->commit));
  else if (!o->quiet)
    fprintf(stderr, "pull: %s@%.12s complete in %s\n", o->repo, p->commit, p->dir);
  rc = 0;
  goto done;
oom:
  snprintf(err, errlen, "out of memory");
done:
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  if (rc != 0 && o->json)
    json_event(json_pack("{s:s, s:s}", "event", "error", "message", err));
  df_pull_http_handle_destroy(&h);
  if (lock_fd >= 0) close(lock_fd);
  for (int i = 0; i < p->n; i++) {
    entry *e = &p->e[i];
    if (e->out.ranges) free(e->out.ranges);
    if (e->sparse && e->state != E_DONE && e->partial[0]) unlink(e->partial);
    free(e->head);
    free(e->spans);
    free(e->path);
  }
  free(p->e);
  for (int i = 0; i < p->n_notes; i++) free(p->notes[i]);
  free(p->notes);
  df_pull_manifest_free(&man);
  pthread_mutex_destroy(&p->mu);
  return rc;
}
