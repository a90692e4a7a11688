/* coordinator/hub/pull_fetch.c — the transfers of a pull: one file downloaded with resume,
 * retries and hash verification, then published; stream mode's sparse shards (planned from
 * their safetensors header, only the non-expert ranges downloaded); the worker loop that
 * takes files from the shared cursor. See pull_fetch.h. */
#define _GNU_SOURCE
#include "coordinator/hub/pull_fetch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/safetensors.h"

bool df_pull_is_expert_tensor(const char *name) {
  const char *p = strstr(name, ".mlp.experts.");
  size_t skip = strlen(".mlp.experts.");
  if (!p) { /* Kimi Linear: block_sparse_moe.experts.<e>.w1/w2/w3 */
    p = strstr(name, ".block_sparse_moe.experts.");
    skip = strlen(".block_sparse_moe.experts.");
  }
  if (!p || !strstr(name, "layers.")) return false;
  p += skip;
  if (*p < '0' || *p > '9') return false;
  while (*p >= '0' && *p <= '9') p++;
  return *p == '.';
}

typedef struct fdsink {
  int fd;
  uint64_t pos;        /* next file offset expected */
  uint64_t limit;      /* one past the last byte allowed */
  bool allow_restart;  /* a 200 at offset 0 restarts the file (full downloads) */
  df_pull_sha256 *sha;
  df_pull_gitsha *git;
  uint64_t git_size;
  bool hashing_reset;  /* set when a restart re-initialised the hashes */
  bool oversize;       /* the answer ran past `limit` (the transfer was stopped) */
  df_pull_entry *e;
  df_pull_state *p;
  char *err;
  size_t errlen;
} fdsink;

/* Empty the partial file and start its hashes and progress over (full downloads). */
static int sink_restart(fdsink *s) {
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
  return 0;
}

static int fd_sink(void *ud, uint64_t at, const void *data, size_t n) {
  fdsink *s = ud;
  if (at != s->pos) {
    if (at == 0 && s->allow_restart) {
      /* the server ignored Range: start the file over */
      if (sink_restart(s) != 0) return -1;
    } else {
      snprintf(s->err, s->errlen, "server sent bytes from offset %llu, expected %llu",
               (unsigned long long)at, (unsigned long long)s->pos);
      return -1;
    }
  }
  if (n > s->limit - s->pos) {
    snprintf(s->err, s->errlen, "server sent more than the %llu bytes listed",
             (unsigned long long)s->limit);
    s->oversize = true;
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
static int fetch_span(df_pull_state *p, void *h, const char *url, fdsink *s, uint64_t end,
                      long *status, char *err, size_t errlen) {
  const df_pull_net *net = &p->o->net;
  df_pull_resp resp;
  *status = 0;
  for (int attempt = 0;; attempt++) {
    if (s->pos >= end) return 0;
    err[0] = 0;
    int rc = df_pull_http_get(net, h, url, s->pos, s->allow_restart ? 0 : end, fd_sink, s,
                              &resp, err, errlen);
    *status = resp.status;
    if (rc != 0 && s->oversize && s->allow_restart && resp.status == 200) {
      /* a 200 longer than the file (an error page, a portal): discarded and retried, as
       * one that is too short below */
      snprintf(err, errlen, "%s: HTTP 200 with more than %llu bytes%s%s, not the %llu-byte "
               "file (an error page or a captive portal?); discarded", url,
               (unsigned long long)end, resp.content_type[0] ? " of " : "", resp.content_type,
               (unsigned long long)end);
      s->oversize = false;
      if (sink_restart(s) != 0) return -1;
      resp.retryable = true;
    } else if (rc == 0) {
      if (s->pos == end) return 0;
      snprintf(err, errlen, "%s: the server sent %llu bytes, the listing says %llu", url,
               (unsigned long long)s->pos, (unsigned long long)end);
      if (s->allow_restart && resp.status == 200 && resp.total_size != end) {
        /* a whole answer of the wrong size (a captive portal, a proxy's error page): not
         * the file, so nothing of it is kept; it may go away, so it is retried */
        snprintf(err, errlen, "%s: HTTP 200 with %llu bytes%s%s%s, not the %llu-byte file (an "
                 "error page or a captive portal?); discarded", url,
                 (unsigned long long)resp.body_bytes, resp.content_type[0] ? " of " : "",
                 resp.content_type, "", (unsigned long long)end);
        if (sink_restart(s) != 0) return -1;
        resp.retryable = true;
      } else {
        if (s->pos > end || (resp.total_size && resp.total_size != end)) return -1;
        resp.retryable = true;
      }
    }
    if (!resp.retryable || attempt >= net->retries) return -1;
    df_pull__note(p, false, "pull: %s: %s; retry %d of %d from byte %llu", s->e->path, err,
                  attempt + 1, net->retries, (unsigned long long)s->pos);
    df_pull_http_backoff(net, attempt, resp.retry_after_s);
  }
}

static void http_refusal_hint(const df_pull_entry *e, long status, const df_pull_opts *o, char *err,
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

/* True when the name `name` in folder `dfd` is the very file open as `fd` (not a link, not
 * a file put in its place). */
static bool same_file(int fd, int dfd, const char *name) {
  struct stat a, b;
  return fstat(fd, &a) == 0 && fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
         a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Publish e's verified partial file, open as fd: fsync, then rename it from p->part_fd to
 * e->path under p->dir_fd, whose folders are created and opened one by one without
 * following links (a link planted in the folder cannot take the file elsewhere), and fsync
 * of that folder. What is renamed must be the file open as fd, whose bytes were hashed: a
 * file swapped in under the partial's name is refused (before the rename, and checked again
 * after it; found at the final path, it is removed). fd is closed in every case; on error
 * the partial is removed and e->err set. 0 or -1. */
static int publish(df_pull_state *p, df_pull_entry *e, int fd) {
  char err[700];
  const char *slash = strrchr(e->path, '/'), *base = slash ? slash + 1 : e->path;
  int pfd = -1;
  if (fsync(fd) != 0) {
    snprintf(err, sizeof err, "%.400s: fsync failed: %s", e->partial, strerror(errno));
    goto fail;
  }
  if (slash) {
    char parent[1100];
    snprintf(parent, sizeof parent, "%.*s", (int)(slash - e->path), e->path);
    if ((pfd = df_pull_open_dirs(p->dir_fd, p->dir, parent, true, err, sizeof err)) < 0)
      goto fail;
  } else if ((pfd = fcntl(p->dir_fd, F_DUPFD_CLOEXEC, 0)) < 0) {
    snprintf(err, sizeof err, "%.400s: %s", p->dir, strerror(errno));
    goto fail;
  }
  if (!same_file(fd, p->part_fd, e->pname)) {
    snprintf(err, sizeof err, "%.400s was replaced while it was written: not published",
             e->partial);
    goto fail;
  }
  if (renameat(p->part_fd, e->pname, pfd, base) != 0) {
    snprintf(err, sizeof err, "cannot rename %.200s to %.200s/%.200s: %s", e->partial, p->dir,
             e->path, strerror(errno));
    goto fail;
  }
  if (!same_file(fd, pfd, base)) {
    unlinkat(pfd, base, 0);
    snprintf(err, sizeof err, "%.400s was replaced while it was published: removed",
             e->partial);
    close(pfd);
    close(fd);
    snprintf(e->err, sizeof e->err, "%.300s: %.400s", e->path, err);
    return -1;
  }
  if (fsync(pfd) != 0) {
    snprintf(e->err, sizeof e->err, "%.300s: fsync of the folder failed: %s", e->path,
             strerror(errno));
    close(pfd);
    close(fd);
    return -1;
  }
  close(pfd);
  return close(fd) == 0 ? 0 : (snprintf(e->err, sizeof e->err, "%.300s: close failed: %s",
                                        e->path, strerror(errno)), -1);
fail:
  if (pfd >= 0) close(pfd);
  if (same_file(fd, p->part_fd, e->pname)) unlinkat(p->part_fd, e->pname, 0);
  close(fd);
  snprintf(e->err, sizeof e->err, "%.300s: %.400s", e->path, err);
  return -1;
}

static int download_full(df_pull_state *p, void *h, df_pull_entry *e) {
  const df_pull_opts *o = p->o;
  char url[4400], err[768];
  int fd = -1, rc = -1;
  df_pull_sha256 sha;
  df_pull_gitsha git;
  bool use_git = !e->lfs[0] && e->git[0];
  bool fresh_retry = false;
  if (df_pull_resolve_url(o->net.endpoint, o->repo, p->commit, e->path, url, sizeof url) != 0) {
    snprintf(e->err, sizeof e->err, "%s: URL too long", e->path);
    return -1;
  }
restart:
  /* resumed in place: never through a symbolic link (a link planted in a shared --dir would
   * have the download written over its target), and only into a regular file */
  fd = openat(p->part_fd, e->pname, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK |
              O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(e->err, sizeof e->err, "%.200s: cannot open %.300s: %s%s", e->path, e->partial,
             strerror(errno), errno == ELOOP ? " (a symbolic link: remove it)" : "");
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) goto io_fail;
  if (!S_ISREG(st.st_mode)) {
    snprintf(e->err, sizeof e->err, "%.200s: %.300s is not a regular file: remove it", e->path,
             e->partial);
    close(fd);
    return -1;
  }
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
    df_pull__note(p, false, "pull: %s: resuming at byte %llu of %llu", e->path,
                  (unsigned long long)have, (unsigned long long)e->size);
  fdsink s = {.fd = fd, .pos = have, .limit = e->size, .allow_restart = true, .sha = &sha,
              .git = use_git ? &git : NULL, .git_size = e->size, .e = e, .p = p, .err = err,
              .errlen = sizeof err};
  long status = 0;
  if (fetch_span(p, h, url, &s, e->size, &status, err, sizeof err) != 0) {
    if (status == 416 && have > 0 && !fresh_retry) {
      /* the partial file does not fit the remote file: start over once */
      close(fd);
      unlinkat(p->part_fd, e->pname, 0);
      fresh_retry = true;
      goto restart;
    }
    http_refusal_hint(e, status, o, err, sizeof err);
    snprintf(e->err, sizeof e->err, "%s", err);
    close(fd);
    if (status >= 400 && status < 500) unlinkat(p->part_fd, e->pname, 0); /* refused */
    return -1;
  }
  char got[DF_PULL_SHA256_HEX], got_git[DF_PULL_SHA1_HEX] = "";
  df_pull_sha256_final(&sha, got);
  if (use_git) df_pull_gitsha_final(&git, got_git);
  const char *want = e->lfs[0] ? e->lfs : e->git;
  const char *have_hash = e->lfs[0] ? got : got_git;
  if (want[0] && strcmp(want, have_hash) != 0) {
    close(fd);
    unlinkat(p->part_fd, e->pname, 0);
    atomic_fetch_sub(&p->total_done, atomic_load(&e->done));
    if (e->resumed > 0 && !s.hashing_reset && !fresh_retry) {
      df_pull__note(p, false,
                    "pull: %s: the resumed download does not verify; downloading it again",
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
  if (publish(p, e, fd) != 0) return -1;
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

int df_pull__plan_sparse(df_pull_state *p, void *h, df_pull_entry *e, char *err, size_t errlen) {
  const df_pull_opts *o = p->o;
  char url[4400], herr[768];
  uint8_t len8[8], *head = NULL;
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
  head = malloc(e->head_len);
  if (!head) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  memcpy(head, len8, 8);
  if (df_pull_http_get_range(&o->net, h, url, 8, n, head + 8, herr, sizeof herr) != 0) {
    snprintf(err, errlen, "%s: reading the safetensors header: %s", e->path, herr);
    goto done;
  }
  /* the header's hash is its manifest range; the bytes themselves live in the partial file
   * from here on (Kimi K3: 96 headers of ~1 MB need not stay in memory) */
  df_pull_sha256_buf(head, e->head_len, e->head_sha);
  /* validate through the engine's own parser on a sparse image of the file */
  unlinkat(p->part_fd, e->pname, 0);
  fd = openat(p->part_fd, e->pname, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
              0644); /* unlinked above */
  if (fd < 0 || ftruncate(fd, (off_t)e->size) != 0 ||
      pwrite(fd, head, e->head_len, 0) != (ssize_t)e->head_len) {
    snprintf(err, errlen, "%s: cannot write %s: %s", e->path, e->partial, strerror(errno));
    goto done;
  }
  free(head);
  head = NULL;
  char self[64]; /* the file just written, whatever is at its name now */
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  if (df_st_open_file(self, &st, herr, sizeof herr) != 0) {
    snprintf(err, errlen, "%s: %s", e->path, herr);
    goto done;
  }
  size_t nt = df_st_count(st);
  df_pull_span *sp = calloc(nt ? nt : 1, sizeof *sp);
  if (!sp) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  int ns = 0;
  uint64_t omitted = 0, unused = 0, need = 0;
  size_t pl = strlen(p->text_prefix);
  for (size_t i = 0; i < nt; i++) {
    const df_st_tensor *t = df_st_at(st, i);
    if (t->nbytes == 0) continue;
    if (pl && strncmp(t->name, p->text_prefix, pl) != 0) {
      unused += t->nbytes; /* another tower of a wrapper config: never read, never fetched */
      continue;
    }
    if (df_pull_is_expert_tensor(t->name)) {
      omitted += t->nbytes;
      continue;
    }
    sp[ns++] = (df_pull_span){t->file_offset, t->nbytes};
    need += t->nbytes;
  }
  /* ascending offsets, adjacent spans merged into one request */
  for (int i = 1; i < ns; i++)
    for (int j = i; j > 0 && sp[j].off < sp[j - 1].off; j--) {
      df_pull_span t = sp[j];
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
  e->unused = unused;
  if (omitted == 0 && unused == 0) {
    /* nothing to leave out: an ordinary verified download */
    e->sparse = false;
    free(e->spans);
    e->spans = NULL;
    e->n_spans = 0;
    close(fd);
    fd = -1;
    unlinkat(p->part_fd, e->pname, 0);
    size_t pl = strlen(e->partial), nl = strlen(e->pname);
    e->partial[pl - strlen("sparse")] = 0;
    strcat(e->partial, "incomplete");
    e->pname[nl - strlen("sparse")] = 0;
    strcat(e->pname, "incomplete");
    e->need = e->size;
    rc = 0;
    goto done;
  }
  e->need = need;
  rc = 0;
done:
  free(head);
  df_st_close(&st);
  if (fd >= 0) close(fd);
  return rc;
}

static int download_sparse(df_pull_state *p, void *h, df_pull_entry *e) {
  const df_pull_opts *o = p->o;
  char url[4400], err[768];
  int fd = -1;
  df_pull_resolve_url(o->net.endpoint, o->repo, p->commit, e->path, url, sizeof url);
  fd = openat(p->part_fd, e->pname, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
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
  snprintf(rs[0].sha256, sizeof rs[0].sha256, "%s", e->head_sha);
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
      unlinkat(p->part_fd, e->pname, 0);
      return -1;
    }
    rs[nr].off = e->spans[i].off;
    rs[nr].len = e->spans[i].len;
    df_pull_sha256_final(&sha, rs[nr].sha256);
    /* the header range and the first span may touch: keep them separate records */
    nr++;
  }
  if (publish(p, e, fd) != 0) {
    free(rs);
    return -1;
  }
  e->out.path = e->path;
  e->out.size = e->size;
  e->out.sparse = true;
  e->out.omitted = e->omitted;
  e->out.unused = e->unused;
  e->out.ranges = rs;
  e->out.n_ranges = nr;
  snprintf(e->out.lfs_sha256, sizeof e->out.lfs_sha256, "%s", e->lfs);
  snprintf(e->out.git_oid, sizeof e->out.git_oid, "%s", e->git);
  return 0;
}

void *df_pull__worker(void *arg) {
  df_pull_state *p = arg;
  void *h = df_pull_http_handle_new();
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int i = p->next;
    while (i < p->n && p->e[i].state != E_TODO) i++;
    p->next = i + 1;
    pthread_mutex_unlock(&p->mu);
    if (i >= p->n) break;
    df_pull_entry *e = &p->e[i];
    e->t0 = df_pull__now();
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
        df_pull__json_event(json_pack("{s:s, s:s, s:s, s:I, s:s, s:b}", "event", "file", "path",
                                      e->path, "status", "ok", "size", (json_int_t)e->size,
                                      "sha256", e->out.sha256, "sparse", e->sparse));
      else if (e->sparse && e->unused) {
        char un[32];
        df_pull__note(p, false, "pull: %s: header and non-expert tensors written, %s of routed "
                      "experts left to stream, %s never read (outside %s) not downloaded",
                      e->path, df_pull_fmt_bytes(e->omitted, sz, sizeof sz),
                      df_pull_fmt_bytes(e->unused, un, sizeof un), p->text_prefix);
      } else if (e->sparse)
        df_pull__note(p, false, "pull: %s: header and non-expert tensors written, %s of routed "
                      "experts left to stream", e->path,
                      df_pull_fmt_bytes(e->omitted, sz, sizeof sz));
      else
        df_pull__note(p, false, "pull: %s: %s, %s verified", e->path,
                      df_pull_fmt_bytes(e->size, sz, sizeof sz),
                      e->lfs[0] ? "SHA-256" : e->git[0] ? "git blob id" : "size");
    } else {
      if (p->o->json)
        df_pull__json_event(json_pack("{s:s, s:s, s:s, s:s}", "event", "file", "path", e->path,
                                      "status", "error", "message", e->err));
      else
        df_pull__note(p, true, "deltafin pull: %s", e->err);
    }
  }
  df_pull_http_handle_destroy(&h);
  atomic_fetch_add(&p->workers_done, 1);
  return NULL;
}
