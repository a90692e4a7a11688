/* coordinator/cluster/cluster_internal.h — between the cluster manager thread (cluster.c) and the
 * cluster expert backend that runs on the forward thread (expert_remote.c).
 *
 * The forward thread never touches the manager's sockets or state: it hands a job over an
 * inproc PAIR socket and blocks on the replies (no busy-waiting). For one MoE layer:
 *   df_cluster_dispatch: hands the job over and returns at once (the forward thread goes on
 *     with work that needs no routing, the layer's shared experts); the manager routes every
 *     group (node that holds the pair and is ready, else the coordinator), sends one FFN per
 *     involved node, and answers PLANNED;
 *   df_cluster_planned: waits for PLANNED: where[g] = DF_WHERE_LOCAL for the groups the
 *     forward thread must run itself, which it runs through the local backend meanwhile;
 *   df_cluster_collect: waits for DONE, which the manager sends on its own once the job has
 *     nothing in flight (at once when no node was involved): it has written every RESULT's
 *     rows into req->y at their group's rows (never other rows), or the deadline passed;
 *     groups of nodes that failed are DF_WHERE_FAILED and the forward thread reruns them
 *     locally, so the layer always completes with the same bytes.
 * Neither reply waits for a request from the forward thread: on the critical path of a layer
 * are only the hand-over, the nodes' round trips and the DONE.
 */
#ifndef DF_COORD_CLUSTER_INTERNAL_H
#define DF_COORD_CLUSTER_INTERNAL_H

#include <stdint.h>

#include "coordinator/cluster/cluster.h"
#include "engine/experts/expert_backend.h"

enum { DF_WHERE_LOCAL = 0, DF_WHERE_REMOTE = 1, DF_WHERE_DONE = 2, DF_WHERE_FAILED = 3 };

typedef struct df_cluster df_cluster;

typedef struct df_cluster_job {
  const df_expert_request *req; /* borrowed for the duration of the job */
  uint8_t *where;               /* [req->n_groups] written by the manager */
} df_cluster_job;

/* Traffic figures, summed over the manager's life. */
typedef struct df_cluster_stats {
  uint64_t dispatches;   /* MoE layer calls */
  uint64_t remote_calls; /* dispatches that involved at least one node */
  uint64_t round_trips;  /* FFN requests sent */
  uint64_t bytes_tx, bytes_rx; /* FFN + RESULT payload and header bytes */
  uint64_t groups_remote, groups_local, groups_rerun;
  uint64_t nodes_dropped;
} df_cluster_stats;

/* Start the manager thread (binds the socket before returning). NULL + message. */
df_cluster *df_cluster_start(const struct df_model *m, const df_cluster_opts *o, char *err,
                             size_t errlen);
/* Block until min_nodes nodes are ready and none is provisioning, or wait_s passed. Returns
 * the number of ready nodes. */
int df_cluster_wait(df_cluster *c, double wait_s, int min_nodes);
/* See the file comment; called in this order, once each per job (planned and collect only
 * after a dispatch that returned 0). Each returns 0, or -1 when the manager is gone (then
 * every group is DF_WHERE_LOCAL and the caller runs everything locally; after planned or
 * collect failed, the caller must not wait for that job again). */
int df_cluster_dispatch(df_cluster *c, df_cluster_job *j);
int df_cluster_planned(df_cluster *c, df_cluster_job *j);
int df_cluster_collect(df_cluster *c, df_cluster_job *j);
/* Say BYE to the nodes, stop and join the thread, free; NULLs *c. Stats copied to *st when
 * not NULL. */
void df_cluster_stop(df_cluster **c, df_cluster_stats *st);

/* The cluster expert backend over manager c (takes ownership of c) and model m. */
df_expert_backend *df_expert_remote_new(const struct df_model *m, df_cluster *c, bool stats,
                                        char *err, size_t errlen);

#endif
