/* coordinator/cluster/cluster_snapshot.h — snapshots of the cluster manager's state
 * (cluster_snapshot.c), published on its board (cluster_status.h). Manager thread only.
 */
#ifndef DF_COORD_CLUSTER_SNAPSHOT_H
#define DF_COORD_CLUSTER_SNAPSHOT_H

#include "coordinator/cluster/cluster_mgr.h"

/* Build a snapshot of c now (endpoint, key fingerprint, the placement grid with each pair's
 * holder and routed rows, every member's health, budget, experts and counters) and publish it
 * on c->board; out of memory keeps the previous snapshot. */
void df_cluster__publish(df_cluster *c);

/* df_cluster__publish, then write STATE/cluster-status.json from that snapshot (read by
 * `deltafin cluster status`). */
void df_cluster__write_status(df_cluster *c);

#endif
