/* coordinator/cluster/cluster.h — `--cluster`: run a model's routed experts on df-node agents.
 *
 * Owns: the entry point cmd_run (and later serve) call to turn a loaded model into a cluster
 * coordinator: start the cluster manager (coordinator/cluster/cluster.c: the ROUTER socket, ZAP,
 * membership, placement, dispatch, failover), wait for nodes, and install the cluster expert
 * backend (coordinator/cluster/expert_remote.c) on the model. See docs/CLUSTER.md.
 */
#ifndef DF_COORD_CLUSTER_H
#define DF_COORD_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/cluster/cluster_status.h"

struct df_model;
struct df_cluster; /* the manager (cluster.c; df_cluster in cluster_internal.h) */

typedef struct df_cluster_opts {
  const char *bind_host; /* interface to bind; NULL = every interface ("*") */
  int port;              /* 0 = 7070 */
  const char *state_dir; /* NULL = ~/.local/state/deltafin */
  double wait_s;         /* seconds to wait for nodes before generating; < 0 = 10 */
  int min_nodes;         /* stop waiting once this many nodes are ready; 0 = 1 */
  double timeout_s;      /* deadline of one layer's FFN round trip; 0 = 30 */
  bool stats;            /* print traffic figures to stderr when the model is destroyed */
  bool quiet;            /* log only errors and warnings (serve --quiet): no lines for
                            listening, nodes joining / ready, the wait, nor the discovery
                            announcement */
  const uint64_t *heat;  /* routing counts [heat_n] layer-major (STATE/heat, expert_heat.h), or
                            NULL; copied at start; ignored unless heat_n = n_layers *
                            num_experts. Placement gives the hottest pairs to the nodes that
                            declared a device budget first (cluster_place.h). */
  int64_t heat_n;
  /* Outputs of df_cluster_attach, each NULL = not wanted: the seconds spent waiting for
   * nodes (0 when wait_s is 0), and how many nodes were ready when the wait ended. */
  double *waited_s;
  int *nodes_ready;
  /* Output of df_cluster_attach, NULL = not wanted: the running manager, for
   * df_cluster_snapshot_get. Borrowed: the model owns it, and it is gone
   * once the model is destroyed. */
  struct df_cluster **manager;
} df_cluster_opts;

/* Start the cluster manager for model m (borrowed: the model owns the backend installed
 * here, and destroying the model stops the manager), wait up to o->wait_s for o->min_nodes
 * nodes to be ready (fewer, or none, is fine: the coordinator runs what no node holds), and
 * install the cluster expert backend with df_model_set_expert_backend. The wait's length
 * and the nodes then ready go to *o->waited_s and *o->nodes_ready when those are set, the
 * manager to *o->manager (NULL on failure).
 * Errors (-1, one line): the state directory or key file, the port cannot be bound, the
 * model has no MoE layers to place is not an error (everything runs locally). */
int df_cluster_attach(struct df_model *m, const df_cluster_opts *o, char *err, size_t errlen);

/* A copy of the running manager's last published snapshot (cluster_status.h: members,
 * placement, expert heat, traffic): *out is a new heap object owned by the caller (free with
 * df_cluster_snapshot_destroy). Any thread; never waits for the manager thread. Also tells the
 * manager that someone reads, so it refreshes the snapshot every 0.5 s for the next 5 s.
 * Returns 0, or -1 with *out NULL when c is NULL or out of memory. */
int df_cluster_snapshot_get(struct df_cluster *c, df_cluster_snapshot **out);

#endif
