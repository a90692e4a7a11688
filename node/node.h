/* node/node.h — the df-node agent: joins a coordinator, holds the expert shards it is
 * assigned, and runs FFN requests on them (docs/PROTOCOL.md).
 *
 * Owns: the node's one DEALER socket and its monitor (one thread: the caller's), the
 * join/rejoin state machine with backoff, shard provisioning through node/store.h, the
 * planned activation buffers, and the expert execution (df_t_glu_ffn with the ASSIGN's
 * activation, SwiGLU or Kimi K3's SiTU-GLU, over the same weight bytes as the coordinator —
 * BF16/F16/F32, FP8 with block scales, or MXFP4 with E8M0 scales checked for the NaN byte
 * before an expert's first use — in the width the ASSIGN names, so results are bitwise
 * identical). Stateless between requests: no sequence state lives here.
 */
#ifndef DF_NODE_NODE_H
#define DF_NODE_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/tensor/torch_shim.h"

typedef struct df_node_opts {
  const char *endpoint;  /* "tcp://HOST:PORT" of the coordinator, or NULL: found by DNS-SD
                            discovery among announcers of the pinned key (node/target.h) */
  const char *state_dir; /* keys, pinned coordinator key, shard cache */
  const char *model_dir; /* own copy of the checkpoint, or NULL */
  const char *token;     /* join token, or NULL to rejoin with the stored key */
  const char *name;      /* shown in cluster status; NULL = hostname */
  uint64_t memory;       /* expert memory budget, bytes (> 0) */
  int threads;           /* compute threads, 0 = all CPUs */
  df_t_device device;    /* where experts run: zero = the CPU kernels; CUDA / AUTO: served
                            experts are kept on the GPU as far as admission allows
                            (docs/GPU.md), the rest on the CPU */
  bool quiet;            /* only errors on stderr */
} df_node_opts;

/* Run the agent until SIGINT/SIGTERM (returns 0) or a definitive refusal (returns 3, one line
 * in err naming what is wrong): the coordinator refused the token or does not admit this key,
 * or it closed the CURVE handshake 5 times in a row, quickly, because it does not hold the
 * coordinator key this node pinned (a token or stored key of another coordinator; the line
 * names the key's fingerprint). An unreachable coordinator is retried forever. Without an
 * endpoint the coordinator is looked for by discovery, forever too; a discovered endpoint
 * that closes the handshake so, refuses during it (a CURVE ERROR is not authenticated), or
 * completes none within 15 s is set aside and another looked for: anyone can announce, so
 * only a refusal after the handshake (ERROR to JOIN) returns 3 there. Local errors (bad token
 * text, state directory, keys, no endpoint in a build without discovery and none recorded)
 * return 1. Progress goes to stderr, one line per
 * event, prefixed "df-node:", identical lines at most once per 30 s. `o` and its strings are
 * borrowed for the call; err (errlen bytes) is written only on a non-zero return. */
int df_node_run(const df_node_opts *o, char *err, size_t errlen);

#endif
