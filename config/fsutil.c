/* config/fsutil.c — atomic file publication; see fsutil.h. */
#define _GNU_SOURCE
#include "config/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
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

int df_fs_write_atomic(const char *path, const void *data, size_t len, int mode, char *err,
                       size_t errlen) {
  char tmp[4200];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
    snprintf(err, errlen, "path too long: %s", path);
    return -1;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    return -1;
  }
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
  if (fchmod(fd, (mode_t)mode) != 0) { /* exact mode whatever the umask */
    snprintf(err, errlen, "cannot chmod %s: %s", tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    return -1;
  }
  return df_fs_publish(fd, tmp, path, err, errlen);
}
