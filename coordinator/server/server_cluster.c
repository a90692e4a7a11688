/* coordinator/server/server_cluster.c — GET /v1/cluster: what the web UI's dashboard shows,
 * as one JSON document (schema: docs/API.md "Cluster").
 *
 * Owns: the document — the mode (local / cluster), live generation figures from the scheduler
 * (tokens per second, running and queued requests, draft acceptance), and with --cluster the
 * nodes, the placement grid and the expert heat grid of a snapshot the cluster manager
 * published (coordinator/cluster/cluster_status.h; taken without waiting for the manager
 * thread). Does not own: the figures themselves, auth and routing (server.c).
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/cluster/cluster.h"
#include "coordinator/server/server_internal.h"
#include "engine/model.h"

/* [n] counts as a JSON array of integers (counts past 2^63 are clamped). */
static json_t *u64_array(const uint64_t *v, int64_t n) {
  json_t *a = json_array();
  for (int64_t i = 0; a && i < n; i++)
    json_array_append_new(a, json_integer(v[i] > INT64_MAX ? INT64_MAX : (json_int_t)v[i]));
  return a;
}

static json_int_t ji(uint64_t v) { return v > INT64_MAX ? INT64_MAX : (json_int_t)v; }

/* "placement" and "heat": one entry per layer, null for a layer without routed experts. */
static void grids(json_t *o, const df_cluster_snapshot *s) {
  json_t *pl = json_array(), *ht = json_array();
  for (int64_t l = 0; s->holder && l < s->n_layers; l++) {
    const int32_t *h = s->holder + l * s->n_experts;
    if (h[0] == -2) { /* a dense layer */
      json_array_append_new(pl, json_null());
      json_array_append_new(ht, json_null());
      continue;
    }
    json_t *row = json_array();
    for (int64_t e = 0; row && e < s->n_experts; e++)
      json_array_append_new(row, json_integer(h[e] < -1 ? -1 : h[e]));
    json_array_append_new(pl, row);
    json_array_append_new(ht, u64_array(s->heat + l * s->n_experts, s->n_experts));
  }
  json_object_set_new(o, "placement", s->holder ? pl : (json_decref(pl), json_null()));
  json_object_set_new(o, "heat", s->holder ? ht : (json_decref(ht), json_null()));
}

static json_t *node_obj(const df_cluster_node_info *n, int index) {
  return json_pack("{s:i, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                   "index", index, "name", n->name, "key_fingerprint", n->key_fingerprint,
                   "health", n->health, "rtt_us", (json_int_t)n->rtt_us, "budget", ji(n->budget),
                   "device", ji(n->device), "held", ji(n->held), "experts",
                   (json_int_t)n->experts, "routed", (json_int_t)n->routed, "served",
                   ji(n->served), "round_trips", ji(n->round_trips), "errors", ji(n->errors));
}

enum MHD_Result df_srv_handle_cluster(conn *c, struct MHD_Connection *mc) {
  srv_ctx *s = c->srv;
  df_sched_stats st = df_sched_get_stats(s->sched);
  const df_model_config *cfg = df_model_cfg(s->m);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  df_cluster_snapshot *snap = NULL;
  bool cluster = s->o.cluster_mgr != NULL;
  if (cluster && df_cluster_snapshot_get(s->o.cluster_mgr, &snap) != 0)
    return df_srv_send_json(c, mc, 500, NULL); /* out of memory */
  json_t *o = json_pack(
      "{s:s, s:s, s:s, s:I, s:I, s:I, s:{s:f, s:I, s:I, s:I, s:I, s:I, s:{s:b, s:I, s:I, s:o}}}",
      "object", "cluster", "mode", cluster ? "cluster" : "local", "model", s->model_id, "time",
      (json_int_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, "layers",
      (json_int_t)cfg->num_hidden_layers, "experts",
      (json_int_t)(cfg->num_experts > 0 ? cfg->num_experts : 0), "generation",
      "tokens_per_second", st.gen_tok_s, "running", (json_int_t)st.running, "queued",
      (json_int_t)st.queued, "slots", (json_int_t)st.max_seqs, "prompt_tokens",
      (json_int_t)st.prompt_tokens, "completion_tokens", (json_int_t)st.completion_tokens, "draft",
      "enabled", st.drafting, "draft_tokens", (json_int_t)st.drafted, "accepted_tokens",
      (json_int_t)st.accepted, "acceptance",
      st.drafted ? json_real((double)st.accepted / (double)st.drafted) : json_null());
  if (o && snap) {
    json_t *nodes = json_array();
    for (int i = 0; nodes && i < snap->n_nodes; i++)
      json_array_append_new(nodes, node_obj(&snap->nodes[i], i));
    json_object_set_new(o, "nodes", nodes);
    json_object_set_new(
        o, "coordinator",
        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "endpoint",
                  snap->endpoint, "key_fingerprint", snap->key_fingerprint, "snapshot_time",
                  (json_int_t)snap->updated_unix_ms, "pairs", (json_int_t)snap->pairs,
                  "pairs_on_coordinator", (json_int_t)snap->pairs_on_coordinator, "pair_bytes",
                  ji(snap->pair_bytes), "dispatches", ji(snap->dispatches), "round_trips",
                  ji(snap->round_trips), "bytes_tx", ji(snap->bytes_tx), "bytes_rx",
                  ji(snap->bytes_rx), "groups_rerun", ji(snap->groups_rerun), "nodes_dropped",
                  ji(snap->nodes_dropped)));
    grids(o, snap);
  } else if (o) {
    json_object_set_new(o, "nodes", json_array());
    json_object_set_new(o, "coordinator", json_null());
    json_object_set_new(o, "placement", json_null());
    json_object_set_new(o, "heat", json_null());
  }
  df_cluster_snapshot_destroy(&snap);
  char *body = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
  json_decref(o);
  if (!body) return df_srv_send_json(c, mc, 500, NULL);
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body,
                                                           MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", "application/json");
  MHD_add_response_header(r, "Cache-Control", "no-store");
  enum MHD_Result ret = MHD_queue_response(mc, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  df_srv_count(c->srv, c->route, MHD_HTTP_OK);
  c->status = MHD_HTTP_OK;
  return ret;
}
