/* node/store.h — where a df-node's expert tensors come from: its own copy of the checkpoint
 * (--model-dir), checked tensor by tensor against the coordinator's SHA-256 manifest, or a
 * content-addressed on-disk cache (STATE/cache/sha256/<hex>) filled by streaming from the
 * coordinator and published atomically.
 *
 * Owns: the read-only mappings of the tensors it hands out, the cache directory, and the
 * in-progress download of one tensor at a time. Does not own: the protocol exchange that
 * feeds it (node/node.c), the tensors' meaning.
 */
#ifndef DF_NODE_STORE_H
#define DF_NODE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/codec.h"

typedef struct df_node_store df_node_store;

/* Open a store over STATE/cache (created 0700) and, when model_dir is not NULL, the
 * checkpoint in model_dir (df_st_open: mmapped, nothing read yet). NULL + message. */
df_node_store *df_node_store_new(const char *state_dir, const char *model_dir, char *err,
                                 size_t errlen);
void df_node_store_destroy(df_node_store **s);

/* Bytes of tensor `t` if the store can serve them now: from the model dir when the tensor
 * there has the manifest's dtype, shape and SHA-256, else from the cache file named by the
 * SHA-256 (re-hashed once per process). NULL when neither has it (the caller fetches it).
 * The pointer stays valid until df_node_store_release or destroy. SHA-256 results are
 * remembered per tensor name and digest, so a reassignment does not hash again. */
const void *df_node_store_get(df_node_store *s, const df_proto_tensor *t);

/* Unmap every cache file handed out (the model-dir mapping stays). Called on a new
 * assignment and when the coordinator goes away. */
void df_node_store_release(df_node_store *s);

/* Download of tensor `t` into the cache: begin opens STATE/cache/tmp/<hex>.<pid>; chunks
 * must arrive in order (offset == bytes written so far, within nbytes); finish checks the
 * SHA-256 of what was written, fsyncs and renames it to STATE/cache/sha256/<hex>.
 * Each returns 0 or -1 + message (I/O error, chunk out of order or past the end, digest
 * mismatch — the partial file is removed). abort drops a download in progress. */
int df_node_store_begin(df_node_store *s, const df_proto_tensor *t, char *err, size_t errlen);
int df_node_store_write(df_node_store *s, uint64_t offset, const void *data, size_t len,
                        char *err, size_t errlen);
int df_node_store_finish(df_node_store *s, char *err, size_t errlen);
void df_node_store_abort(df_node_store *s);

/* Bytes written so far to the download in progress. */
uint64_t df_node_store_written(const df_node_store *s);

#endif
