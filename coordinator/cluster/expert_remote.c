/* coordinator/cluster/expert_remote.c — the cluster expert backend
 * (engine/experts/expert_backend.h), run on the forward thread, and df_cluster_attach.
 *
 * Owns: one MoE layer's split between the cluster manager (coordinator/cluster/cluster.c,
 * which sends the node-held groups and writes their rows into y) and the coordinator's own
 * local backend (engine/experts/expert_local.h), and the rerun of every group whose node
 * failed, so a layer always completes with the bytes one machine would produce (same kernels,
 * same weight bytes, per-row outputs; the model combines them in router order). A latent
 * MoE's (Kimi K3's) requests carry rows of the latent width and the SiTU activation; the
 * nodes are sent both in ASSIGN (cluster_manifest.h). Does not own:
 * sockets or membership (the manager thread's), routing or combining (engine/model.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/cluster/cluster_internal.h"
#include "engine/experts/expert_local.h"
#include "engine/model.h"

typedef struct remote_be {
  df_expert_backend base;
  df_cluster *c;
  df_expert_backend *local;
  uint8_t *where; /* [num_experts] planned at creation */
  bool stats;
  int64_t moe_layers;
} remote_be;

/* Run through the local backend every group whose where[] is `a` or `b`: each maximal run
 * of consecutive such groups is one view of the request (its groups' rows are contiguous). */
static int run_local(remote_be *rb, const df_expert_request *req, int a, int b, char *err,
                     size_t errlen) {
  for (int g = 0; g < req->n_groups;) {
    if (rb->where[g] != a && rb->where[g] != b) {
      g++;
      continue;
    }
    int e = g + 1;
    while (e < req->n_groups && (rb->where[e] == a || rb->where[e] == b)) e++;
    df_expert_request run = {.layer = req->layer, .n_groups = e - g, .experts = req->experts + g,
                             .offsets = req->offsets + g, .x = req->x, .y = req->y,
                             .act = req->act};
    if (df_expert_backend_run(rb->local, &run, err, errlen) != 0) return -1;
    g = e;
  }
  return 0;
}

static int remote_run(df_expert_backend *be, const df_expert_request *req, char *err, size_t errlen) {
  remote_be *rb = (remote_be *)be;
  df_cluster_job job = {.req = req, .where = rb->where};
  bool remote = df_cluster_dispatch(rb->c, &job) == 0;
  /* the shared experts while the manager routes and the nodes work (they need no routing) */
  if (remote && req->overlap) req->overlap(req->overlap_ctx);
  /* a manager gone before PLANNED wrote nothing: everything runs here */
  if (remote && df_cluster_planned(rb->c, &job) != 0) remote = false;
  int rc = run_local(rb, req, DF_WHERE_LOCAL, DF_WHERE_LOCAL, err, errlen);
  /* always collect, even after a local error: the manager must be done with y */
  if (remote) df_cluster_collect(rb->c, &job);
  /* groups of failed nodes (REMOTE cannot remain after collect; rerun it too if it did) */
  if (rc == 0) rc = run_local(rb, req, DF_WHERE_FAILED, DF_WHERE_REMOTE, err, errlen);
  return rc;
}

static void remote_destroy(df_expert_backend *be) {
  remote_be *rb = (remote_be *)be;
  df_cluster_stats st;
  df_cluster_stop(&rb->c, &st);
  if (rb->stats) {
    double fw = rb->moe_layers ? (double)st.dispatches / (double)rb->moe_layers : 0;
    fprintf(stderr,
            "cluster: %llu MoE layer calls (%.0f forwards), %llu FFN round trips (%.2f per forward), "
            "%.2f MiB sent, %.2f MiB received (%.1f KiB per forward); groups: %llu on nodes, %llu "
            "local, %llu rerun locally after a node failed; %llu nodes dropped\n",
            (unsigned long long)st.dispatches, fw, (unsigned long long)st.round_trips,
            fw > 0 ? st.round_trips / fw : 0.0, st.bytes_tx / 1048576.0, st.bytes_rx / 1048576.0,
            fw > 0 ? (st.bytes_tx + st.bytes_rx) / 1024.0 / fw : 0.0,
            (unsigned long long)st.groups_remote, (unsigned long long)st.groups_local,
            (unsigned long long)st.groups_rerun, (unsigned long long)st.nodes_dropped);
  }
  df_expert_backend_destroy(&rb->local);
  free(rb->where);
  free(rb);
}

static const df_expert_backend_ops remote_ops = {"cluster", remote_run, remote_destroy};

df_expert_backend *df_expert_remote_new(const df_model *m, df_cluster *c, bool stats, char *err,
                                        size_t errlen) {
  const df_model_config *cfg = df_model_cfg(m);
  remote_be *rb = calloc(1, sizeof *rb);
  if (!rb || !(rb->where = calloc((size_t)(cfg->num_experts > 0 ? cfg->num_experts : 1), 1))) {
    snprintf(err, errlen, "out of memory");
    free(rb);
    df_cluster_stop(&c, NULL);
    return NULL;
  }
  rb->base.ops = &remote_ops;
  rb->base.impl = rb;
  rb->c = c;
  rb->stats = stats;
  for (int64_t l = 0; l < cfg->num_hidden_layers; l++) {
    const df_t_tensor *g, *u, *d;
    rb->moe_layers += cfg->num_experts > 0 && df_model_expert_weights(m, (int)l, 0, &g, &u, &d) == 0;
  }
  if (!(rb->local = df_model_local_experts(m, err, errlen))) {
    remote_destroy(&rb->base);
    return NULL;
  }
  return &rb->base;
}

int df_cluster_attach(df_model *m, const df_cluster_opts *o, char *err, size_t errlen) {
  if (o->manager) *o->manager = NULL;
  df_cluster *c = df_cluster_start(m, o, err, errlen);
  if (!c) return -1;
  double wait_s = o->wait_s < 0 ? 10 : o->wait_s;
  int min_nodes = o->min_nodes > 0 ? o->min_nodes : 1;
  if (o->waited_s) *o->waited_s = 0;
  if (o->nodes_ready) *o->nodes_ready = 0;
  if (wait_s > 0) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int n = df_cluster_wait(c, wait_s, min_nodes);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (o->waited_s)
      *o->waited_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (o->nodes_ready) *o->nodes_ready = n;
    if (!o->quiet)
      fprintf(stderr, "deltafin: cluster: %d node%s ready%s\n", n, n == 1 ? "" : "s",
              n ? "" : "; running every expert locally until nodes join");
  }
  df_expert_backend *be = df_expert_remote_new(m, c, o->stats, err, errlen);
  if (!be) return -1;
  df_model_set_expert_backend(m, be);
  if (o->manager) *o->manager = c; /* the backend owns it now */
  /* the coordinator's device admitted every routed expert: the backend is never asked */
  const df_model_config *cfg = df_model_cfg(m);
  int64_t n_moe = 0;
  for (int64_t l = 0; l < cfg->num_hidden_layers; l++)
    n_moe += cfg->is_moe_layer[l] ? cfg->num_experts : 0;
  if (n_moe > 0 && df_model_experts_on_device(m) == n_moe && !o->quiet) {
    char nm[32];
    df_t_device d = df_model_device(m);
    fprintf(stderr, "deltafin: cluster: all %lld routed experts are on this machine's %s; the "
            "nodes stand by\n", (long long)n_moe, df_t_device_name(&d, nm, sizeof nm));
  }
  return 0;
}
