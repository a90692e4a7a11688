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
#include "engine/models/family.h"

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
    if (json_is_string(fn) && df_pull_path_reserved(json_string_value(fn))) {
      snprintf(err, errlen, "%s: siblings[%zu].rfilename '%.300s': refusing a name deltafin "
               "pull keeps for itself (%s, .deltafin/)", url, i, json_string_value(fn),
               DF_PULL_MANIFEST_NAME);
      goto done;
    }
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
    /* every file is checked against a hub hash: blobId (git SHA-1), or lfs.sha256 below */
    if (blob && !json_is_null(blob)) {
      if (!json_is_string(blob) || !hex_ok(json_string_value(blob), 40)) {
        snprintf(err, errlen, "%s: %s: blobId is not 40 lowercase hex digits", url, path);
        goto done;
      }
      snprintf(e->git, sizeof e->git, "%s", json_string_value(blob));
    } else if (!json_is_object(lfs)) {
      snprintf(err, errlen, "%s: %s: the listing gives no blobId (nor lfs.sha256): the file "
               "could not be verified", url, path);
      goto done;
    }
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

/* ---------------------------------------------------------------- stream planning */

/* Stream mode: which tensors the engine reads. The repo's config.json at the pulled commit,
 * parsed by the engine's own config reader: a wrapper config (kimi_k3: text_config +
 * vision_config) names its text model's tensors under a prefix ("language_model."), and
 * tensors outside it (K3's vision_tower.*, mm_projector.*) are never read by the engine, so
 * stream mode neither downloads nor streams them. No config.json, or one the engine does not
 * read: "" (every non-expert tensor is downloaded, as before). */
static void stream_text_prefix(df_pull_state *p) {
  const df_pull_opts *o = p->o;
  p->text_prefix[0] = 0;
  bool listed = false;
  for (int i = 0; i < p->n && !listed; i++) listed = !strcmp(p->e[i].path, "config.json");
  char url[4400], herr[1024];
  if (!listed || df_pull_resolve_url(o->net.endpoint, o->repo, p->commit, "config.json", url,
                                     sizeof url) != 0)
    return;
  char *body = NULL;
  size_t len = 0;
  df_pull_resp resp;
  if (df_pull_http_get_small(&o->net, url, (size_t)16 << 20, &body, &len, &resp, herr,
                             sizeof herr) != 0) {
    df_pull__note(p, false, "pull: config.json: %s; every non-expert tensor is downloaded", herr);
    return;
  }
  df_model_config *c = calloc(1, sizeof *c);
  if (c && df_cfg_parse(body, len, "config.json", c, herr, sizeof herr) == 0 &&
      c->tensor_prefix[0]) {
    snprintf(p->text_prefix, sizeof p->text_prefix, "%s", c->tensor_prefix);
    df_pull__note(p, false, "pull: config.json is a %s wrapper: tensors outside %s (its other "
                  "towers) are never read and are not downloaded", c->model_type,
                  c->tensor_prefix);
  }
  free(c);
  free(body);
}

typedef struct plan_ctx {
  df_pull_state *p;
  int next;
  bool failed;
  char err[1024];
} plan_ctx;

/* A planning thread: reads sparse shards' headers until none is left or one fails. */
static void *plan_worker(void *arg) {
  plan_ctx *c = arg;
  df_pull_state *p = c->p;
  void *h = df_pull_http_handle_new();
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int i = c->next;
    while (i < p->n && (p->e[i].state != E_TODO || !p->e[i].sparse)) i++;
    c->next = i + 1;
    bool stop = c->failed || i >= p->n;
    pthread_mutex_unlock(&p->mu);
    if (stop) break;
    char err[1024];
    int rc = h ? df_pull__plan_sparse(p, h, &p->e[i], err, sizeof err) : -1;
    if (!h) snprintf(err, sizeof err, "cannot create an HTTP handle");
    if (rc != 0) {
      pthread_mutex_lock(&p->mu);
      if (!c->failed) snprintf(c->err, sizeof c->err, "%s", err);
      c->failed = true;
      pthread_mutex_unlock(&p->mu);
      break;
    }
  }
  df_pull_http_handle_destroy(&h);
  return NULL;
}

/* Stream mode: plan every sparse shard (header fetched, validated, spans listed), up to
 * `jobs` shards at a time (Kimi K3: 96 headers of ~1 MB each). */
static int plan_sparse_all(df_pull_state *p, char *err, size_t errlen) {
  int todo = 0;
  for (int i = 0; i < p->n; i++) todo += p->e[i].state == E_TODO && p->e[i].sparse;
  if (!todo) return 0;
  plan_ctx c = {.p = p};
  int nt = p->o->jobs < todo ? p->o->jobs : todo, started = 0;
  pthread_t th[64];
  for (int i = 0; i < nt && i < 64; i++)
    if (pthread_create(&th[i], NULL, plan_worker, &c) == 0) started++;
  if (!started) plan_worker(&c);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  if (c.failed) {
    snprintf(err, errlen, "%s", c.err);
    return -1;
  }
  return 0;
}

/* statvfs of the folder, or of its nearest existing parent (a --dry-run of a new folder). */
static int statvfs_near(const char *dir, struct statvfs *vfs) {
  char d[4096];
  snprintf(d, sizeof d, "%.4000s", dir);
  for (;;) {
    if (statvfs(d, vfs) == 0) return 0;
    char *s = strrchr(d, '/');
    if (!s) return statvfs(".", vfs);
    if (s == d) return statvfs("/", vfs);
    *s = 0;
  }
}

/* --dry-run: what the pull would do, on stdout (plain) or as one "plan" JSON event. */
static void print_plan(const df_pull_state *p, uint64_t need, bool have_free, uint64_t avail,
                       uint64_t want) {
  const df_pull_opts *o = p->o;
  uint64_t experts = 0, unused = 0, heads = 0, shard_need = 0, other_need = 0,
           full_shard_need = 0;
  int n_sparse = 0, n_other = 0, n_skip = 0, n_full_shards = 0;
  for (int i = 0; i < p->n; i++) {
    const df_pull_entry *e = &p->e[i];
    if (e->state == E_SKIP) n_skip++;
    if (e->state != E_TODO) continue;
    if (e->sparse) {
      n_sparse++;
      experts += e->omitted;
      unused += e->unused;
      heads += e->head_len;
      shard_need += e->need;
    } else {
      n_other++;
      other_need += e->need;
      if (ends_with(e->path, ".safetensors")) n_full_shards++, full_shard_need += e->need;
    }
  }
  bool fits = !have_free || want <= avail;
  char a[32], b[32], c[32], d[32], f[32];
  if (o->json) {
    json_t *files = json_array();
    for (int i = 0; i < p->n; i++) {
      const df_pull_entry *e = &p->e[i];
      if (e->state != E_TODO && e->state != E_SKIP) continue;
      json_array_append_new(files, json_pack(
          "{s:s, s:I, s:s, s:b, s:I, s:I, s:I, s:I}", "path", e->path, "size",
          (json_int_t)e->size, "state", e->state == E_SKIP ? "present" : "todo", "sparse",
          e->sparse, "download", (json_int_t)(e->state == E_TODO ? e->need : 0), "header",
          (json_int_t)(e->sparse ? e->head_len : 0), "experts", (json_int_t)e->omitted,
          "unused", (json_int_t)e->unused));
    }
    json_t *ev = json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:s}", "event",
                           "plan", "repo", o->repo, "revision", p->rev, "commit", p->commit,
                           "dir", p->dir, "stream", o->stream, "download_bytes",
                           (json_int_t)need, "expert_bytes", (json_int_t)experts,
                           "unused_bytes", (json_int_t)unused, "header_bytes",
                           (json_int_t)heads, "text_prefix", p->text_prefix);
    json_object_set_new(ev, "free_bytes", have_free ? json_integer((json_int_t)avail) : json_null());
    json_object_set_new(ev, "fits", json_boolean(fits));
    json_object_set_new(ev, "files", files);
    df_pull__json_event(ev);
    return;
  }
  printf("plan for %s@%s (commit %.12s), %s mode, into %s (dry run: nothing written)\n",
         o->repo, p->rev, p->commit, o->stream ? "stream" : "full", p->dir);
  if (n_sparse) {
    printf("  %d shard(s) in stream mode: %s of text tensors to download (their headers, %s, "
           "were read to plan this)\n", n_sparse, df_pull_fmt_bytes(shard_need, a, sizeof a),
           df_pull_fmt_bytes(heads, b, sizeof b));
    printf("    %s of routed experts left as holes, fetched on first use\n",
           df_pull_fmt_bytes(experts, c, sizeof c));
    if (unused)
      printf("    %s never read (outside %s: not the text model), not downloaded\n",
             df_pull_fmt_bytes(unused, d, sizeof d), p->text_prefix);
  }
  if (n_full_shards)
    printf("  %d shard(s)%s downloaded in full: %s\n", n_full_shards,
           o->stream ? " without routed experts," : "", df_pull_fmt_bytes(full_shard_need, a, sizeof a));
  if (n_other - n_full_shards)
    printf("  %d other file(s): %s\n", n_other - n_full_shards,
           df_pull_fmt_bytes(other_need - full_shard_need, a, sizeof a));
  if (n_skip) printf("  %d file(s) already present\n", n_skip);
  if (have_free)
    printf("  up front: %s to download; %s needed with headroom%s, %s free: %s\n",
           df_pull_fmt_bytes(need, a, sizeof a), df_pull_fmt_bytes(want, b, sizeof b),
           o->stream && o->cache_budget ? " and the --cache-budget" : "",
           df_pull_fmt_bytes(avail, f, sizeof f), fits ? "fits" : "NOT enough free disk");
  else
    printf("  up front: %s to download\n", df_pull_fmt_bytes(need, a, sizeof a));
}

/* ---------------------------------------------------------------- the pull */

static void utc_now(char *buf, size_t cap) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The stem of an entry's partial file names: the SHA-256 of its hub oid (lfs.sha256, else
 * blobId), a NUL and its path. One per listed path (files of identical content never share
 * a partial) and per content (a partial of another revision's bytes is never resumed). */
static void partial_stem(const df_pull_entry *e, char key[DF_PULL_SHA256_HEX]) {
  const char *oid = e->lfs[0] ? e->lfs : e->git;
  char id[1200];
  int n = snprintf(id, sizeof id, "%s%c%.1100s", oid, 0, e->path);
  df_pull_sha256_buf(id, (size_t)n, key);
}

/* Remove partial downloads that belong to no pending file of this listing (an older
 * revision's, a published file's). Through p->part_fd only; nothing to report. */
static void sweep_partials(df_pull_state *p) {
  int dfd = p->part_fd >= 0 ? fcntl(p->part_fd, F_DUPFD_CLOEXEC, 0) : -1;
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!d && dfd >= 0) close(dfd);
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    bool keep = false;
    for (int i = 0; i < p->n && !keep; i++) {
      char key[DF_PULL_SHA256_HEX];
      partial_stem(&p->e[i], key);
      keep = !strncmp(de->d_name, key, 64) && de->d_name[64] == '.' &&
             p->e[i].state != E_DONE && p->e[i].state != E_SKIP;
    }
    if (!keep) unlinkat(p->part_fd, de->d_name, 0);
  }
  if (d) closedir(d);
}

/* True when the listed `rel` is a regular file of `size` bytes in the folder, reached
 * without following a symbolic link (p->dir_fd; false when it is not open). */
static bool file_has_size(const df_pull_state *p, const char *rel, uint64_t size) {
  if (p->dir_fd < 0) return false;
  const char *slash = strrchr(rel, '/');
  int pfd = p->dir_fd;
  if (slash) {
    char parent[1100], err[256];
    snprintf(parent, sizeof parent, "%.*s", (int)(slash - rel), rel);
    if ((pfd = df_pull_open_dirs(p->dir_fd, p->dir, parent, false, err, sizeof err)) < 0)
      return false;
  }
  struct stat st;
  bool ok = fstatat(pfd, slash ? slash + 1 : rel, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode) && (uint64_t)st.st_size == size;
  if (pfd != p->dir_fd) close(pfd);
  return ok;
}

int df_pull_run(const df_pull_opts *o, char *dir_out, size_t dir_cap, char *err, size_t errlen) {
  df_pull_state P = {.o = o, .dir_fd = -1, .part_fd = -1};
  df_pull_state *p = &P;
  df_pull_manifest man = {0};
  int rc = -1, lock_fd = -1, meta_fd = -1, nthreads = 0;
  pthread_t th[64];
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

  if (o->dry_run) {
    /* nothing goes into the folder: stream mode's header images go to a temporary folder */
    const char *tmp = getenv("TMPDIR");
    snprintf(p->partial_dir, sizeof p->partial_dir, "%.2048s/deltafin-plan-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(p->partial_dir)) {
      snprintf(err, errlen, "%s: cannot create a temporary folder: %s", p->partial_dir,
               strerror(errno));
      p->partial_dir[0] = 0;
      goto done;
    }
    p->part_fd = open(p->partial_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    p->dir_fd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* absent: nothing present */
    if (p->part_fd < 0) {
      snprintf(err, errlen, "%s: %s", p->partial_dir, strerror(errno));
      goto done;
    }
  } else {
    /* --dir itself may be a link (the user's choice); everything below it is reached from
     * its descriptor without following links (.deltafin planted as a link to another
     * user's folder would hand them the lock and the partial files) */
    snprintf(p->partial_dir, sizeof p->partial_dir, "%.2048s/.deltafin/partial", p->dir);
    if (df_fs_mkdirs(p->dir, err, errlen) != 0) goto done;
    p->dir_fd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (p->dir_fd < 0) {
      snprintf(err, errlen, "%s: cannot open the folder: %s", p->dir, strerror(errno));
      goto done;
    }
    if ((meta_fd = df_pull_open_dirs(p->dir_fd, p->dir, ".deltafin", true, err, errlen)) < 0 ||
        (p->part_fd = df_pull_open_dirs(p->dir_fd, p->dir, ".deltafin/partial", true, err,
                                        errlen)) < 0)
      goto done;
    snprintf(path, sizeof path, "%.2048s/.deltafin/lock", p->dir);
    lock_fd = openat(meta_fd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK |
                     O_CLOEXEC, 0644);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      snprintf(err, errlen, "%s: another deltafin pull is writing this folder (%s)", p->dir,
               lock_fd < 0 ? strerror(errno) : "lock held");
      goto done;
    }
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
    bool same_remote = old && old->size == e->size && !strcmp(old->lfs_sha256, e->lfs) &&
                       (!e->git[0] || !old->git_oid[0] || !strcmp(old->git_oid, e->git));
    if (same_remote && file_has_size(p, e->path, e->size) && (!old->sparse || e->sparse)) {
      e->state = E_SKIP;
      n_skip++;
      continue;
    }
    char key[DF_PULL_SHA256_HEX];
    partial_stem(e, key);
    snprintf(e->pname, sizeof e->pname, "%.64s.%s", key, e->sparse ? "sparse" : "incomplete");
    snprintf(e->partial, sizeof e->partial, "%.2100s/%s", p->partial_dir, e->pname);
  }
  if (n_sel == 0) {
    snprintf(err, errlen, "%s@%s: no file matches the --include/--exclude patterns (%d files "
             "in the repository)", o->repo, p->rev, p->n);
    goto done;
  }
  if (o->stream) {
    bool any = false;
    for (int i = 0; i < p->n && !any; i++) any = p->e[i].state == E_TODO && p->e[i].sparse;
    if (any) stream_text_prefix(p);
    if (plan_sparse_all(p, err, errlen) != 0) goto done;
  }
  /* free disk: what is still to download, plus the expert cache budget in stream mode */
  uint64_t need = 0;
  for (int i = 0; i < p->n; i++) {
    df_pull_entry *e = &p->e[i];
    if (e->state != E_TODO) continue;
    if (!e->sparse) {
      struct stat st;
      uint64_t have = fstatat(p->part_fd, e->pname, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                      (uint64_t)st.st_size <= e->size ? (uint64_t)st.st_size : 0;
      e->need = e->size - have;
    }
    need += e->need;
  }
  p->total_need = need;
  uint64_t budget = o->cache_budget ? o->cache_budget
                    : man.cache_budget ? man.cache_budget : DF_PULL_DEFAULT_CACHE_BUDGET;
  struct statvfs vfs;
  bool have_free = statvfs_near(p->dir, &vfs) == 0;
  uint64_t avail = have_free ? (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize : 0;
  uint64_t want = need + ((uint64_t)64 << 20); /* headroom for metadata */
  if (o->stream && o->cache_budget) want += o->cache_budget;
  if (o->dry_run) {
    print_plan(p, need, have_free, avail, want);
    rc = 0;
    goto done;
  }
  if (have_free) {
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
      if (old && old->size == e->size && !strcmp(old->lfs_sha256, e->lfs) &&
          file_has_size(p, e->path, e->size) && df_pull_manifest_put(&nm, old) != 0)
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
  if (lock_fd >= 0) close(lock_fd);
  if (meta_fd >= 0) close(meta_fd);
  for (int i = 0; i < p->n; i++) {
    df_pull_entry *e = &p->e[i];
    if (e->out.ranges) free(e->out.ranges);
    if (e->sparse && e->state != E_DONE && e->pname[0] && p->part_fd >= 0)
      unlinkat(p->part_fd, e->pname, 0);
    free(e->spans);
    free(e->path);
  }
  if (p->part_fd >= 0) close(p->part_fd);
  if (p->dir_fd >= 0) close(p->dir_fd);
  if (o->dry_run && p->partial_dir[0]) rmdir(p->partial_dir);
  free(p->e);
  for (int i = 0; i < p->n_notes; i++) free(p->notes[i]);
  free(p->notes);
  df_pull_manifest_free(&man);
  pthread_mutex_destroy(&p->mu);
  return rc;
}
