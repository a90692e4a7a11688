/* node/node.c — the df-node agent loop; see node.h.
 *
 * One thread owns the DEALER socket and its monitor. States: JOINING (waiting for the CURVE
 * handshake, then for the ASSIGN that answers our JOIN), PROVISIONING (pulling missing
 * tensors with FETCH, a window of chunks in flight), SERVING (FFN/PING/STATS). A closed
 * connection, a BYE or 10 s of silence drop every per-connection resource (buffers, weight
 * views, cache mappings) and start over; libzmq reconnects with backoff. Nothing here
 * busy-waits: every wait is a zmq_poll with the next deadline as its timeout.
 *
 * Joining with a token: the node first connects with its own key; when the coordinator's ZAP
 * handler refuses it (not admitted yet), the node reconnects with the token's join key
 * (transport/keys.h df_proto_token_join_keypair), sends JOIN with the token and its own key,
 * and on ADMIT reconnects with its own key and joins as a known node.
 *
 * Giving up: a coordinator that refuses this node is not retried forever. The ZAP handler
 * refusing the key (CURVE ERROR) with no token to try, refusing the token's join key, or an
 * UNAUTHORIZED reply to JOIN ends the node at once;
 * a peer that closes the CURVE handshake quickly (within HS_QUICK_MS of the TCP connect)
 * HS_FAIL_MAX times in a row, each within HS_GAP_MS of the previous, without one handshake
 * succeeding, does not hold the coordinator key this node pinned (a token or stored key of
 * another coordinator) and ends it too — both with exit status 3 and one line saying which
 * key is wrong. An unreachable coordinator (connection refused, handshake timeouts) is
 * retried forever, as a restarting coordinator must be. Identical log lines are written at
 * most once per DF_PROTO_LOGRATE_WINDOW_MS (transport/lograte.h).
 *
 * Without an address (discovery, node/target.h) the endpoint comes from the LAN's
 * `_deltafin._tcp` announcers whose fingerprint is the pinned key's; the handshake against the
 * pinned key proves it. Such an endpoint that fails or refuses the handshake as above (a CURVE
 * ERROR is unauthenticated), or completes none within REDISCOVER_MS (stale address, silent
 * listener), is set aside and the node looks again: announcements can be forged.
 */
#define _GNU_SOURCE
#include "node/node.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "engine/experts/expert_local.h"
#include "engine/tensor/torch_shim.h"
#include "node/device.h"
#include "node/store.h"
#include "node/target.h"
#include "transport/keys.h"
#include "transport/lograte.h"
#include "transport/sock.h"

#define SILENCE_MS 10000      /* no message from the coordinator: rejoin */
#define JOIN_REPLY_MS 10000   /* JOIN unanswered: reconnect */
#define CHUNK (1u << 20)      /* FETCH length */
#define WINDOW 8              /* FETCHes in flight */
#define MAX_ACT_BYTES (1ull << 30) /* cap on planned activation buffers */
#define HS_FAIL_MAX 5         /* quick handshake failures in a row: the pinned key is wrong */
#define HS_QUICK_MS 5000      /* a failure this soon after the TCP connect was a refusal */
#define HS_GAP_MS 10000       /* failures further apart do not count as "in a row" */
#define MAX_HDR_BYTES (64ll << 20) /* header frame limit (docs/PROTOCOL.md §2), before decoding */
#define REDISCOVER_MS 15000   /* discovery: no handshake with the endpoint this long, look again */

static volatile sig_atomic_t g_stop;
static void on_signal(int s) { (void)s; g_stop = 1; }

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

enum { JOINING, PROVISIONING, SERVING };

typedef struct pair_w {
  int32_t layer, expert;
  df_t_tensor *w[3]; /* gate, up, down (MXFP4: F4 of logical shape over the packed bytes) */
  df_t_tensor *s[3]; /* their F32 block scales (FP8) or U8 E8M0 scales (MXFP4), else NULL */
} pair_w;

typedef struct node {
  const df_node_opts *o;
  df_proto_keypair kp;
  df_node_target tg;        /* pinned coordinator key, token secret and join key, endpoint */
  bool linked;              /* a CURVE handshake succeeded and the connection is up */
  int64_t unlinked_ms;      /* since when not (socket opened, or disconnected) */
  bool via_token;           /* the socket is the token's join connection (own key refused) */
  void *ctx, *sock, *mon;
  int state;
  bool joined_once;
  int64_t last_rx, join_sent;
  uint64_t next_id;
  df_node_store *store;
  /* current assignment */
  df_proto_msg assign; /* decoded ASSIGN (owns pairs/tensors) */
  bool have_assign;
  pair_w *pw;          /* [n_pairs] sorted by (layer, expert) */
  int64_t n_pw;
  uint64_t held;
  /* provisioning */
  int64_t *missing;    /* tensor indices still to fetch */
  int64_t n_missing, cur_missing;
  uint64_t requested;  /* bytes of the current tensor requested so far */
  int in_flight;
  /* planned buffers */
  df_t_tensor *x, *y, *g, *u;
  df_tx *tx;           /* experts kept on the device (--device), or NULL */
  uint64_t dev_budget; /* bytes of experts tx may keep (declared in JOIN `device`); 0 = CPU */
  bool dev_said;       /* the "experts on the device" line of this assignment was logged */
  df_k_act act;        /* the assignment's gated activation (ASSIGN `act`; zero = SiLU) */
  bool host_only;      /* SiTU or MXFP4 experts: the device path (df_tx) does not run them */
  int64_t cap_rows;    /* rows of x and y */
  int64_t cap_gu;      /* rows of g and u (a batch of groups uses the request's rows) */
  /* stats */
  uint64_t served, rows_done, busy_us;
  /* giving up, log rate */
  int64_t connected_ms;  /* last TCP connect seen by the monitor, else when the socket opened
                            (its first connect may precede the monitor) */
  int hs_fails;          /* quick handshake failures in a row */
  int64_t hs_last_ms;    /* the last of them */
  df_proto_lograte lr;
} node;

/* Replace control bytes (< 0x20, 0x7f) of s in place by '?': text a peer chose (tensor names,
 * reasons) must not forge or garble a log line. */
static void printable(char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = '?';
}

/* One progress line on stderr ("df-node: " + text, made printable), identical lines
 * rate-limited. */
static void node_log(node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void node_log(node *n, const char *fmt, ...) {
  if (n->o->quiet) return;
  char line[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  printable(line);
  uint64_t held = 0;
  if (!df_proto_lograte_admit(&n->lr, line, now_ms(), &held)) return;
  if (held)
    fprintf(stderr, "df-node: %s (%llu more like this in the last %d s)\n", line,
            (unsigned long long)held, DF_PROTO_LOGRATE_WINDOW_MS / 1000);
  else
    fprintf(stderr, "df-node: %s\n", line);
}
#define LOG(n, ...) node_log((n), __VA_ARGS__)

static void drop_assignment(node *n) {
  for (int64_t i = 0; i < n->n_pw; i++)
    for (int k = 0; k < 3; k++) df_t_destroy(&n->pw[i].w[k]), df_t_destroy(&n->pw[i].s[k]);
  if (n->tx) df_tx_clear(n->tx); /* its keys are the handles freed above */
  n->dev_said = false;
  n->act = (df_k_act){0};
  n->host_only = false;
  free(n->pw);
  n->pw = NULL;
  n->n_pw = 0;
  free(n->missing);
  n->missing = NULL;
  n->n_missing = n->cur_missing = 0;
  n->in_flight = 0;
  n->requested = 0;
  df_proto_msg_free(&n->assign);
  n->have_assign = false;
  n->held = 0;
  if (n->store) {
    df_node_store_abort(n->store);
    df_node_store_release(n->store);
  }
}

/* Everything that belongs to one connection. */
static void drop_connection(node *n) {
  drop_assignment(n);
  df_t_destroy(&n->x);
  df_t_destroy(&n->y);
  df_t_destroy(&n->g);
  df_t_destroy(&n->u);
  n->cap_rows = 0;
  n->cap_gu = 0;
  n->state = JOINING;
  n->join_sent = 0;
}

static void close_socket(node *n) {
  /* monitor stopped before its reader closes (transport/sock.h): an event of the socket's
   * reconnecting between the two used to wedge the node in libzmq forever */
  df_proto_monitor_close(n->sock, &n->mon);
  if (n->sock) zmq_close(n->sock);
  n->sock = NULL;
}

static int open_socket(node *n, char *err, size_t errlen) {
  /* the largest legal inbound message: an FFN of max rows, or a shard chunk, + header */
  int64_t max_msg = (int64_t)MAX_ACT_BYTES + (64ll << 20);
  n->sock = df_proto_client_socket(n->ctx, n->via_token ? &n->tg.join_kp : &n->kp, n->tg.pub,
                                   max_msg, err, errlen);
  if (!n->sock) return -1;
  char ep[64];
  static int seq;
  snprintf(ep, sizeof ep, "inproc://df-node-mon-%d", seq++);
  if (!(n->mon = df_proto_monitor_open(n->ctx, n->sock, ep,
                                       ZMQ_EVENT_CONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                                           ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                           ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL,
                                       err, errlen))) {
    close_socket(n);
    return -1;
  }
  /* connected only now that the monitor exists: its handshake event starts the JOIN */
  if (df_proto_client_connect(n->sock, n->tg.endpoint, err, errlen) != 0) {
    close_socket(n);
    return -1;
  }
  n->last_rx = n->connected_ms = n->unlinked_ms = now_ms();
  n->linked = false;
  return 0;
}

static int send_msg(node *n, df_proto_msg *m, const void *payload, size_t len) {
  char err[256];
  if (df_proto_send(n->sock, NULL, 0, m, payload, len, ZMQ_DONTWAIT, err, sizeof err) != 0) {
    LOG(n, "%s", err);
    return -1;
  }
  return 0;
}

static void send_join(node *n) {
  /* features: this node runs SiTU experts (`act`) and MXFP4 ones in the 32-chain order (`mx32`), so a coordinator
   * may send it Kimi K3's */
  df_proto_msg m = {.op = DF_PROTO_JOIN, .id = ++n->next_id, .memory = n->o->memory,
                    .device = n->dev_budget, .has_model = n->o->model_dir != NULL,
                    .features = DF_PROTO_FEAT_ACT | DF_PROTO_FEAT_MX};
  char host[64] = "node";
  if (n->o->name) snprintf(host, sizeof host, "%s", n->o->name);
  else gethostname(host, sizeof host - 1);
  snprintf(m.name, sizeof m.name, "%s", host);
  if (n->via_token) { /* redeem the token for this node's own key (answered by ADMIT) */
    snprintf(m.token, sizeof m.token, "%s", n->tg.secret);
    snprintf(m.key, sizeof m.key, "%s", n->kp.pub);
  }
  if (send_msg(n, &m, NULL, 0) == 0) {
    n->join_sent = now_ms();
    LOG(n, "joining %s%s", n->tg.endpoint, n->via_token ? " with a token" : " with the stored key");
  }
}

static int cmp_pw(const void *a, const void *b) {
  const pair_w *x = a, *y = b;
  if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
  return x->expert < y->expert ? -1 : x->expert > y->expert;
}

static const pair_w *find_pair(const node *n, int32_t layer, int32_t expert) {
  pair_w key = {.layer = layer, .expert = expert};
  return bsearch(&key, n->pw, (size_t)n->n_pw, sizeof *n->pw, cmp_pw);
}

/* Check tensor t of assignment a against the dtype and shape its role (0 weight, 1 scales)
 * implies, the weight's logical shape being [want0, want1], and its nbytes against both.
 * FP8 weights: F8_E4M3 [want0, want1]; their scales: F32 [ceil(want0 / block_n),
 * ceil(want1 / block_k)]. MXFP4 weights: U8 [want0, want1 / 2] (weight_packed); their scales:
 * U8 [want0, want1 / 32] (weight_scale, E8M0). Otherwise BF16/F16/F32 [want0, want1].
 * 0 with the dtype in *dt, or -1 with a message naming the tensor and the field. Reads only
 * the manifest: on_assign runs it before anything is fetched. */
static int check_tensor(const df_proto_msg *a, const df_proto_tensor *t, int role, int64_t want0,
                        int64_t want1, df_dtype *dtp, char *err, size_t errlen) {
  df_dtype dt = DF_DT_F32;
  bool fp8 = a->block_n > 0, mx = a->mx > 0, ok = df_dtype_from_name(t->dtype, &dt) == 0;
  const char *expect = "BF16/F16/F32";
  if (role == 1 && mx) { /* E8M0 scales, one byte per MX block of a row */
    want1 /= a->mx;
    ok = ok && dt == DF_DT_U8;
    expect = "U8 (E8M0 weight_scale)";
  } else if (role == 1) { /* FP8 block scale */
    want0 = (want0 + a->block_n - 1) / a->block_n;
    want1 = (want1 + a->block_k - 1) / a->block_k;
    ok = ok && dt == DF_DT_F32;
    expect = "F32";
  } else if (mx) { /* E2M1 pairs, low nibble = even column */
    want1 /= 2;
    ok = ok && dt == DF_DT_U8;
    expect = "U8 (MXFP4 weight_packed)";
  } else {
    ok = ok && (fp8 ? dt == DF_DT_F8_E4M3 : df_dtype_is_supported(dt));
    if (fp8) expect = "F8_E4M3";
  }
  /* names may be 255 bytes: cut to keep the field in a 255-byte ERROR reason */
  if (!ok || t->shape[0] != want0 || t->shape[1] != want1) {
    snprintf(err, errlen, "tensor %.128s is %s [%lld, %lld], expected %s [%lld, %lld]", t->name,
             t->dtype, (long long)t->shape[0], (long long)t->shape[1], expect,
             (long long)want0, (long long)want1);
    return -1;
  }
  /* shapes are <= DF_PROTO_MAX_DIM (2^20) each: the product cannot overflow */
  uint64_t bytes = (uint64_t)t->shape[0] * (uint64_t)t->shape[1] * df_dtype_size(dt);
  if (bytes != t->nbytes) {
    snprintf(err, errlen, "tensor %.128s: nbytes %llu, but %s [%lld, %lld] is %llu bytes",
             t->name, (unsigned long long)t->nbytes, t->dtype, (long long)t->shape[0],
             (long long)t->shape[1], (unsigned long long)bytes);
    return -1;
  }
  *dtp = dt;
  return 0;
}

/* Wrap the bytes of tensor t (present now, checked by check_tensor) as the weight or scales
 * of its role; MXFP4 weights as F4 of logical shape [want0, want1]. Adds its bytes to held.
 * The handle is the caller's; NULL + message. */
static df_t_tensor *wrap_tensor(node *n, const df_proto_tensor *t, int role, int64_t want0,
                                int64_t want1, char *err, size_t errlen) {
  const df_proto_msg *a = &n->assign;
  const void *data = df_node_store_get(n->store, t);
  df_dtype dt = DF_DT_F32;
  bool mx = a->mx > 0;
  int64_t logical[2] = {want0, want1};
  if (!data) {
    snprintf(err, errlen, "tensor %s vanished from the cache", t->name);
    return NULL;
  }
  if (check_tensor(a, t, role, want0, want1, &dt, err, errlen) != 0) return NULL;
  n->held += t->nbytes;
  if (mx && role == 0) return df_t_wrap(data, DF_DT_F4, 2, logical, err, errlen);
  return df_t_wrap(data, dt, 2, t->shape, err, errlen);
}

/* Wrap every tensor of the assignment (all present now), attach FP8 block scales or MXFP4
 * E8M0 scales so that df_t_glu_ffn de-quantises inside its kernels, and report READY. The
 * E8M0 NaN byte is looked for before an expert's first use (on_ffn), not here: a node
 * holding a large share of Kimi K3 would otherwise read gigabytes of scales at every join. */
static int finish_provisioning(node *n, char *err, size_t errlen) {
  const df_proto_msg *a = &n->assign;
  int tpp = df_proto_assign_per_pair(a);
  n->pw = calloc(a->n_pairs ? (size_t)a->n_pairs : 1, sizeof *n->pw);
  if (!n->pw) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  n->n_pw = a->n_pairs;
  n->held = 0;
  for (int64_t p = 0; p < a->n_pairs; p++) {
    pair_w *w = &n->pw[p];
    w->layer = a->pairs[2 * p];
    w->expert = a->pairs[2 * p + 1];
    for (int k = 0; k < 3; k++) {
      int64_t want0 = k == 2 ? a->hidden : a->inter, want1 = k == 2 ? a->inter : a->hidden;
      if (!(w->w[k] = wrap_tensor(n, &a->tensors[tpp * p + k], 0, want0, want1, err, errlen)))
        return -1;
      if (tpp == 3) continue;
      if (!(w->s[k] = wrap_tensor(n, &a->tensors[tpp * p + 3 + k], 1, want0, want1, err, errlen)))
        return -1;
      if (a->mx ? df_t_set_mx_scale(w->w[k], w->s[k], err, errlen)
                : df_t_set_block_scale(w->w[k], w->s[k], a->block_n, a->block_k, err, errlen))
        return -1;
    }
  }
  qsort(n->pw, (size_t)n->n_pw, sizeof *n->pw, cmp_pw);
  for (int64_t i = 1; i < n->n_pw; i++)
    if (!cmp_pw(&n->pw[i - 1], &n->pw[i])) {
      snprintf(err, errlen, "assignment lists layer %d expert %d twice", n->pw[i].layer, n->pw[i].expert);
      return -1;
    }
  /* g, u: sized by grow_rows at the first request (the assignment's width may change) */
  df_t_destroy(&n->g);
  df_t_destroy(&n->u);
  n->cap_gu = 0;
  n->state = SERVING;
  df_proto_msg r = {.op = DF_PROTO_READY, .id = ++n->next_id, .epoch = a->epoch, .held = n->held};
  send_msg(n, &r, NULL, 0);
  LOG(n, "ready: epoch %llu, %lld experts, %.1f MiB held", (unsigned long long)a->epoch,
      (long long)n->n_pw, n->held / 1048576.0);
  return 0;
}

/* Check the whole manifest of the assignment before anything is fetched: every tensor's dtype,
 * shape and nbytes against its role (check_tensor: a wrong one would otherwise be streamed
 * to disk first, and one of 0 bytes would wait for a chunk never asked for), and the sum of
 * their bytes against the budget this node declared in JOIN (a coordinator places at most
 * that; more would fill the cache disk at the coordinator's will). 0, or -1 with a message
 * naming the tensor and the field. */
static int check_manifest(const node *n, char *err, size_t errlen) {
  const df_proto_msg *a = &n->assign;
  int tpp = df_proto_assign_per_pair(a);
  uint64_t total = 0;
  for (int64_t p = 0; p < a->n_pairs; p++)
    for (int k = 0; k < tpp; k++) {
      const df_proto_tensor *t = &a->tensors[tpp * p + k];
      int64_t want0 = k % 3 == 2 ? a->hidden : a->inter, want1 = k % 3 == 2 ? a->inter : a->hidden;
      df_dtype dt;
      if (check_tensor(a, t, k >= 3, want0, want1, &dt, err, errlen) != 0) return -1;
      if (t->nbytes > n->o->memory - total) { /* no overflow: total <= memory here */
        snprintf(err, errlen, "assignment of %lld experts needs at least %.1f MiB, over the "
                 "declared memory of %.1f MiB", (long long)a->n_pairs,
                 (total + t->nbytes) / 1048576.0, n->o->memory / 1048576.0);
        return -1;
      }
      total += t->nbytes;
    }
  return 0;
}

/* Keep the FETCH window full for the current missing tensor. */
static void pump_fetch(node *n) {
  if (n->cur_missing >= n->n_missing) return;
  const df_proto_tensor *t = &n->assign.tensors[n->missing[n->cur_missing]];
  while (n->in_flight < WINDOW && n->requested < t->nbytes) {
    uint64_t len = t->nbytes - n->requested < CHUNK ? t->nbytes - n->requested : CHUNK;
    df_proto_msg f = {.op = DF_PROTO_FETCH, .id = ++n->next_id, .epoch = n->assign.epoch,
                      .tensor = (uint64_t)n->missing[n->cur_missing], .offset = n->requested,
                      .length = len};
    if (send_msg(n, &f, NULL, 0) != 0) return;
    n->requested += len;
    n->in_flight++;
  }
}

/* Start the next missing tensor's download, or finish. */
static int next_missing(node *n, char *err, size_t errlen) {
  while (n->cur_missing < n->n_missing) {
    const df_proto_tensor *t = &n->assign.tensors[n->missing[n->cur_missing]];
    if (df_node_store_get(n->store, t)) { /* an earlier download had the same bytes */
      n->cur_missing++;
      continue;
    }
    if (df_node_store_begin(n->store, t, err, errlen) != 0) return -1;
    n->requested = 0;
    n->in_flight = 0;
    pump_fetch(n);
    return 0;
  }
  return finish_provisioning(n, err, errlen);
}

static void on_assign(node *n, df_proto_msg *m) {
  char err[512];
  drop_assignment(n);
  n->assign = *m; /* take ownership of the arrays */
  memset(m, 0, sizeof *m);
  n->have_assign = true;
  n->tg.secret[0] = 0; /* admitted: the token is spent */
  const df_proto_msg *a = &n->assign;
  if (a->n_pairs > 0 &&
      ((uint64_t)a->max_rows * (uint64_t)a->inter * 8 > MAX_ACT_BYTES || a->max_rows <= 0 ||
       a->hidden <= 0 || a->inter <= 0)) {
    char why[160];
    snprintf(why, sizeof why, "assignment too large: max_rows %lld x inter %lld exceeds the "
             "node's buffers", (long long)a->max_rows, (long long)a->inter);
    LOG(n, "assignment refused: %s", why);
    df_proto_send_error(n->sock, NULL, 0, a->id, DF_PROTO_E_BAD_REQUEST, why);
    drop_assignment(n);
    return;
  }
  if (a->mx > 0 && (a->hidden % a->mx != 0 || a->inter % a->mx != 0)) {
    /* every MXFP4 row (of hidden or inter columns) is whole MX blocks of 32 */
    char why[160];
    snprintf(why, sizeof why, "MXFP4 experts of width %lld and inter %lld: both must be "
             "multiples of the MX block %lld", (long long)a->hidden, (long long)a->inter,
             (long long)a->mx);
    LOG(n, "assignment refused: %s", why);
    df_proto_send_error(n->sock, NULL, 0, a->id, DF_PROTO_E_BAD_REQUEST, why);
    drop_assignment(n);
    return;
  }
  if (check_manifest(n, err, sizeof err) != 0) {
    printable(err); /* the names and dtypes are the peer's text */
    LOG(n, "assignment refused: %s", err);
    df_proto_send_error(n->sock, NULL, 0, a->id, DF_PROTO_E_BAD_REQUEST, err);
    drop_assignment(n);
    return;
  }
  /* the codec accepted only a known kind with finite betas (df_proto_act_valid) */
  n->act = (df_k_act){.kind = a->act_kind == DF_PROTO_ACT_SITU ? DF_K_ACT_SITU : DF_K_ACT_SILU,
                      .beta = a->act_beta, .beta_lin = a->act_beta_lin};
  n->host_only = a->act_kind != DF_PROTO_ACT_SILU || a->mx > 0;
  if (n->tx && n->host_only && a->n_pairs > 0)
    LOG(n, "device: these experts are %s%s%s, which the device path does not run; they run on "
        "the CPU", a->mx ? "MXFP4" : "", a->mx && a->act_kind ? " and " : "",
        a->act_kind ? "SiTU-GLU" : "");
  n->missing = malloc((size_t)(a->n_tensors ? a->n_tensors : 1) * sizeof *n->missing);
  if (!n->missing) {
    df_proto_send_error(n->sock, NULL, 0, a->id, DF_PROTO_E_INTERNAL, "out of memory");
    drop_assignment(n);
    return;
  }
  int64_t from_store = 0;
  for (int64_t i = 0; i < a->n_tensors; i++) {
    if (df_node_store_get(n->store, &a->tensors[i])) from_store++;
    else n->missing[n->n_missing++] = i;
  }
  LOG(n, "assigned epoch %llu: %lld experts, %lld tensors local, %lld to fetch",
      (unsigned long long)a->epoch, (long long)a->n_pairs, (long long)from_store,
      (long long)n->n_missing);
  n->state = PROVISIONING;
  if (next_missing(n, err, sizeof err) != 0) {
    LOG(n, "provisioning failed: %s", err);
    df_proto_send_error(n->sock, NULL, 0, a->id, DF_PROTO_E_INTERNAL, err);
    drop_assignment(n);
    n->state = JOINING;
  }
}

static void on_chunk(node *n, const df_proto_msg *m, df_proto_frames *f) {
  char err[512] = "";
  if (n->state != PROVISIONING || !n->have_assign || m->epoch != n->assign.epoch) return;
  if (n->cur_missing >= n->n_missing || m->tensor != (uint64_t)n->missing[n->cur_missing]) {
    LOG(n, "unexpected shard chunk ignored");
    return;
  }
  const df_proto_tensor *t = &n->assign.tensors[m->tensor];
  /* A chunk of the tensor being fetched holds exactly what its FETCH asked for (FETCHes ask
   * CHUNK bytes at multiples of CHUNK): min(CHUNK, total - offset) bytes in one frame. Any
   * other chunk fails the stream: ignored, or written short, it would leave the window
   * waiting for bytes nobody sends, the node provisioning forever. */
  uint64_t want = m->offset < t->nbytes ? t->nbytes - m->offset : 0;
  if (want > CHUNK) want = CHUNK;
  if (!f->has_payload || f->n_frames != 2) {
    snprintf(err, sizeof err, "chunk of %.128s has %d frames, expected 2", t->name, f->n_frames);
  } else if (m->total != t->nbytes) {
    snprintf(err, sizeof err, "size disagrees with the manifest (total %llu, nbytes %llu)",
             (unsigned long long)m->total, (unsigned long long)t->nbytes);
  } else if (zmq_msg_size(&f->payload) != want) {
    snprintf(err, sizeof err, "chunk of %.128s at %llu holds %zu bytes, expected %llu", t->name,
             (unsigned long long)m->offset, zmq_msg_size(&f->payload), (unsigned long long)want);
  } else if (df_node_store_write(n->store, m->offset, zmq_msg_data(&f->payload),
                                 zmq_msg_size(&f->payload), err, sizeof err) == 0) {
    err[0] = 0;
  }
  if (err[0]) {
    LOG(n, "shard stream error: %s", err);
    goto fail;
  }
  n->in_flight--;
  if (df_node_store_written(n->store) == t->nbytes) {
    if (df_node_store_finish(n->store, err, sizeof err) != 0) {
      LOG(n, "%s: %s", t->name, err);
      goto fail;
    }
    n->cur_missing++;
    if (next_missing(n, err, sizeof err) != 0) {
      LOG(n, "provisioning failed: %s", err);
      goto fail;
    }
  } else {
    pump_fetch(n);
  }
  return;
fail:
  df_proto_send_error(n->sock, NULL, 0, m->id, DF_PROTO_E_INTERNAL, "provisioning failed");
  drop_assignment(n);
  n->state = JOINING;
}

/* x, y [>= rows, H] and g, u [>= rows, I] fp32 (capacities doubling from 64 rows). */
static int grow_rows(node *n, int64_t rows, int64_t H, int64_t I, char *err, size_t errlen) {
  if (rows > n->cap_gu || !n->g) {
    df_t_destroy(&n->g);
    df_t_destroy(&n->u);
    n->cap_gu = 0;
    if ((uint64_t)rows * (uint64_t)I * 4 > MAX_ACT_BYTES / 2) {
      snprintf(err, errlen, "request of %lld rows exceeds the node's buffers", (long long)rows);
      return -1;
    }
    int64_t cap = 64, most = (int64_t)(MAX_ACT_BYTES / 2 / ((uint64_t)I * 4));
    while (cap < rows) cap *= 2;
    if (cap > most) cap = most; /* doubling never takes a buffer past its cap (>= rows) */
    int64_t shp[2] = {cap, I};
    if (!(n->g = df_t_new_f32(2, shp, err, errlen)) || !(n->u = df_t_new_f32(2, shp, err, errlen)))
      return -1;
    n->cap_gu = cap;
  }
  if (rows <= n->cap_rows) return 0;
  if ((uint64_t)rows * (uint64_t)H * 4 > MAX_ACT_BYTES / 2) {
    snprintf(err, errlen, "request of %lld rows exceeds the node's buffers", (long long)rows);
    return -1;
  }
  int64_t cap = n->cap_rows ? n->cap_rows : 64, most = (int64_t)(MAX_ACT_BYTES / 2 / ((uint64_t)H * 4));
  while (cap < rows) cap *= 2;
  if (cap > most) cap = most; /* >= rows, checked above */
  df_t_destroy(&n->x);
  df_t_destroy(&n->y);
  n->cap_rows = 0;
  int64_t shp[2] = {cap, H};
  if (!(n->x = df_t_new_f32(2, shp, err, errlen)) || !(n->y = df_t_new_f32(2, shp, err, errlen))) return -1;
  n->cap_rows = cap;
  return 0;
}

/* Refuse FFN request `id`: one log line "refused FFN: <why>" and ERROR `code` with why. */
static void refuse_ffn(node *n, uint64_t id, uint32_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void refuse_ffn(node *n, uint64_t id, uint32_t code, const char *fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  LOG(n, "refused FFN: %s", why);
  df_proto_send_error(n->sock, NULL, 0, id, code, why);
}

static void on_ffn(node *n, const df_proto_msg *m, df_proto_frames *f) {
  char err[256];
  const df_proto_msg *a = &n->assign;
  if (n->state != SERVING) {
    df_proto_send_error(n->sock, NULL, 0, m->id, DF_PROTO_E_NOT_READY, "node is not ready");
    return;
  }
  if (m->cols != a->hidden) {
    refuse_ffn(n, m->id, DF_PROTO_E_MALFORMED, "FFN cols %lld, the assignment's hidden is %lld",
               (long long)m->cols, (long long)a->hidden);
    return;
  }
  if (!f->has_payload || f->n_frames != 2) {
    refuse_ffn(n, m->id, DF_PROTO_E_MALFORMED, "FFN of %d frames, expected 2 (header, rows)",
               f->n_frames);
    return;
  }
  if ((int64_t)zmq_msg_size(&f->payload) != df_proto_payload_bytes(m)) {
    refuse_ffn(n, m->id, DF_PROTO_E_MALFORMED, "FFN payload of %zu bytes, but rows %lld x cols "
               "%lld fp32 are %lld bytes", zmq_msg_size(&f->payload), (long long)m->total_rows,
               (long long)m->cols, (long long)df_proto_payload_bytes(m));
    return;
  }
  const pair_w **ws = malloc((size_t)m->n_groups * sizeof *ws);
  if (!ws) {
    df_proto_send_error(n->sock, NULL, 0, m->id, DF_PROTO_E_INTERNAL, "out of memory");
    return;
  }
  for (int g = 0; g < m->n_groups; g++) {
    ws[g] = find_pair(n, m->layer, m->experts[g]);
    if (!ws[g] || m->rows[g] > a->max_rows) {
      refuse_ffn(n, m->id, DF_PROTO_E_BAD_REQUEST, "layer %d expert %d %s", m->layer,
                 m->experts[g], ws[g] ? "group exceeds max_rows" : "is not held by this node");
      free(ws);
      return;
    }
    /* MXFP4: the E8M0 NaN byte 255 is looked for before the expert's first use (once per
     * weight: the handle remembers a clean scan), as the coordinator's own backend does */
    if (df_expert_check_scales(ws[g]->layer, ws[g]->expert, ws[g]->w[0], ws[g]->w[1],
                               ws[g]->w[2], err, sizeof err) != 0) {
      refuse_ffn(n, m->id, DF_PROTO_E_BAD_REQUEST, "%s", err);
      free(ws);
      return;
    }
  }
  if (grow_rows(n, m->total_rows, a->hidden, a->inter, err, sizeof err) != 0) {
    refuse_ffn(n, m->id, DF_PROTO_E_BAD_REQUEST, "%s", err);
    free(ws);
    return;
  }
  int64_t t0 = now_ms();
  size_t bytes = zmq_msg_size(&f->payload);
  memcpy(df_t_f32(n->x), zmq_msg_data(&f->payload), bytes);
  int64_t r0 = 0;
  bool host_ran = false; /* an expert ran on the host: the device budget is spent */
  /* SiTU or MXFP4 experts stay on the host: df_tx runs SwiGLU over BF16/F16/F32/FP8 only */
  df_tx *tx = n->host_only ? NULL : n->tx;
  const df_k_act *act = n->act.kind == DF_K_ACT_SILU ? NULL : &n->act;
  /* Groups the device does not take run on the host in batches of consecutive groups through
   * df_t_glu_ffn_groups, the coordinator's own call (its values, bit for bit): one parallel
   * region per matrix kind for the batch instead of four per expert, whose fork and join cost
   * more than a decoded row's expert product (~0.1 ms each on a busy 2-core machine). */
  enum { HOST_BATCH = 128 };
  const df_t_tensor *hg[HOST_BATCH], *hu[HOST_BATCH], *hd[HOST_BATCH];
  int64_t hoff[HOST_BATCH + 1];
  int nh = 0;
  for (int g = 0; g <= m->n_groups; g++) {
    int on = g < m->n_groups && tx
                 ? df_tx_swiglu_ffn(tx, n->x, r0, m->rows[g], ws[g]->w[0], ws[g]->w[1],
                                    ws[g]->w[2], n->g, n->u, n->y, err, sizeof err)
                 : 0;
    bool host = g < m->n_groups && on <= 0;
    if (nh > 0 && (!host || nh == HOST_BATCH || hoff[nh] != r0)) { /* flush the batch */
      df_t_glu_ffn_groups(n->x, nh, hoff, hg, hu, hd, act, n->g, n->u, n->y);
      nh = 0;
    }
    if (host) {
      if (nh == 0) hoff[0] = r0;
      hg[nh] = ws[g]->w[0], hu[nh] = ws[g]->w[1], hd[nh] = ws[g]->w[2];
      hoff[++nh] = r0 + m->rows[g];
    }
    if (g < m->n_groups) {
      host_ran |= tx && on == 0;
      r0 += m->rows[g];
    }
  }
  free(ws);
  if (tx && !n->dev_said && (host_ran || df_tx_experts(n->tx) == n->n_pw)) {
    n->dev_said = true; /* once per assignment: every expert is there, or the budget is full */
    LOG(n, "device: %lld of %lld experts kept there (%.1f MiB)%s",
        (long long)df_tx_experts(n->tx), (long long)n->n_pw, df_tx_bytes(n->tx) / 1048576.0,
        host_ran ? ", the budget is full: the others run on the CPU" : "");
  }
  df_proto_msg r = {.op = DF_PROTO_RESULT, .id = m->id, .total_rows = m->total_rows, .cols = m->cols};
  send_msg(n, &r, df_t_f32(n->y), bytes);
  n->served++;
  n->rows_done += (uint64_t)m->total_rows;
  n->busy_us += (uint64_t)(now_ms() - t0) * 1000;
}

/* Handle one message from the coordinator. Returns 3 on a definitive refusal. */
static int on_message(node *n, df_proto_frames *f, char *err, size_t errlen) {
  df_proto_msg m;
  int code;
  char why[256];
  n->last_rx = now_ms();
  if (zmq_msg_size(&f->hdr) > MAX_HDR_BYTES) {
    /* before msgpack sees it (docs/PROTOCOL.md §2): the decoder's object tree takes ~24 bytes
     * per element, so a header of the 1 GiB the socket admits (a frame of nils) would take
     * ~24 GiB */
    snprintf(why, sizeof why, "malformed header: %zu bytes, over the node's header limit of "
             "%lld MiB", zmq_msg_size(&f->hdr), MAX_HDR_BYTES >> 20);
    LOG(n, "bad message from the coordinator: %s", why);
    df_proto_send_error(n->sock, NULL, 0, 0, DF_PROTO_E_MALFORMED, why);
    return 0;
  }
  if (df_proto_decode(zmq_msg_data(&f->hdr), zmq_msg_size(&f->hdr), &m, &code, why, sizeof why) != 0) {
    LOG(n, "bad message from the coordinator: %s", why);
    df_proto_send_error(n->sock, NULL, 0, m.id, (uint32_t)code, why);
    return 0;
  }
  printable(m.reason); /* a BYE's or ERROR's reason ends up in a log line or main's last line */
  if (f->n_frames != 1 && m.op != DF_PROTO_FFN && m.op != DF_PROTO_SHARD_CHUNK &&
      m.op != DF_PROTO_ERROR && m.op != DF_PROTO_BYE) {
    /* only FFN and SHARD_CHUNK carry a payload frame (and check theirs); ERROR and BYE are
     * never answered, so two peers cannot trade errors forever */
    snprintf(why, sizeof why, "malformed message: %s of %d frames, expected 1 (a header alone)",
             df_proto_op_name(m.op), f->n_frames);
    LOG(n, "bad message from the coordinator: %s", why);
    df_proto_send_error(n->sock, NULL, 0, m.id, DF_PROTO_E_MALFORMED, why);
    df_proto_msg_free(&m);
    return 0;
  }
  int rc = 0;
  switch (m.op) {
  case DF_PROTO_ASSIGN: on_assign(n, &m); break;
  case DF_PROTO_SHARD_CHUNK: on_chunk(n, &m, f); break;
  case DF_PROTO_FFN: on_ffn(n, &m, f); break;
  case DF_PROTO_PING: {
    df_proto_msg r = {.op = DF_PROTO_PONG, .id = m.id};
    send_msg(n, &r, NULL, 0);
    break;
  }
  case DF_PROTO_STATS: {
    df_proto_msg r = {.op = DF_PROTO_STATS, .id = m.id, .held = n->held, .served = n->served,
                      .rows_done = n->rows_done, .busy_us = n->busy_us};
    send_msg(n, &r, NULL, 0);
    break;
  }
  case DF_PROTO_ADMIT:
    if (!n->via_token) { /* only a token's join connection is answered so */
      LOG(n, "unexpected ADMIT ignored");
      break;
    }
    LOG(n, "the token admitted this node's key; rejoining with it");
    n->tg.secret[0] = 0; /* spent */
    n->via_token = false;
    drop_connection(n);
    close_socket(n); /* reopened by the main loop with this node's key */
    break;
  case DF_PROTO_BYE:
    LOG(n, "coordinator said bye: %s", m.reason);
    drop_connection(n);
    close_socket(n); /* reopened by the main loop: a fresh session */
    break;
  case DF_PROTO_ERROR:
    if (m.code == DF_PROTO_E_UNAUTHORIZED) { /* the one line is main's */
      snprintf(err, errlen, "refused by the coordinator at %s: %s", n->tg.endpoint, m.reason);
      rc = 3;
    } else {
      LOG(n, "coordinator error %u: %s", m.code, m.reason);
    }
    break;
  default: /* an op only a node sends */
    snprintf(why, sizeof why, "unexpected op %s from the coordinator", df_proto_op_name(m.op));
    LOG(n, "%s", why);
    df_proto_send_error(n->sock, NULL, 0, m.id, DF_PROTO_E_BAD_REQUEST, why);
    break;
  }
  df_proto_msg_free(&m);
  return rc;
}

/* A handshake failed. Returns 3 (message in err) when it is the HS_FAIL_MAX-th quick one in a
 * row: the peer does not hold the coordinator key this node pinned. */
static int on_handshake_failed(node *n, char *err, size_t errlen) {
  int64_t t = now_ms();
  if (t - n->connected_ms >= HS_QUICK_MS) {
    LOG(n, "the CURVE handshake with the coordinator did not complete; retrying");
    return 0;
  }
  if (n->hs_fails && t - n->hs_last_ms > HS_GAP_MS) n->hs_fails = 0;
  n->hs_fails++;
  n->hs_last_ms = t;
  if (n->hs_fails < HS_FAIL_MAX) {
    LOG(n, "the coordinator closed the CURVE handshake; retrying");
    return 0;
  }
  if (n->tg.discover) { /* a forged or stale announcement: try the other announcers first */
    LOG(n, "discovery: %s closed the CURVE handshake %d times in a row, so it does not hold the "
        "pinned key %s; looking for another announcer", n->tg.endpoint, n->hs_fails, n->tg.fp);
    n->hs_fails = 0;
    df_node_target_avoid(&n->tg);
    drop_connection(n);
    close_socket(n); /* the main loop finds another endpoint */
    return 0;
  }
  const char *fp = n->tg.fp;
  snprintf(err, errlen, "wrong coordinator key: %s closed the CURVE handshake %d times in a row, "
           "so it does not hold the key %s this node pinned %s, which belongs to another "
           "coordinator (or this one was re-initialised, or another service listens there); run "
           "'deltafin cluster token' on that coordinator and join with the new --token",
           n->tg.endpoint, n->hs_fails, fp,
           n->o->token ? "from --token" : "at its first join");
  return 3;
}

/* Read one monitor event; returns 3 on a definitive refusal (message in err). */
static int on_monitor(node *n, char *err, size_t errlen) {
  zmq_msg_t a, b;
  zmq_msg_init(&a);
  zmq_msg_init(&b);
  int rc = 0;
  if (zmq_msg_recv(&a, n->mon, ZMQ_DONTWAIT) < 0) goto done;
  if (zmq_msg_more(&a)) zmq_msg_recv(&b, n->mon, 0);
  if (zmq_msg_size(&a) < 6) goto done;
  uint16_t ev;
  memcpy(&ev, zmq_msg_data(&a), 2);
  if (ev == ZMQ_EVENT_CONNECTED) {
    n->connected_ms = now_ms();
  } else if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
    n->hs_fails = 0;
    n->linked = true;
    char rerr[256]; /* the peer holds the pinned key: remember where it was */
    if (n->tg.discover && df_node_target_record(&n->tg, n->o->state_dir, rerr, sizeof rerr))
      LOG(n, "%s", rerr);
    drop_connection(n); /* a new session starts with a JOIN */
    send_join(n);
  } else if (ev == ZMQ_EVENT_DISCONNECTED) {
    if (n->state != JOINING || n->have_assign) LOG(n, "disconnected from the coordinator; reconnecting");
    n->linked = false;
    n->unlinked_ms = now_ms();
    drop_connection(n);
  } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH && !n->via_token && n->tg.secret[0]) {
    /* this node's key is not admitted yet: redeem the token on the token's own key */
    LOG(n, "this node's key is not admitted yet; joining with the token");
    n->via_token = true;
    drop_connection(n);
    close_socket(n); /* reopened by the main loop with the token's join key */
  } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    char fp[17], why[4600];
    df_proto_key_fingerprint(n->kp.pub, fp);
    if (n->via_token)
      snprintf(why, sizeof why, "the token is not open there (unknown, expired or already used); "
               "make a fresh one with 'deltafin cluster token'");
    else /* revoked keys are never admitted again, not even with a token: a new key is */
      snprintf(why, sizeof why, "this node's key %s is not admitted there (revoked, or not on "
               "its allow-list); to join again, remove %s/node.key and join with a fresh token "
               "from 'deltafin cluster token' on that coordinator (--token-file F)", fp,
               n->o->state_dir);
    if (!n->tg.discover) {
      snprintf(err, errlen, "refused by the coordinator at %s: %s", n->tg.endpoint, why);
      rc = 3;
    } else { /* a CURVE ERROR is not authenticated: an impostor can send one, so look again */
      LOG(n, "discovery: refused at %s: %s; looking for another announcer", n->tg.endpoint, why);
      n->via_token = false;
      df_node_target_avoid(&n->tg);
      drop_connection(n);
      close_socket(n); /* the main loop finds an endpoint again */
    }
  } else {
    rc = on_handshake_failed(n, err, errlen);
  }
done:
  zmq_msg_close(&a);
  zmq_msg_close(&b);
  return rc;
}

static int load_identity(node *n, char *err, size_t errlen) {
  const df_node_opts *o = n->o;
  char p[4200];
  if (df_proto_state_mkdir(o->state_dir, err, errlen) != 0) return -1;
  snprintf(p, sizeof p, "%s/node.key", o->state_dir);
  if (df_proto_keys_load(p, true, &n->kp, NULL, err, errlen) != 0) return -1;
  return df_node_target_load(&n->tg, o->state_dir, o->token, o->endpoint, err, errlen);
}

/* df_node_target_find's lines go through the node's rate-limited log. */
static void target_log(void *user, const char *line) { LOG((node *)user, "%s", line); }

int df_node_run(const df_node_opts *o, char *err, size_t errlen) {
  node nd;
  memset(&nd, 0, sizeof nd);
  node *n = &nd;
  n->o = o;
  df_proto_lograte_init(&n->lr, DF_PROTO_LOGRATE_WINDOW_MS);
  int rc = 1;
  g_stop = 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  int claim = -1; /* STATE/node.lock: one node per state directory (one key, one cache) */
  if (df_proto_state_mkdir(o->state_dir, err, errlen) != 0 ||
      (claim = df_proto_state_claim(o->state_dir, "node.lock", "df-node", err, errlen)) < 0 ||
      load_identity(n, err, errlen) != 0)
    goto done;
  if (!(n->store = df_node_store_new(o->state_dir, o->model_dir, err, errlen))) goto done;
  df_t_set_threads(o->threads);
  n->tx = df_node_device_setup(&o->device, o->memory, MAX_ACT_BYTES, &n->dev_budget);
  if (!(n->ctx = zmq_ctx_new())) {
    snprintf(err, errlen, "zmq_ctx_new failed");
    goto done;
  }
  char fp[17];
  df_proto_key_fingerprint(n->kp.pub, fp);
  LOG(n, "key %s, budget %.1f MiB, coordinator %s%s%s", fp, o->memory / 1048576.0,
      o->endpoint ? o->endpoint : "with key ", o->endpoint ? "" : n->tg.fp,
      o->endpoint ? "" : ", found by discovery");
  while (!g_stop) {
    if (!n->sock) {
      drop_connection(n);
      int found = n->tg.endpoint[0] ? 1 : df_node_target_find(&n->tg, &g_stop, target_log, n,
                                                                err, errlen);
      if (found < 0) goto done;
      if (found == 0) break; /* stopped while looking */
      if (open_socket(n, err, errlen) != 0) goto done;
    }
    int64_t t = now_ms(), timeout = SILENCE_MS;
    if (n->state == JOINING && n->join_sent) timeout = n->join_sent + JOIN_REPLY_MS - t;
    else if (n->state != JOINING) timeout = n->last_rx + SILENCE_MS - t;
    if (n->tg.discover && !n->linked && n->unlinked_ms + REDISCOVER_MS - t < timeout)
      timeout = n->unlinked_ms + REDISCOVER_MS - t;
    if (timeout < 0) timeout = 0;
    zmq_pollitem_t it[2] = {{n->sock, 0, ZMQ_POLLIN, 0}, {n->mon, 0, ZMQ_POLLIN, 0}};
    int r = zmq_poll(it, 2, (long)timeout);
    if (r < 0) {
      if (zmq_errno() == EINTR) continue;
      snprintf(err, errlen, "zmq_poll: %s", zmq_strerror(zmq_errno()));
      goto done;
    }
    if (it[1].revents & ZMQ_POLLIN) {
      int x = on_monitor(n, err, errlen);
      if (x) {
        rc = x;
        goto done;
      }
    }
    if (n->sock && (it[0].revents & ZMQ_POLLIN)) {
      df_proto_frames f;
      while (n->sock && df_proto_recv(n->sock, false, ZMQ_DONTWAIT, &f) == 0) {
        int x = on_message(n, &f, err, errlen);
        df_proto_frames_close(&f);
        if (x) {
          rc = x;
          goto done;
        }
      }
    }
    t = now_ms();
    if (n->sock && n->state == JOINING && n->join_sent && t - n->join_sent >= JOIN_REPLY_MS) {
      LOG(n, "no answer to JOIN; reconnecting");
      close_socket(n);
    } else if (n->sock && n->state != JOINING && t - n->last_rx >= SILENCE_MS) {
      LOG(n, "coordinator silent for %d s; reconnecting", SILENCE_MS / 1000);
      close_socket(n);
    } else if (n->sock && n->tg.discover && !n->linked && t - n->unlinked_ms >= REDISCOVER_MS) {
      LOG(n, "discovery: no CURVE handshake with %s for %d s; looking for the coordinator again",
          n->tg.endpoint, REDISCOVER_MS / 1000);
      df_node_target_avoid(&n->tg); /* stale or silent: the others first */
      close_socket(n);
    }
  }
  LOG(n, "stopping");
  if (n->sock && n->state != JOINING) {
    df_proto_msg b = {.op = DF_PROTO_BYE, .id = ++n->next_id};
    snprintf(b.reason, sizeof b.reason, "node shutting down");
    send_msg(n, &b, NULL, 0);
  }
  rc = 0;
done:
  drop_connection(n);
  close_socket(n);
  if (n->ctx) zmq_ctx_term(n->ctx);
  df_node_store_destroy(&n->store);
  df_tx_destroy(&n->tx);
  if (claim >= 0) close(claim);
  return rc;
}
