/* coordinator/hub/stream_cache.h — a content-addressed on-disk byte cache with a budget and LRU.
 *
 * Owns: a folder of blobs named by the SHA-256 of their content (DIR/blobs/<sha256>),
 * an index mapping caller keys to blobs with their last use (DIR/index.tsv, rewritten
 * atomically), the byte budget (the blobs' total size never exceeds it: room is made by
 * evicting the least recently used blobs before a new one is written), publication by temp +
 * fsync + rename, read-only mappings of the blobs in use, and an exclusive lock (DIR/lock)
 * for the process that has the cache open. A key keeps the SHA-256 of the content first
 * stored under it even after eviction, so a re-fetched blob must be byte-identical to the
 * first (trust on first use); a blob whose bytes no longer match its name (disk corruption)
 * is dropped and reported as a miss.
 * Stream mode (stream.h) keeps routed experts here; a df-node can keep its shards the same way.
 * Not thread-safe: one thread uses a cache.
 */
#ifndef DF_COORD_STREAM_CACHE_H
#define DF_COORD_STREAM_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct df_stream_cache df_stream_cache;

/* Open (creating) the cache folder `dir` with a budget in bytes (> 0). Loads the index,
 * drops entries whose blob is missing or the wrong size, deletes blobs no entry names and
 * leftover temp files, and evicts down to the budget if it shrank.
 * Errors (-1 + message): the folder cannot be created, another process holds the cache
 * (lock), a malformed index line (named by line number). */
int df_stream_cache_open(const char *dir, uint64_t budget, df_stream_cache **out, char *err,
                         size_t errlen);

/* Persist the index (last-use order), unmap every blob, release the lock, free; NULLs *c. */
void df_stream_cache_close(df_stream_cache **c);

/* Look up `key` (a NUL-terminated string without tabs/newlines, up to 127 bytes).
 * 1 = hit: *data and *len describe the blob's bytes, read-only, valid until the next
 *     df_stream_cache_put or close; the key becomes the most recently used.
 * 0 = miss (never stored, evicted, or dropped as corrupt).
 * -1 = an I/O error (message). */
int df_stream_cache_get(df_stream_cache *c, const char *key, const void **data, uint64_t *len,
                        char *err, size_t errlen);

/* Store `len` bytes under `key`, evicting least recently used blobs first so that the total
 * stays within the budget, and return the stored copy like df_stream_cache_get.
 * Errors (-1 + message): len larger than the whole budget, content differing from what was
 * first stored under this key (both SHA-256s named), disk errors (nothing is left behind). */
int df_stream_cache_put(df_stream_cache *c, const char *key, const void *buf, uint64_t len,
                        const void **data, char *err, size_t errlen);

/* Bytes of blobs now stored (<= the budget), the budget, and counters since open. */
uint64_t df_stream_cache_bytes(const df_stream_cache *c);
uint64_t df_stream_cache_budget(const df_stream_cache *c);
typedef struct df_stream_cache_stats {
  uint64_t hits, misses, puts, evictions, corrupt_dropped;
} df_stream_cache_stats;
df_stream_cache_stats df_stream_cache_get_stats(const df_stream_cache *c);

#endif
