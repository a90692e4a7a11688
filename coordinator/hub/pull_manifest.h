/* coordinator/hub/pull_manifest.h — the record of a pulled model folder.
 *
 * Owns: DIR/.deltafin-manifest.json, written by `deltafin pull` and read by `deltafin
 * verify` and stream mode: where the folder came from (endpoint, repo, revision, commit),
 * every published file's size and SHA-256, and for stream-mode shards the byte ranges that
 * were written (the routed-expert ranges stay holes and are fetched on first use). Strict
 * parsing: unknown versions, missing fields and hostile paths are errors.
 *
 * JSON shape (version 1):
 *   {"format": "deltafin-manifest", "version": 1, "endpoint": "https://huggingface.co",
 *    "repo": "ORG/NAME", "revision": "main", "commit": "<40 hex>", "created": "<UTC ISO 8601>",
 *    "mode": "full" | "stream", "complete": true, "cache_budget": <bytes, stream mode>,
 *    "files": [{"path": "config.json", "size": 1234, "sha256": "<hex>", "git_oid": "<hex>"},
 *              {"path": "model-00001-of-00002.safetensors", "size": N, "lfs_sha256": "<hex>",
 *               "sha256": "<hex>"},                         (a full LFS file)
 *              {"path": "...", "size": N, "lfs_sha256": "<hex>", "sparse": true,
 *               "omitted_bytes": M, "unused_bytes": U (optional, 0 when absent),
 *               "ranges": [[offset, length, "<sha256 of those bytes>"]]}],
 *    "pending": ["paths listed by the hub but not (yet) published"]}
 */
#ifndef DF_COORD_PULL_MANIFEST_H
#define DF_COORD_PULL_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/hub/pull_util.h"

#define DF_PULL_MANIFEST_NAME ".deltafin-manifest.json"

typedef struct df_pull_range {
  uint64_t off, len;              /* bytes */
  char sha256[DF_PULL_SHA256_HEX]; /* of those bytes as written */
} df_pull_range;

typedef struct df_pull_mfile {
  char *path;                          /* relative to the folder; owned */
  uint64_t size;                       /* bytes (apparent size for sparse files) */
  char sha256[DF_PULL_SHA256_HEX];     /* whole local file; "" for sparse files */
  char lfs_sha256[DF_PULL_SHA256_HEX]; /* the hub's LFS oid; "" for plain git files */
  char git_oid[DF_PULL_SHA1_HEX];      /* the hub's git blob id; "" when not given */
  bool sparse;                         /* stream mode: only `ranges` hold data */
  uint64_t omitted;                    /* sparse: routed-expert bytes left as holes */
  uint64_t unused;                     /* sparse: bytes of tensors the engine never reads
                                          (outside a wrapper config's text prefix, e.g. Kimi
                                          K3's vision tower), holes never fetched */
  df_pull_range *ranges;               /* [n_ranges], ascending, owned */
  int n_ranges;
} df_pull_mfile;

typedef struct df_pull_manifest {
  char endpoint[1024];
  char repo[256];
  char revision[256];
  char commit[96];
  char created[32];
  bool stream;            /* pulled with --stream */
  bool complete;          /* every listed file published */
  uint64_t cache_budget;  /* stream mode: expert cache budget, bytes */
  df_pull_mfile *files;   /* [n_files], owned */
  int n_files;
  char **pending;         /* [n_pending], owned */
  int n_pending;
} df_pull_manifest;

/* Read DIR/.deltafin-manifest.json into *m (zeroed first). Returns 0 when read, 1 when the
 * folder has no manifest (*m left empty), -1 + message naming the file and field on a
 * malformed manifest. Free with df_pull_manifest_free in every case. */
int df_pull_manifest_read(const char *dir, df_pull_manifest *m, char *err, size_t errlen);

/* Same, from a JSON text in memory (`name` used in messages). */
int df_pull_manifest_parse(const char *json, size_t len, const char *name, df_pull_manifest *m,
                           char *err, size_t errlen);

/* Write it atomically (temp + fsync + rename). 0 or -1 + message. */
int df_pull_manifest_write(const char *dir, const df_pull_manifest *m, char *err, size_t errlen);

/* Free what *m owns and zero it. NULL-safe. */
void df_pull_manifest_free(df_pull_manifest *m);

/* The entry for `path`, or NULL. */
df_pull_mfile *df_pull_manifest_find(const df_pull_manifest *m, const char *path);

/* Add a deep copy of *f, replacing an entry with the same path. 0 or -1 (out of memory). */
int df_pull_manifest_put(df_pull_manifest *m, const df_pull_mfile *f);

/* Free what an entry owns (path, ranges) and zero it. */
void df_pull_mfile_free(df_pull_mfile *f);

#endif
