/* coordinator/cluster/cluster_status.h — what a running cluster manager says about itself:
 * a snapshot of its members, placement, expert heat and traffic that any thread may take
 * (`deltafin serve`'s GET /v1/cluster, through df_cluster_snapshot_get in cluster.h), and the
 * status file STATE/cluster-status.json written from the same snapshot (`deltafin cluster
 * status`, docs/CLUSTER.md "Status").
 *
 * Owns: the snapshot type, the board it is published on (one writer, any number of readers)
 * and the status file's format. Does not own: building a snapshot from membership and
 * placement (cluster.c, the manager thread), reading the status file back (coord_state.h).
 *
 * Threads: the manager thread alone builds snapshots (from state only it touches) and swaps
 * each in under the board's mutex; readers copy the current one under that mutex and never
 * see the manager's live state. The manager re-publishes at once when membership or placement
 * change (a node joins, becomes ready, is dropped), at least every 10 s, and every 0.5 s while
 * readers ask (df_cluster_board_wanted within the last 5 s), so RTTs, counts and heat stay
 * live without costing an idle coordinator any wake-up.
 */
#ifndef DF_COORD_CLUSTER_STATUS_H
#define DF_COORD_CLUSTER_STATUS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One member of the cluster as the manager knows it. */
typedef struct df_cluster_node_info {
  char name[72];            /* the name its key was admitted under; printable ASCII, no '"' or
                               '\\' */
  char key_fingerprint[17]; /* 16 hex characters (transport/keys.h) */
  char health[16];          /* "ready", "provisioning" (assigned, still loading) or "dropped" */
  int64_t rtt_us;           /* last PING round trip, microseconds; 0 = none measured yet */
  uint64_t budget;          /* bytes of experts it offered (JOIN --memory) */
  uint64_t device;          /* of budget, bytes on its GPU; 0 = CPU node */
  uint64_t held;            /* bytes of experts it reports holding */
  int64_t experts;          /* (layer, expert) pairs assigned to it (primary and replica) */
  int64_t routed;           /* pairs whose token rows it runs now */
  uint64_t served;          /* FFN requests it reports having served (STATS, every 10 s) */
  uint64_t round_trips;     /* FFN requests sent to it */
  uint64_t errors;          /* times it failed: dropped for a fault (deadline missed, connection
                               lost, malformed or implausible RESULT, ERROR on an FFN), or an
                               ERROR it reported otherwise; its own BYE does not count */
  char *placement;          /* its assignment as "L1:0-3,7 L3:..." (docs/CLUSTER.md); "" when
                               dropped; owned by the snapshot */
} df_cluster_node_info;

typedef struct df_cluster_snapshot {
  int64_t updated_unix_ms;  /* when the manager published it, Unix time in milliseconds */
  char endpoint[300];       /* the cluster socket, "tcp://HOST:PORT" */
  char key_fingerprint[17]; /* the coordinator key's fingerprint */
  int64_t n_layers;         /* the model's layers (num_hidden_layers), dense ones included */
  int64_t n_experts;        /* routed experts per MoE layer; 0 = no MoE layer */
  int64_t pairs;            /* (layer, expert) pairs of the MoE layers */
  int64_t pairs_on_coordinator; /* of them, pairs no ready node runs (the coordinator does) */
  uint64_t pair_bytes;      /* the largest pair's bytes */
  uint64_t dispatches, round_trips, bytes_tx, bytes_rx, groups_rerun, nodes_dropped;
                            /* traffic since start (MoE layer calls, FFN requests, payload and
                               header bytes each way, groups rerun after a node failed, drops) */
  int n_nodes;
  df_cluster_node_info *nodes; /* [n_nodes] every member since start, dropped ones included
                               (a departed node's slot may be reused by a new key) */
  int32_t *holder;          /* [n_layers * n_experts] layer-major: the index in nodes[] of the
                               node that runs the pair now, -1 = the coordinator, -2 = not a
                               routed pair (a dense layer); NULL when n_experts is 0 */
  uint64_t *heat;           /* [n_layers * n_experts] layer-major: token rows routed to the
                               pair since the manager started (0 for dense layers); NULL when
                               n_experts is 0 */
} df_cluster_snapshot;

/* Free a snapshot and everything in it; NULLs *s; NULL-safe. */
void df_cluster_snapshot_destroy(df_cluster_snapshot **s);

/* Where one writer publishes snapshots for readers on any thread. Fields are private to
 * cluster_status.c; the owner embeds it and calls init/destroy. */
typedef struct df_cluster_board {
  pthread_mutex_t mu;         /* guards snap */
  bool mu_init;
  df_cluster_snapshot *snap;  /* the current snapshot, or NULL before the first publish */
  atomic_llong wanted_ms;     /* when a reader last asked (CLOCK_MONOTONIC, ms) */
} df_cluster_board;

/* Make b empty (no snapshot, nobody asking). Returns 0, or -1 when the mutex cannot be made. */
int df_cluster_board_init(df_cluster_board *b);

/* Free b's snapshot and mutex; b may be zeroed or never initialised past calloc. */
void df_cluster_board_destroy(df_cluster_board *b);

/* Writer: make s (owned by b from now; NULL is ignored) the current snapshot and free the
 * previous one. */
void df_cluster_board_publish(df_cluster_board *b, df_cluster_snapshot *s);

/* Reader, any thread: *out = a deep copy of the current snapshot (a new heap object owned by
 * the caller; free with df_cluster_snapshot_destroy), and note that someone reads (see
 * df_cluster_board_wanted). Holds the mutex only for the copy. Returns 0, or -1 with *out
 * NULL when nothing is published yet, b is NULL or out of memory. */
int df_cluster_board_get(df_cluster_board *b, df_cluster_snapshot **out);

/* Writer: whether a reader asked within the last within_ms milliseconds. */
bool df_cluster_board_wanted(const df_cluster_board *b, int64_t within_ms);

/* Writer: write the current snapshot to path as the status file (JSON, docs/CLUSTER.md
 * "Status"; also the pid and deltafin subcommand of this process) atomically with mode 0600.
 * Nothing published yet, out of memory or a failed write leaves the old file (best effort:
 * the status file is advisory). */
void df_cluster_board_write(df_cluster_board *b, const char *path);

#endif
