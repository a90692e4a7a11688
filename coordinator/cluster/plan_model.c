/* coordinator/cluster/plan_model.c — placement and time per token of a model on machines; see
 * plan_model.h for the cost model. */
#include "coordinator/cluster/plan_model.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cluster/cluster_place.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && errlen) vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

double df_plan_miss_prob(int64_t n_experts, int64_t top_k, int64_t m) {
  if (m <= 0) return 1.0;
  if (m > n_experts - top_k) return 0.0;
  double q = 1.0; /* prod_{j<k} (E - m - j) / (E - j) */
  for (int64_t j = 0; j < top_k; j++) q *= (double)(n_experts - m - j) / (double)(n_experts - j);
  return q;
}

void df_plan_free(df_plan *p) {
  if (!p) return;
  free(p->node);
  memset(p, 0, sizeof *p);
}

static uint64_t sat_sub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

/* The disk holder for the next pair no RAM holds: the machine with a disk and room whose
 * (pairs on its disk + 1) / disk_gbps is lowest (ties: lower index), so the disks' read times
 * balance; -1 if none. */
static int pick_disk(int n, const df_plan_node *nodes, const uint64_t *room, const int64_t *taken,
                     uint64_t pair) {
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (!(nodes[i].disk_gbps > 0) || room[i] < pair) continue;
    if (best < 0 || (double)(taken[i] + 1) / nodes[i].disk_gbps <
                        (double)(taken[best] + 1) / nodes[best].disk_gbps)
      best = i;
  }
  return best;
}

int df_plan_compute(const df_plan_model *m, const df_plan_node *nodes, int n_nodes,
                    const df_plan_opts *o, df_plan *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (n_nodes < 1 || n_nodes > 4096) return fail(err, errlen, "plan: %d machines (1..4096)", n_nodes);
  if (m->resident_read > m->resident_bytes || m->n_moe_layers < 0 || m->n_experts < 0 ||
      m->top_k < 0 || (m->n_moe_layers > 0 && (m->n_experts < 1 || m->top_k < 1 ||
                                                m->top_k > m->n_experts || m->width < 1)))
    return fail(err, errlen, "plan: inconsistent model figures (experts %lld, top-k %lld)",
                (long long)m->n_experts, (long long)m->top_k);
  if (o->draft_k < 1 || o->draft_k > 1024 || !(o->accept >= 0) || o->accept > (double)o->draft_k ||
      !(o->rtt_s >= 0) || !isfinite(o->rtt_s))
    return fail(err, errlen, "plan: --accept must be in [0, --draft-k] (%g, %lld), the round trip "
                "time >= 0", o->accept, (long long)o->draft_k);
  for (int i = 0; i < n_nodes; i++) {
    const df_plan_node *d = &nodes[i];
    if (!(d->mem_gbps > 0) || !isfinite(d->mem_gbps) || !(d->disk_gbps >= 0) ||
        !isfinite(d->disk_gbps) || !(d->link_gbitps >= 0) || !isfinite(d->link_gbitps))
      return fail(err, errlen, "plan: machine %d: memory bandwidth must be > 0, disk and link >= 0",
                  i + 1);
    if (n_nodes > 1 && !(d->link_gbitps > 0))
      return fail(err, errlen, "plan: machine %d has no network link (0 Gbit/s) but %d machines "
                  "were given", i + 1, n_nodes);
  }
  int n = n_nodes;
  int64_t L = m->n_moe_layers, E = m->n_experts, k = m->top_k;
  int64_t P = L * E;
  uint64_t pair = m->pair_bytes ? m->pair_bytes : 1;
  out->n_nodes = n;
  out->pairs = P;
  out->rows[0] = 1;
  out->rows[1] = o->draft_k + 1;
  out->tokens_per_forward[0] = 1.0;
  out->tokens_per_forward[1] = o->accept + 1.0;
  out->expert_bytes_token = (double)L * (double)k * (double)m->pair_bytes;
  df_plan_node_out *no = out->node = calloc((size_t)n, sizeof *no);
  uint64_t *budget = calloc((size_t)n, sizeof *budget), *droom = calloc((size_t)n, sizeof *droom);
  int64_t *dtaken = calloc((size_t)n, sizeof *dtaken);
  int32_t *prim = malloc((size_t)(P ? P : 1) * sizeof *prim);
  int64_t *cram = calloc((size_t)(L ? L : 1) * (size_t)n, sizeof *cram);
  int64_t *cdisk = calloc((size_t)(L ? L : 1) * (size_t)n, sizeof *cdisk);
  int rc = -1;
  if (!no || !budget || !droom || !dtaken || !prim || !cram || !cdisk) {
    fail(err, errlen, "plan: out of memory");
    goto done;
  }

  /* RAM and disk room */
  for (int i = 0; i < n; i++) {
    no[i].avail = sat_sub(nodes[i].mem, o->reserve);
    budget[i] = no[i].avail;
    droom[i] = nodes[i].disk_gbps > 0 ? nodes[i].disk_bytes : 0;
  }
  /* the coordinator: state in RAM (it cannot stream), then as much of the resident part as
   * fits, the rest on its disk */
  uint64_t ram0 = no[0].avail;
  no[0].state = m->state_bytes;
  if (m->state_bytes > ram0) out->coord_short += m->state_bytes - ram0;
  ram0 = sat_sub(ram0, m->state_bytes);
  no[0].resident_ram = m->resident_bytes < ram0 ? m->resident_bytes : ram0;
  uint64_t rest = m->resident_bytes - no[0].resident_ram;
  if (rest) {
    uint64_t on_disk = rest < droom[0] ? rest : droom[0];
    no[0].resident_disk = on_disk;
    droom[0] -= on_disk;
    out->coord_short += rest - on_disk;
  }
  budget[0] = ram0 - no[0].resident_ram;

  /* routed experts: RAM by the cluster's proportional rule, the rest on disks */
  if (P > 0) df_cluster_place(P, pair, n, budget, 0, prim, NULL);
  for (int64_t p = 0; p < P; p++) {
    if (prim[p] >= 0) {
      no[prim[p]].pairs_ram++;
      cram[(p / E) * n + prim[p]]++;
      continue;
    }
    int i = pick_disk(n, nodes, droom, dtaken, pair);
    if (i < 0) {
      out->pairs_unheld++;
      continue;
    }
    droom[i] -= pair;
    dtaken[i]++;
    no[i].pairs_disk++;
    cdisk[(p / E) * n + i]++;
  }
  out->expert_short = (uint64_t)out->pairs_unheld * m->pair_bytes;
  out->feasible = out->coord_short == 0 && out->expert_short == 0;
  rc = 0;
  if (!out->feasible) goto done;

  /* the cost of one forward of rows[mode] rows */
  double mem_bps0 = nodes[0].mem_gbps * 1e9;
  for (int mode = 0; mode < 2; mode++) {
    double rows = (double)out->rows[mode];
    uint64_t rdisk = m->resident_read > no[0].resident_ram && no[0].resident_disk
                         ? m->resident_read - no[0].resident_ram : 0;
    if (rdisk > no[0].resident_disk) rdisk = no[0].resident_disk;
    double rram = (double)(m->resident_read - rdisk);
    /* each MoE layer's shared experts overlap that layer's remote experts (below) */
    double shared_l = L > 0 && (double)m->shared_read <= rram ? (double)m->shared_read / (double)L : 0;
    rram -= shared_l * (double)L;
    double serial = (rram + (double)m->state_read) / mem_bps0 +
                    (rdisk ? (double)rdisk / (nodes[0].disk_gbps * 1e9) : 0.0);
    no[0].mem_read[mode] = rram + (double)m->state_read;
    no[0].disk_read[mode] = (double)rdisk;
    no[0].busy_s[mode] = serial;
    out->coord_serial_s[mode] = serial;
    double u = E > 0 ? 1.0 - pow(1.0 - (double)k / (double)E, rows) : 0.0; /* P(pair used) */
    double row_bytes = (double)m->width * 4.0;
    double link0 = nodes[0].link_gbitps * 1e9 / 8.0;
    double experts_s = 0, latency_s = 0;
    for (int64_t l = 0; l < L; l++) {
      double t_local = 0, t_remote = 0, nic = 0;
      int64_t m_remote = 0;
      for (int i = 0; i < n; i++) {
        int64_t mr = cram[l * n + i], md = cdisk[l * n + i];
        double bm = (double)mr * u * (double)m->pair_bytes;
        double bd = (double)md * u * (double)m->pair_bytes;
        double t = bm / (nodes[i].mem_gbps * 1e9) + (md ? bd / (nodes[i].disk_gbps * 1e9) : 0.0);
        no[i].mem_read[mode] += bm;
        no[i].disk_read[mode] += bd;
        if (i == 0) {
          t_local = t + shared_l / mem_bps0;
          no[0].mem_read[mode] += shared_l;
          continue;
        }
        double net = 2.0 * rows * (double)k * (double)(mr + md) / (double)E * row_bytes;
        double link = nodes[i].link_gbitps < nodes[0].link_gbitps ? nodes[i].link_gbitps
                                                                  : nodes[0].link_gbitps;
        t += net / (link * 1e9 / 8.0);
        no[i].net_bytes[mode] += net;
        no[0].net_bytes[mode] += net;
        no[i].round_trips[mode] += 1.0 - pow(df_plan_miss_prob(E, k, mr + md), rows);
        no[i].busy_s[mode] += t;
        nic += net / link0;
        m_remote += mr + md;
        if (t > t_remote) t_remote = t;
      }
      /* the coordinator reads its own experts while its link carries the nodes' rows */
      no[0].busy_s[mode] += t_local > nic ? t_local : nic;
      double p_any = 1.0 - pow(df_plan_miss_prob(E, k, m_remote), rows);
      no[0].round_trips[mode] += p_any;
      double remote = p_any * o->rtt_s + (t_remote > nic ? t_remote : nic);
      experts_s += t_local > remote ? t_local : remote;
      if (remote > t_local) latency_s += p_any * o->rtt_s;
    }
    out->experts_s[mode] = experts_s;
    out->latency_s[mode] = latency_s;
    out->forward_s[mode] = serial + experts_s;
    out->s_per_token[mode] = out->forward_s[mode] / out->tokens_per_forward[mode];
  }
done:
  free(budget);
  free(droom);
  free(dtaken);
  free(prim);
  free(cram);
  free(cdisk);
  if (rc != 0) df_plan_free(out);
  return rc;
}
