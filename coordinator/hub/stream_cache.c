/* coordinator/hub/stream_cache.c — content-addressed blob cache with budget and LRU; see
 * stream_cache.h. */
#define _GNU_SOURCE
#include "coordinator/hub/stream_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/fsutil.h"
#include "coordinator/hub/pull_util.h"
#include "engine/safetensors.h"

#define KEY_MAX 128

typedef struct centry {
  char key[KEY_MAX];
  char sha[DF_PULL_SHA256_HEX]; /* content hash first stored under the key */
  uint64_t size;                /* bytes */
  uint64_t tick;                /* last use */
  bool present;                 /* blob on disk */
  bool verified;                /* blob hashed since this process mapped it */
  void *map;                    /* read-only mapping while present and used */
} centry;

struct df_stream_cache {
  char dir[2048];
  uint64_t budget, used, tick;
  int lock_fd;
  centry *e;
  int n, cap;
  int *slots; /* open-addressing hash table of entry indices, -1 = empty */
  int n_slots;
  df_stream_cache_stats st;
};

static uint64_t key_hash(const char *k) {
  uint64_t h = 1469598103934665603ull;
  for (; *k; k++) h = (h ^ (unsigned char)*k) * 1099511628211ull;
  return h;
}

static int rehash(df_stream_cache *c, int n_slots) {
  int *s = malloc((size_t)n_slots * sizeof *s);
  if (!s) return -1;
  for (int i = 0; i < n_slots; i++) s[i] = -1;
  for (int i = 0; i < c->n; i++) {
    uint64_t h = key_hash(c->e[i].key) & (uint64_t)(n_slots - 1);
    while (s[h] >= 0) h = (h + 1) & (uint64_t)(n_slots - 1);
    s[h] = i;
  }
  free(c->slots);
  c->slots = s;
  c->n_slots = n_slots;
  return 0;
}

static int find(const df_stream_cache *c, const char *key) {
  if (!c->n_slots) return -1;
  uint64_t h = key_hash(key) & (uint64_t)(c->n_slots - 1);
  while (c->slots[h] >= 0) {
    if (!strcmp(c->e[c->slots[h]].key, key)) return c->slots[h];
    h = (h + 1) & (uint64_t)(c->n_slots - 1);
  }
  return -1;
}

static int add(df_stream_cache *c, const char *key) {
  if (c->n == c->cap) {
    int nc = c->cap ? c->cap * 2 : 256;
    centry *ne = realloc(c->e, (size_t)nc * sizeof *ne);
    if (!ne) return -1;
    c->e = ne;
    c->cap = nc;
  }
  centry *e = &c->e[c->n];
  memset(e, 0, sizeof *e);
  snprintf(e->key, sizeof e->key, "%s", key);
  c->n++;
  if (c->n * 2 > c->n_slots) {
    if (rehash(c, c->n_slots ? c->n_slots * 2 : 1024) != 0) {
      c->n--;
      return -1;
    }
  } else {
    uint64_t h = key_hash(key) & (uint64_t)(c->n_slots - 1);
    while (c->slots[h] >= 0) h = (h + 1) & (uint64_t)(c->n_slots - 1);
    c->slots[h] = c->n - 1;
  }
  return c->n - 1;
}

static void blob_path(const df_stream_cache *c, const char *sha, char *out, size_t cap) {
  snprintf(out, cap, "%s/blobs/%.64s", c->dir, sha);
}

/* Another present entry holding the same content? */
static bool blob_shared(const df_stream_cache *c, int except, const char *sha) {
  for (int i = 0; i < c->n; i++)
    if (i != except && c->e[i].present && !strcmp(c->e[i].sha, sha)) return true;
  return false;
}

static void unmap(centry *e) {
  if (e->map) munmap(e->map, e->size ? e->size : 1);
  e->map = NULL;
  e->verified = false;
}

static void drop(df_stream_cache *c, int i) {
  centry *e = &c->e[i];
  if (!e->present) return;
  unmap(e);
  e->present = false;
  if (!blob_shared(c, i, e->sha)) {
    char p[2300];
    blob_path(c, e->sha, p, sizeof p);
    unlink(p);
    c->used -= e->size;
  }
}

static int write_index(df_stream_cache *c, char *err, size_t errlen) {
  size_t cap = (size_t)c->n * (KEY_MAX + 100) + 64, n = 0;
  char *buf = malloc(cap);
  if (!buf) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  n += (size_t)snprintf(buf + n, cap - n, "# deltafin expert cache v1: key sha256 bytes tick present\n");
  for (int i = 0; i < c->n; i++) {
    const centry *e = &c->e[i];
    n += (size_t)snprintf(buf + n, cap - n, "%s\t%s\t%llu\t%llu\t%d\n", e->key, e->sha,
                          (unsigned long long)e->size, (unsigned long long)e->tick, e->present);
  }
  char path[2300];
  snprintf(path, sizeof path, "%s/index.tsv", c->dir);
  int rc = df_fs_write_atomic(path, buf, n, 0644, err, errlen);
  free(buf);
  return rc;
}

static int evict_for(df_stream_cache *c, uint64_t need, int keep) {
  while (c->used + need > c->budget) {
    int victim = -1;
    for (int i = 0; i < c->n; i++)
      if (i != keep && c->e[i].present && (victim < 0 || c->e[i].tick < c->e[victim].tick))
        victim = i;
    if (victim < 0) return -1;
    drop(c, victim);
    c->st.evictions++;
  }
  return 0;
}

static int load_index(df_stream_cache *c, char *err, size_t errlen) {
  char path[2300];
  snprintf(path, sizeof path, "%s/index.tsv", c->dir);
  FILE *f = fopen(path, "r");
  if (!f) return errno == ENOENT ? 0 : -1;
  char line[512];
  int ln = 0;
  while (fgets(line, sizeof line, f)) {
    ln++;
    if (line[0] == '#' || line[0] == '\n') continue;
    char key[KEY_MAX], sha[DF_PULL_SHA256_HEX];
    unsigned long long size, tick;
    int present;
    if (sscanf(line, "%127[^\t]\t%64[0-9a-f]\t%llu\t%llu\t%d", key, sha, &size, &tick,
               &present) != 5 || strlen(sha) != 64 || find(c, key) >= 0) {
      snprintf(err, errlen, "%s: line %d: malformed (expected key, sha256, bytes, tick, "
               "present)", path, ln);
      fclose(f);
      return -1;
    }
    int i = add(c, key);
    if (i < 0) {
      fclose(f);
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    centry *e = &c->e[i];
    snprintf(e->sha, sizeof e->sha, "%s", sha);
    e->size = size;
    e->tick = tick;
    if (tick > c->tick) c->tick = tick;
    if (present) {
      char bp[2300];
      struct stat st;
      blob_path(c, sha, bp, sizeof bp);
      e->present = stat(bp, &st) == 0 && (uint64_t)st.st_size == size;
      if (e->present && !blob_shared(c, i, sha)) c->used += size;
    }
  }
  fclose(f);
  return 0;
}

/* Delete blobs no present entry names and stale temp files. */
static void sweep(df_stream_cache *c) {
  char p[2300];
  snprintf(p, sizeof p, "%s/blobs", c->dir);
  DIR *d = opendir(p);
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    bool named = false;
    for (int i = 0; i < c->n && !named; i++) named = c->e[i].present && !strcmp(c->e[i].sha, de->d_name);
    if (!named) {
      char f[2600];
      snprintf(f, sizeof f, "%s/%.255s", p, de->d_name);
      unlink(f);
    }
  }
  if (d) closedir(d);
  snprintf(p, sizeof p, "%s/tmp", c->dir);
  d = opendir(p);
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char f[2600];
    snprintf(f, sizeof f, "%s/%.255s", p, de->d_name);
    unlink(f);
  }
  if (d) closedir(d);
}

int df_stream_cache_open(const char *dir, uint64_t budget, df_stream_cache **out, char *err,
                         size_t errlen) {
  *out = NULL;
  df_stream_cache *c = calloc(1, sizeof *c);
  char p[2300];
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  c->lock_fd = -1;
  if (budget == 0 || strlen(dir) >= sizeof c->dir) {
    snprintf(err, errlen, "expert cache %s: %s", dir, budget ? "path too long" : "budget is 0 bytes");
    goto fail;
  }
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  c->budget = budget;
  snprintf(p, sizeof p, "%s/blobs", dir);
  if (df_fs_mkdirs(p, err, errlen) != 0) goto fail;
  snprintf(p, sizeof p, "%s/tmp", dir);
  if (df_fs_mkdirs(p, err, errlen) != 0) goto fail;
  snprintf(p, sizeof p, "%s/lock", dir);
  c->lock_fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC, 0644);
  if (c->lock_fd < 0 || flock(c->lock_fd, LOCK_EX | LOCK_NB) != 0) {
    snprintf(err, errlen, "expert cache %s is in use by another process (%s)", dir,
             c->lock_fd < 0 ? strerror(errno) : "lock held");
    goto fail;
  }
  if (rehash(c, 1024) != 0 || load_index(c, err, errlen) != 0) {
    if (!err[0]) snprintf(err, errlen, "%s/index.tsv: cannot read", dir);
    goto fail;
  }
  sweep(c);
  evict_for(c, 0, -1);
  if (write_index(c, err, errlen) != 0) goto fail;
  *out = c;
  return 0;
fail:
  if (c->lock_fd >= 0) close(c->lock_fd);
  free(c->e);
  free(c->slots);
  free(c);
  return -1;
}

void df_stream_cache_close(df_stream_cache **cp) {
  if (!cp || !*cp) return;
  df_stream_cache *c = *cp;
  char err[256];
  write_index(c, err, sizeof err);
  for (int i = 0; i < c->n; i++) unmap(&c->e[i]);
  if (c->lock_fd >= 0) close(c->lock_fd);
  free(c->e);
  free(c->slots);
  free(c);
  *cp = NULL;
}

/* Map entry i's blob read-only, verifying its content the first time in this process
 * (unless it was just written from bytes already hashed). */
static int map_entry(df_stream_cache *c, int i, bool verify, char *err, size_t errlen) {
  centry *e = &c->e[i];
  if (e->map) return 1;
  char p[2300];
  blob_path(c, e->sha, p, sizeof p);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size != e->size) {
    if (fd >= 0) close(fd);
    drop(c, i);
    c->st.corrupt_dropped++;
    return 0;
  }
  void *m = e->size ? mmap(NULL, e->size, PROT_READ, MAP_SHARED, fd, 0) : NULL;
  close(fd);
  if (e->size && m == MAP_FAILED) {
    snprintf(err, errlen, "%s: mmap failed: %s", p, strerror(errno));
    return -1;
  }
  df_st_advise_weights(m, e->size); /* a NULL m (empty blob) is ignored */
  char hex[DF_PULL_SHA256_HEX];
  if (verify) df_pull_sha256_buf(m, e->size, hex);
  if (verify && strcmp(hex, e->sha) != 0) {
    if (m) munmap(m, e->size);
    drop(c, i);
    c->st.corrupt_dropped++;
    return 0;
  }
  e->map = m;
  e->verified = true;
  return 1;
}

int df_stream_cache_get(df_stream_cache *c, const char *key, const void **data, uint64_t *len,
                        char *err, size_t errlen) {
  int i = find(c, key);
  if (i < 0 || !c->e[i].present) {
    c->st.misses++;
    return 0;
  }
  int r = map_entry(c, i, true, err, errlen);
  if (r <= 0) {
    if (r == 0) c->st.misses++;
    return r;
  }
  c->e[i].tick = ++c->tick;
  c->st.hits++;
  *data = c->e[i].map;
  *len = c->e[i].size;
  return 1;
}

int df_stream_cache_put(df_stream_cache *c, const char *key, const void *buf, uint64_t len,
                        const void **data, char *err, size_t errlen) {
  char hex[DF_PULL_SHA256_HEX], tmp[2400], fin[2300];
  if (strlen(key) >= KEY_MAX || strpbrk(key, "\t\n")) {
    snprintf(err, errlen, "expert cache: bad key");
    return -1;
  }
  if (len > c->budget) {
    char a[32], b[32];
    snprintf(err, errlen, "expert cache: %s does not fit the budget of %s",
             df_pull_fmt_bytes(len, a, sizeof a), df_pull_fmt_bytes(c->budget, b, sizeof b));
    return -1;
  }
  df_pull_sha256_buf(buf, len, hex);
  int i = find(c, key);
  if (i >= 0 && c->e[i].sha[0] && strcmp(c->e[i].sha, hex) != 0) {
    snprintf(err, errlen, "expert cache: the bytes of %s changed since they were first fetched "
             "(SHA-256 %s, first %s)", key, hex, c->e[i].sha);
    return -1;
  }
  if (i < 0 && (i = add(c, key)) < 0) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  centry *e = &c->e[i];
  if (e->present) drop(c, i);
  snprintf(e->sha, sizeof e->sha, "%s", hex);
  e->size = len;
  bool shared = blob_shared(c, i, hex);
  if (!shared) {
    if (evict_for(c, len, i) != 0) {
      snprintf(err, errlen, "expert cache: cannot make room for %llu bytes",
               (unsigned long long)len);
      return -1;
    }
    char base[sizeof tmp - 16];
    snprintf(base, sizeof base, "%s/tmp/%.64s", c->dir, hex);
    blob_path(c, hex, fin, sizeof fin);
    char cerr[300];
    int fd = df_fs_create_temp(base, 0444, tmp, sizeof tmp, cerr, sizeof cerr);
    if (fd < 0) {
      snprintf(err, errlen, "expert cache: %s", cerr);
      return -1;
    }
    const uint8_t *p = buf;
    uint64_t left = len;
    while (left) {
      ssize_t w = write(fd, p, left > (1u << 30) ? (1u << 30) : (size_t)left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        snprintf(err, errlen, "expert cache: writing %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
      }
      p += w;
      left -= (uint64_t)w;
    }
    if (df_fs_publish(fd, tmp, fin, err, errlen) != 0) return -1;
    c->used += len;
  }
  e->present = true;
  e->tick = ++c->tick;
  c->st.puts++;
  if (write_index(c, err, errlen) != 0) return -1;
  int r = map_entry(c, i, false, err, errlen);
  if (r <= 0) {
    if (r == 0) snprintf(err, errlen, "expert cache: %s vanished after writing", fin);
    return -1;
  }
  *data = e->map;
  return 0;
}

uint64_t df_stream_cache_bytes(const df_stream_cache *c) { return c->used; }
uint64_t df_stream_cache_budget(const df_stream_cache *c) { return c->budget; }
df_stream_cache_stats df_stream_cache_get_stats(const df_stream_cache *c) { return c->st; }
