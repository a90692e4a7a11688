/* coordinator/cluster/plan_model.h — the planning cost model: where a model's bytes go on a set
 * of machines, what each forward pass reads from memory, disk and network on each of them, and
 * the time per token that follows (`deltafin plan`, docs/K3.md "Planning a machine or a
 * cluster").
 *
 * Owns: feasibility (does the coordinator's RAM + disk hold the resident part and the sequence
 * state; do all machines' RAM + disks hold the routed experts), the placement of the routed
 * (layer, expert) pairs in RAM (coordinator/cluster/cluster_place.h's proportional rule, the
 * coordinator's machine counting as a holder with what its RAM has left) and on disk, and the
 * bandwidth cost model below. Pure arithmetic on the figures it is given: it loads no model and
 * measures nothing. Does not own: reading a model folder (coordinator/cli/cmd_plan.c does that
 * through engine/model.h), printing.
 *
 * Cost model (one target forward of `rows` token rows; every figure an expectation):
 *  * Memory: bytes / mem_gbps per machine; disk: bytes / disk_gbps; network: bytes × 8 /
 *    link_gbitps (1 GB = 1e9 B, 1 Gbit = 1e9 bit). Compute is not counted (decode is
 *    bandwidth-bound), nor is the draft model's own time.
 *  * Coordinator, serially: the resident part is read once per forward whatever `rows` is
 *    (resident_read bytes: the resident part without the embedding table's unread rows); the
 *    bytes of it that do not fit in RAM are read from the coordinator's disk every forward (the
 *    embedding table is the first part left on disk, so streamed = max(0, resident_read −
 *    held)); the sequence state (state_read bytes) is read once per forward from memory.
 *  * Routed experts, per MoE layer l, all holders in parallel: a pair is used by a forward with
 *    probability u(rows) = 1 − (1 − k/E)^rows (rows routed independently, uniformly: the
 *    expected distinct experts of a layer are E·u, at most min(E, rows·k)); a holder reads
 *    u × pair_bytes for each pair it holds, from memory (pairs in RAM) or disk (pairs on
 *    disk: read on every use, never cached); a remote holder also receives and returns every
 *    (row, expert) assignment it gets, rows·k·m/E of them for m pairs of the layer, each
 *    width × 4 bytes (fp32) each way, at min(its link, the coordinator's link).
 *    Layer time = max(t_coordinator_experts, P_any·rtt + max(max_i t_i, NIC)) where t_i =
 *    memory + disk + network time of node i, NIC = all remote bytes through the
 *    coordinator's link, and P_any = 1 − q(m_remote)^rows the chance a row touches a remote
 *    expert (q(m) = C(E − m, k) / C(E, k)): one round trip per MoE layer per forward with remote
 *    experts, the nodes' trips concurrent.
 *    The coordinator's own experts include the layer's shared experts (shared_read / L, read
 *    from its memory while the nodes work: the engine runs them between dispatch and collect),
 *    which are therefore not in its serial part.
 *  * Forward time = coordinator's serial time + Σ_l layer time. Time per token: forward(1 row)
 *    alone; with speculation forward(k + 1 rows) / (accept + 1) (the draft's accepted tokens
 *    plus the target's own).
 */
#ifndef DF_COORD_PLAN_MODEL_H
#define DF_COORD_PLAN_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* What the plan needs of a model (coordinator/cli/cmd_plan.c fills it from engine/model.h). */
typedef struct df_plan_model {
  uint64_t resident_bytes;  /* held by the coordinator: embeddings, attention, norms, routers,
                               shared experts, dense MLPs, lm_head */
  uint64_t resident_read;   /* of it, bytes read per target forward (<= resident_bytes) */
  uint64_t shared_read;     /* of resident_read, the shared experts of all MoE layers: the
                               coordinator reads a layer's share while that layer's remote
                               experts are in flight */
  uint64_t state_bytes;     /* sequence state the coordinator keeps in RAM (KV / recurrent
                               state at the planned context, activation buffers) */
  uint64_t state_read;      /* state bytes read per forward */
  int64_t n_moe_layers;     /* layers with routed experts (0: a dense model) */
  int64_t n_experts;        /* E, routed experts per MoE layer */
  int64_t top_k;            /* k, experts per token row */
  uint64_t pair_bytes;      /* one (layer, expert) pair's weights as stored */
  int64_t width;            /* values per row sent to an expert holder and back (the experts'
                               input width: hidden size, or the latent width) */
} df_plan_model;

/* One machine; node 0 is the coordinator's. */
typedef struct df_plan_node {
  uint64_t mem;        /* RAM bytes */
  double mem_gbps;     /* memory read bandwidth, GB/s (> 0) */
  double disk_gbps;    /* disk read bandwidth, GB/s; 0 = no disk to read weights from */
  uint64_t disk_bytes; /* disk room for weights; UINT64_MAX = enough (ignored without a disk) */
  double link_gbitps;  /* network link, Gbit/s; 0 = none (a machine alone) */
} df_plan_node;

typedef struct df_plan_opts {
  uint64_t reserve;  /* RAM each machine keeps for its OS and runtime */
  double rtt_s;      /* one round trip's latency, seconds */
  int64_t draft_k;   /* draft tokens per verify forward (rows = draft_k + 1); >= 1 */
  double accept;     /* mean accepted draft tokens per verify forward, in [0, draft_k] */
} df_plan_opts;

/* Per machine. Arrays [2]: [0] one row per forward (no speculation), [1] draft_k + 1 rows. */
typedef struct df_plan_node_out {
  uint64_t avail;            /* RAM for weights and state: mem − reserve (0 if below) */
  uint64_t resident_ram;     /* resident part held in RAM (coordinator only) */
  uint64_t resident_disk;    /* resident part left on disk, streamed (coordinator only) */
  uint64_t state;            /* sequence state in RAM (coordinator only) */
  int64_t pairs_ram;         /* routed pairs held in RAM */
  int64_t pairs_disk;        /* routed pairs read from this machine's disk on use */
  double mem_read[2];        /* bytes read from memory per forward */
  double disk_read[2];       /* bytes read from disk per forward */
  double net_bytes[2];       /* bytes over the network per forward, both directions (for the
                                coordinator: all remote traffic) */
  double round_trips[2];     /* expected round trips per forward: a node's to it; the
                                coordinator's, MoE layers that wait for one (Σ_l P_any) */
  double busy_s[2];          /* seconds per forward this machine reads / transfers (the
                                coordinator: serial part + Σ_l max(own experts, its link)) */
} df_plan_node_out;

typedef struct df_plan {
  int n_nodes;
  df_plan_node_out *node;     /* [n_nodes], owned */
  int64_t rows[2];            /* 1, draft_k + 1 */
  double tokens_per_forward[2]; /* 1, accept + 1 */
  double forward_s[2];        /* predicted seconds per forward */
  double s_per_token[2];      /* forward_s / tokens_per_forward */
  double expert_bytes_token;  /* routed-expert bytes one row reads (n_moe · k · pair_bytes) */
  double coord_serial_s[2];   /* the coordinator's serial part of forward_s */
  double experts_s[2];        /* Σ over MoE layers of the layer time */
  double latency_s[2];        /* of experts_s, round-trip latency */
  int64_t pairs;              /* n_moe_layers · n_experts */
  int64_t pairs_unheld;       /* pairs no RAM or disk holds (infeasible when > 0) */
  uint64_t coord_short;       /* bytes of resident part + state the coordinator cannot hold */
  uint64_t expert_short;      /* bytes of routed experts no machine can hold */
  int feasible;               /* 1 when both shortfalls are 0 */
} df_plan;

/* Compute the plan of model m on nodes[n_nodes] (node 0 the coordinator) into *out (zeroed
 * first; release with df_plan_free). Returns 0 with out->feasible 1 for a feasible plan, 0 with
 * out->feasible 0 and the shortfalls set for an infeasible one (the time figures are then not
 * computed), -1 + one line in err on bad input (n_nodes < 1 or > 4096, a bandwidth <= 0 where
 * it is needed: mem_gbps of any machine, link_gbitps of a second machine or of the coordinator
 * of several, opts out of range, m->n_experts < m->top_k) or out of memory. Deterministic. */
int df_plan_compute(const df_plan_model *m, const df_plan_node *nodes, int n_nodes,
                    const df_plan_opts *opts, df_plan *out, char *err, size_t errlen);

/* Free out->node and zero *p; NULL-safe. */
void df_plan_free(df_plan *p);

/* q(m) = C(E − m, k) / C(E, k): the chance one row's k distinct experts of E all avoid m given
 * experts (1 for m <= 0, 0 for m > E − k). */
double df_plan_miss_prob(int64_t n_experts, int64_t top_k, int64_t m);

#endif
