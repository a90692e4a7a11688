/* engine/experts/expert_local.h — the in-process expert backend over the checkpoint's mmap.
 *
 * Owns: running routed experts (SwiGLU: down(silu(gate(x)) * up(x)), transformers'
 * Qwen3MoeMLP) on the coordinator's own CPU from the model's weight views, group by group,
 * with planned scratch buffers. Does not own: routing or combining (engine/layers/moe.c).
 */
#ifndef DF_ENGINE_EXPERT_LOCAL_H
#define DF_ENGINE_EXPERT_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/experts/expert_backend.h"

/* Where a routed expert's weights are: gate/up [I, H], down [H, I] of (layer, expert) in
 * their stored dtype (FP8 with block scales); -1 when that pair does not exist. */
typedef int (*df_expert_weights_fn)(const void *owner, int layer, int expert,
                                    const df_t_tensor **gate, const df_t_tensor **up,
                                    const df_t_tensor **down);

/* Refuse a routed expert whose MXFP4 scales hold the NaN byte 255 (OCP MX v1.0: E8M0 255 is
 * NaN; an honest checkpoint never has one). Each weight is scanned once, before its first
 * use (torch_shim.h df_t_mx_scale_check). 0, or -1 + "layer L expert E: the gate (w1)
 * weight's E8M0 scales hold 255 (NaN) at row R, group G: the checkpoint is damaged". */
int df_expert_check_scales(int layer, int expert, const df_t_tensor *gate,
                           const df_t_tensor *up, const df_t_tensor *down, char *err,
                           size_t errlen);

/* A local backend over the weights `weights(owner, ...)` finds (owner borrowed: must outlive
 * the backend), with fp32 scratch for up to max_rows routed rows per request of expert width
 * I (moe_intermediate_size). A model's own: engine/model.h df_model_local_experts. NULL +
 * message on allocation failure. */
df_expert_backend *df_expert_local_new(df_expert_weights_fn weights, const void *owner,
                                       int64_t max_rows, int64_t I, char *err, size_t errlen);

#endif
