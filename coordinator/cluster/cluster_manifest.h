/* coordinator/cluster/cluster_manifest.h — the routed-expert manifest the coordinator sends in
 * ASSIGN: every (layer, expert) pair of the model's MoE layers with its tensors (name, dtype,
 * shape, bytes, SHA-256) and where their bytes live in the coordinator's mapping (for
 * SHARD_CHUNK streaming). A pair has three tensors (gate_proj, up_proj, down_proj weights),
 * or six for FP8 block-quantised experts: the three F8_E4M3 weights, then their three F32
 * `weight_scale_inv` tensors, with the config's weight_block_size; or six for MXFP4 experts
 * (Kimi K3): the three U8 `weight_packed` [N, K/2], then their three U8 E8M0 `weight_scale`
 * [N, K/32] (docs/PROTOCOL.md §2). A latent MoE's experts run in its latent width, which the
 * manifest's `hidden` is.
 *
 * Owns: the pair numbering (p = moe_layer_index * num_experts + expert, MoE layers in
 * ascending order) and the SHA-256 digests, cached on disk under STATE/manifests keyed by
 * the checkpoint files' paths, sizes and modification times. Does not own: the mapping
 * (the model's), placement (cluster_place.h).
 */
#ifndef DF_COORD_CLUSTER_MANIFEST_H
#define DF_COORD_CLUSTER_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/model.h"
#include "transport/codec.h"

typedef struct df_cluster_manifest {
  int64_t n_pairs;         /* MoE layers x experts */
  int32_t *pairs;          /* [n_pairs][2] (layer, expert) */
  int32_t *pair_of_layer;  /* [num_hidden_layers] first pair index of the layer, -1 if dense */
  int64_t n_experts;       /* experts per MoE layer */
  int tpp;                 /* tensors per pair: 3, or 6 with FP8 block scales or MXFP4 */
  int64_t block_n, block_k; /* FP8 weight_block_size; 0 otherwise */
  int64_t mx;              /* MXFP4 experts: DF_PROTO_MX_BLOCK (32); 0 otherwise */
  uint32_t act_kind;       /* DF_PROTO_ACT_*: the experts' gated activation (config hidden_act) */
  float act_beta, act_beta_lin; /* SiTU betas as the engine uses them; 0 for SiLU */
  uint32_t needs;          /* DF_PROTO_FEAT_* a node must declare to be given these experts */
  df_proto_tensor *t;      /* [tpp * n_pairs] per pair gate, up, down (+ their scales) */
  const uint8_t **data;    /* [tpp * n_pairs] the bytes in the model's mapping */
  uint64_t pair_bytes;     /* largest pair's bytes (all its tensors) */
  uint64_t total_bytes;    /* every pair's bytes */
  int64_t hidden, inter;   /* the experts' width (hidden_size, or latent_dim for a latent MoE),
                              moe_intermediate_size */
  bool hashed;             /* sha256 fields filled */
} df_cluster_manifest;

/* Collect the pairs and tensors of model m (borrowed; must outlive the manifest). SHA-256s
 * are not computed yet. A model without MoE layers gives n_pairs 0. Experts whose weights
 * are F8_E4M3 (config quantization_config fp8) get tpp 6: each weight's block scales as the
 * engine bound them (df_t_block_scale), named `<weight name>_scale_inv`. MXFP4 experts (F4 as
 * bound) get tpp 6 and mx 32: `<weight name>_packed` then `<weight name>_scale`, the bytes the
 * engine bound. 0 or -1 + message (a tensor missing from the checkpoint or not 2-D, FP8 or
 * MXFP4 experts without their scales or mixed with other dtypes, out of memory). */
int df_cluster_manifest_build(const df_model *m, df_cluster_manifest *mf, char *err, size_t errlen);

/* Fill every SHA-256 (in parallel), reading STATE/manifests/<key> when a previous run of the
 * same files wrote it, writing it otherwise (state_dir NULL: no disk cache). 0 or -1. */
int df_cluster_manifest_hash(df_cluster_manifest *mf, const df_model *m, const char *state_dir,
                             char *err, size_t errlen);

void df_cluster_manifest_free(df_cluster_manifest *mf);

/* Whether an expert request's activation (NULL = SiLU) is the one the manifest sends nodes:
 * requests asking another run on the coordinator. */
bool df_cluster_manifest_act_ok(const df_cluster_manifest *mf, const df_k_act *a);

/* What a node declaring `features` (DF_PROTO_FEAT_*) lacks of mf->needs, as words for a log
 * line ("SiTU experts (`act`) or MXFP4 experts (`mx`)"); "" when nothing. Static storage. */
const char *df_cluster_manifest_missing(const df_cluster_manifest *mf, uint32_t features);

/* "L1:0-3,7 L3:..." : the (layer, expert) pairs mf->pairs[idx[0 .. n)] (idx ascending) as runs
 * of expert ids per layer, written to f (cluster-status.json's `placement`). */
void df_cluster_manifest_pairs_text(const df_cluster_manifest *mf, const int64_t *idx, int64_t n,
                                    FILE *f);

#endif
