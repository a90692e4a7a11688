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

#endif
