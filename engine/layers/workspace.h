/* engine/layers/workspace.h — the planned scratch buffers of one model, shared by its blocks.
 *
 * Owns: every activation and index buffer the blocks of a model compute in, allocated once
 * at load for max_rows rows and freed with the model. A block asks for a buffer by name and
 * shape; blocks of the same kind on different layers get the same buffer (a layer's scratch
 * is dead once its block returns), so memory does not grow with the layer count. Does not
 * own: per-sequence state (engine/kv_cache.h), weights.
 */
#ifndef DF_ENGINE_LAYERS_WORKSPACE_H
#define DF_ENGINE_LAYERS_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/tensor/torch_shim.h"

typedef struct df_ws df_ws;

/* An empty workspace; NULL when out of memory. Free with df_ws_destroy. */
df_ws *df_ws_new(void);

/* Free every buffer; NULLs *ws; NULL-safe. */
void df_ws_destroy(df_ws **ws);

/* The zeroed fp32 tensor [rows, cols] named `name` (a block kind's key, e.g. "gqa.q"): the
 * same tensor for every call with that name and shape, a new one otherwise. Owned by the
 * workspace. NULL + message (bytes) when out of memory. */
df_t_tensor *df_ws_f32(df_ws *ws, const char *name, int64_t rows, int64_t cols, char *err,
                       size_t errlen);

/* A zeroed host array of n elements of elem_size bytes named `name`, shared as df_ws_f32
 * shares (same name and byte size). Owned by the workspace. NULL + message when out of
 * memory. */
void *df_ws_array(df_ws *ws, const char *name, int64_t n, size_t elem_size, char *err,
                  size_t errlen);

/* Bytes held by every buffer of the workspace. */
uint64_t df_ws_bytes(const df_ws *ws);

#endif
