/* engine/experts/expert_backend.h — the interface through which a MoE layer runs its routed experts.
 *
 * Owns: the contract between the forward pass (which routes token rows and combines the
 * results) and whoever holds the routed-expert weights: the local backend
 * (engine/experts/expert_local.c, in-process over the checkpoint's mmap) now, remote df-node agents
 * later. A backend is a small table of function pointers (DESIGN.md §9).
 *
 * A request carries, for one MoE layer, the token rows grouped by expert: group g holds
 * rows [offsets[g], offsets[g+1]) of `x` and is to be run through expert experts[g]. The
 * backend writes each row's expert output, unweighted, to the same rows of `y` — never a
 * partial sum — and the caller weights and accumulates them in fp32 in the router's order,
 * so the result does not depend on which backend ran which expert (DESIGN.md §6).
 */
#ifndef DF_ENGINE_EXPERT_BACKEND_H
#define DF_ENGINE_EXPERT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/tensor/torch_shim.h"

typedef struct df_expert_request {
  int layer;               /* decoder layer index */
  int n_groups;            /* experts used in this call */
  const int32_t *experts;  /* [n_groups] expert ids, ascending */
  const int64_t *offsets;  /* [n_groups + 1] row offsets into x and y; offsets[0] = 0 */
  const df_t_tensor *x;    /* [>= offsets[n_groups], hidden] fp32 gathered input rows */
  df_t_tensor *y;          /* [>= offsets[n_groups], hidden] fp32 expert outputs (written) */
  const df_k_act *act;     /* the experts' gated activation (kernels.h df_k_glu_act); NULL =
                              SiLU (SwiGLU). `hidden` is the width the experts run in: the
                              model's hidden size, or a latent MoE's latent width */
  void (*overlap)(void *ctx); /* optional: the caller's own work that reads neither x nor y
                                 nor the backend's buffers (a MoE layer's shared experts).
                                 A backend that waits on other machines calls it once while
                                 their replies are in flight; others leave it uncalled, and
                                 the caller runs what is left afterwards. NULL = none */
  void *overlap_ctx;
} df_expert_request;

typedef struct df_expert_backend df_expert_backend;

typedef struct df_expert_backend_ops {
  const char *name;
  /* Run every group of `req`. 0 on success; -1 with a one-line message in err (e.g. a node
   * that died); on error the contents of req->y are unspecified and the caller may retry
   * on another backend. */
  int (*run)(df_expert_backend *be, const df_expert_request *req, char *err, size_t errlen);
  /* Free the backend (NULL-safe through df_expert_backend_destroy). */
  void (*destroy)(df_expert_backend *be);
} df_expert_backend_ops;

struct df_expert_backend {
  const df_expert_backend_ops *ops;
  void *impl;
};

/* Run a request through a backend; see df_expert_backend_ops.run. */
static inline int df_expert_backend_run(df_expert_backend *be, const df_expert_request *req,
                                        char *err, size_t errlen) {
  return be->ops->run(be, req, err, errlen);
}

/* Destroy a backend and NULL the caller's pointer. */
static inline void df_expert_backend_destroy(df_expert_backend **be) {
  if (be && *be) {
    (*be)->ops->destroy(*be);
    *be = NULL;
  }
}

#endif
