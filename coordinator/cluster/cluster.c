/* coordinator/cluster/cluster.c — the cluster manager: one thread that owns the ROUTER socket,
 * the ZAP handler, the socket monitor and every piece of membership state.
 *
 * Owns: admission (ZAP decisions, JOIN with token or known key), membership (members keyed
 * by public key, connection = routing id + fd), placement epochs (cluster_place.h) and
 * ASSIGN/FETCH/SHARD_CHUNK/READY provisioning, routing of each MoE layer's groups, the FFN
 * round trips and their deadline, failure handling (a dropped node's groups come back as
 * DF_WHERE_FAILED and its pairs are re-placed), PING/STATS, the status file read by
 * `deltafin cluster status`, and the mDNS/DNS-SD announcement while it listens (started and
 * withdrawn here, run by transport/dnssd.c on its own thread). Does not own: computing experts (the forward thread runs the
 * coordinator's share through the local backend, expert_remote.c), keys/tokens files
 * (transport/keys.c). Protocol: docs/PROTOCOL.md.
 */
#define _GNU_SOURCE
#include "coordinator/cluster/cluster_mgr.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "coordinator/cluster/cluster_manifest.h"
#include "coordinator/cluster/cluster_snapshot.h"
#include "coordinator/cluster/cluster_place.h"
#include "engine/model.h"
#include "transport/keys.h"
#include "transport/lograte.h"
#include "transport/sock.h"

#define PING_MS 2000
#define STATS_MS 10000
#define SNAP_MS 500          /* the snapshot's refresh period while someone reads it */
#define SNAP_WANTED_MS 5000  /* ... that is, asked for it within this many ms */
#define MAX_INBOUND_HDR (64 << 10)
#define DF_RESULT_MAX_ABS 1.2676506e30f /* 2^100: largest |value| a RESULT may hold */

enum { CTL_JOB = 1, CTL_WAIT, CTL_STOP, CTL_PLANNED, CTL_DONE, CTL_WAITED };

typedef struct ctl_msg {
  int kind;
  df_cluster_job *job;
  int64_t deadline_ms;
  int min_nodes;
  int result;
} ctl_msg;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* One line on stderr ("deltafin: cluster: " + text). Identical lines are rate-limited
 * (transport/lograte.h): a node or an attacker retrying in a loop must not flood the log. */
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static df_proto_lograte g_log_rate;
static void cl_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void cl_log(const char *fmt, ...) {
  char line[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&g_log_mu);
  if (!g_log_rate.window_ms) df_proto_lograte_init(&g_log_rate, DF_PROTO_LOGRATE_WINDOW_MS);
  uint64_t held = 0;
  if (df_proto_lograte_admit(&g_log_rate, line, now_ms(), &held)) {
    if (held)
      fprintf(stderr, "deltafin: cluster: %s (%llu more like this in the last %d s)\n", line,
              (unsigned long long)held, DF_PROTO_LOGRATE_WINDOW_MS / 1000);
    else
      fprintf(stderr, "deltafin: cluster: %s\n", line);
  }
  pthread_mutex_unlock(&g_log_mu);
}

/* An informational line (listening, joined, ready, ...): not written with o.quiet. */
#define cl_info(c, ...)                        \
  do {                                         \
    if (!(c)->o.quiet) cl_log(__VA_ARGS__);    \
  } while (0)

static void replan(df_cluster *c);

/* ---- sending ----------------------------------------------------------------------- */

static int send_to(df_cluster *c, member *mb, df_proto_msg *m, const void *payload, size_t len) {
  char err[256];
  if (df_proto_send(c->router, mb->rid, mb->rid_len, m, payload, len, ZMQ_DONTWAIT, err, sizeof err) != 0)
    return -1;
  mb->last_tx_ms = now_ms();
  return 0;
}

/* SHARD_CHUNK payload straight from the model's mapping (zero-copy: the mapping outlives
 * the context, which is terminated before the model is destroyed). */
static void no_free(void *data, void *hint) { (void)data, (void)hint; }
static int send_chunk(df_cluster *c, member *mb, df_proto_msg *m, const uint8_t *data, size_t len) {
  uint8_t *hdr;
  size_t hl;
  char err[128];
  if (df_proto_encode(m, &hdr, &hl, err, sizeof err) != 0) return -1;
  zmq_msg_t pm;
  int rc = -1;
  if (zmq_send(c->router, mb->rid, mb->rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
      zmq_send(c->router, hdr, hl, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
    goto done;
  zmq_msg_init_data(&pm, (void *)data, len, no_free, NULL);
  if (zmq_msg_send(&pm, c->router, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&pm);
    goto done;
  }
  mb->last_tx_ms = now_ms();
  rc = 0;
done:
  free(hdr);
  return rc;
}

/* ---- membership -------------------------------------------------------------------- */

static member *find_key(df_cluster *c, const char *key) {
  for (int i = 0; i < c->n_mb; i++)
    if (!strcmp(c->mb[i].key, key)) return &c->mb[i];
  return NULL;
}

static int ready_count(const df_cluster *c, bool *all_ready) {
  int n = 0;
  *all_ready = true;
  for (int i = 0; i < c->n_mb; i++) {
    if (!c->mb[i].alive) continue;
    if (c->mb[i].ready) n++;
    else *all_ready = false;
  }
  return n;
}

static void ctl_reply(df_cluster *c, int kind, int result) {
  ctl_msg r = {.kind = kind, .result = result};
  zmq_send(c->ctl_mgr, &r, sizeof r, 0);
}

static void check_wait(df_cluster *c, bool timed_out) {
  if (!c->waiting) return;
  bool all;
  int n = ready_count(c, &all);
  if ((n >= c->wait_min && all) || timed_out) {
    c->waiting = false;
    ctl_reply(c, CTL_WAITED, n);
  }
}

/* The job has nothing in flight: tell the forward thread (CTL_DONE, once per job). */
static void job_finish_if_done(df_cluster *c) {
  if (c->job && c->job_outstanding == 0) c->job = NULL;
  if (!c->job && c->job_open) {
    c->job_open = false;
    ctl_reply(c, CTL_DONE, 0);
  }
}

/* Mark the in-flight groups of mb failed (the forward thread reruns them). */
static void fail_outstanding(df_cluster *c, member *mb) {
  if (!mb->outstanding) return;
  mb->outstanding = false;
  if (c->job) {
    for (int i = 0; i < mb->n_grp; i++) c->job->where[mb->grp[i]] = DF_WHERE_FAILED;
    c->st.groups_rerun += (uint64_t)mb->n_grp;
    c->job_outstanding--;
    job_finish_if_done(c);
  }
}

static void drop_member(df_cluster *c, member *mb, const char *why, bool bye) {
  if (!mb->alive) return;
  cl_log("dropped node %s (%s): %s", mb->name, mb->fp, why);
  if (!mb->said_bye) mb->errors++;
  mb->said_bye = false;
  if (bye) {
    df_proto_msg b = {.op = DF_PROTO_BYE, .id = ++c->id_seq};
    snprintf(b.reason, sizeof b.reason, "%s", why);
    send_to(c, mb, &b, NULL, 0);
  }
  mb->alive = mb->ready = false;
  mb->fd = -1;
  c->st.nodes_dropped++;
  fail_outstanding(c, mb);
  replan(c);
  check_wait(c, false);
}

static void recompute_routes(df_cluster *c) {
  for (int64_t p = 0; p < c->mf.n_pairs; p++) {
    int r = -1, a = c->prim[p], b = c->repl[p];
    if (a >= 0 && c->mb[a].alive && c->mb[a].ready) r = a;
    else if (b >= 0 && c->mb[b].alive && c->mb[b].ready) r = b;
    c->route[p] = r;
  }
}

static int cmp_key(const void *a, const void *b, void *arg) {
  const df_cluster *c = arg;
  return strcmp(c->mb[*(const int *)a].key, c->mb[*(const int *)b].key);
}

static void send_assign(df_cluster *c, member *mb) {
  /* a node that cannot serve this model's experts is given none, in version 2's first form
   * (it would ignore `act` / `mx`): it stays a member that holds nothing */
  bool full = mb->can_serve;
  int tpp = full ? c->mf.tpp : 3;
  df_proto_msg a = {.op = DF_PROTO_ASSIGN, .epoch = mb->epoch, .hidden = c->mf.hidden,
                    .inter = c->mf.inter, .max_rows = df_model_max_rows(c->m),
                    .block_n = full ? c->mf.block_n : 0, .block_k = full ? c->mf.block_k : 0,
                    .mx = full ? c->mf.mx : 0,
                    .act_kind = full ? c->mf.act_kind : DF_PROTO_ACT_SILU,
                    .act_beta = full ? c->mf.act_beta : 0,
                    .act_beta_lin = full ? c->mf.act_beta_lin : 0,
                    .n_pairs = full ? mb->n_apairs : 0,
                    .n_tensors = full ? tpp * mb->n_apairs : 0};
  a.id = mb->reply_id ? mb->reply_id : ++c->id_seq;
  mb->reply_id = 0;
  a.pairs = malloc((size_t)(mb->n_apairs ? mb->n_apairs : 1) * 2 * sizeof *a.pairs);
  a.tensors = malloc((size_t)(mb->n_apairs ? mb->n_apairs : 1) * (size_t)tpp * sizeof *a.tensors);
  if (!a.pairs || !a.tensors) {
    cl_log("out of memory building an assignment for %s", mb->name);
    goto done;
  }
  for (int64_t i = 0; i < a.n_pairs; i++) { /* full: tpp is the manifest's */
    int64_t p = mb->apairs[i];
    a.pairs[2 * i] = c->mf.pairs[2 * p];
    a.pairs[2 * i + 1] = c->mf.pairs[2 * p + 1];
    memcpy(&a.tensors[tpp * i], &c->mf.t[tpp * p], (size_t)tpp * sizeof *a.tensors);
  }
  if (send_to(c, mb, &a, NULL, 0) != 0) cl_log("cannot send ASSIGN to %s", mb->name);
done:
  free(a.pairs);
  free(a.tensors);
}

/* Recompute the plan for the live members; send ASSIGN to every member whose pairs changed
 * (or who waits for an answer to its JOIN). */
static void replan(df_cluster *c) {
  int idx[MAX_MEMBERS], n = 0;
  uint64_t budgets[MAX_MEMBERS], device[MAX_MEMBERS];
  for (int i = 0; i < c->n_mb; i++)
    if (c->mb[i].alive) idx[n++] = i;
  qsort_r(idx, (size_t)n, sizeof *idx, cmp_key, c);
  for (int i = 0; i < n; i++) { /* a node that cannot serve these experts has no room */
    bool ok = c->mb[idx[i]].can_serve;
    budgets[i] = ok ? c->mb[idx[i]].budget : 0;
    device[i] = ok ? c->mb[idx[i]].device : 0;
  }
  int64_t P = c->mf.n_pairs;
  int64_t placed = df_cluster_place_hot(P, c->mf.pair_bytes, n, budgets, device, c->heat, 1, c->prim,
                                        c->repl);
  for (int64_t p = 0; p < P; p++) {
    if (c->prim[p] >= 0) c->prim[p] = idx[c->prim[p]];
    if (c->repl[p] >= 0) c->repl[p] = idx[c->repl[p]];
  }
  if (placed > 0 && !c->mf.hashed) {
    char err[256];
    int64_t t0 = now_ms();
    if (df_cluster_manifest_hash(&c->mf, c->m, c->state, err, sizeof err) != 0)
      cl_log("manifest: %s", err);
    if (now_ms() - t0 > 500) cl_info(c, "hashed %.1f MiB of expert tensors in %.1f s", c->mf.total_bytes / 1048576.0,
                                  (now_ms() - t0) / 1000.0);
  }
  int64_t *list = malloc((size_t)(P ? P : 1) * sizeof *list);
  if (!list) return;
  for (int k = 0; k < n; k++) {
    member *mb = &c->mb[idx[k]];
    int64_t cnt = 0;
    for (int64_t p = 0; p < P; p++)
      if (c->prim[p] == idx[k] || c->repl[p] == idx[k]) list[cnt++] = p;
    bool same = mb->epoch && cnt == mb->n_apairs &&
                (cnt == 0 || !memcmp(list, mb->apairs, (size_t)cnt * sizeof *list));
    if (same && !mb->reply_id) continue;
    int64_t *ap = malloc((size_t)(cnt ? cnt : 1) * sizeof *ap);
    if (!ap) continue;
    memcpy(ap, list, (size_t)cnt * sizeof *ap);
    free(mb->apairs);
    mb->apairs = ap;
    mb->n_apairs = cnt;
    mb->epoch = ++c->epoch_seq;
    mb->ready = false;
    send_assign(c, mb);
  }
  free(list);
  recompute_routes(c);
  c->status_due = 0;
}

/* ZAP: admit keys on the allow-list, and the join key of each open token (a node redeeming
 * it); a peer holding neither never completes the handshake, so nothing it sends is read. */
static bool zap_decide(void *user, const char *pub, const char *address, char *why, size_t whylen) {
  df_cluster *c = user;
  char fp[17], tw[64];
  df_proto_key_fingerprint(pub, fp);
  if (df_proto_allow_has(c->state, pub, NULL, 0)) return true;
  if (df_proto_token_join_key_open(c->state, pub, tw, sizeof tw)) return true; /* JOIN only */
  snprintf(why, whylen, "unknown key");
  cl_log("refused connection from %s: unknown key %s (not admitted; as a join key: %s)", address,
         fp, tw);
  return false;
}

/* JOIN on a token's join connection: the token admits the node's own key (JOIN `key`), and
 * ADMIT tells the node to reconnect with it. */
static void on_token_join(df_cluster *c, df_proto_frames *f, df_proto_msg *m, const char *fp) {
  char why[256], kfp[17];
  if (df_proto_token_admit(c->state, m->token, f->user, m->key, m->name, why, sizeof why) != 0) {
    cl_log("refused JOIN from %s on a token's key: %s", fp, why);
    df_proto_send_error(c->router, f->rid, f->rid_len, m->id, DF_PROTO_E_UNAUTHORIZED, why);
    return;
  }
  df_proto_key_fingerprint(m->key, kfp);
  cl_info(c, "a token admitted key %s", kfp);
  snprintf(c->admitted[c->n_admitted++ % 8], DF_PROTO_Z85_KEY + 1, "%s", m->key);
  df_proto_msg a = {.op = DF_PROTO_ADMIT, .id = m->id};
  df_proto_send(c->router, f->rid, f->rid_len, &a, NULL, 0, ZMQ_DONTWAIT, why, sizeof why);
}

static void on_join(df_cluster *c, df_proto_frames *f, df_proto_msg *m) {
  char fp[17];
  df_proto_key_fingerprint(f->user, fp);
  char stored[DF_PROTO_Z85_KEY + 64] = ""; /* the name the key was admitted under */
  if (!df_proto_allow_has(c->state, f->user, stored, sizeof stored)) {
    /* ZAP admitted it as an open token's join key (or the token closed since) */
    on_token_join(c, f, m, fp);
    return;
  }
  bool by_token = false;
  for (int i = 0; i < 8 && !by_token; i++)
    if (!strcmp(c->admitted[i], f->user)) by_token = true, c->admitted[i][0] = 0;
  member *mb = find_key(c, f->user);
  if (!mb) {
    /* a new key: a fresh slot, else the slot of a node that left (dropped members are in no
     * plan: replan ran when they went), so keys that come and go never fill the table */
    member *reuse = NULL;
    if (c->n_mb == MAX_MEMBERS)
      for (int i = 0; i < c->n_mb && !reuse; i++)
        if (!c->mb[i].alive && !c->mb[i].outstanding) reuse = &c->mb[i];
    if (c->n_mb == MAX_MEMBERS && !reuse) {
      df_proto_send_error(c->router, f->rid, f->rid_len, m->id, DF_PROTO_E_INTERNAL, "cluster full");
      return;
    }
    if (reuse) {
      cl_info(c, "slot of departed node %s (%s) reused", reuse->name, reuse->fp);
      free(reuse->grp);
      free(reuse->ex);
      free(reuse->rows);
      mb = reuse;
    } else {
      mb = &c->mb[c->n_mb++];
    }
    memset(mb, 0, sizeof *mb);
    snprintf(mb->key, sizeof mb->key, "%s", f->user);
    memcpy(mb->fp, fp, sizeof fp);
    int64_t E = c->mf.n_experts > 0 ? c->mf.n_experts : 1;
    mb->grp = malloc((size_t)E * sizeof *mb->grp);
    mb->ex = malloc((size_t)E * sizeof *mb->ex);
    mb->rows = malloc((size_t)E * sizeof *mb->rows);
    if (!mb->grp || !mb->ex || !mb->rows) {
      free(mb->grp);
      free(mb->ex);
      free(mb->rows);
      memset(mb, 0, sizeof *mb); /* a dead, keyless slot: reusable */
      if (!reuse) c->n_mb--;
      df_proto_send_error(c->router, f->rid, f->rid_len, m->id, DF_PROTO_E_INTERNAL, "out of memory");
      return;
    }
  } else if (mb->alive) {
    fail_outstanding(c, mb); /* the old connection is gone */
  }
  /* the allow-list's name, which `deltafin cluster revoke` matches, not what JOIN claims now */
  snprintf(mb->name, sizeof mb->name, "%s", stored[0] && strcmp(stored, "-") ? stored : m->name);
  for (char *q = mb->name; *q; q++) /* peer text in logs and status: printable ASCII only */
    if ((unsigned char)*q <= 0x20 || (unsigned char)*q > 0x7e || *q == '"' || *q == '\\') *q = '_';
  memcpy(mb->rid, f->rid, f->rid_len);
  mb->rid_len = f->rid_len;
  mb->fd = f->fd;
  mb->budget = m->memory;
  mb->device = m->device; /* the codec keeps it <= memory */
  mb->can_serve = (c->mf.needs & ~m->features) == 0;
  mb->has_model = m->has_model;
  mb->alive = true;
  mb->ready = false;
  mb->epoch = 0; /* force an ASSIGN */
  mb->reply_id = m->id;
  mb->joined_ms = mb->last_tx_ms = now_ms();
  char dev[64] = "";
  if (mb->device) snprintf(dev, sizeof dev, " (%.1f MiB on its device)", mb->device / 1048576.0);
  cl_info(c, "node %s (%s) joined%s: budget %.1f MiB%s%s", mb->name, fp,
         by_token ? " with a token" : " with its stored key",
       mb->budget / 1048576.0, dev, mb->has_model ? ", has the checkpoint" : "");
  if (!mb->can_serve && c->mf.n_pairs > 0)
    cl_log("node %s (%s) does not declare %s (a df-node older than this model's experts): it is "
           "given none of them; update it", mb->name, fp,
           df_cluster_manifest_missing(&c->mf, m->features));
  replan(c);
}

static void on_fetch(df_cluster *c, member *mb, df_proto_msg *m) {
  if (m->epoch != mb->epoch) return; /* stale */
  int tpp = c->mf.tpp;
  if (m->tensor >= (uint64_t)tpp * (uint64_t)mb->n_apairs) {
    drop_member(c, mb, "FETCH of a tensor outside its assignment", true);
    return;
  }
  int64_t p = mb->apairs[m->tensor / (uint64_t)tpp];
  int k = (int)(m->tensor % (uint64_t)tpp);
  const df_proto_tensor *t = &c->mf.t[tpp * p + k];
  if (m->offset >= t->nbytes) {
    drop_member(c, mb, "FETCH past the end of a tensor", true);
    return;
  }
  uint64_t len = t->nbytes - m->offset < m->length ? t->nbytes - m->offset : m->length;
  df_proto_msg r = {.op = DF_PROTO_SHARD_CHUNK, .id = m->id, .epoch = m->epoch, .tensor = m->tensor,
                    .offset = m->offset, .total = t->nbytes};
  if (send_chunk(c, mb, &r, c->mf.data[tpp * p + k] + m->offset, (size_t)len) != 0)
    cl_log("cannot stream to %s: %s", mb->name, zmq_strerror(zmq_errno()));
  mb->bytes_tx += len;
}

static void on_result(df_cluster *c, member *mb, df_proto_msg *m, df_proto_frames *f) {
  if (!mb->outstanding || m->id != mb->out_id || !c->job) {
    drop_member(c, mb, "RESULT that answers no request", true);
    return;
  }
  const df_expert_request *req = c->job->req;
  int64_t H = c->mf.hidden;
  if (m->total_rows != mb->out_rows || m->cols != H || !f->has_payload || f->n_frames != 2 ||
      (int64_t)zmq_msg_size(&f->payload) != mb->out_rows * H * 4) {
    char why[160];
    snprintf(why, sizeof why, "wrongly-shaped RESULT (%lld x %lld, %zu payload bytes; expected %lld x %lld)",
             (long long)m->total_rows, (long long)m->cols,
             f->has_payload ? zmq_msg_size(&f->payload) : 0, (long long)mb->out_rows, (long long)H);
    drop_member(c, mb, why, true);
    return;
  }
  /* honest outputs are finite and far below 2^100; a NaN, an Inf or a value past it would
   * poison the generation: the node is dropped, its rows recomputed elsewhere */
  const float *src = zmq_msg_data(&f->payload);
  size_t n_vals = (size_t)(mb->out_rows * H);
  float bad_v = 0;
  size_t bad_at = df_proto_first_implausible(src, n_vals, DF_RESULT_MAX_ABS, &bad_v);
  if (bad_at < n_vals) {
    char why[160];
    snprintf(why, sizeof why, "RESULT with a non-finite or implausible value (%g at row %lld "
             "column %lld)", (double)bad_v, (long long)(bad_at / (size_t)H),
             (long long)(bad_at % (size_t)H));
    drop_member(c, mb, why, true);
    return;
  }
  float *y = df_t_f32(req->y);
  for (int i = 0; i < mb->n_grp; i++) {
    int g = mb->grp[i];
    int64_t r0 = req->offsets[g], n = req->offsets[g + 1] - r0;
    memcpy(y + r0 * H, src, (size_t)(n * H) * sizeof(float));
    src += n * H;
    c->job->where[g] = DF_WHERE_DONE;
  }
  mb->bytes_rx += zmq_msg_size(&f->payload) + zmq_msg_size(&f->hdr);
  c->st.bytes_rx += zmq_msg_size(&f->payload) + zmq_msg_size(&f->hdr);
  mb->outstanding = false;
  c->job_outstanding--;
  job_finish_if_done(c);
}

static void on_router(df_cluster *c, df_proto_frames *f) {
  df_proto_msg m;
  int code;
  char why[300];
  member *mb = f->user[0] ? find_key(c, f->user) : NULL;
  if (mb && !mb->alive) mb = NULL;
  if (mb && (mb->rid_len != f->rid_len || memcmp(mb->rid, f->rid, f->rid_len))) mb = NULL; /* old connection */
  if (zmq_msg_size(&f->hdr) > MAX_INBOUND_HDR ||
      df_proto_decode(zmq_msg_data(&f->hdr), zmq_msg_size(&f->hdr), &m, &code, why, sizeof why) != 0) {
    if (zmq_msg_size(&f->hdr) > MAX_INBOUND_HDR) {
      code = DF_PROTO_E_MALFORMED;
      snprintf(why, sizeof why, "header of %zu bytes exceeds %d", zmq_msg_size(&f->hdr), MAX_INBOUND_HDR);
      memset(&m, 0, sizeof m);
    }
    char fp[17] = "-";
    if (f->user[0]) df_proto_key_fingerprint(f->user, fp);
    cl_log("refused message from %s: %s", mb ? mb->name : fp, why);
    df_proto_send_error(c->router, f->rid, f->rid_len, m.id, (uint32_t)code, why);
    if (mb) drop_member(c, mb, code == DF_PROTO_E_VERSION ? "unsupported protocol version" : "malformed message", true);
    return;
  }
  if (m.op == DF_PROTO_JOIN) {
    on_join(c, f, &m);
    goto done;
  }
  if (!mb) {
    /* a peer that has not joined (pending key) or a dropped one: only JOIN is accepted */
    char fp[17] = "-";
    if (f->user[0]) df_proto_key_fingerprint(f->user, fp);
    if (m.op != DF_PROTO_PONG && m.op != DF_PROTO_BYE && m.op != DF_PROTO_READY && m.op != DF_PROTO_ERROR) {
      cl_log("refused %s from %s: not a member (JOIN first)", df_proto_op_name(m.op), fp);
      df_proto_send_error(c->router, f->rid, f->rid_len, m.id, DF_PROTO_E_UNAUTHORIZED, "not joined");
    }
    goto done;
  }
  if (f->n_frames != (m.op == DF_PROTO_RESULT ? 2 : 1)) {
    if (m.op == DF_PROTO_RESULT) {
      on_result(c, mb, &m, f); /* reports the shape error and drops */
    } else {
      df_proto_send_error(c->router, f->rid, f->rid_len, m.id, DF_PROTO_E_MALFORMED, "unexpected payload frames");
      drop_member(c, mb, "unexpected payload frames", true);
    }
    goto done;
  }
  switch (m.op) {
  case DF_PROTO_READY:
    if (m.epoch == mb->epoch && !mb->ready) {
      mb->ready = true;
      mb->held = m.held;
      cl_info(c, "node %s ready: %lld experts, %.1f MiB", mb->name, (long long)mb->n_apairs, m.held / 1048576.0);
      recompute_routes(c);
      c->status_due = 0;
      check_wait(c, false);
    }
    break;
  case DF_PROTO_FETCH: on_fetch(c, mb, &m); break;
  case DF_PROTO_RESULT: on_result(c, mb, &m, f); break;
  case DF_PROTO_PONG:
    if (m.id == mb->ping_id) mb->rtt_us = now_us() - mb->last_ping_ms * 1000;
    break;
  case DF_PROTO_STATS:
    mb->served = m.served;
    mb->held = m.held;
    break;
  case DF_PROTO_BYE:
    mb->said_bye = true; /* leaving is not a fault */
    drop_member(c, mb, m.reason[0] ? m.reason : "node said bye", false);
    break;
  case DF_PROTO_ERROR:
    if (mb->outstanding && m.id == mb->out_id) {
      snprintf(why, sizeof why, "error %u on FFN: %s", m.code, m.reason);
      drop_member(c, mb, why, true);
    } else {
      cl_log("node %s reports error %u: %s", mb->name, m.code, m.reason);
      mb->errors++;
      if (m.code == DF_PROTO_E_INTERNAL || m.code == DF_PROTO_E_BAD_REQUEST) drop_member(c, mb, m.reason, true);
    }
    break;
  default:
    df_proto_send_error(c->router, f->rid, f->rid_len, m.id, DF_PROTO_E_BAD_REQUEST, "unexpected op");
    drop_member(c, mb, "unexpected op", true);
    break;
  }
done:
  df_proto_msg_free(&m);
}

/* ---- jobs -------------------------------------------------------------------------- */

static void start_job(df_cluster *c, df_cluster_job *j) {
  const df_expert_request *req = j->req;
  int64_t H = c->mf.hidden;
  c->st.dispatches++;
  for (int g = 0; g < req->n_groups; g++) j->where[g] = DF_WHERE_LOCAL;
  int32_t base = req->layer >= 0 && req->layer < df_model_cfg(c->m)->num_hidden_layers
                     ? c->mf.pair_of_layer[req->layer] : -1;
  c->job_outstanding = 0;
  /* the nodes compute the manifest's (the config's) activation; a request asking another
   * (no family does) runs here */
  bool act_ok = df_cluster_manifest_act_ok(&c->mf, req->act);
  c->job_open = true;
  if (base >= 0) /* the heat the dashboard shows (/v1/cluster) */
    for (int g = 0; g < req->n_groups; g++)
      c->routed_rows[base + req->experts[g]] += (uint64_t)(req->offsets[g + 1] - req->offsets[g]);
  if (base < 0 || c->n_mb == 0 || !act_ok) {
    c->st.groups_local += (uint64_t)req->n_groups;
    ctl_reply(c, CTL_PLANNED, 0);
    job_finish_if_done(c);
    return;
  }
  for (int i = 0; i < c->n_mb; i++) c->mb[i].n_grp = 0, c->mb[i].out_rows = 0;
  for (int g = 0; g < req->n_groups; g++) {
    int r = c->route[base + req->experts[g]];
    if (r < 0) continue;
    member *mb = &c->mb[r];
    mb->grp[mb->n_grp++] = g;
    mb->out_rows += req->offsets[g + 1] - req->offsets[g];
  }
  const float *x = df_t_data(req->x);
  for (int i = 0; i < c->n_mb; i++) {
    member *mb = &c->mb[i];
    if (!mb->n_grp) continue;
    if (mb->out_rows * H > mb->sendcap) {
      float *nb = realloc(mb->sendbuf, (size_t)(mb->out_rows * H) * sizeof(float));
      if (!nb) {
        mb->n_grp = 0;
        continue;
      }
      mb->sendbuf = nb;
      mb->sendcap = mb->out_rows * H;
    }
    float *dst = mb->sendbuf;
    for (int k = 0; k < mb->n_grp; k++) {
      int g = mb->grp[k];
      int64_t r0 = req->offsets[g], n = req->offsets[g + 1] - r0;
      memcpy(dst, x + r0 * H, (size_t)(n * H) * sizeof(float));
      dst += n * H;
      mb->ex[k] = req->experts[g];
      mb->rows[k] = n;
    }
    df_proto_msg f = {.op = DF_PROTO_FFN, .id = ++c->id_seq, .layer = req->layer, .n_groups = mb->n_grp,
                      .experts = mb->ex, .rows = mb->rows, .cols = H};
    size_t bytes = (size_t)(mb->out_rows * H) * sizeof(float);
    if (send_to(c, mb, &f, mb->sendbuf, bytes) != 0) {
      drop_member(c, mb, "unreachable", false); /* its groups stay LOCAL */
      continue;
    }
    mb->outstanding = true;
    mb->out_id = f.id;
    mb->rounds++;
    c->job_outstanding++;
    c->st.round_trips++;
    c->st.bytes_tx += bytes + 64;
    mb->bytes_tx += bytes;
    c->st.groups_remote += (uint64_t)mb->n_grp;
    for (int k = 0; k < mb->n_grp; k++) j->where[mb->grp[k]] = DF_WHERE_REMOTE;
  }
  for (int g = 0; g < req->n_groups; g++) c->st.groups_local += j->where[g] == DF_WHERE_LOCAL;
  if (c->job_outstanding) {
    c->st.remote_calls++;
    c->job = j;
    c->job_deadline = now_ms() + (int64_t)(c->o.timeout_s * 1000);
  }
  ctl_reply(c, CTL_PLANNED, 0);
  job_finish_if_done(c);
}

static void on_ctl(df_cluster *c) {
  ctl_msg m;
  if (zmq_recv(c->ctl_mgr, &m, sizeof m, ZMQ_DONTWAIT) != (int)sizeof m) return;
  switch (m.kind) {
  case CTL_JOB: start_job(c, m.job); break; /* PLANNED now; DONE when nothing is in flight */
  case CTL_WAIT:
    c->waiting = true;
    c->wait_deadline = m.deadline_ms;
    c->wait_min = m.min_nodes;
    check_wait(c, false);
    break;
  case CTL_STOP: c->stop = true; break;
  default: break;
  }
}

/* ---- monitor, pings, status -------------------------------------------------------- */

static void on_monitor(df_cluster *c) {
  for (;;) {
    zmq_msg_t a, b;
    zmq_msg_init(&a);
    zmq_msg_init(&b);
    if (zmq_msg_recv(&a, c->mon, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&a);
      return;
    }
    if (zmq_msg_more(&a)) zmq_msg_recv(&b, c->mon, 0);
    if (zmq_msg_size(&a) >= 6) {
      uint16_t ev;
      uint32_t val;
      memcpy(&ev, zmq_msg_data(&a), 2);
      memcpy(&val, (uint8_t *)zmq_msg_data(&a) + 2, 4);
      if (ev == ZMQ_EVENT_DISCONNECTED) {
        for (int i = 0; i < c->n_mb; i++)
          if (c->mb[i].alive && c->mb[i].fd == (int)val) drop_member(c, &c->mb[i], "connection closed", false);
      } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        char fp[17];
        df_proto_key_fingerprint(c->kp.pub, fp);
        cl_log("a CURVE handshake on %.*s failed: a client without this coordinator's key %s "
               "(a token or stored key of another coordinator), or not a CURVE client",
               (int)zmq_msg_size(&b), (const char *)zmq_msg_data(&b), fp);
      }
    }
    zmq_msg_close(&a);
    zmq_msg_close(&b);
  }
}

int df_cluster_snapshot_get(df_cluster *c, df_cluster_snapshot **out) {
  *out = NULL;
  return c ? df_cluster_board_get(&c->board, out) : -1;
}

static void timers(df_cluster *c, int64_t t) {
  if (c->job && t >= c->job_deadline) {
    for (int i = 0; i < c->n_mb; i++)
      if (c->mb[i].outstanding) drop_member(c, &c->mb[i], "missed the FFN deadline", true);
  }
  if (c->waiting && t >= c->wait_deadline) check_wait(c, true);
  for (int i = 0; i < c->n_mb; i++) {
    member *mb = &c->mb[i];
    if (!mb->alive || mb->outstanding) continue;
    if (t - mb->last_tx_ms >= PING_MS) {
      df_proto_msg p = {.op = t - mb->last_stats_ms >= STATS_MS ? DF_PROTO_STATS : DF_PROTO_PING,
                        .id = ++c->id_seq};
      if (p.op == DF_PROTO_STATS) mb->last_stats_ms = t;
      else {
        mb->ping_id = p.id;
        mb->last_ping_ms = t;
      }
      send_to(c, mb, &p, NULL, 0);
    }
  }
  if (t >= c->status_due) {
    df_cluster__write_status(c); /* publishes too */
    c->status_due = t + STATS_MS;
    c->snap_due = t + SNAP_MS;
  } else if (t >= c->snap_due && df_cluster_board_wanted(&c->board, SNAP_WANTED_MS)) {
    df_cluster__publish(c); /* someone reads the snapshot (/v1/cluster): keep it fresh */
    c->snap_due = t + SNAP_MS;
  }
  /* the allow-list changed (deltafin cluster revoke): drop members no longer on it; looked
   * at once a second, not on every pass of the loop (which runs per layer's round trip) */
  if (t < c->nodes_check_ms) return;
  c->nodes_check_ms = t + 1000;
  char p[4200];
  struct stat st;
  snprintf(p, sizeof p, "%s/nodes", c->state);
  if (stat(p, &st) == 0 && (st.st_mtim.tv_sec != c->nodes_mtime.tv_sec ||
                            st.st_mtim.tv_nsec != c->nodes_mtime.tv_nsec)) {
    c->nodes_mtime = st.st_mtim;
    for (int i = 0; i < c->n_mb; i++)
      if (c->mb[i].alive && !df_proto_allow_has(c->state, c->mb[i].key, NULL, 0))
        drop_member(c, &c->mb[i], "key revoked", true);
  }
}

static int64_t next_timeout(const df_cluster *c, int64_t t) {
  int64_t due = c->status_due;
  if (c->job && c->job_deadline < due) due = c->job_deadline;
  if (c->waiting && c->wait_deadline < due) due = c->wait_deadline;
  if (df_cluster_board_wanted(&c->board, SNAP_WANTED_MS) && c->snap_due < due) due = c->snap_due;
  for (int i = 0; i < c->n_mb; i++)
    if (c->mb[i].alive && !c->mb[i].outstanding && c->mb[i].last_tx_ms + PING_MS < due)
      due = c->mb[i].last_tx_ms + PING_MS;
  return due > t ? due - t : 0;
}

/* ---- thread ------------------------------------------------------------------------ */

static void *cluster_main(void *arg) {
  df_cluster *c = arg;
  while (!c->stop) {
    int64_t t = now_ms();
    zmq_pollitem_t it[4] = {{c->mon, 0, ZMQ_POLLIN, 0}, {c->zap, 0, ZMQ_POLLIN, 0},
                            {c->ctl_mgr, 0, ZMQ_POLLIN, 0}, {c->router, 0, ZMQ_POLLIN, 0}};
    int r = zmq_poll(it, 4, (long)next_timeout(c, t));
    if (r < 0 && zmq_errno() != EINTR) break;
    if (r > 0) {
      if (it[0].revents & ZMQ_POLLIN) on_monitor(c);
      if (it[1].revents & ZMQ_POLLIN)
        while (df_proto_zap_handle(c->zap, zap_decide, c) == 0) {
        }
      if (it[3].revents & ZMQ_POLLIN) {
        df_proto_frames f;
        for (int k = 0; k < 256 && df_proto_recv(c->router, true, ZMQ_DONTWAIT, &f) == 0; k++) {
          on_monitor(c); /* a closed connection is seen before a reused fd's messages */
          on_router(c, &f);
          df_proto_frames_close(&f);
        }
      }
      if (it[2].revents & ZMQ_POLLIN) on_ctl(c);
    }
    timers(c, now_ms());
  }
  for (int i = 0; i < c->n_mb; i++)
    if (c->mb[i].alive) {
      df_proto_msg b = {.op = DF_PROTO_BYE, .id = ++c->id_seq};
      snprintf(b.reason, sizeof b.reason, "coordinator shutting down");
      send_to(c, &c->mb[i], &b, NULL, 0);
    }
  df_cluster__write_status(c);
  return NULL;
}

static void cluster_free(df_cluster *c) {
  df_proto_dnssd_announce_stop(&c->ann); /* withdrawn before the port closes */
  if (c->claim_fd >= 0) close(c->claim_fd); /* releases the state directory */
  /* the monitor stops before its reader closes (transport/sock.h): a node disconnecting
   * after our BYE used to land between the two and wedge the exit in libzmq forever */
  df_proto_monitor_close(c->router, &c->mon);
  if (c->router) zmq_close(c->router);
  if (c->zap) zmq_close(c->zap);
  if (c->ctl_mgr) zmq_close(c->ctl_mgr);
  if (c->ctl_fwd) zmq_close(c->ctl_fwd);
  if (c->ctx) zmq_ctx_term(c->ctx);
  for (int i = 0; i < c->n_mb; i++) {
    free(c->mb[i].apairs);
    free(c->mb[i].grp);
    free(c->mb[i].ex);
    free(c->mb[i].rows);
    free(c->mb[i].sendbuf);
  }
  free(c->prim);
  free(c->routed_rows);
  df_cluster_board_destroy(&c->board);
  free(c->heat);
  free(c->repl);
  free(c->route);
  df_cluster_manifest_free(&c->mf);
  free(c);
}

df_cluster *df_cluster_start(const df_model *m, const df_cluster_opts *o, char *err, size_t errlen) {
  df_cluster *c = calloc(1, sizeof *c);
  if (c) c->claim_fd = -1;
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (df_cluster_board_init(&c->board) != 0) {
    free(c);
    snprintf(err, errlen, "cluster: cannot make a mutex");
    return NULL;
  }
  c->o = *o;
  c->m = m;
  if (c->o.timeout_s <= 0) c->o.timeout_s = 30;
  if (o->state_dir) snprintf(c->state, sizeof c->state, "%s", o->state_dir);
  else if (df_proto_state_default("deltafin", c->state, sizeof c->state, err, errlen) != 0) goto fail;
  c->o.state_dir = c->state;
  char kp[4200];
  snprintf(kp, sizeof kp, "%s/coordinator.key", c->state);
  if (df_proto_state_mkdir(c->state, err, errlen) != 0 ||
      (c->claim_fd = df_proto_state_claim(c->state, "coordinator.lock", "coordinator", err,
                                          errlen)) < 0 ||
      df_proto_keys_load(kp, true, &c->kp, NULL, err, errlen) != 0 ||
      df_cluster_manifest_build(m, &c->mf, err, errlen) != 0)
    goto fail;
  size_t np = (size_t)(c->mf.n_pairs ? c->mf.n_pairs : 1);
  c->prim = malloc(np * sizeof *c->prim);
  c->repl = malloc(np * sizeof *c->repl);
  c->route = malloc(np * sizeof *c->route);
  c->routed_rows = calloc(np, sizeof *c->routed_rows);
  if (!c->prim || !c->repl || !c->route || !c->routed_rows) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  for (size_t p = 0; p < np; p++) c->prim[p] = c->repl[p] = c->route[p] = -1;
  {
    const df_model_config *hc = df_model_cfg(m);
    int64_t E = c->mf.n_experts;
    if (o->heat && c->mf.n_pairs > 0 && E > 0 && o->heat_n == hc->num_hidden_layers * E) {
      if (!(c->heat = malloc(np * sizeof *c->heat))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
      }
      for (int64_t p = 0; p < c->mf.n_pairs; p++) /* layer-major file -> manifest pairs */
        c->heat[p] = o->heat[c->mf.pairs[2 * p] * E + c->mf.pairs[2 * p + 1]];
    }
    c->o.heat = NULL; /* borrowed only for the call */
    c->o.heat_n = 0;
  }
  if (!(c->ctx = zmq_ctx_new()) || !(c->zap = df_proto_zap_bind(c->ctx, err, errlen))) goto fail;
  snprintf(c->endpoint, sizeof c->endpoint, "tcp://%s:%d", o->bind_host ? o->bind_host : "*",
           o->port ? o->port : DF_PROTO_DEFAULT_PORT);
  /* largest legal inbound message: a RESULT of every routed row of a chunk, + header */
  const df_model_config *cfg = df_model_cfg(m);
  int64_t max_msg = df_model_max_rows(m) * (cfg->num_experts_per_tok > 0 ? cfg->num_experts_per_tok : 1) *
                        c->mf.hidden * 4 + MAX_INBOUND_HDR; /* rows of the experts' width */
  if (!(c->router = df_proto_server_open(c->ctx, c->endpoint, &c->kp, max_msg, err, errlen))) goto fail;
  if (!(c->mon = df_proto_monitor_open(c->ctx, c->router, "inproc://df-cluster-mon",
                                       ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL,
                                       err, errlen)))
    goto fail;
  int zero = 0; /* nothing of the control pair is worth waiting for at zmq_ctx_term */
  if (!(c->ctl_mgr = zmq_socket(c->ctx, ZMQ_PAIR)) ||
      zmq_setsockopt(c->ctl_mgr, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
      zmq_bind(c->ctl_mgr, "inproc://df-cluster-ctl") != 0 ||
      !(c->ctl_fwd = zmq_socket(c->ctx, ZMQ_PAIR)) ||
      zmq_setsockopt(c->ctl_fwd, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
      zmq_connect(c->ctl_fwd, "inproc://df-cluster-ctl") != 0) {
    snprintf(err, errlen, "cluster: inproc sockets: %s", zmq_strerror(zmq_errno()));
    goto fail;
  }
  char fp[17];
  df_proto_key_fingerprint(c->kp.pub, fp);
  cl_info(c, "listening on %s (key %s), %lld expert pairs of %.2f MiB", c->endpoint, fp,
       (long long)c->mf.n_pairs, c->mf.pair_bytes / 1048576.0);
  df_cluster__publish(c); /* readers find a snapshot from the start */
  c->ann = df_proto_dnssd_announce(c->kp.pub, o->port ? o->port : DF_PROTO_DEFAULT_PORT,
                                   o->bind_host, "deltafin: cluster: ",
                                   o->quiet); /* NULL: not announced */
  if (pthread_create(&c->thread, NULL, cluster_main, c) != 0) {
    snprintf(err, errlen, "cluster: cannot start the manager thread");
    goto fail;
  }
  c->thread_started = true;
  return c;
fail:
  cluster_free(c);
  return NULL;
}

/* The forward thread's side: wait for a reply of kind `want` (others are dropped). Returns its
 * result, or -1 when the manager is gone. */
static int ctl_wait(df_cluster *c, int want) {
  ctl_msg r;
  for (;;) {
    int n = zmq_recv(c->ctl_fwd, &r, sizeof r, 0);
    if (n < 0 && zmq_errno() == EINTR) continue;
    if (n != (int)sizeof r) return -1;
    if (r.kind == want) return r.result;
  }
}

static int ctl_call(df_cluster *c, ctl_msg *m, int want) {
  if (!c || !c->thread_started) return -1;
  if (zmq_send(c->ctl_fwd, m, sizeof *m, 0) != (int)sizeof *m) return -1;
  return ctl_wait(c, want);
}

int df_cluster_wait(df_cluster *c, double wait_s, int min_nodes) {
  ctl_msg m = {.kind = CTL_WAIT, .deadline_ms = now_ms() + (int64_t)(wait_s * 1000), .min_nodes = min_nodes};
  int n = ctl_call(c, &m, CTL_WAITED);
  return n < 0 ? 0 : n;
}

int df_cluster_dispatch(df_cluster *c, df_cluster_job *j) {
  ctl_msg m = {.kind = CTL_JOB, .job = j};
  if (!c || !c->thread_started || zmq_send(c->ctl_fwd, &m, sizeof m, 0) != (int)sizeof m) {
    for (int g = 0; g < j->req->n_groups; g++) j->where[g] = DF_WHERE_LOCAL;
    return -1;
  }
  return 0;
}

int df_cluster_planned(df_cluster *c, df_cluster_job *j) {
  if (ctl_wait(c, CTL_PLANNED) < 0) {
    for (int g = 0; g < j->req->n_groups; g++) j->where[g] = DF_WHERE_LOCAL;
    return -1;
  }
  return 0;
}

int df_cluster_collect(df_cluster *c, df_cluster_job *j) {
  (void)j;
  return ctl_wait(c, CTL_DONE) < 0 ? -1 : 0;
}

void df_cluster_stop(df_cluster **cp, df_cluster_stats *st) {
  if (!cp || !*cp) return;
  df_cluster *c = *cp;
  if (c->thread_started) {
    ctl_msg m = {.kind = CTL_STOP};
    zmq_send(c->ctl_fwd, &m, sizeof m, 0);
    pthread_join(c->thread, NULL);
  }
  if (st) *st = c->st;
  cluster_free(c);
  *cp = NULL;
}
