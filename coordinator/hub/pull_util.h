/* coordinator/hub/pull_util.h — small helpers shared by pull, verify and stream mode (and
 * the progress line of run, coordinator/cli/progress.h).
 *
 * Owns: SHA-256 / git blob SHA-1 hashing (mbedTLS) of buffers and files, atomic file
 * publication (temp + fsync + rename + directory fsync), `mkdir -p`, the validation of
 * names that come from the hub (repository ids, revisions, file paths inside a repo), URL
 * percent-encoding, byte-size parsing/printing, remaining-time printing and the default
 * download folder.
 * Does not own: HTTP (pull_http.h), the manifest format (pull_manifest.h).
 */
#ifndef DF_COORD_PULL_UTIL_H
#define DF_COORD_PULL_UTIL_H

#include "config/fsutil.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DF_PULL_SHA256_HEX 65 /* 64 hex digits + NUL */
#define DF_PULL_SHA1_HEX 41   /* 40 hex digits + NUL */

/* Incremental SHA-256 (opaque storage big enough for mbedTLS' context). */
typedef struct df_pull_sha256 {
  _Alignas(16) unsigned char ctx[256];
} df_pull_sha256;
void df_pull_sha256_init(df_pull_sha256 *h);
void df_pull_sha256_update(df_pull_sha256 *h, const void *data, size_t n);
/* Writes 64 lowercase hex digits + NUL to hex; the context must be re-initialised after. */
void df_pull_sha256_final(df_pull_sha256 *h, char hex[DF_PULL_SHA256_HEX]);
/* One-shot SHA-256 of n bytes. */
void df_pull_sha256_buf(const void *data, size_t n, char hex[DF_PULL_SHA256_HEX]);

/* Incremental git blob id: SHA-1 of "blob <size>\0" followed by the content. `size` is the
 * total content size in bytes, known up front. */
typedef struct df_pull_gitsha {
  _Alignas(16) unsigned char ctx[160];
} df_pull_gitsha;
void df_pull_gitsha_init(df_pull_gitsha *h, uint64_t size);
void df_pull_gitsha_update(df_pull_gitsha *h, const void *data, size_t n);
void df_pull_gitsha_final(df_pull_gitsha *h, char hex[DF_PULL_SHA1_HEX]);

/* SHA-256 of bytes [off, off+len) of an open file descriptor (pread; len == UINT64_MAX means
 * to the end of the file). When `git` is not NULL it is fed the same bytes. 0, or -1 with a
 * message naming `name` on a read error or a file shorter than asked. */
int df_pull_hash_fd(int fd, uint64_t off, uint64_t len, const char *name,
                    char hex[DF_PULL_SHA256_HEX], df_pull_gitsha *git, char *err, size_t errlen);

/* Folders and atomic publication: config/fsutil.h (df_fs_mkdirs, df_fs_publish,
 * df_fs_write_atomic). */

/* Open the folder `rel` ('/'-separated, relative, no "." or ".." components) under the open
 * folder `base`, one component at a time with openat(O_DIRECTORY | O_NOFOLLOW), creating
 * missing components (mode 0755) when `create`. A symbolic link or a non-folder at any
 * component is refused, so nothing planted under `base` can redirect the walk outside it.
 * `shown` is base's path, for messages. Returns a new descriptor (the caller closes it), or
 * -1 with a message naming the offending component (errno ENOENT when !create and a
 * component is missing). */
int df_pull_open_dirs(int base, const char *shown, const char *rel, bool create, char *err,
                      size_t errlen);

/* Read a whole file into a new NUL-terminated malloc'd buffer (caller frees), at most
 * `max` bytes. 0 or -1 + message. */
int df_pull_read_file(const char *path, size_t max, char **out, size_t *len, char *err,
                      size_t errlen);

/* "ORG/NAME" (or a legacy "NAME"): each part 1..96 chars of [A-Za-z0-9._-], not starting or
 * ending with '.' or '-', no "..". true when valid. */
bool df_pull_repo_id_ok(const char *repo);
/* A revision (branch, tag, commit): 1..255 bytes, printable ASCII, no "..", no spaces. */
bool df_pull_revision_ok(const char *rev);
/* A file path from the hub: relative, '/'-separated, every component non-empty and not
 * "." or "..", no backslash or control bytes, at most 1024 bytes, and not one of the names
 * pull reserves at the top of the folder (df_pull_path_reserved). Keeps hostile listings
 * from writing outside the model folder or over pull's own files. */
bool df_pull_path_ok(const char *path);
/* True when `path`'s first component is a name pull keeps for itself at the top of a model
 * folder: ".deltafin" (partials, lock, expert cache) or ".deltafin-manifest.json" (and its
 * temporary files, ".deltafin-manifest.json.tmp.*"). */
bool df_pull_path_reserved(const char *path);

/* Percent-encode `s` into out (RFC 3986 unreserved kept; '/' kept when keep_slash).
 * 0, or -1 when out (cap bytes) is too small. */
int df_pull_urlenc(const char *s, bool keep_slash, char *out, size_t cap);

/* Parse "123", "4K", "1.5G", "2GiB" (K/M/G/T = powers of 1024) into bytes. 0 or -1. */
int df_pull_parse_bytes(const char *s, uint64_t *out);
/* "1.50 GiB" style, into buf (returns buf). */
const char *df_pull_fmt_bytes(uint64_t n, char *buf, size_t cap);
/* A remaining time of s seconds as "M:SS" (under an hour) or "H:MM:SS", rounded to the
 * second, into buf (cap bytes, 16 suffice; returns buf); "--:--" when s is negative, NaN or
 * over 100 hours (unknown). Allocates nothing. */
const char *df_pull_fmt_eta(double s, char *buf, size_t cap);

/* The default folder for a repo: $DELTAFIN_HOME/models/REPO, else
 * $XDG_CACHE_HOME/deltafin/models/REPO, else $HOME/.cache/deltafin/models/REPO.
 * 0 or -1 + message when no home can be found or the path is too long. */
int df_pull_default_dir(const char *repo, char *out, size_t cap, char *err, size_t errlen);

/* The endpoint: $HF_ENDPOINT without trailing '/', else "https://huggingface.co". Static
 * storage (valid until the next call). */
const char *df_pull_endpoint(void);
/* The token: $HF_TOKEN, else the first line of $HF_TOKEN_PATH, else of $HF_HOME/token
 * (default ~/.cache/huggingface/token); NULL when none. Static storage. */
const char *df_pull_token(void);

#endif
