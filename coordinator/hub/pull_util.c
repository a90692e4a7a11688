/* coordinator/hub/pull_util.c — hashing, atomic publication, name validation; see pull_util.h. */
#define _GNU_SOURCE
#include "coordinator/hub/pull_util.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/sha1.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>

#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#define SHA256_STARTS mbedtls_sha256_starts
#define SHA256_UPDATE mbedtls_sha256_update
#define SHA256_FINISH mbedtls_sha256_finish
#define SHA1_STARTS mbedtls_sha1_starts
#define SHA1_UPDATE mbedtls_sha1_update
#define SHA1_FINISH mbedtls_sha1_finish
#else
#define SHA256_STARTS mbedtls_sha256_starts_ret
#define SHA256_UPDATE mbedtls_sha256_update_ret
#define SHA256_FINISH mbedtls_sha256_finish_ret
#define SHA1_STARTS mbedtls_sha1_starts_ret
#define SHA1_UPDATE mbedtls_sha1_update_ret
#define SHA1_FINISH mbedtls_sha1_finish_ret
#endif

_Static_assert(sizeof(mbedtls_sha256_context) <= sizeof(((df_pull_sha256 *)0)->ctx),
               "df_pull_sha256 too small");
_Static_assert(sizeof(mbedtls_sha1_context) <= sizeof(((df_pull_gitsha *)0)->ctx),
               "df_pull_gitsha too small");

static void to_hex(const unsigned char *d, size_t n, char *hex) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    hex[2 * i] = digits[d[i] >> 4];
    hex[2 * i + 1] = digits[d[i] & 15];
  }
  hex[2 * n] = 0;
}

void df_pull_sha256_init(df_pull_sha256 *h) {
  mbedtls_sha256_context *c = (mbedtls_sha256_context *)h->ctx;
  mbedtls_sha256_init(c);
  SHA256_STARTS(c, 0);
}

void df_pull_sha256_update(df_pull_sha256 *h, const void *data, size_t n) {
  if (n) SHA256_UPDATE((mbedtls_sha256_context *)h->ctx, data, n);
}

void df_pull_sha256_final(df_pull_sha256 *h, char hex[DF_PULL_SHA256_HEX]) {
  unsigned char d[32];
  mbedtls_sha256_context *c = (mbedtls_sha256_context *)h->ctx;
  SHA256_FINISH(c, d);
  mbedtls_sha256_free(c);
  to_hex(d, 32, hex);
}

void df_pull_sha256_buf(const void *data, size_t n, char hex[DF_PULL_SHA256_HEX]) {
  df_pull_sha256 h;
  df_pull_sha256_init(&h);
  df_pull_sha256_update(&h, data, n);
  df_pull_sha256_final(&h, hex);
}

void df_pull_gitsha_init(df_pull_gitsha *h, uint64_t size) {
  mbedtls_sha1_context *c = (mbedtls_sha1_context *)h->ctx;
  mbedtls_sha1_init(c);
  SHA1_STARTS(c);
  char pre[48];
  int n = snprintf(pre, sizeof pre, "blob %llu", (unsigned long long)size);
  SHA1_UPDATE(c, (const unsigned char *)pre, (size_t)n + 1); /* with the NUL */
}

void df_pull_gitsha_update(df_pull_gitsha *h, const void *data, size_t n) {
  if (n) SHA1_UPDATE((mbedtls_sha1_context *)h->ctx, data, n);
}

void df_pull_gitsha_final(df_pull_gitsha *h, char hex[DF_PULL_SHA1_HEX]) {
  unsigned char d[20];
  mbedtls_sha1_context *c = (mbedtls_sha1_context *)h->ctx;
  SHA1_FINISH(c, d);
  mbedtls_sha1_free(c);
  to_hex(d, 20, hex);
}

int df_pull_hash_fd(int fd, uint64_t off, uint64_t len, const char *name,
                    char hex[DF_PULL_SHA256_HEX], df_pull_gitsha *git, char *err, size_t errlen) {
  enum { BUF = 1 << 20 };
  unsigned char *buf = malloc(BUF);
  int rc = -1;
  df_pull_sha256 h;
  df_pull_sha256_init(&h);
  if (!buf) {
    snprintf(err, errlen, "%s: out of memory", name);
    goto done;
  }
  uint64_t left = len;
  while (left > 0) {
    size_t want = left < BUF ? (size_t)left : BUF;
    ssize_t got = pread(fd, buf, want, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      snprintf(err, errlen, "%s: read error at byte %llu: %s", name, (unsigned long long)off,
               strerror(errno));
      goto done;
    }
    if (got == 0) {
      if (len == UINT64_MAX) break;
      snprintf(err, errlen, "%s: file ends at byte %llu, expected %llu more bytes", name,
               (unsigned long long)off, (unsigned long long)left);
      goto done;
    }
    df_pull_sha256_update(&h, buf, (size_t)got);
    if (git) df_pull_gitsha_update(git, buf, (size_t)got);
    off += (uint64_t)got;
    if (len != UINT64_MAX) left -= (uint64_t)got;
  }
  rc = 0;
done:
  df_pull_sha256_final(&h, hex);
  free(buf);
  return rc;
}


int df_pull_read_file(const char *path, size_t max, char **out, size_t *len, char *err,
                      size_t errlen) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
    snprintf(err, errlen, "%s: not a regular file of at most %zu bytes", path, max);
    close(fd);
    return -1;
  }
  char *buf = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  if (!buf) {
    snprintf(err, errlen, "%s: out of memory", path);
    close(fd);
    return -1;
  }
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != (size_t)st.st_size) {
    snprintf(err, errlen, "%s: short read", path);
    free(buf);
    return -1;
  }
  buf[got] = 0;
  *out = buf;
  if (len) *len = got;
  return 0;
}

static bool repo_part_ok(const char *s, size_t n) {
  if (n == 0 || n > 96) return false;
  if (s[0] == '.' || s[0] == '-' || s[n - 1] == '.' || s[n - 1] == '-') return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
    if (c == '.' && i + 1 < n && s[i + 1] == '.') return false;
  }
  return true;
}

bool df_pull_repo_id_ok(const char *repo) {
  if (!repo) return false;
  const char *slash = strchr(repo, '/');
  if (!slash) return repo_part_ok(repo, strlen(repo));
  if (strchr(slash + 1, '/')) return false;
  return repo_part_ok(repo, (size_t)(slash - repo)) && repo_part_ok(slash + 1, strlen(slash + 1));
}

bool df_pull_revision_ok(const char *rev) {
  if (!rev) return false;
  size_t n = strlen(rev);
  if (n == 0 || n > 255 || strstr(rev, "..")) return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)rev[i] <= 0x20 || (unsigned char)rev[i] >= 0x7f) return false;
  return true;
}

bool df_pull_path_reserved(const char *path) {
  static const char man[] = ".deltafin-manifest.json";
  size_t len = strcspn(path, "/");
  if (len == 9 && !memcmp(path, ".deltafin", 9)) return true;
  return len >= sizeof man - 1 && !memcmp(path, man, sizeof man - 1) &&
         (len == sizeof man - 1 || path[sizeof man - 1] == '.');
}

bool df_pull_path_ok(const char *path) {
  if (!path) return false;
  size_t n = strlen(path);
  if (n == 0 || n > 1024 || path[0] == '/' || df_pull_path_reserved(path)) return false;
  const char *p = path;
  while (*p) {
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
      return false;
    for (size_t i = 0; i < len; i++)
      if ((unsigned char)p[i] < 0x20 || p[i] == '\\' || p[i] == 0x7f) return false;
    if (!e) break;
    p = e + 1;
    if (!*p) return false; /* trailing slash */
  }
  return true;
}

int df_pull_open_dirs(int base, const char *shown, const char *rel, bool create, char *err,
                      size_t errlen) {
  int fd = fcntl(base, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "%s: %s", shown, strerror(errno));
    return -1;
  }
  const char *c = rel;
  while (*c) {
    size_t len = strcspn(c, "/");
    char name[256];
    if (len == 0 || len >= sizeof name) {
      snprintf(err, errlen, "%s/%s: bad folder name", shown, rel);
      close(fd);
      return -1;
    }
    memcpy(name, c, len);
    name[len] = 0;
    int sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0 && errno == ENOENT && create) {
      if (mkdirat(fd, name, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        snprintf(err, errlen, "cannot create folder %s/%.*s: %s", shown, (int)(c - rel + len),
                 rel, strerror(e));
        close(fd);
        errno = e;
        return -1;
      }
      sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (sub < 0) {
      int e = errno;
      struct stat st;
      bool link = fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
      snprintf(err, errlen, "%s/%.*s: %s", shown, (int)(c - rel + len), rel,
               link ? "is a symbolic link: refusing to follow it out of the folder (remove it)"
               : e == ENOTDIR ? "exists and is not a folder" : strerror(e));
      close(fd);
      errno = link ? ELOOP : e;
      return -1;
    }
    close(fd);
    fd = sub;
    c += len;
    while (*c == '/') c++;
  }
  return fd;
}

int df_pull_urlenc(const char *s, bool keep_slash, char *out, size_t cap) {
  static const char digits[] = "0123456789ABCDEF";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char c = *p;
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
    if (keep) {
      if (o + 1 >= cap) return -1;
      out[o++] = (char)c;
    } else {
      if (o + 3 >= cap) return -1;
      out[o++] = '%';
      out[o++] = digits[c >> 4];
      out[o++] = digits[c & 15];
    }
  }
  if (o >= cap) return -1;
  out[o] = 0;
  return 0;
}

int df_pull_parse_bytes(const char *s, uint64_t *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0) || !isfinite(v)) return -1;
  double mul = 1;
  switch (*end) {
  case 'k': case 'K': mul = 1024.0; end++; break;
  case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
  case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
  case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
  default: break;
  }
  if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end) return -1;
  double b = v * mul;
  if (b >= 18446744073709551615.0) return -1;
  *out = (uint64_t)b;
  return 0;
}

const char *df_pull_fmt_bytes(uint64_t n, char *buf, size_t cap) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)n;
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, cap, "%llu B", (unsigned long long)n);
  else
    snprintf(buf, cap, "%.2f %s", v, units[u]);
  return buf;
}

const char *df_pull_fmt_eta(double s, char *buf, size_t cap) {
  if (!(s >= 0) || s > 360000) {
    snprintf(buf, cap, "--:--");
    return buf;
  }
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else
    snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

int df_pull_default_dir(const char *repo, char *out, size_t cap, char *err, size_t errlen) {
  const char *dh = getenv("DELTAFIN_HOME"), *xdg = getenv("XDG_CACHE_HOME"),
             *home = getenv("HOME");
  int n;
  if (dh && *dh)
    n = snprintf(out, cap, "%s/models/%s", dh, repo);
  else if (xdg && *xdg)
    n = snprintf(out, cap, "%s/deltafin/models/%s", xdg, repo);
  else if (home && *home)
    n = snprintf(out, cap, "%s/.cache/deltafin/models/%s", home, repo);
  else {
    snprintf(err, errlen, "no DELTAFIN_HOME, XDG_CACHE_HOME or HOME set; pass --dir DIR");
    return -1;
  }
  if (n < 0 || (size_t)n >= cap) {
    snprintf(err, errlen, "download folder path too long");
    return -1;
  }
  return 0;
}

const char *df_pull_endpoint(void) {
  static char ep[1024];
  const char *e = getenv("HF_ENDPOINT");
  if (!e || !*e) e = "https://huggingface.co";
  snprintf(ep, sizeof ep, "%s", e);
  size_t n = strlen(ep);
  while (n > 0 && ep[n - 1] == '/') ep[--n] = 0;
  return ep;
}

static bool read_token_file(const char *path, char *tok, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = fgets(tok, (int)cap, f) != NULL;
  fclose(f);
  if (!ok) return false;
  tok[strcspn(tok, "\r\n")] = 0;
  return tok[0] != 0;
}

const char *df_pull_token(void) {
  static char tok[1024];
  const char *t = getenv("HF_TOKEN");
  if (t && *t) {
    snprintf(tok, sizeof tok, "%s", t);
    tok[strcspn(tok, "\r\n")] = 0;
    return tok;
  }
  char path[2048];
  const char *tp = getenv("HF_TOKEN_PATH"), *hh = getenv("HF_HOME"), *home = getenv("HOME");
  if (tp && *tp) return read_token_file(tp, tok, sizeof tok) ? tok : NULL;
  if (hh && *hh)
    snprintf(path, sizeof path, "%s/token", hh);
  else if (home && *home)
    snprintf(path, sizeof path, "%s/.cache/huggingface/token", home);
  else
    return NULL;
  return read_token_file(path, tok, sizeof tok) ? tok : NULL;
}
