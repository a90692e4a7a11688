/* node/store.c — a df-node's expert tensor sources; see store.h. */
#define _GNU_SOURCE
#include "node/store.h"
#include "config/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/safetensors.h"
#include "transport/keys.h"

typedef struct verified {
  char name[DF_PROTO_MAX_TNAME + 1];
  uint8_t sha[32];
  bool from_model; /* true: model-dir bytes match; false: cache file checked */
} verified;

typedef struct mapping {
  void *p;
  size_t len;
} mapping;

struct df_node_store {
  char cache[4096];       /* STATE/cache */
  df_st_model *model;     /* --model-dir, or NULL */
  verified *ver;          /* remembered SHA-256 checks */
  int n_ver, cap_ver;
  mapping *maps;          /* cache files mapped for the current assignment */
  int n_maps, cap_maps;
  /* download in progress */
  int fd;
  char tmp[4200], final[4200];
  uint64_t total, written;
  uint8_t want[32];
  df_proto_sha256_ctx sha;
};

df_node_store *df_node_store_new(const char *state_dir, const char *model_dir, char *err,
                                 size_t errlen) {
  df_node_store *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  s->fd = -1;
  char d[4200];
  snprintf(s->cache, sizeof s->cache, "%s/cache", state_dir);
  snprintf(d, sizeof d, "%s/sha256", s->cache);
  if (df_proto_state_mkdir(d, err, errlen) != 0) goto fail;
  snprintf(d, sizeof d, "%s/tmp", s->cache);
  if (df_proto_state_mkdir(d, err, errlen) != 0) goto fail;
  if (model_dir && df_st_open(model_dir, &s->model, err, errlen) != 0) goto fail;
  return s;
fail:
  df_node_store_destroy(&s);
  return NULL;
}

void df_node_store_destroy(df_node_store **sp) {
  if (!sp || !*sp) return;
  df_node_store *s = *sp;
  df_node_store_abort(s);
  df_node_store_release(s);
  free(s->maps);
  free(s->ver);
  df_st_close(&s->model);
  free(s);
  *sp = NULL;
}

static const verified *find_ver(const df_node_store *s, const df_proto_tensor *t, bool model) {
  for (int i = 0; i < s->n_ver; i++)
    if (s->ver[i].from_model == model && !memcmp(s->ver[i].sha, t->sha256, 32) &&
        !strcmp(s->ver[i].name, t->name))
      return &s->ver[i];
  return NULL;
}

static void add_ver(df_node_store *s, const df_proto_tensor *t, bool model) {
  if (s->n_ver == s->cap_ver) {
    int nc = s->cap_ver ? 2 * s->cap_ver : 64;
    verified *nv = realloc(s->ver, (size_t)nc * sizeof *nv);
    if (!nv) return; /* only a cache of checks: hashing again later is correct */
    s->ver = nv;
    s->cap_ver = nc;
  }
  verified *v = &s->ver[s->n_ver++];
  snprintf(v->name, sizeof v->name, "%s", t->name);
  memcpy(v->sha, t->sha256, 32);
  v->from_model = model;
}

static const void *from_model(df_node_store *s, const df_proto_tensor *t) {
  if (!s->model) return NULL;
  const df_st_tensor *st = df_st_find(s->model, t->name);
  if (!st || st->ndim != 2 || st->shape[0] != t->shape[0] || st->shape[1] != t->shape[1] ||
      st->nbytes != t->nbytes || strcmp(df_dtype_name(st->dtype), t->dtype))
    return NULL;
  if (!find_ver(s, t, true)) {
    uint8_t h[32];
    df_proto_sha256(st->data, st->nbytes, h);
    if (memcmp(h, t->sha256, 32)) return NULL; /* a different checkpoint: fetch instead */
    add_ver(s, t, true);
  }
  return st->data;
}

static const void *from_cache(df_node_store *s, const df_proto_tensor *t) {
  char hex[65], path[4300];
  df_proto_hex(t->sha256, 32, hex);
  snprintf(path, sizeof path, "%s/sha256/%s", s->cache, hex);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  void *p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == t->nbytes && t->nbytes > 0)
    p = mmap(NULL, (size_t)t->nbytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return NULL;
  df_st_advise_weights(p, (size_t)t->nbytes);
  if (!find_ver(s, t, false)) {
    uint8_t h[32];
    df_proto_sha256(p, (size_t)t->nbytes, h);
    if (memcmp(h, t->sha256, 32)) { /* corrupt cache entry: drop it, fetch again */
      munmap(p, (size_t)t->nbytes);
      unlink(path);
      return NULL;
    }
    add_ver(s, t, false);
  }
  if (s->n_maps == s->cap_maps) {
    int nc = s->cap_maps ? 2 * s->cap_maps : 64;
    mapping *nm = realloc(s->maps, (size_t)nc * sizeof *nm);
    if (!nm) {
      munmap(p, (size_t)t->nbytes);
      return NULL;
    }
    s->maps = nm;
    s->cap_maps = nc;
  }
  s->maps[s->n_maps++] = (mapping){p, (size_t)t->nbytes};
  return p;
}

const void *df_node_store_get(df_node_store *s, const df_proto_tensor *t) {
  const void *p = from_model(s, t);
  return p ? p : from_cache(s, t);
}

void df_node_store_release(df_node_store *s) {
  for (int i = 0; i < s->n_maps; i++) munmap(s->maps[i].p, s->maps[i].len);
  s->n_maps = 0;
}

int df_node_store_begin(df_node_store *s, const df_proto_tensor *t, char *err, size_t errlen) {
  df_node_store_abort(s);
  char hex[65];
  df_proto_hex(t->sha256, 32, hex);
  char base[4200];
  snprintf(base, sizeof base, "%s/tmp/%s", s->cache, hex);
  snprintf(s->final, sizeof s->final, "%s/sha256/%s", s->cache, hex);
  /* exclusive, random name: a file or symlink planted in tmp/ is never written through */
  s->fd = df_fs_create_temp(base, 0600, s->tmp, sizeof s->tmp, err, errlen);
  if (s->fd < 0) return -1;
  s->total = t->nbytes;
  s->written = 0;
  memcpy(s->want, t->sha256, 32);
  df_proto_sha256_init(&s->sha);
  return 0;
}

int df_node_store_write(df_node_store *s, uint64_t offset, const void *data, size_t len,
                        char *err, size_t errlen) {
  if (s->fd < 0 || offset != s->written || len > s->total - s->written) {
    snprintf(err, errlen, "shard chunk at %llu (+%zu) out of order (have %llu of %llu bytes)",
             (unsigned long long)offset, len, (unsigned long long)s->written,
             (unsigned long long)s->total);
    return -1;
  }
  const uint8_t *p = data;
  size_t left = len;
  while (left) {
    ssize_t w = write(s->fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      snprintf(err, errlen, "cannot write %s: %s", s->tmp, strerror(errno));
      df_node_store_abort(s);
      return -1;
    }
    p += w;
    left -= (size_t)w;
  }
  df_proto_sha256_update(&s->sha, data, len);
  s->written += len;
  return 0;
}

int df_node_store_finish(df_node_store *s, char *err, size_t errlen) {
  uint8_t h[32];
  if (s->fd < 0 || s->written != s->total) {
    snprintf(err, errlen, "shard download incomplete");
    df_node_store_abort(s);
    return -1;
  }
  df_proto_sha256_final(&s->sha, h);
  if (memcmp(h, s->want, 32)) {
    snprintf(err, errlen, "streamed tensor does not match its SHA-256; discarded");
    df_node_store_abort(s);
    return -1;
  }
  if (fsync(s->fd) != 0 || close(s->fd) != 0) {
    s->fd = -1;
    snprintf(err, errlen, "cannot flush %s: %s", s->tmp, strerror(errno));
    unlink(s->tmp);
    return -1;
  }
  s->fd = -1;
  if (rename(s->tmp, s->final) != 0) {
    snprintf(err, errlen, "cannot publish %s: %s", s->final, strerror(errno));
    unlink(s->tmp);
    return -1;
  }
  return 0;
}

void df_node_store_abort(df_node_store *s) {
  if (s->fd >= 0) {
    close(s->fd);
    s->fd = -1;
    unlink(s->tmp);
  }
}

uint64_t df_node_store_written(const df_node_store *s) { return s->written; }
