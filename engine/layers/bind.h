/* engine/layers/bind.h — binding a checkpoint's tensors by name, checked against the config.
 *
 * Owns: looking a tensor up in the safetensors index, checking its dtype and shape against
 * what config.json implies (one error line naming the file, the tensor, what it has and
 * what was expected), wrapping the mmap without a copy, keeping every handle it made (freed
 * with the binder) and counting the bound bytes as resident or routed-expert bytes. Family
 * files (engine/models/) bind through it. Does not own: the mmap (engine/safetensors.h).
 */
#ifndef DF_ENGINE_LAYERS_BIND_H
#define DF_ENGINE_LAYERS_BIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/model_config.h"
#include "engine/safetensors.h"
#include "engine/tensor/torch_shim.h"

typedef struct df_binder {
  const char *dir;              /* the model folder (messages) */
  const df_st_model *st;        /* borrowed */
  const df_model_config *cfg;   /* borrowed */
  df_t_tensor **handles;        /* every handle created, freed by df_binder_free */
  size_t n_handles, cap_handles;
  uint64_t total, resident, experts; /* bytes bound: all, non-expert, routed experts */
} df_binder;

/* Free every handle the binder made and zero it. */
void df_binder_free(df_binder *b);

/* Keep handle t (freed with the binder). 0, or -1 out of memory (t is not kept). */
int df_binder_track(df_binder *b, df_t_tensor *t);

/* Tensor `name` with exactly `shape` (ndim dims), dtype BF16, F16 or F32. optional: an
 * absent tensor returns NULL without an error. is_expert: its bytes count as routed-expert
 * bytes, else resident. Errors (NULL + message): missing (required) tensor, unsupported
 * dtype (named), shape disagreeing with the config (both shapes named), out of memory. */
const df_t_tensor *df_bind(df_binder *b, const char *name, int ndim, const int64_t *shape,
                           bool optional, bool is_expert, char *err, size_t errlen);

/* A linear weight [N, K] named `name` (normally "<base>.weight"): BF16/F16/F32 as df_bind,
 * or F8_E4M3 with its F32 `<name>_scale_inv` [ceil(N/bn), ceil(K/bk)] attached
 * (df_t_set_block_scale) when the config declares FP8 blocks (quantization_config,
 * weight_block_size [bn, bk]); the bytes of both count.
 * MXFP4 (Kimi K3's routed experts; OCP Microscaling Formats (MX) Specification v1.0 in the
 * layout of compressed-tensors' "mxfp4-pack-quantized" packer, docs/K3.md §4): when `name`
 * ends in ".weight", is absent, and `<base>.weight_packed` and `<base>.weight_scale` both
 * exist (the rule of the format: a weight is MXFP4 iff both do), the pair is bound as ONE
 * weight: dtype F4, logical shape [N, K] (df_t_size(w, 1) == K), data = weight_packed's mmap
 * bytes U8 [N, K/2] (low nibble = column 2i, high = 2i+1; never copied or widened), with
 * weight_scale U8 [N, K/32] (E8M0) attached (df_t_set_mx_scale; df_t_block_scale returns it,
 * block [1, 32]). The NaN byte 255 is refused: for a resident weight (is_expert false) the
 * binder reads every scale byte here; a routed expert's scales are scanned before the
 * expert's first use instead (engine/experts/expert_local.h df_expert_check_scales, torch_shim.h
 * df_t_mx_scale_check), since reading Kimi K3's ~85 GB of expert scales at load is not
 * acceptable. The packed and scale bytes count (as routed-expert bytes when is_expert). The
 * tensors decide which weights are MXFP4; the config must declare the format
 * (quantization_config: compressed-tensors MXFP4, config/model_config.h df_cfg_quant_mxfp4).
 * Errors (NULL + one line naming the file or folder, the tensor, what it has and what was
 * expected): df_bind's; F8_E4M3 without an fp8 quantization_config, a missing or mis-shaped
 * (or non-F32) FP8 scale tensor; for MXFP4 a config that does not declare MXFP4, one of the
 * pair without the other, K not a
 * multiple of 32, a part not U8 or not of shape [N, K/2] / [N, K/32], and (resident weights)
 * "tensor '<base>.weight_scale' holds E8M0 255 (NaN) at row R, group G". */
const df_t_tensor *df_bind_linear(df_binder *b, const char *name, int64_t N, int64_t K,
                                  bool is_expert, char *err, size_t errlen);

#endif
