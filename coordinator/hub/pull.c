/* coordinator/hub/pull.c — list, plan and run a pull of a hub repo, then write its manifest;
 * see pull.h. The transfers are pull_fetch.c, the output pull_progress.c.
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

#include "coordinator/hub/pull_fetch.h"
#include "coordinator/hub/pull_manifest.h"
#include "coordinator/hub/pull_progress.h"
#include "coordinator/hub/pull_util.h"

void df_pull_opts_init(df_pull_opts *o) {
  memset(o, 0, sizeof *o);
  o->jobs = 4;
  o->progress_interval_s = 10;
  df_pull_net_defaults(&o->net);
}

/* ---------------------------------------------------------------- listing */

static bool hex_ok(const char *s, size_t n) {
  if (strlen(s) != n) return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

static int list_repo(df_pull_state *p, char *err, size_t errlen) {
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
    df_pull_entry *e = &p->e[p->n];
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

/* ---------------------------------------------------------------- the pull */

static void utc_now(char *buf, size_t cap) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Remove partial downloads that belong to no file of this listing (an older revision's). */
static void sweep_partials(df_pull_state *p) {
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
  df_pull_state P = {.o = o};
  df_pull_state *p = &P;
  df_pull_manifest man = {0};
  int rc = -1, lock_fd = -1, nthreads = 0;
  pthread_t th[64];
  void *h = NULL;
  char path[4400];
  pthread_mutex_init(&p->mu, NULL);
  p->tty = !o->quiet && !o->json && isatty(STDERR_FILENO);
  struct winsize ws;
  p->cols = p->tty && ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col : 80;
  p->t_start = df_pull__now();

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
    df_pull__json_event(json_pack("{s:s, s:s, s:s, s:s, s:i}", "event", "list", "repo", o->repo,
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
    df_pull_entry *e = &p->e[i];
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
      df_pull_entry *e = &p->e[i];
      if (e->state != E_TODO || !e->sparse) continue;
      if (!h || df_pull__plan_sparse(p, h, e, err, errlen) != 0) {
        if (!h) snprintf(err, errlen, "cannot create an HTTP handle");
        goto done;
      }
    }
    df_pull_http_handle_destroy(&h);
  }
  /* free disk: what is still to download, plus the expert cache budget in stream mode */
  uint64_t need = 0;
  for (int i = 0; i < p->n; i++) {
    df_pull_entry *e = &p->e[i];
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
    df_pull__note(p, false, "pull: %s@%s (commit %.12s): %d files selected, %d already present, "
                  "%s to download into %s", o->repo, p->rev, p->commit, n_sel, n_skip,
                  df_pull_fmt_bytes(need, a, sizeof a), p->dir);
  }

  /* download */
  int jobs = o->jobs;
  int todo = n_sel - n_skip;
  if (jobs > todo) jobs = todo > 0 ? todo : 1;
  for (int i = 0; i < jobs; i++) {
    if (pthread_create(&th[i], NULL, df_pull__worker, p) != 0) break;
    nthreads++;
  }
  if (nthreads == 0) {
    snprintf(err, errlen, "cannot start download threads");
    goto done;
  }
  while (atomic_load(&p->workers_done) < nthreads) {
    df_pull__draw(p, false);
    struct timespec ts = {0, p->tty ? 200000000L : 100000000L};
    nanosleep(&ts, NULL);
  }
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  nthreads = 0;
  df_pull__draw(p, true);

  /* manifest: keep entries still valid for this listing, add what was published */
  df_pull_manifest nm = {0};
  snprintf(nm.endpoint, sizeof nm.endpoint, "%s", o->net.endpoint);
  snprintf(nm.repo, sizeof nm.repo, "%s", o->repo);
  snprintf(nm.revision, sizeof nm.revision, "%.255s", p->rev);
  snprintf(nm.commit, sizeof nm.commit, "%.95s", p->commit);
  utc_now(nm.created, sizeof nm.created);
  int failed = 0, first_failed = -1, pending = 0;
  for (int i = 0; i < p->n; i++) {
    df_pull_entry *e = &p->e[i];
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
    df_pull__json_event(json_pack("{s:s, s:s, s:s, s:s}", "event", "done", "dir", p->dir, "repo",
                                  o->repo, "commit", p->commit));
  else if (!o->quiet)
    fprintf(stderr, "pull: %s@%.12s complete in %s\n", o->repo, p->commit, p->dir);
  rc = 0;
  goto done;
oom:
  snprintf(err, errlen, "out of memory");
done:
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  if (rc != 0 && o->json)
    df_pull__json_event(json_pack("{s:s, s:s}", "event", "error", "message", err));
  df_pull_http_handle_destroy(&h);
  if (lock_fd >= 0) close(lock_fd);
  for (int i = 0; i < p->n; i++) {
    df_pull_entry *e = &p->e[i];
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
