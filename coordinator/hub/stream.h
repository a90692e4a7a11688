/* coordinator/hub/stream.h — stream mode: routed experts fetched from the hub on first use.
 *
 * Owns: the expert backend (engine/experts/expert_backend.h) of a folder pulled with
 * `deltafin pull --stream`. Such a folder has every shard at full size with its header and
 * non-expert tensors written and the routed-expert byte ranges left as holes that are never
 * read (pull.h). On the first use of (layer, expert) the backend fetches exactly the byte
 * ranges of its gate_proj, up_proj and down_proj tensors, with their scales for FP8
 * (`weight_scale_inv`) and MXFP4 (Kimi K3: `weight_packed` + `weight_scale`, six contiguous
 * tensors, so one request) experts (offsets from the safetensors header; adjacent ranges in
 * one HTTP Range request) from the commit recorded in the
 * manifest, stores them as one blob in the folder's expert cache (stream_cache.h:
 * content-addressed, byte budget, LRU) and computes from the cached bytes, exactly as the
 * local backend would from a complete file (the same df_t_glu_ffn on the same bytes).
 * Offline (HF_HUB_OFFLINE=1 or DELTAFIN_OFFLINE=1) only the cache is used, and an expert
 * missing from it is an error naming the layer and expert.
 * Does not own: routing and combining (engine/model.c), the download (pull.c).
 */
#ifndef DF_COORD_STREAM_H
#define DF_COORD_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

typedef struct df_stream_opts {
  uint64_t budget; /* expert cache bytes; 0 = $DELTAFIN_STREAM_BUDGET (e.g. "8G"), else the
                      manifest's cache_budget */
  int offline;     /* 1 = never fetch; 0 = from $HF_HUB_OFFLINE / $DELTAFIN_OFFLINE */
  bool stats;      /* print cache hits, fetches and bytes to stderr when the model is freed
                      (also with $DELTAFIN_STREAM_STATS=1) */
} df_stream_opts;

/* If `dir` was pulled with --stream (its manifest says mode "stream"), install the streaming
 * expert backend on m (the model owns it from then on); otherwise do nothing and return 0.
 * `opts` may be NULL (all defaults). Nothing is fetched here.
 * Errors (-1 + one line): a malformed manifest, an expert tensor of m that is not in the
 * folder's shards, a budget smaller than one expert (both sizes named), the cache folder
 * locked by another process, out of memory. m is unchanged on error. */
int df_stream_attach(df_model *m, const char *dir, const df_stream_opts *opts, char *err,
                     size_t errlen);

#endif
