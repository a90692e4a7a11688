/* coordinator/cluster_manifest.h — the routed-expert manifest the coordinator sends in
 * ASSIGN: every (layer, expert) pair of the model's MoE layers with its three tensors
 * (name, dtype, shape, bytes, SHA-256) and where their bytes live in the coordinator's
 * mapping (for SHARD_CHUNK streaming).
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

#include "engine/model.h"
#include "transport/codec.h"

typedef struct df_cluster_manifest {
  int64_t n_pairs;         /* MoE layers x experts */
  int32_t *pairs;          /* [n_pairs][2] (layer, expert) */
  int32_t *pair_of_layer;  /* [num_hidden_layers] first pair index of the layer, -1 if dense */
  int64_t n_experts;       /* experts per MoE layer */
  df_proto_tensor *t;      /* [3 * n_pairs] gate, up, down per pair */
  const uint8_t **data;    /* [3 * n_pairs] the bytes in the model's mapping */
  uint64_t pair_bytes;     /* largest pair's bytes (three tensors) */
  uint64_t total_bytes;    /* every pair's bytes */
  int64_t hidden, inter;   /* hidden_size, moe_intermediate_size */
  bool hashed;             /* sha256 fields filled */
} df_cluster_manifest;

/* Collect the pairs and tensors of model m (borrowed; must outlive the manifest). SHA-256s
 * are not computed yet. A model without MoE layers gives n_pairs 0. 0 or -1 + message (a
 * tensor missing from the checkpoint, out of memory). */
int df_cluster_manifest_build(const df_model *m, df_cluster_manifest *mf, char *err, size_t errlen);

/* Fill every SHA-256 (in parallel), reading STATE/manifests/<key> when a previous run of the
 * same files wrote it, writing it otherwise (state_dir NULL: no disk cache). 0 or -1. */
int df_cluster_manifest_hash(df_cluster_manifest *mf, const df_model *m, const char *state_dir,
                             char *err, size_t errlen);

void df_cluster_manifest_free(df_cluster_manifest *mf);

#endif
