/* config/fsutil.c — atomic file publication; see fsutil.h. */
#define _GNU_SOURCE
#include "config/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int df_fs_mkdirs(const char *path, char *err, size_t errlen) {
  char tmp[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof tmp) {
    snprintf(err, errlen, "bad folder path '%s'", path);
    return -1;
  }
  memcpy(tmp, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (tmp[i] != '/' && tmp[i] != 0) continue;
    char c = tmp[i];
    tmp[i] = 0;
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
      snprintf(err, errlen, "cannot create folder %s: %s", tmp, strerror(errno));
      return -1;
    }
    tmp[i] = c;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s exists and is not a folder", path);
    return -1;
  }
  return 0;
}

static int fsync_parent(const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  int dfd = open(dirname(tmp), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  int rc = fsync(dfd);
  close(dfd);
  return rc;
}

int df_fs_publish(int fd, const char *tmp, const char *final, char *err, size_t errlen) {
  char parent[4096];
  if (fsync(fd) != 0) {
    snprintf(err, errlen, "%s: fsync failed: %s", tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    return -1;
  }
  if (close(fd) != 0) {
    snprintf(err, errlen, "%s: close failed: %s", tmp, strerror(errno));
    unlink(tmp);
    return -1;
  }
  snprintf(parent, sizeof parent, "%s", final);
  if (df_fs_mkdirs(dirname(parent), err, errlen) != 0) {
    unlink(tmp);
    return -1;
  }
  if (rename(tmp, final) != 0) {
    snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    unlink(tmp);
    return -1;
  }
  if (fsync_parent(final) != 0) {
    snprintf(err, errlen, "%s: fsync of the folder failed: %s", final, strerror(errno));
    return -1;
  }
  return 0;
}

int df_fs_create_temp(const char *final, int mode, char *tmp, size_t cap, char *err,
                      size_t errlen) {
  int w = snprintf(tmp, cap, "%s.tmp.XXXXXX", final);
  if (w < 0 || (size_t)w >= cap) {
    snprintf(err, errlen, "path too long: %s", final);
    return -1;
  }
  int fd = mkostemp(tmp, O_CLOEXEC); /* O_CREAT | O_EXCL, mode 0600 */
  if (fd < 0) {
    snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    return -1;
  }
  if (fchmod(fd, (mode_t)mode) != 0) { /* exact mode whatever the umask */
    snprintf(err, errlen, "cannot chmod %s: %s", tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    return -1;
  }
  return fd;
}

int df_fs_read_small(const char *path, size_t max_bytes, int private_only, char **data,
                     size_t *len, char *err, size_t errlen) {
  *data = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open %s: %s", path,
             errno == ELOOP ? "it is a symbolic link (give the file itself)" : strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "%s: not a regular file", path);
    close(fd);
    return -1;
  }
  if (private_only && (st.st_mode & 077)) {
    snprintf(err, errlen, "%s is accessible to others (mode %03o); chmod 600 it", path,
             (unsigned)(st.st_mode & 0777));
    close(fd);
    return -1;
  }
  if ((uint64_t)st.st_size > max_bytes) {
    snprintf(err, errlen, "%s: %lld bytes, more than the %zu expected", path,
             (long long)st.st_size, max_bytes);
    close(fd);
    return -1;
  }
  char *b = malloc((size_t)st.st_size + 1);
  if (!b) {
    snprintf(err, errlen, "%s: out of memory", path);
    close(fd);
    return -1;
  }
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break; /* shrank while reading: keep what is there */
    got += (size_t)r;
  }
  close(fd);
  b[got] = 0;
  *data = b;
  *len = got;
  return 0;
}

int df_fs_read_secret(const char *path, char **secret, char *err, size_t errlen) {
  char *b = NULL;
  size_t n = 0;
  *secret = NULL;
  if (df_fs_read_small(path, 4096, 1, &b, &n, err, errlen) != 0) return -1;
  const char *nl = memchr(b, '\n', n); /* the first line, NUL bytes included */
  size_t k = nl ? (size_t)(nl - b) : n;
  bool nul = memchr(b, 0, k) != NULL;
  while (k > 0 && (b[k - 1] == ' ' || b[k - 1] == '\t' || b[k - 1] == '\r')) k--;
  b[k] = 0;
  if (k == 0 || nul) {
    snprintf(err, errlen, "%s: %s", path, k == 0 ? "empty (expected the secret on its first line)"
                                                 : "holds a NUL byte");
    free(b);
    return -1;
  }
  *secret = b;
  return 0;
}

int df_fs_write_atomic(const char *path, const void *data, size_t len, int mode, char *err,
                       size_t errlen) {
  char tmp[4200];
  int fd = df_fs_create_temp(path, mode, tmp, sizeof tmp, err, errlen);
  if (fd < 0) return -1;
  const char *p = data;
  size_t left = len;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
      close(fd);
      unlink(tmp);
      return -1;
    }
    p += w;
    left -= (size_t)w;
  }
  return df_fs_publish(fd, tmp, path, err, errlen);
}
