/* coordinator/cluster/cluster_snapshot.c — the cluster manager's state as a snapshot for
 * readers (the web UI's GET /v1/cluster, `deltafin cluster status`); see cluster_snapshot.h.
 */
#define _GNU_SOURCE
#include "coordinator/cluster/cluster_snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/cluster/cluster_manifest.h"
#include "coordinator/cluster/cluster_status.h"
#include "engine/model.h"
#include "transport/keys.h"

/* The snapshot of c's state now (manager thread), or NULL when out of memory. */
static df_cluster_snapshot *snapshot_build(df_cluster *c) {
  df_cluster_snapshot *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  s->updated_unix_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  snprintf(s->endpoint, sizeof s->endpoint, "%s", c->endpoint);
  df_proto_key_fingerprint(c->kp.pub, s->key_fingerprint);
  const df_cluster_manifest *mf = &c->mf;
  s->n_layers = df_model_cfg(c->m)->num_hidden_layers;
  s->n_experts = mf->n_pairs > 0 ? mf->n_experts : 0;
  s->pairs = mf->n_pairs;
  for (int64_t p = 0; p < mf->n_pairs; p++) s->pairs_on_coordinator += c->route[p] < 0;
  s->pair_bytes = mf->pair_bytes;
  s->dispatches = c->st.dispatches;
  s->round_trips = c->st.round_trips;
  s->bytes_tx = c->st.bytes_tx;
  s->bytes_rx = c->st.bytes_rx;
  s->groups_rerun = c->st.groups_rerun;
  s->nodes_dropped = c->st.nodes_dropped;
  size_t grid = (size_t)(s->n_layers * s->n_experts);
  if (grid) {
    if (!(s->holder = malloc(grid * sizeof *s->holder)) ||
        !(s->heat = calloc(grid, sizeof *s->heat)))
      goto fail;
    for (size_t i = 0; i < grid; i++) s->holder[i] = -2;
    for (int64_t p = 0; p < mf->n_pairs; p++) {
      size_t at = (size_t)(mf->pairs[2 * p] * s->n_experts + mf->pairs[2 * p + 1]);
      s->holder[at] = c->route[p];
      s->heat[at] = c->routed_rows[p];
    }
  }
  if (c->n_mb && !(s->nodes = calloc((size_t)c->n_mb, sizeof *s->nodes))) goto fail;
  for (int i = 0; i < c->n_mb; i++) {
    const member *mb = &c->mb[i];
    df_cluster_node_info *n = &s->nodes[i];
    s->n_nodes = i + 1;
    snprintf(n->name, sizeof n->name, "%s", mb->name);
    memcpy(n->key_fingerprint, mb->fp, sizeof n->key_fingerprint);
    snprintf(n->health, sizeof n->health, "%s",
             !mb->alive ? "dropped" : mb->ready ? "ready" : "provisioning");
    n->rtt_us = mb->rtt_us;
    n->budget = mb->budget;
    n->device = mb->device;
    n->held = mb->held;
    n->experts = mb->n_apairs;
    for (int64_t p = 0; p < mf->n_pairs; p++) n->routed += c->route[p] == i;
    n->served = mb->served;
    n->round_trips = mb->rounds;
    n->errors = mb->errors;
    size_t len = 0;
    FILE *f = open_memstream(&n->placement, &len);
    if (!f) goto fail;
    if (mb->alive) df_cluster_manifest_pairs_text(mf, mb->apairs, mb->n_apairs, f);
    if (fclose(f) != 0) goto fail;
  }
  return s;
fail:
  df_cluster_snapshot_destroy(&s);
  return NULL;
}

/* Manager thread: build a fresh snapshot of c and publish it; out of memory keeps the
 * previous one. */
void df_cluster__publish(df_cluster *c) { df_cluster_board_publish(&c->board, snapshot_build(c)); }

/* Manager thread: publish, then write STATE/cluster-status.json from that snapshot, which
 * `deltafin cluster status` reads. */
void df_cluster__write_status(df_cluster *c) {
  df_cluster__publish(c);
  char path[4200];
  snprintf(path, sizeof path, "%s/cluster-status.json", c->state);
  df_cluster_board_write(&c->board, path);
}
