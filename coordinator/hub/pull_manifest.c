/* coordinator/hub/pull_manifest.c — read and write .deltafin-manifest.json; see
 * pull_manifest.h. */
#define _GNU_SOURCE
#include "coordinator/hub/pull_manifest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static bool is_hex(const char *s, size_t n) {
  if (strlen(s) != n) return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

void df_pull_mfile_free(df_pull_mfile *f) {
  if (!f) return;
  free(f->path);
  free(f->ranges);
  memset(f, 0, sizeof *f);
}

void df_pull_manifest_free(df_pull_manifest *m) {
  if (!m) return;
  for (int i = 0; i < m->n_files; i++) df_pull_mfile_free(&m->files[i]);
  free(m->files);
  for (int i = 0; i < m->n_pending; i++) free(m->pending[i]);
  free(m->pending);
  memset(m, 0, sizeof *m);
}

df_pull_mfile *df_pull_manifest_find(const df_pull_manifest *m, const char *path) {
  for (int i = 0; i < m->n_files; i++)
    if (!strcmp(m->files[i].path, path)) return &m->files[i];
  return NULL;
}

int df_pull_manifest_put(df_pull_manifest *m, const df_pull_mfile *f) {
  df_pull_mfile c = *f;
  c.path = strdup(f->path);
  c.ranges = NULL;
  if (f->n_ranges) {
    c.ranges = malloc((size_t)f->n_ranges * sizeof *c.ranges);
    if (c.ranges) memcpy(c.ranges, f->ranges, (size_t)f->n_ranges * sizeof *c.ranges);
  }
  if (!c.path || (f->n_ranges && !c.ranges)) {
    df_pull_mfile_free(&c);
    return -1;
  }
  df_pull_mfile *old = df_pull_manifest_find(m, f->path);
  if (old) {
    df_pull_mfile_free(old);
    *old = c;
    return 0;
  }
  df_pull_mfile *nf = realloc(m->files, (size_t)(m->n_files + 1) * sizeof *nf);
  if (!nf) {
    df_pull_mfile_free(&c);
    return -1;
  }
  m->files = nf;
  m->files[m->n_files++] = c;
  return 0;
}

#define FAIL(...)                                   \
  do {                                              \
    int k_ = snprintf(err, errlen, "%s: ", name);   \
    if (k_ > 0 && (size_t)k_ < errlen)              \
      snprintf(err + k_, errlen - (size_t)k_, __VA_ARGS__); \
    goto done;                                      \
  } while (0)

static int get_str(json_t *o, const char *key, bool required, char *out, size_t cap) {
  json_t *v = json_object_get(o, key);
  if (!v) {
    out[0] = 0;
    return required ? -1 : 0;
  }
  if (!json_is_string(v) || strlen(json_string_value(v)) >= cap) return -1;
  snprintf(out, cap, "%s", json_string_value(v));
  return 0;
}

static int get_u64(json_t *o, const char *key, bool required, uint64_t *out) {
  json_t *v = json_object_get(o, key);
  if (!v) {
    *out = 0;
    return required ? -1 : 0;
  }
  if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

int df_pull_manifest_parse(const char *text, size_t len, const char *name, df_pull_manifest *m,
                           char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  json_error_t je;
  int rc = -1;
  df_pull_mfile f = {0};
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) FAIL("line %d column %d: %s", je.line, je.column, je.text);
  if (!json_is_object(root)) FAIL("expected a JSON object");
  json_t *fmt = json_object_get(root, "format");
  if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "deltafin-manifest"))
    FAIL("format: expected \"deltafin-manifest\"");
  json_t *ver = json_object_get(root, "version");
  if (!json_is_integer(ver) || json_integer_value(ver) != 1)
    FAIL("version: expected 1 (this deltafin reads manifest version 1)");
  if (get_str(root, "endpoint", true, m->endpoint, sizeof m->endpoint)) FAIL("endpoint: expected a string");
  if (get_str(root, "repo", true, m->repo, sizeof m->repo) || !df_pull_repo_id_ok(m->repo))
    FAIL("repo: expected ORG/NAME");
  if (get_str(root, "revision", true, m->revision, sizeof m->revision)) FAIL("revision: expected a string");
  if (get_str(root, "commit", true, m->commit, sizeof m->commit) || !df_pull_revision_ok(m->commit))
    FAIL("commit: expected a commit id");
  if (get_str(root, "created", false, m->created, sizeof m->created)) FAIL("created: expected a string");
  char mode[16];
  if (get_str(root, "mode", true, mode, sizeof mode) || (strcmp(mode, "full") && strcmp(mode, "stream")))
    FAIL("mode: expected \"full\" or \"stream\"");
  m->stream = !strcmp(mode, "stream");
  json_t *cpl = json_object_get(root, "complete");
  if (!json_is_boolean(cpl)) FAIL("complete: expected true or false");
  m->complete = json_is_true(cpl);
  if (get_u64(root, "cache_budget", false, &m->cache_budget)) FAIL("cache_budget: expected bytes");
  json_t *files = json_object_get(root, "files");
  if (!json_is_array(files)) FAIL("files: expected an array");
  size_t i;
  json_t *e;
  json_array_foreach(files, i, e) {
    char path[1100];
    memset(&f, 0, sizeof f);
    if (!json_is_object(e)) FAIL("files[%zu]: expected an object", i);
    if (get_str(e, "path", true, path, sizeof path) || !df_pull_path_ok(path))
      FAIL("files[%zu].path: expected a relative path inside the folder", i);
    if (get_u64(e, "size", true, &f.size)) FAIL("files[%zu].size: expected bytes", i);
    if (get_str(e, "sha256", false, f.sha256, sizeof f.sha256) ||
        (f.sha256[0] && !is_hex(f.sha256, 64)))
      FAIL("files[%zu].sha256: expected 64 lowercase hex digits", i);
    if (get_str(e, "lfs_sha256", false, f.lfs_sha256, sizeof f.lfs_sha256) ||
        (f.lfs_sha256[0] && !is_hex(f.lfs_sha256, 64)))
      FAIL("files[%zu].lfs_sha256: expected 64 lowercase hex digits", i);
    if (get_str(e, "git_oid", false, f.git_oid, sizeof f.git_oid) ||
        (f.git_oid[0] && !is_hex(f.git_oid, 40)))
      FAIL("files[%zu].git_oid: expected 40 lowercase hex digits", i);
    json_t *sp = json_object_get(e, "sparse");
    if (sp && !json_is_boolean(sp)) FAIL("files[%zu].sparse: expected true or false", i);
    f.sparse = json_is_true(sp);
    if (!f.sparse && !f.sha256[0]) FAIL("files[%zu].sha256: missing", i);
    if (f.sparse) {
      if (get_u64(e, "omitted_bytes", true, &f.omitted)) FAIL("files[%zu].omitted_bytes: expected bytes", i);
      if (get_u64(e, "unused_bytes", false, &f.unused)) FAIL("files[%zu].unused_bytes: expected bytes", i);
      json_t *rs = json_object_get(e, "ranges");
      if (!json_is_array(rs)) FAIL("files[%zu].ranges: expected an array", i);
      size_t n = json_array_size(rs);
      if (n > (1u << 24)) FAIL("files[%zu].ranges: too many", i);
      f.ranges = calloc(n ? n : 1, sizeof *f.ranges);
      if (!f.ranges) FAIL("out of memory");
      uint64_t prev_end = 0;
      for (size_t k = 0; k < n; k++) {
        json_t *r = json_array_get(rs, k);
        json_t *o = json_array_get(r, 0), *l = json_array_get(r, 1), *h = json_array_get(r, 2);
        if (!json_is_array(r) || json_array_size(r) != 3 || !json_is_integer(o) ||
            !json_is_integer(l) || !json_is_string(h) || json_integer_value(o) < 0 ||
            json_integer_value(l) <= 0 || !is_hex(json_string_value(h), 64))
          FAIL("files[%zu].ranges[%zu]: expected [offset, length, sha256]", i, k);
        df_pull_range *pr = &f.ranges[k];
        pr->off = (uint64_t)json_integer_value(o);
        pr->len = (uint64_t)json_integer_value(l);
        snprintf(pr->sha256, sizeof pr->sha256, "%s", json_string_value(h));
        if (pr->off < prev_end || pr->len > f.size || pr->off > f.size - pr->len)
          FAIL("files[%zu].ranges[%zu]: out of order or past the file size", i, k);
        prev_end = pr->off + pr->len;
        f.n_ranges++;
      }
    }
    f.path = path;
    if (df_pull_manifest_find(m, path)) FAIL("files[%zu].path: duplicate '%s'", i, path);
    if (df_pull_manifest_put(m, &f) != 0) {
      f.path = NULL;
      FAIL("out of memory");
    }
    f.path = NULL;
    free(f.ranges);
    f.ranges = NULL;
  }
  json_t *pend = json_object_get(root, "pending");
  if (pend) {
    if (!json_is_array(pend)) FAIL("pending: expected an array");
    size_t n = json_array_size(pend);
    m->pending = calloc(n ? n : 1, sizeof *m->pending);
    if (!m->pending) FAIL("out of memory");
    json_array_foreach(pend, i, e) {
      if (!json_is_string(e) || !df_pull_path_ok(json_string_value(e)))
        FAIL("pending[%zu]: expected a relative path", i);
      if (!(m->pending[m->n_pending] = strdup(json_string_value(e)))) FAIL("out of memory");
      m->n_pending++;
    }
  }
  rc = 0;
done:
  free(f.ranges);
  json_decref(root);
  return rc;
}

int df_pull_manifest_read(const char *dir, df_pull_manifest *m, char *err, size_t errlen) {
  char path[4200];
  memset(m, 0, sizeof *m);
  snprintf(path, sizeof path, "%s/%s", dir, DF_PULL_MANIFEST_NAME);
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT) return 1;
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  fclose(f);
  char *text = NULL;
  size_t len = 0;
  if (df_pull_read_file(path, (size_t)256 << 20, &text, &len, err, errlen) != 0) return -1;
  int rc = df_pull_manifest_parse(text, len, path, m, err, errlen);
  free(text);
  return rc;
}

int df_pull_manifest_write(const char *dir, const df_pull_manifest *m, char *err, size_t errlen) {
  int rc = -1;
  char *text = NULL;
  json_t *root = json_object(), *files = json_array(), *pend = json_array();
  if (!root || !files || !pend) goto oom;
  json_object_set_new(root, "format", json_string("deltafin-manifest"));
  json_object_set_new(root, "version", json_integer(1));
  json_object_set_new(root, "endpoint", json_string(m->endpoint));
  json_object_set_new(root, "repo", json_string(m->repo));
  json_object_set_new(root, "revision", json_string(m->revision));
  json_object_set_new(root, "commit", json_string(m->commit));
  json_object_set_new(root, "created", json_string(m->created));
  json_object_set_new(root, "mode", json_string(m->stream ? "stream" : "full"));
  json_object_set_new(root, "complete", json_boolean(m->complete));
  if (m->stream) json_object_set_new(root, "cache_budget", json_integer((json_int_t)m->cache_budget));
  for (int i = 0; i < m->n_files; i++) {
    const df_pull_mfile *f = &m->files[i];
    json_t *o = json_object();
    if (!o) goto oom;
    json_object_set_new(o, "path", json_string(f->path));
    json_object_set_new(o, "size", json_integer((json_int_t)f->size));
    if (f->sha256[0]) json_object_set_new(o, "sha256", json_string(f->sha256));
    if (f->lfs_sha256[0]) json_object_set_new(o, "lfs_sha256", json_string(f->lfs_sha256));
    if (f->git_oid[0]) json_object_set_new(o, "git_oid", json_string(f->git_oid));
    if (f->sparse) {
      json_t *rs = json_array();
      if (!rs) goto oom;
      json_object_set_new(o, "sparse", json_true());
      json_object_set_new(o, "omitted_bytes", json_integer((json_int_t)f->omitted));
      if (f->unused) json_object_set_new(o, "unused_bytes", json_integer((json_int_t)f->unused));
      for (int k = 0; k < f->n_ranges; k++)
        json_array_append_new(rs, json_pack("[IIs]", (json_int_t)f->ranges[k].off,
                                            (json_int_t)f->ranges[k].len, f->ranges[k].sha256));
      json_object_set_new(o, "ranges", rs);
    }
    json_array_append_new(files, o);
  }
  for (int i = 0; i < m->n_pending; i++) json_array_append_new(pend, json_string(m->pending[i]));
  json_object_set(root, "files", files);
  json_object_set(root, "pending", pend);
  text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  if (!text) goto oom;
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, DF_PULL_MANIFEST_NAME);
  size_t n = strlen(text);
  text[n] = '\n'; /* json_dumps leaves room for the NUL we overwrite; write n + 1 bytes */
  rc = df_fs_write_atomic(path, text, n + 1, 0644, err, errlen);
  goto done;
oom:
  snprintf(err, errlen, "out of memory writing the manifest");
done:
  free(text);
  json_decref(files);
  json_decref(pend);
  json_decref(root);
  return rc;
}
