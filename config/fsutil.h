/* config/fsutil.h — files that appear whole or not at all.
 *
 * Owns: `mkdir -p`, publishing a finished temporary file (fsync, close, rename into place,
 * fsync of the folder) and writing a small buffer atomically. Used by the state directory
 * (keys, tokens, node lists), the download manager and the expert caches, so that a crash
 * or a full disk never leaves a half-written file at a final path.
 */
#ifndef DF_CONFIG_FSUTIL_H
#define DF_CONFIG_FSUTIL_H

#include <stddef.h>

/* Create `path` and its missing parents (mode 0755). 0, or -1 with a message naming the
 * folder (including "exists and is not a folder"). */
int df_fs_mkdirs(const char *path, char *err, size_t errlen);

/* Publish an open temporary file: fsync(fd), close(fd), create final's parent folders,
 * rename(tmp, final), fsync final's folder. fd is closed in every case; on error tmp is
 * unlinked and nothing is at `final` that was not there before. 0 or -1 + message. */
int df_fs_publish(int fd, const char *tmp, const char *final, char *err, size_t errlen);

/* Write `len` bytes to `path` atomically with permission bits `mode` (e.g. 0600 for keys):
 * a temporary file beside it (path.tmp.PID), then df_fs_publish. 0 or -1 + message. */
int df_fs_write_atomic(const char *path, const void *data, size_t len, int mode, char *err,
                       size_t errlen);

/* Create a new temporary file beside `final` for writing: final + ".tmp.XXXXXX" with a
 * random suffix, created exclusively (O_EXCL: never an existing file or a planted symlink),
 * O_CLOEXEC, permission bits `mode` whatever the umask. The name goes to tmp[cap]. Returns
 * the fd, or -1 with a message naming the file (path too long, cannot create). */
int df_fs_create_temp(const char *final, int mode, char *tmp, size_t cap, char *err,
                      size_t errlen);

/* Read a small regular file whole: opened O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
 * O_NOCTTY (a symlink, FIFO or device in its place is refused, never waited on), at most
 * max_bytes. With private_only, a file that its group or others may read or write (mode &
 * 077) is refused, as ssh refuses keys. On success *data is a malloc'd NUL-terminated copy
 * (caller frees) of *len bytes and 0 is returned; -1 with a message naming the file and the
 * reason otherwise. */
int df_fs_read_small(const char *path, size_t max_bytes, int private_only, char **data,
                     size_t *len, char *err, size_t errlen);

/* df_fs_read_small of a one-line secret (an API key, a join token): the first line, with
 * trailing spaces, tabs, CR and LF removed. Refused: an empty secret, more than 4096 bytes,
 * a file others can read. *secret is malloc'd (caller frees). 0 or -1 + message. */
int df_fs_read_secret(const char *path, char **secret, char *err, size_t errlen);

#endif
