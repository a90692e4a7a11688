/* engine/experts/expert_local.h — the in-process expert backend over the checkpoint's mmap.
 *
 * Owns: running routed experts (SwiGLU: down(silu(gate(x)) * up(x)), transformers'
 * Qwen3MoeMLP) on the coordinator's own CPU from the model's weight views, group by group,
 * with planned scratch buffers. Does not own: routing or combining (engine/model.c).
 */
#ifndef DF_ENGINE_EXPERT_LOCAL_H
#define DF_ENGINE_EXPERT_LOCAL_H

#include <stddef.h>

#include "engine/experts/expert_backend.h"

struct df_model;

/* A local backend for model m (borrowed: must outlive the backend). Scratch is planned for
 * groups of up to max_rows rows. NULL + message on allocation failure. */
df_expert_backend *df_expert_local_new(const struct df_model *m, char *err, size_t errlen);

#endif
