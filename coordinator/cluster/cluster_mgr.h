/* coordinator/cluster/cluster_mgr.h — the cluster manager's state (cluster.c: sockets,
 * membership, placement, jobs, and the snapshot it publishes about itself on a
 * df_cluster_board, cluster_status.h).
 *
 * Every field belongs to the manager thread, except board, which readers on other threads
 * touch through df_cluster_snapshot_get. Private to coordinator/cluster/.
 */
#ifndef DF_COORD_CLUSTER_MGR_H
#define DF_COORD_CLUSTER_MGR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "coordinator/cluster/cluster_internal.h"
#include "coordinator/cluster/cluster_manifest.h"
#include "coordinator/cluster/cluster_status.h"
#include "transport/dnssd.h"
#include "transport/keys.h"

#define MAX_MEMBERS 256

typedef struct member {
  char key[DF_PROTO_Z85_KEY + 1];
  char fp[17];
  char name[DF_PROTO_MAX_NAME + 1];
  uint8_t rid[256];
  size_t rid_len;
  int fd;
  bool alive, ready, has_model;
  uint64_t budget, held;
  uint64_t device;           /* of budget, bytes kept on its GPU (JOIN `device`; 0 = CPU) */
  bool can_serve;            /* its JOIN `features` hold all the model's experts need
                                (mf.needs); else it is given none of them */
  uint64_t epoch;            /* of the assignment last sent */
  int64_t *apairs, n_apairs; /* that assignment's pair indices, ascending */
  uint64_t reply_id;         /* JOIN id to answer with the next ASSIGN (0 = none) */
  int64_t last_tx_ms, last_ping_ms, rtt_us, joined_ms;
  uint64_t ping_id, stats_id;
  int64_t last_stats_ms;
  uint64_t served, bytes_tx, bytes_rx, rounds;
  uint64_t errors;           /* times it failed: dropped for a fault (not its own BYE), or an
                                ERROR it reported outside an FFN */
  bool said_bye;             /* its BYE is being handled: that drop is no fault */
  /* the FFN in flight for the current job */
  bool outstanding;
  uint64_t out_id;
  int32_t *grp;    /* [n_experts] group indices sent, in order */
  int n_grp;
  int64_t out_rows;
  int32_t *ex;     /* [n_experts] scratch for the header */
  int64_t *rows;   /* [n_experts] */
  float *sendbuf;  /* gathered rows */
  int64_t sendcap; /* floats */
} member;

struct df_cluster {
  df_cluster_opts o;
  const df_model *m;
  df_cluster_manifest mf;
  char state[4096];
  char endpoint[300];
  df_proto_keypair kp;
  df_proto_dnssd_ann *ann;      /* the mDNS/DNS-SD announcement (transport/dnssd.h), or NULL */
  void *ctx, *router, *zap, *mon, *ctl_mgr, *ctl_fwd;
  char admitted[8][DF_PROTO_Z85_KEY + 1]; /* keys a token admitted lately (for the join log) */
  struct timespec nodes_mtime;            /* of STATE/nodes when members were last checked */
  int claim_fd;                           /* STATE/coordinator.lock, held while running */
  int64_t nodes_check_ms;                 /* when timers() next looks at STATE/nodes */
  int n_admitted;
  pthread_t thread;
  bool thread_started;
  /* members */
  member mb[MAX_MEMBERS];
  int n_mb;
  uint64_t epoch_seq, id_seq;
  int32_t *prim, *repl, *route; /* [n_pairs] member index or -1 */
  uint64_t *heat;               /* [n_pairs] routing counts from o.heat, or NULL */
  /* job */
  df_cluster_job *job;
  int64_t job_deadline;
  int job_outstanding;
  bool job_open; /* a job was handed over and its CTL_DONE is not sent yet */
  /* wait */
  bool waiting;
  int64_t wait_deadline;
  int wait_min;
  bool stop;
  int64_t status_due;
  df_cluster_stats st;
  /* what the manager publishes (cluster_status.c) */
  uint64_t *routed_rows;        /* [n_pairs] token rows routed to each pair since start */
  df_cluster_board board;       /* the published snapshot (cluster_status.h) */
  int64_t snap_due;             /* when the manager next publishes while readers ask */
};

#endif
