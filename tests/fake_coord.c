/* tests/fake_coord.c — a hostile coordinator for probing df-node (tests/fake_coord.cmake).
 *
 *   fake_coord PROBE DF_NODE WORK_DIR   run one probe against a df-node it starts
 *   fake_coord PROBE,PROBE,... DF_NODE WORK_DIR
 *                                       run those probes at once, each in a process of its
 *                                       own with its own node (probes that mostly wait out
 *                                       the node's 10 s timers); outputs printed per probe
 *   fake_coord list                     name and describe every probe
 *
 * Plays the coordinator's end of docs/PROTOCOL.md — or a man in the middle holding the
 * coordinator's key: binds a CURVE ROUTER on 127.0.0.1 (a free port) with a fresh keypair,
 * admits every client key in its ZAP handler, writes a join token for itself
 * (dft1_<its key>_<random secret>; it accepts any secret) to WORK_DIR/PROBE/token, starts
 * `DF_NODE join 127.0.0.1:PORT --token-file ...` in a sandbox (WORK_DIR/PROBE: state/, cwd/ as
 * its working directory, home/ as $HOME) and runs the probe: a script of messages, each with
 * the node's expected reaction checked. It serves its own small model (two SwiGLU experts of
 * F32 tensors, 1.5 MiB each, so every tensor takes two FETCH chunks), so no checkpoint is
 * needed. With DF_NODE "-" nothing is started: the df-node command line is printed and the
 * harness waits for a node started by hand.
 *
 * Every probe ends with the same checks: the node is alive (PING -> PONG; unless the probe
 * expects it to exit, then: with that status), its peak RSS stayed under the probe's bound,
 * it exits 0 within 10 s of SIGTERM, every line of its log is one "df-node: " line without
 * control bytes (a peer's text cannot forge or garble log lines), and the sandbox holds
 * nothing but the token, the log, the node's key and pinned coordinator and cache/sha256/<hex>
 * files whose bytes hash to their name (nothing is written from a peer-chosen name).
 *
 * Adding a probe: write `static void probe_x(fc *c, int arg)` with the helpers below (fc_ready:
 * a serving node; fc_send / fc_send_frames / fc_assign: send; fc_expect_error, fc_wait,
 * fc_alive, fc_log_wait, CHECK: assert), add it to PROBES, and its name to the list in
 * tests/fake_coord.cmake. Answering JOIN happens in answer_join only.
 *
 * Prints one "ok"/"FAIL" line per check and exits 0 when every check passed, 1 otherwise, 2 on
 * a usage or set-up error. Every wait is bounded (each reaction 10 s; the run by a 150 s alarm).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "transport/codec.h"
#include "transport/keys.h"
#include "transport/sock.h"

#define WAIT_MS 10000 /* the bound of one expected reaction */
#define START_MS 20000 /* the first JOIN after starting df-node */
#define NPAIRS 2
#define HID 512
#define INTER 768 /* gate/up [768, 512], down [512, 768] F32: 1.5 MiB, two 1 MiB FETCH chunks */
#define MAXR 64
#define TBYTES ((uint64_t)HID * INTER * 4)

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* SHARD_CHUNK tampering (fc.tamper): applied once, to the chunk named, then off again. */
enum {
  T_NONE,
  T_SHA,      /* first chunk: one byte flipped (the SHA-256 will not match) */
  T_SHORT,    /* last chunk: one byte short */
  T_LONG,     /* last chunk: one byte more than asked */
  T_EMPTY,    /* last chunk: no bytes */
  T_TOTAL,    /* first chunk: `total` one more than the manifest's nbytes */
  T_GAP,      /* first chunk: `offset` 4 KiB past what was asked (a hole) */
  T_OFFSET,   /* first chunk: `offset` past `total` (malformed header) */
  T_FRAMES,   /* first chunk: an extra frame after the bytes */
  T_NOBYTES,  /* first chunk: the header alone, no payload frame */
  T_INDEX,    /* first chunk: `tensor` 2^32 - 1 (no such tensor) */
};

/* The fake's model: NPAIRS SwiGLU experts of F32 tensors. */
typedef struct model {
  int32_t pairs[2 * NPAIRS];       /* (layer 1, expert 0), (layer 1, expert 3) */
  df_proto_tensor t[3 * NPAIRS];   /* per pair gate [INTER, HID], up, down [HID, INTER] */
  float *w[3 * NPAIRS];            /* their bytes */
} model;

/* One probe run. */
typedef struct fc {
  const char *probe;
  void *ctx, *router, *zap;
  df_proto_keypair kp;
  char endpoint[64]; /* tcp://127.0.0.1:PORT, bound */
  char work[1024], state[1100], logp[1100], tokenp[1100], cwd[1100], home[1100];
  const char *dfnode; /* NULL: a node started by hand */
  pid_t pid;
  bool exited;
  int status;          /* waitpid status once exited */
  uint8_t rid[256];    /* routing id of the node's latest connection */
  size_t rid_len;
  char node_key[DF_PROTO_Z85_KEY + 1]; /* the key of the latest CURVE handshake */
  int joins;           /* JOINs received */
  uint64_t next_id, epoch;
  model m;
  df_proto_msg cur;    /* the last ASSIGN sent (arrays borrowed): FETCHes are served from it */
  const void *const *cur_data; /* [cur.n_tensors] its bytes; NULL entries: a byte pattern */
  int tamper;          /* T_* for the next matching chunk */
  int fetches;         /* FETCHes received for the current assignment */
  df_proto_frames fr;  /* frames of the last message fc_wait returned */
  bool have_fr;
  df_proto_msg join;   /* a JOIN that came while waiting for something else (a new session) */
  bool have_join;
  uint64_t rss_limit_kb;
  int expect_exit;     /* -1: running at the end (then SIGTERM, exit 0); else its exit status */
  char memory[32];     /* df-node --memory */
  int checks, failures;
} fc;

static fc *g_fc; /* for the alarm handler and the sandbox walk */

/* Print one check result; count failures. Returns cond. */
static bool check(fc *c, bool cond, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool check(fc *c, bool cond, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s  ", cond ? "ok  " : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  c->checks++;
  if (!cond) c->failures++;
  return cond;
}
#define CHECK(c, cond, ...) check((c), (cond), __VA_ARGS__)

/* Peer text made printable for our own output (control bytes as '?'), into buf. */
static const char *shown(const char *s, char *buf, size_t cap) {
  size_t i = 0;
  for (; s[i] && i + 1 < cap; i++) buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
  buf[i] = 0;
  return buf;
}

/* ---- the node process -------------------------------------------------------------------- */

/* Whether the df-node is still running (reaps it, recording its status, once it is not). */
static bool node_running(fc *c) {
  if (!c->pid || c->exited) return false;
  if (waitpid(c->pid, &c->status, WNOHANG) == c->pid) c->exited = true;
  return !c->exited;
}

/* Wait up to ms for the node to exit; true when it has. */
static bool node_wait_exit(fc *c, int ms) {
  int64_t end = now_ms() + ms;
  while (node_running(c) && now_ms() < end) usleep(20000);
  return !node_running(c);
}

/* Start df-node join against the fake in the sandbox: stdout and stderr to node.log, cwd/ as
 * its working directory, home/ as $HOME, no inherited state or token variables. 0 or -1. */
static int node_start(fc *c) {
  const char *hp = c->endpoint + 6; /* past "tcp://" */
  if (!c->dfnode) {
    printf("fake_coord: start the node yourself (waiting %d s):\n  df-node join %s --token-file %s "
           "--state-dir %s --memory %s\n", START_MS / 1000, hp, c->tokenp, c->state, c->memory);
    fflush(stdout);
    return 0;
  }
  int fd = open(c->logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    if (chdir(c->cwd) != 0) _exit(127);
    setenv("HOME", c->home, 1);
    unsetenv("XDG_STATE_HOME");
    unsetenv("DELTAFIN_JOIN_TOKEN");
    setenv("OMP_NUM_THREADS", "1", 1);
    char *argv[] = {(char *)c->dfnode, "join", (char *)hp, "--token-file", c->tokenp,
                    "--state-dir", c->state, "--memory", c->memory, "--name", "fake-coord-probe",
                    "--threads", "1", NULL};
    execv(c->dfnode, argv);
    _exit(127);
  }
  close(fd);
  c->pid = pid;
  return 0;
}

/* Peak resident set of the node (VmHWM, KiB); 0 when unknown. */
static uint64_t node_peak_kb(fc *c) {
  char p[64], line[256];
  uint64_t kb = 0;
  if (!c->pid) return 0;
  snprintf(p, sizeof p, "/proc/%d/status", (int)c->pid);
  FILE *f = fopen(p, "r");
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kb = strtoull(line + 6, NULL, 10);
  fclose(f);
  return kb;
}

/* CPU time the node has used (user + system), ms; -1 when unknown. */
static int64_t node_cpu_ms(fc *c) {
  char p[64], buf[2048];
  snprintf(p, sizeof p, "/proc/%d/stat", (int)c->pid);
  FILE *f = fopen(p, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *q = strrchr(buf, ')'); /* fields after the command name: state is field 3 */
  unsigned long ut = 0, st = 0;
  if (!q || sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  return (int64_t)(ut + st) * 1000 / sysconf(_SC_CLK_TCK);
}

/* The node's log (malloc'd, NUL-terminated; caller frees), or NULL. */
static char *log_read(fc *c, size_t *len) {
  FILE *f = fopen(c->logp, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap + 1);
  size_t r;
  while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      char *nb = realloc(b, 2 * cap + 1);
      if (!nb) break;
      b = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (b) b[n] = 0;
  if (len) *len = n;
  return b;
}

static int fc_wait(struct fc *c, unsigned want, int ms, df_proto_msg *out);

/* Wait up to ms for the node's log to contain `needle` (serving FETCHes meanwhile); checks
 * and returns whether it did. */
static bool fc_log_wait(fc *c, const char *needle, int ms) {
  int64_t end = now_ms() + ms;
  bool found = false;
  while (!found) {
    char *b = log_read(c, NULL);
    found = b && strstr(b, needle);
    free(b);
    if (found || now_ms() >= end || !c->dfnode) break;
    df_proto_msg m;
    fc_wait(c, 0, 50, &m); /* FETCHes keep being served meanwhile */
  }
  if (!c->dfnode) return true; /* a node started by hand logs elsewhere */
  return CHECK(c, found, "node log says \"%s\"", needle);
}

/* ---- messages ----------------------------------------------------------------------------- */

/* ZAP decision: every client key is admitted (the fake never refuses a handshake). */
static bool zap_admit(void *user, const char *pub, const char *address, char *why, size_t whylen) {
  fc *c = user;
  snprintf(c->node_key, sizeof c->node_key, "%s", pub);
  return true;
}

/* Send one message to the node's latest connection. 0 or -1 (printed). */
static int fc_send(fc *c, df_proto_msg *m, const void *payload, size_t len) {
  char err[256];
  if (!m->id) m->id = ++c->next_id;
  if (df_proto_send(c->router, c->rid, c->rid_len, m, payload, len, 0, err, sizeof err) != 0) {
    printf("fake_coord: %s\n", err);
    return -1;
  }
  return 0;
}

/* Send n raw frames (after the routing id) to the node: a header that is not a valid one,
 * extra frames. 0 or -1. */
static int fc_send_frames(fc *c, int n, const void *const *data, const size_t *len) {
  if (zmq_send(c->router, c->rid, c->rid_len, ZMQ_SNDMORE) < 0) return -1;
  for (int i = 0; i < n; i++)
    if (zmq_send(c->router, data[i], len[i], i + 1 < n ? ZMQ_SNDMORE : 0) < 0) return -1;
  return 0;
}

/* Encode m and send its header followed by `extra` frames of `extra_len` bytes (0..7). */
static int fc_send_extra(fc *c, df_proto_msg *m, int extra, size_t extra_len) {
  uint8_t *h = NULL;
  size_t hl = 0;
  char err[128];
  if (!m->id) m->id = ++c->next_id;
  if (df_proto_encode(m, &h, &hl, err, sizeof err) != 0) return -1;
  const void *d[8] = {h};
  size_t l[8] = {hl};
  uint8_t *pad = calloc(1, extra_len + 1);
  for (int i = 0; i < extra && i < 7; i++) d[1 + i] = pad, l[1 + i] = extra_len;
  int rc = fc_send_frames(c, 1 + (extra < 7 ? extra : 7), d, l);
  free(pad);
  free(h);
  return rc;
}

/* Answer one FETCH from the current assignment (c->cur, c->cur_data), tampered per c->tamper. */
static void serve_fetch(fc *c, const df_proto_msg *f) {
  c->fetches++;
  if (f->epoch != c->cur.epoch || f->tensor >= (uint64_t)c->cur.n_tensors ||
      f->offset >= c->cur.tensors[f->tensor].nbytes) {
    df_proto_send_error(c->router, c->rid, c->rid_len, f->id, DF_PROTO_E_BAD_REQUEST, "no such bytes");
    return;
  }
  const df_proto_tensor *t = &c->cur.tensors[f->tensor];
  uint64_t left = t->nbytes - f->offset, len = f->length < left ? f->length : left;
  if (len > (64u << 20)) len = 64u << 20; /* the fake's own bound (a pattern tensor is endless) */
  bool first = f->offset == 0, last = f->offset + len == t->nbytes;
  uint8_t *b = malloc(len + 1);
  if (!b) return;
  const uint8_t *src = c->cur_data ? c->cur_data[f->tensor] : NULL;
  for (uint64_t i = 0; i < len + 1; i++) /* the byte after `len` only for T_LONG */
    b[i] = src && f->offset + i < TBYTES && i < len ? src[f->offset + i]
                                                     : (uint8_t)((f->offset + i) * 131 + 7);
  df_proto_msg r = {.op = DF_PROTO_SHARD_CHUNK, .id = f->id, .epoch = f->epoch, .tensor = f->tensor,
                    .offset = f->offset, .total = t->nbytes};
  int tp = c->tamper, extra = 0;
  bool hit = false;
  bool on_first = tp == T_SHA || tp == T_TOTAL || tp == T_GAP || tp == T_OFFSET || tp == T_FRAMES ||
                  tp == T_NOBYTES || tp == T_INDEX;
  bool on_last = tp == T_SHORT || tp == T_LONG || tp == T_EMPTY;
  if ((on_first && first) || (on_last && last)) {
    c->tamper = T_NONE;
    hit = true;
    switch (tp) {
    case T_SHA: b[0] ^= 0x55; break;
    case T_SHORT: len--; break;
    case T_LONG: len++; break;
    case T_EMPTY: len = 0; break;
    case T_TOTAL: r.total++; break;
    case T_GAP: r.offset += 4096; break;
    case T_OFFSET: r.offset = r.total + 1; break;
    case T_FRAMES: extra = 1; break;
    case T_INDEX: r.tensor = UINT32_MAX; break;
    default: break;
    }
    printf("fake_coord: tampered chunk of tensor %llu at %llu (+%llu)\n",
           (unsigned long long)f->tensor, (unsigned long long)f->offset, (unsigned long long)len);
  }
  if (hit && tp == T_NOBYTES) {
    fc_send_extra(c, &r, 0, 0);
  } else if (extra) {
    uint8_t *h = NULL;
    size_t hl = 0;
    char err[128];
    if (df_proto_encode(&r, &h, &hl, err, sizeof err) == 0) {
      const void *d[3] = {h, b, "junk"};
      size_t l[3] = {hl, (size_t)len, 4};
      fc_send_frames(c, 3, d, l);
    }
    free(h);
  } else {
    fc_send(c, &r, b, (size_t)len);
  }
  free(b);
}

/* Wait up to ms for a message from the node whose op is in `want` (a mask of 1u << op).
 * On the way: ZAP requests are admitted, the routing id of the latest connection is kept,
 * FETCHes are served (serve_fetch), a JOIN is kept for the next wait for one (the node
 * started a new session), anything else is printed and dropped. Returns the op with the
 * decoded header in *out (caller frees with df_proto_msg_free; the frames stay in c->fr
 * until the next call), 0 on a timeout or when the node exited. An undecodable message from
 * the node fails a check. */
static int fc_wait(fc *c, unsigned want, int ms, df_proto_msg *out) {
  memset(out, 0, sizeof *out);
  if (c->have_fr) df_proto_frames_close(&c->fr), c->have_fr = false;
  if (c->have_join && (want & (1u << DF_PROTO_JOIN))) {
    *out = c->join;
    c->have_join = false;
    return DF_PROTO_JOIN;
  }
  int64_t end = now_ms() + ms;
  for (;;) {
    int64_t left = end - now_ms();
    if (left <= 0) return 0;
    if (c->dfnode && !node_running(c)) return 0;
    /* the ZAP socket is polled even without a ROUTER: libzmq tears a CURVE session down
     * only once the ZAP handler's socket has processed its pipe's termination */
    zmq_pollitem_t it[2] = {{c->zap, 0, ZMQ_POLLIN, 0}, {c->router, 0, ZMQ_POLLIN, 0}};
    if (zmq_poll(it, c->router ? 2 : 1, left < 200 ? (long)left : 200) < 0) {
      if (zmq_errno() == EINTR) continue;
      return 0;
    }
    if (it[0].revents & ZMQ_POLLIN) df_proto_zap_handle(c->zap, zap_admit, c);
    if (!c->router || !(it[1].revents & ZMQ_POLLIN)) continue;
    df_proto_frames f;
    if (df_proto_recv(c->router, true, ZMQ_DONTWAIT, &f) != 0) continue;
    memcpy(c->rid, f.rid, f.rid_len);
    c->rid_len = f.rid_len;
    df_proto_msg m;
    int code;
    char err[256];
    if (df_proto_decode(zmq_msg_data(&f.hdr), zmq_msg_size(&f.hdr), &m, &code, err, sizeof err) != 0) {
      CHECK(c, false, "the node sent a message that does not decode: %s", err);
      df_proto_frames_close(&f);
      continue;
    }
    if (m.op == DF_PROTO_JOIN) c->joins++;
    if (m.op == DF_PROTO_FETCH && !(want & (1u << DF_PROTO_FETCH))) {
      serve_fetch(c, &m);
    } else if (want & (1u << m.op)) {
      *out = m;
      c->fr = f;
      c->have_fr = true;
      return m.op;
    } else if (m.op == DF_PROTO_JOIN) {
      printf("fake_coord: (kept for later) JOIN id %llu\n", (unsigned long long)m.id);
      c->join = m; /* a JOIN has no arrays to free */
      c->have_join = true;
    } else {
      char sr[300];
      printf("fake_coord: (not waited for) %s id %llu%s%s\n", df_proto_op_name(m.op),
             (unsigned long long)m.id, m.op == DF_PROTO_ERROR ? ": " : "",
             m.op == DF_PROTO_ERROR ? shown(m.reason, sr, sizeof sr) : "");
    }
    df_proto_msg_free(&m);
    df_proto_frames_close(&f);
  }
}

#define OPM(op) (1u << DF_PROTO_##op)

/* Expect an ERROR within WAIT_MS with `code` (0: any) whose reason contains `substr` (NULL:
 * any); FETCHes meanwhile are served. Checks; returns whether it came as expected. */
static bool fc_expect_error(fc *c, uint32_t code, const char *substr, const char *what) {
  df_proto_msg m;
  int op = fc_wait(c, OPM(ERROR) | OPM(RESULT) | OPM(READY) | OPM(PONG), WAIT_MS, &m);
  char sr[300];
  bool ok = op == DF_PROTO_ERROR && (!code || m.code == code) && (!substr || strstr(m.reason, substr));
  CHECK(c, ok, "%s: ERROR %u expected%s%s%s, got %s %u \"%s\"", what, code, substr ? " naming \"" : "",
        substr ? substr : "", substr ? "\"" : "", op ? df_proto_op_name((df_proto_op)op) : "nothing",
        m.code, shown(m.reason, sr, sizeof sr));
  df_proto_msg_free(&m);
  return ok;
}

/* PING the node and expect PONG within 5 s. Checks. */
static bool fc_alive(fc *c, const char *what) {
  df_proto_msg p = {.op = DF_PROTO_PING}, m;
  fc_send(c, &p, NULL, 0);
  int op = fc_wait(c, OPM(PONG), 5000, &m);
  bool ok = op == DF_PROTO_PONG && m.id == p.id;
  df_proto_msg_free(&m);
  return CHECK(c, ok, "%s: the node still answers PING", what);
}

/* ---- the fake's model and assignments ------------------------------------------------------ */

/* Build the model: deterministic small weights, names as a Qwen-style checkpoint's, SHA-256. */
static int model_init(model *md) {
  static const char *const kind[3] = {"gate_proj", "up_proj", "down_proj"};
  uint32_t s = 0x9e3779b9u;
  for (int p = 0; p < NPAIRS; p++) {
    md->pairs[2 * p] = 1;
    md->pairs[2 * p + 1] = p * 3;
    for (int k = 0; k < 3; k++) {
      int i = 3 * p + k;
      df_proto_tensor *t = &md->t[i];
      snprintf(t->name, sizeof t->name, "model.layers.1.mlp.experts.%d.%s.weight", p * 3, kind[k]);
      snprintf(t->dtype, sizeof t->dtype, "F32");
      t->shape[0] = k == 2 ? HID : INTER;
      t->shape[1] = k == 2 ? INTER : HID;
      t->nbytes = TBYTES;
      if (!(md->w[i] = malloc(TBYTES))) return -1;
      for (uint64_t e = 0; e < TBYTES / 4; e++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        md->w[i][e] = ((float)(s & 0xffff) / 65536.0f - 0.5f) * 0.1f;
      }
      df_proto_sha256(md->w[i], TBYTES, t->sha256);
    }
  }
  return 0;
}

/* The well-formed ASSIGN of the model's first n_pairs pairs (arrays borrowed from c->m). */
static df_proto_msg good_assign(fc *c, int n_pairs) {
  return (df_proto_msg){.op = DF_PROTO_ASSIGN, .hidden = HID, .inter = INTER, .max_rows = MAXR,
                        .n_pairs = n_pairs, .pairs = c->m.pairs, .n_tensors = 3 * n_pairs,
                        .tensors = c->m.t};
}

/* Send ASSIGN `a` (a new epoch; id: `id`, 0 = a fresh one) and serve FETCHes from it: data
 * [a->n_tensors] are the tensors' bytes, TBYTES each (NULL, or a NULL entry: a byte pattern). */
static void fc_assign(fc *c, df_proto_msg *a, uint64_t id, const void *const *data) {
  a->id = id;
  a->epoch = ++c->epoch;
  c->cur = *a;
  c->cur_data = data;
  c->fetches = 0;
  fc_send(c, a, NULL, 0);
}

/* The one place that answers a JOIN (the join handshake is being reworked: keep it here).
 * The fake admits whatever joined: any key (its ZAP handler admits all, so a node never needs
 * a token's join connection here), any token secret or none; it prints what the node
 * declared and replies with ASSIGN `a` (fc_assign; NULL: the well-formed assignment of every
 * pair). */
static void answer_join(fc *c, const df_proto_msg *join, df_proto_msg *a, const void *const *data) {
  char nm[80];
  printf("fake_coord: JOIN #%d from %s: name \"%s\", memory %llu, %s, features %#x\n", c->joins,
         c->node_key, shown(join->name, nm, sizeof nm), (unsigned long long)join->memory,
         join->token[0] ? "with a token" : "without a token", join->features);
  df_proto_msg g = good_assign(c, NPAIRS);
  fc_assign(c, a ? a : &g, join->id, a ? data : (const void *const *)c->m.w);
}

/* Wait for the node's next JOIN (within ms) and answer it (answer_join). Checks. */
static bool fc_join(fc *c, int ms, df_proto_msg *a, const void *const *data) {
  df_proto_msg m;
  int op = fc_wait(c, OPM(JOIN), ms, &m);
  if (!CHECK(c, op == DF_PROTO_JOIN, "the node sends JOIN (within %d s)", ms / 1000)) return false;
  answer_join(c, &m, a, data);
  df_proto_msg_free(&m);
  return true;
}

/* Serve FETCHes until READY for the current epoch with `held` bytes (0: any). Checks. */
static bool fc_expect_ready(fc *c, uint64_t held) {
  df_proto_msg m;
  int op = fc_wait(c, OPM(READY) | OPM(ERROR), WAIT_MS, &m);
  char sr[300];
  bool ok = op == DF_PROTO_READY && m.epoch == c->cur.epoch && (!held || m.held == held);
  CHECK(c, ok, "READY for epoch %llu (%llu bytes held), got %s \"%s\" epoch %llu held %llu",
        (unsigned long long)c->cur.epoch, (unsigned long long)held,
        op ? df_proto_op_name((df_proto_op)op) : "nothing", shown(m.reason, sr, sizeof sr),
        (unsigned long long)m.epoch, (unsigned long long)m.held);
  df_proto_msg_free(&m);
  return ok;
}

/* A serving node: JOIN answered with the well-formed assignment, tensors streamed, READY.
 * A node that dropped its assignment (a failed provisioning, a BYE) joins again when its
 * unanswered-JOIN timer fires (node/node.c JOIN_REPLY_MS, 10 s after its last JOIN) and its
 * socket reconnects (libzmq backoff up to 5 s): that rejoin gets START_MS, not WAIT_MS. */
static bool fc_ready(fc *c) {
  return fc_join(c, START_MS, NULL, NULL) &&
         fc_expect_ready(c, NPAIRS * 3 * TBYTES);
}

/* ---- FFN ------------------------------------------------------------------------------------ */

/* Reference SwiGLU of pair p on `rows` rows of x [rows, HID] into y, in double. */
static void reference(const fc *c, int p, int64_t rows, const float *x, float *y) {
  const float *wg = c->m.w[3 * p], *wu = c->m.w[3 * p + 1], *wd = c->m.w[3 * p + 2];
  double *a = malloc(INTER * sizeof *a);
  for (int64_t r = 0; r < rows && a; r++) {
    for (int i = 0; i < INTER; i++) {
      double g = 0, u = 0;
      for (int h = 0; h < HID; h++) {
        g += (double)wg[(int64_t)i * HID + h] * x[r * HID + h];
        u += (double)wu[(int64_t)i * HID + h] * x[r * HID + h];
      }
      a[i] = g / (1 + exp(-g)) * u;
    }
    for (int h = 0; h < HID; h++) {
      double s = 0;
      for (int i = 0; i < INTER; i++) s += (double)wd[(int64_t)h * INTER + i] * a[i];
      y[r * HID + h] = (float)s;
    }
  }
  free(a);
}

/* Send a well-formed FFN over both pairs (rows 3 and 5) and check the RESULT against the
 * reference. */
static bool fc_ffn_good(fc *c, const char *what) {
  int32_t ex[2] = {c->m.pairs[1], c->m.pairs[3]};
  int64_t rows[2] = {3, 5}, R = 8;
  float *x = malloc(R * HID * 4), *ref = malloc(R * HID * 4);
  if (!x || !ref) return false;
  for (int64_t i = 0; i < R * HID; i++) x[i] = (float)sin((double)i * 0.37) * 2.0f;
  reference(c, 0, 3, x, ref);
  reference(c, 1, 5, x + 3 * HID, ref + 3 * HID);
  df_proto_msg f = {.op = DF_PROTO_FFN, .layer = 1, .n_groups = 2, .experts = ex, .rows = rows,
                    .total_rows = R, .cols = HID},
               m;
  fc_send(c, &f, x, (size_t)(R * HID * 4));
  int op = fc_wait(c, OPM(RESULT) | OPM(ERROR), WAIT_MS, &m);
  double worst = -1;
  if (op == DF_PROTO_RESULT && m.id == f.id && m.total_rows == R && m.cols == HID &&
      c->fr.has_payload && zmq_msg_size(&c->fr.payload) == (size_t)(R * HID * 4)) {
    const float *y = zmq_msg_data(&c->fr.payload);
    worst = 0;
    for (int64_t i = 0; i < R * HID; i++) {
      double d = fabs((double)y[i] - ref[i]) / (1e-3 + fabs(ref[i]));
      if (!(d <= worst)) worst = d; /* NaN counts as worst */
    }
  }
  df_proto_msg_free(&m);
  free(x);
  free(ref);
  return CHECK(c, worst >= 0 && worst < 1e-3, "%s: a well-formed FFN gets the reference RESULT "
               "(worst relative difference %.2g)", what, worst);
}

/* Send an FFN header `f` (ids, layer, experts, rows, cols as given) with `payload_len` bytes
 * of x (NULL payload frame when payload_len < 0); returns the reply op, the reply in *out. */
static int fc_ffn(fc *c, df_proto_msg *f, long long payload_len, df_proto_msg *out) {
  f->op = DF_PROTO_FFN;
  float *x = payload_len > 0 ? calloc(1, (size_t)payload_len) : NULL;
  fc_send(c, f, payload_len >= 0 ? (x ? (void *)x : (void *)"") : NULL,
          payload_len > 0 ? (size_t)payload_len : 0);
  free(x);
  return fc_wait(c, OPM(RESULT) | OPM(ERROR), WAIT_MS, out);
}

/* ---- probes --------------------------------------------------------------------------------- */

/* baseline: the harness itself: a well-formed session (two-chunk fetches, READY with the
 * bytes held, an FFN equal to the reference, STATS). */
static void probe_baseline(fc *c, int arg) {
  if (!fc_ready(c)) return;
  CHECK(c, c->fetches == NPAIRS * 3 * 2, "every tensor was fetched in two chunks (%d FETCHes)",
        c->fetches);
  fc_ffn_good(c, "baseline");
  df_proto_msg s = {.op = DF_PROTO_STATS}, m;
  fc_send(c, &s, NULL, 0);
  int op = fc_wait(c, OPM(STATS), WAIT_MS, &m);
  CHECK(c, op == DF_PROTO_STATS && m.served == 1 && m.rows_done == 8, "STATS: %llu served, %llu rows",
        (unsigned long long)m.served, (unsigned long long)m.rows_done);
  df_proto_msg_free(&m);
}

/* After a refused ASSIGN: nothing was fetched, an FFN is refused, and a well-formed ASSIGN of
 * the first n_pairs pairs still works. */
static void after_refusal(fc *c, int n_pairs, const char *what) {
  CHECK(c, c->fetches == 0, "%s: nothing was fetched for the refused assignment (%d FETCHes)", what,
        c->fetches);
  df_proto_msg f = {.layer = 1, .n_groups = 1, .experts = (int32_t[]){0}, .rows = (int64_t[]){1},
                    .total_rows = 1, .cols = HID},
               m;
  int op = fc_ffn(c, &f, HID * 4, &m);
  CHECK(c, op == DF_PROTO_ERROR && (m.code == DF_PROTO_E_NOT_READY || m.code == DF_PROTO_E_BAD_REQUEST),
        "%s: an FFN now is refused (ERROR %u)", what, m.code);
  df_proto_msg_free(&m);
  df_proto_msg g = good_assign(c, n_pairs);
  fc_assign(c, &g, 0, (const void *const *)c->m.w);
  if (fc_expect_ready(c, (uint64_t)n_pairs * 3 * TBYTES) && n_pairs == NPAIRS) fc_ffn_good(c, what);
}

/* assign_*: an ASSIGN the node must refuse (ERROR 4 naming the field, a log line, nothing
 * fetched), after which a well-formed one still works. arg selects the hostile field. */
enum { A_DIMS, A_NBYTES, A_ZERO, A_DTYPE, A_SHAPE, A_HUGE, A_BUDGET, A_SCALES };
static void probe_assign(fc *c, int arg) {
  df_proto_tensor t[3 * NPAIRS];
  memcpy(t, c->m.t, sizeof t);
  df_proto_msg a = good_assign(c, NPAIRS);
  a.tensors = t;
  const char *want = NULL, *log = "assignment refused";
  switch (arg) {
  case A_DIMS: /* every dimension at the codec's limit: buffers of 2^40 floats */
    a.hidden = a.inter = a.max_rows = DF_PROTO_MAX_DIM;
    want = "too large";
    break;
  case A_NBYTES: /* the shape is right, nbytes 2^62 (no overflow in the fetch loop) */
    t[1].nbytes = 1ull << 62;
    want = "nbytes";
    break;
  case A_ZERO: /* an empty tensor: never fetched, never found */
    t[2].shape[0] = 0, t[2].nbytes = 0;
    want = "down_proj";
    break;
  case A_DTYPE: /* an unknown dtype holding control bytes */
    snprintf(t[0].dtype, sizeof t[0].dtype, "\x1b[2J\n");
    want = "gate_proj";
    break;
  case A_SHAPE: /* down [INTER, HID] instead of [HID, INTER], same bytes */
    t[5].shape[0] = INTER, t[5].shape[1] = HID;
    want = "down_proj";
    break;
  case A_HUGE: /* consistent shapes of 2^40 elements each, max_rows 1: 12 TiB in all */
    a.hidden = a.inter = DF_PROTO_MAX_DIM, a.max_rows = 1;
    for (int i = 0; i < 3 * NPAIRS; i++) {
      t[i].shape[0] = t[i].shape[1] = DF_PROTO_MAX_DIM;
      t[i].nbytes = (uint64_t)DF_PROTO_MAX_DIM * DF_PROTO_MAX_DIM * 4;
    }
    want = "over the declared";
    break;
  case A_BUDGET: /* 9 MiB for a node that declared 8 MiB (--memory 8M) */
    want = "over the declared";
    break;
  case A_SCALES: /* FP8 `block`, six tensors for one pair, but F32 weights (and "scales") */
    a.block_n = a.block_k = 128;
    a.n_pairs = 1, a.n_tensors = 6;
    want = "F8_E4M3";
    break;
  }
  if (!fc_join(c, START_MS, &a, (const void *const *)c->m.w)) return;
  if (fc_expect_error(c, DF_PROTO_E_BAD_REQUEST, want, "hostile ASSIGN refused")) fc_log_wait(c, log, 2000);
  after_refusal(c, arg == A_BUDGET ? 1 : NPAIRS, "after the refusal");
}

/* assign_pairs: one pair more than DF_PROTO_MAX_PAIRS (the header is ~3 MB): refused by the
 * decoder naming 'pairs', before anything is allocated per pair. */
static void probe_assign_pairs(fc *c, int arg) {
  int64_t n = DF_PROTO_MAX_PAIRS + 1;
  int32_t *pairs = calloc((size_t)n * 2, sizeof *pairs);
  if (!pairs) return;
  df_proto_msg a = good_assign(c, 0);
  a.n_pairs = n;
  a.pairs = pairs;
  a.n_tensors = 0; /* the decoder looks at 'pairs' first */
  if (fc_join(c, START_MS, &a, NULL) &&
      fc_expect_error(c, DF_PROTO_E_MALFORMED, "'pairs'", "ASSIGN with too many pairs"))
    fc_log_wait(c, "'pairs' has too many elements", 2000);
  free(pairs);
  after_refusal(c, NPAIRS, "after too many pairs");
}

/* assign_dup: the same pair twice: refused (once its tensors are there) naming it. */
static void probe_assign_dup(fc *c, int arg) {
  int32_t pairs[4] = {1, 0, 1, 0};
  df_proto_tensor t[6];
  memcpy(t, c->m.t, 3 * sizeof *t);
  memcpy(t + 3, c->m.t, 3 * sizeof *t);
  const void *data[6] = {c->m.w[0], c->m.w[1], c->m.w[2], c->m.w[0], c->m.w[1], c->m.w[2]};
  df_proto_msg a = good_assign(c, 2);
  a.pairs = pairs;
  a.tensors = t;
  if (!fc_join(c, START_MS, &a, data)) return;
  fc_expect_error(c, 0, NULL, "ASSIGN listing a pair twice");
  fc_log_wait(c, "layer 1 expert 0 twice", 2000);
  fc_alive(c, "after a duplicate pair");
}

/* chunk_*: a tampered SHARD_CHUNK: the node refuses the stream with a line naming what is
 * wrong, keeps no byte of it, and recovers (arg: T_*, log line per kind). */
static void probe_chunk(fc *c, int arg) {
  static const char *const line[] = {
      [T_SHA] = "does not match its SHA-256",  [T_SHORT] = "bytes, expected",
      [T_LONG] = "bytes, expected",            [T_EMPTY] = "bytes, expected",
      [T_TOTAL] = "size disagrees with the manifest", [T_GAP] = "out of order",
      [T_OFFSET] = "'offset' is past 'total'", [T_FRAMES] = "frames, expected 2",
      [T_NOBYTES] = "frames, expected 2",      [T_INDEX] = "unexpected shard chunk ignored"};
  c->tamper = arg;
  if (!fc_join(c, START_MS, NULL, NULL)) return;
  if (arg == T_OFFSET) { /* a header the decoder refuses: ERROR 1, the stream waits */
    fc_expect_error(c, DF_PROTO_E_MALFORMED, "'offset'", "chunk offset past total");
    fc_log_wait(c, line[arg], 2000);
    fc_alive(c, "after a malformed chunk");
    return;
  }
  if (arg == T_INDEX) { /* a chunk of no tensor: ignored */
    fc_log_wait(c, line[arg], WAIT_MS);
    fc_alive(c, "after a chunk of no tensor");
    return;
  }
  fc_expect_error(c, DF_PROTO_E_INTERNAL, "provisioning failed", "tampered chunk");
  fc_log_wait(c, line[arg], 2000);
  if (arg == T_SHA) { /* the node starts a new session (within its 10 s JOIN window) */
    if (fc_ready(c)) fc_ffn_good(c, "after a tampered stream, rejoined");
    return;
  }
  /* or it takes a new ASSIGN on the same connection: the next stream is clean */
  df_proto_msg g = good_assign(c, NPAIRS);
  fc_assign(c, &g, 0, (const void *const *)c->m.w);
  if (fc_expect_ready(c, NPAIRS * 3 * TBYTES)) fc_ffn_good(c, "after a tampered stream");
}

/* names: tensor names a peer chooses — path separators, "..", absolute paths, control bytes,
 * 255 bytes — are names only: the node provisions them (content-addressed cache), and one
 * logged in a refusal comes out as one printable line. */
static void probe_names(fc *c, int arg) {
  df_proto_tensor t[3 * NPAIRS];
  memcpy(t, c->m.t, sizeof t);
  char abs[1100];
  snprintf(abs, sizeof abs, "%s/pwned-absolute", c->work);
  snprintf(t[0].name, sizeof t[0].name, "../../../pwned-dotdot");
  snprintf(t[1].name, sizeof t[1].name, "%.240s", abs);
  snprintf(t[2].name, sizeof t[2].name, "/tmp/fake_coord_pwned_%d", (int)getpid());
  snprintf(t[3].name, sizeof t[3].name, "..");
  snprintf(t[4].name, sizeof t[4].name, "sha256/../../../../pwned\n\x1b[31mdf-node: FORGED\r");
  memset(t[5].name, 'A', DF_PROTO_MAX_TNAME);
  t[5].name[DF_PROTO_MAX_TNAME] = 0;
  df_proto_msg a = good_assign(c, NPAIRS);
  a.tensors = t;
  if (!fc_join(c, START_MS, &a, (const void *const *)c->m.w)) return;
  if (fc_expect_ready(c, NPAIRS * 3 * TBYTES)) fc_ffn_good(c, "hostile names");
  /* the same names again with a wrong dtype: the refusal names the tensor, printably */
  snprintf(t[4].dtype, sizeof t[4].dtype, "F16");
  a = good_assign(c, NPAIRS);
  a.tensors = t;
  fc_assign(c, &a, 0, (const void *const *)c->m.w);
  fc_expect_error(c, DF_PROTO_E_BAD_REQUEST, "FORGED", "a hostile name in a refusal");
  fc_log_wait(c, "df-node: FORGED", 2000);
  char p[700];
  snprintf(p, sizeof p, "/tmp/fake_coord_pwned_%d", (int)getpid());
  CHECK(c, access(p, F_OK) != 0 && access(abs, F_OK) != 0, "no file at a path a name gave");
}

/* ffn: FFNs whose header and payload disagree, or that ask for what is not held: each gets
 * an ERROR naming the field and the node keeps serving. */
static void probe_ffn(fc *c, int arg) {
  if (!fc_ready(c)) return;
  int32_t ex1[1] = {0}, ex_bad[1] = {1}, ex_many[4096];
  int64_t r1[1] = {1}, r_big[1] = {MAXR + 1}, r_many[4096];
  for (int i = 0; i < 4096; i++) ex_many[i] = i % 2 ? 3 : 0, r_many[i] = 1;
  struct {
    const char *what;
    df_proto_msg f;
    long long payload;
    uint32_t code;
    const char *field;
  } cases[] = {
      {"cols other than hidden", {.layer = 1, .n_groups = 1, .experts = ex1, .rows = r1, .total_rows = 1,
                                  .cols = HID + 1}, (HID + 1) * 4, DF_PROTO_E_MALFORMED, "cols"},
      {"payload 4 bytes short", {.layer = 1, .n_groups = 1, .experts = ex1, .rows = r1, .total_rows = 1,
                                 .cols = HID}, HID * 4 - 4, DF_PROTO_E_MALFORMED, "bytes"},
      {"payload 4 bytes long", {.layer = 1, .n_groups = 1, .experts = ex1, .rows = r1, .total_rows = 1,
                                .cols = HID}, HID * 4 + 4, DF_PROTO_E_MALFORMED, "bytes"},
      {"no payload frame", {.layer = 1, .n_groups = 1, .experts = ex1, .rows = r1, .total_rows = 1,
                            .cols = HID}, -1, DF_PROTO_E_MALFORMED, "frames"},
      {"rows over max_rows", {.layer = 1, .n_groups = 1, .experts = ex1, .rows = r_big,
                              .total_rows = MAXR + 1, .cols = HID}, (MAXR + 1) * HID * 4,
       DF_PROTO_E_BAD_REQUEST, "max_rows"},
      {"an expert not held", {.layer = 1, .n_groups = 1, .experts = ex_bad, .rows = r1, .total_rows = 1,
                              .cols = HID}, HID * 4, DF_PROTO_E_BAD_REQUEST, "not held"},
      {"a layer not held", {.layer = INT32_MAX, .n_groups = 1, .experts = ex1, .rows = r1,
                            .total_rows = 1, .cols = HID}, HID * 4, DF_PROTO_E_BAD_REQUEST, "not held"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    df_proto_msg m;
    int op = fc_ffn(c, &cases[i].f, cases[i].payload, &m);
    char sr[300];
    CHECK(c, op == DF_PROTO_ERROR && m.code == cases[i].code && strstr(m.reason, cases[i].field),
          "FFN with %s: ERROR %u naming \"%s\", got %s %u \"%s\"", cases[i].what, cases[i].code,
          cases[i].field, op ? df_proto_op_name((df_proto_op)op) : "nothing", m.code,
          shown(m.reason, sr, sizeof sr));
    df_proto_msg_free(&m);
  }
  fc_log_wait(c, "refused FFN", 2000);
  /* an FFN with an extra frame */
  df_proto_msg f = {.op = DF_PROTO_FFN, .layer = 1, .n_groups = 1, .experts = ex1, .rows = r1,
                    .total_rows = 1, .cols = HID};
  fc_send_extra(c, &f, 2, HID * 4);
  fc_expect_error(c, DF_PROTO_E_MALFORMED, "frames", "FFN with extra frames");
  /* 4096 groups of one row each, alternating the two held experts: answered */
  df_proto_msg g = {.layer = 1, .n_groups = 4096, .experts = ex_many, .rows = r_many,
                    .total_rows = 4096, .cols = HID},
               m;
  int op = fc_ffn(c, &g, 4096ll * HID * 4, &m);
  CHECK(c, op == DF_PROTO_RESULT && m.total_rows == 4096, "FFN of 4096 groups answered (%s)",
        op ? df_proto_op_name((df_proto_op)op) : "nothing");
  df_proto_msg_free(&m);
  fc_ffn_good(c, "after the refused FFNs");
}

/* ffn_nan: inputs holding NaN, +-Inf and 3e38: the node answers (or refuses), never crashes,
 * and later FFNs are unaffected. */
static void probe_ffn_nan(fc *c, int arg) {
  if (!fc_ready(c)) return;
  int32_t ex[2] = {0, 3};
  int64_t rows[2] = {2, 2};
  float *x = calloc(4 * HID, sizeof *x);
  x[0] = NAN, x[1] = INFINITY, x[HID + 5] = -INFINITY, x[2 * HID] = 3e38f, x[3 * HID + 7] = -3e38f;
  df_proto_msg f = {.op = DF_PROTO_FFN, .layer = 1, .n_groups = 2, .experts = ex, .rows = rows,
                    .total_rows = 4, .cols = HID},
               m;
  fc_send(c, &f, x, 4 * HID * sizeof *x);
  free(x);
  int op = fc_wait(c, OPM(RESULT) | OPM(ERROR), WAIT_MS, &m);
  CHECK(c, (op == DF_PROTO_RESULT && m.total_rows == 4 && m.cols == HID) || op == DF_PROTO_ERROR,
        "FFN of NaN/Inf rows answered: %s", op ? df_proto_op_name((df_proto_op)op) : "nothing");
  df_proto_msg_free(&m);
  fc_ffn_good(c, "after NaN rows");
}

/* ops: headers that are not messages, a version-99 message, unknown and unexpected ops,
 * payload-less ops with extra frames, an ERROR from the coordinator: each answered with an
 * ERROR naming what is wrong (or logged), and the node keeps serving. */
static void probe_ops(fc *c, int arg) {
  if (!fc_ready(c)) return;
  static const uint8_t junk[] = {0xc1, 0xde, 0xad, 0xbe, 0xef, 0x00, 0xff};
  static const uint8_t arr[] = {0x93, 0x01, 0x02, 0x03};               /* [1, 2, 3] */
  static const uint8_t deep[] = {0x81, 0xa1, 'x', 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0xc0};
  static const uint8_t opctl[] = {0x83, 0xa1, 'v', 0x02, 0xa2, 'i', 'd', 0x07, 0xa2, 'o', 'p',
                                  0xa4, 'F', 0x1b, '\n', 'X'}; /* op "F\x1b\nX" */
  struct {
    const char *what;
    const void *b;
    size_t n;
    const char *field;
  } raw[] = {
      {"garbage bytes", junk, sizeof junk, "not one bounded msgpack value"},
      {"an empty header frame", "", 0, "not one bounded msgpack value"},
      {"a msgpack array", arr, sizeof arr, "not a map"},
      {"nesting past the limit", deep, sizeof deep, "not one bounded msgpack value"},
      {"an op with control bytes", opctl, sizeof opctl, "unknown op 'F??X'"},
  };
  for (size_t i = 0; i < sizeof raw / sizeof *raw; i++) {
    const void *d[1] = {raw[i].b};
    size_t l[1] = {raw[i].n};
    fc_send_frames(c, 1, d, l);
    fc_expect_error(c, DF_PROTO_E_MALFORMED, raw[i].field, raw[i].what);
  }
  fc_log_wait(c, "bad message from the coordinator", 2000);
  /* version 99: ERROR 2 carrying v = 2 */
  df_proto_msg v = {.op = DF_PROTO_PING, .v = 99}, m;
  fc_send(c, &v, NULL, 0);
  int op = fc_wait(c, OPM(ERROR) | OPM(PONG), WAIT_MS, &m);
  CHECK(c, op == DF_PROTO_ERROR && m.code == DF_PROTO_E_VERSION && m.v == DF_PROTO_VERSION,
        "a version-99 PING: ERROR 2 with v %u (got %s %u)", m.v,
        op ? df_proto_op_name((df_proto_op)op) : "nothing", m.code);
  df_proto_msg_free(&m);
  /* ops a coordinator never sends */
  df_proto_op unexpected[] = {DF_PROTO_JOIN, DF_PROTO_FETCH, DF_PROTO_READY, DF_PROTO_RESULT,
                              DF_PROTO_PONG};
  for (size_t i = 0; i < sizeof unexpected / sizeof *unexpected; i++) {
    df_proto_msg u = {.op = unexpected[i], .cols = HID, .length = 1};
    snprintf(u.name, sizeof u.name, "x");
    fc_send(c, &u, NULL, 0);
    char what[64];
    snprintf(what, sizeof what, "a %s sent to the node", df_proto_op_name(unexpected[i]));
    fc_expect_error(c, DF_PROTO_E_BAD_REQUEST, "unexpected", what);
  }
  fc_log_wait(c, "unexpected", 2000);
  /* payload-less ops with extra frames */
  df_proto_msg p = {.op = DF_PROTO_PING};
  fc_send_extra(c, &p, 4, 16);
  fc_expect_error(c, DF_PROTO_E_MALFORMED, "frames", "a PING with 4 extra frames");
  df_proto_msg s = {.op = DF_PROTO_STATS};
  fc_send_extra(c, &s, 1, 1 << 20);
  fc_expect_error(c, DF_PROTO_E_MALFORMED, "frames", "a STATS with a 1 MiB extra frame");
  /* an ERROR from the coordinator (not unauthorised) is logged, printably */
  df_proto_msg e = {.op = DF_PROTO_ERROR, .code = DF_PROTO_E_INTERNAL};
  snprintf(e.reason, sizeof e.reason, "oops\n\x1b[1mdf-node: FORGED-ERROR");
  fc_send(c, &e, NULL, 0);
  fc_log_wait(c, "coordinator error 6: oops", 2000);
  fc_alive(c, "after the hostile ops");
  fc_ffn_good(c, "after the hostile ops");
}

/* Send one header frame of n bytes: a PING whose ignored key `pad` is an array of nils
 * (n - 25 of them). -1 when out of memory. */
static int send_nil_ping(fc *c, size_t n) {
  uint8_t *h = malloc(n);
  if (!h) return -1;
  static const uint8_t head[] = {0x84, 0xa1, 'v', 0x02, 0xa2, 'i', 'd', 0x09, 0xa2, 'o', 'p',
                                 0xa4, 'P', 'I', 'N', 'G', 0xa3, 'p', 'a', 'd', 0xdd};
  size_t hl = sizeof head, cnt = n - hl - 4;
  memcpy(h, head, hl);
  h[hl] = (uint8_t)(cnt >> 24), h[hl + 1] = (uint8_t)(cnt >> 16), h[hl + 2] = (uint8_t)(cnt >> 8),
  h[hl + 3] = (uint8_t)cnt;
  memset(h + hl + 4, 0xc0, cnt);
  const void *d[1] = {h};
  size_t l[1] = {n};
  fc_send_frames(c, 1, d, l);
  free(h);
  return 0;
}

/* hdr_big: a header frame over the node's 64 MiB header limit (docs/PROTOCOL.md §2): refused
 * before msgpack sees it; its 65 MiB are an array of nils, which decoded would take ~1.6 GB. */
static void probe_hdr_big(fc *c, int arg) {
  if (!fc_ready(c)) return;
  size_t n = (65u << 20) + 32;
  if (send_nil_ping(c, n) != 0) return;
  fc_expect_error(c, DF_PROTO_E_MALFORMED, "header", "a 65 MiB header");
  fc_log_wait(c, "header", 2000);
  fc_alive(c, "after a 65 MiB header");
}

/* hdr_nils: a PING with an ignored key holding nils. arg 0: 4 M of them (4 MiB, within every
 * limit): answered. arg 1: 20 M (20 MiB, under the 64 MiB header limit but past
 * DF_PROTO_MAX_VALUES): refused as malformed before msgpack-c builds its object tree (24
 * bytes per value: ~480 MiB), and the node's peak RSS stays far below that. */
static void probe_hdr_nils(fc *c, int arg) {
  if (!fc_ready(c)) return;
  uint64_t before = node_peak_kb(c);
  size_t n = arg ? 20u << 20 : 4u << 20;
  if (send_nil_ping(c, n) != 0) return;
  df_proto_msg m;
  int op = fc_wait(c, OPM(PONG) | OPM(ERROR), WAIT_MS, &m);
  uint32_t code = m.code;
  df_proto_msg_free(&m);
  uint64_t after = node_peak_kb(c);
  if (arg) {
    CHECK(c, op == DF_PROTO_ERROR && code == DF_PROTO_E_MALFORMED && after < before + 200 * 1024,
          "a 20 MiB header of 20 M nils refused as malformed (%s %u); peak RSS %.0f -> %.0f MiB",
          op ? df_proto_op_name((df_proto_op)op) : "nothing", code, before / 1024.0, after / 1024.0);
    fc_alive(c, "after a header of 20 M values");
    return;
  }
  CHECK(c, op != 0, "a 4 MiB header of nils answered (%s); peak RSS %.0f -> %.0f MiB",
        op ? df_proto_op_name((df_proto_op)op) : "nothing", before / 1024.0, after / 1024.0);
}

/* silent: a coordinator that stops talking after READY: the node reconnects within the 10 s
 * of docs/PROTOCOL.md §3 and joins again. */
static void probe_silent(fc *c, int arg) {
  if (!fc_ready(c)) return;
  int64_t t0 = now_ms();
  df_proto_msg m;
  int op = fc_wait(c, OPM(JOIN), 15000, &m);
  int64_t dt = now_ms() - t0;
  CHECK(c, op == DF_PROTO_JOIN && dt >= 9000, "silent coordinator: the node joins again after "
        "%.1f s (10 s of silence)", dt / 1000.0);
  fc_log_wait(c, "coordinator silent for 10 s; reconnecting", 1000);
  if (op == DF_PROTO_JOIN) {
    answer_join(c, &m, NULL, NULL);
    if (fc_expect_ready(c, NPAIRS * 3 * TBYTES)) fc_ffn_good(c, "after the silence");
  }
  df_proto_msg_free(&m);
}

/* join_silent: a JOIN never answered: the node reconnects after 10 s and joins again. */
static void probe_join_silent(fc *c, int arg) {
  df_proto_msg m;
  int op = fc_wait(c, OPM(JOIN), START_MS, &m);
  df_proto_msg_free(&m);
  if (!CHECK(c, op == DF_PROTO_JOIN, "the node sends JOIN")) return;
  int64_t t0 = now_ms();
  op = fc_wait(c, OPM(JOIN), 15000, &m);
  int64_t dt = now_ms() - t0;
  CHECK(c, op == DF_PROTO_JOIN && dt >= 9000, "unanswered JOIN: sent again after %.1f s",
        dt / 1000.0);
  fc_log_wait(c, "no answer to JOIN; reconnecting", 1000);
  if (op == DF_PROTO_JOIN) {
    answer_join(c, &m, NULL, NULL);
    if (fc_expect_ready(c, NPAIRS * 3 * TBYTES)) fc_ffn_good(c, "after an unanswered JOIN");
  }
  df_proto_msg_free(&m);
}

/* gone: the coordinator's socket closes under a serving node: it logs the loss, keeps trying
 * without burning CPU, and joins the coordinator bound again on the same port. */
static void probe_gone(fc *c, int arg) {
  if (!fc_ready(c)) return;
  if (c->have_fr) df_proto_frames_close(&c->fr), c->have_fr = false;
  zmq_close(c->router);
  c->router = NULL;
  fc_log_wait(c, "disconnected from the coordinator", WAIT_MS);
  int64_t cpu0 = node_cpu_ms(c);
  df_proto_msg m;
  fc_wait(c, 0, 3000, &m); /* 3 s without a coordinator (the ZAP socket polled) */
  int64_t cpu1 = node_cpu_ms(c);
  CHECK(c, node_running(c) && cpu1 - cpu0 < 300, "coordinator gone: the node waits (%lld ms CPU "
        "in 3 s)", (long long)(cpu1 - cpu0));
  char err[256];
  for (int i = 0; i < 40 && !c->router; i++) /* the port is free once libzmq closed it */
    if (!(c->router = df_proto_server_open(c->ctx, c->endpoint, &c->kp, 64 << 20, err, sizeof err)))
      usleep(50000);
  if (!c->router) {
    CHECK(c, false, "rebind %s: %s", c->endpoint, err);
    return;
  }
  if (fc_ready(c)) fc_ffn_good(c, "after the coordinator came back");
}

/* bye: a BYE whose reason holds control bytes: logged printably; the node joins again. */
static void probe_bye(fc *c, int arg) {
  if (!fc_ready(c)) return;
  df_proto_msg b = {.op = DF_PROTO_BYE};
  snprintf(b.reason, sizeof b.reason, "going\r\ndf-node: FORGED-BYE\x1b[0m");
  fc_send(c, &b, NULL, 0);
  fc_log_wait(c, "coordinator said bye: going", 2000);
  if (fc_ready(c)) fc_ffn_good(c, "after BYE");
}

/* unauthorized: ERROR 3 (the coordinator refuses this node): the node exits 3 at once with
 * one printable line naming the coordinator's reason. */
static void probe_unauthorized(fc *c, int arg) {
  c->expect_exit = 3;
  if (!fc_ready(c)) return;
  df_proto_msg e = {.op = DF_PROTO_ERROR, .code = DF_PROTO_E_UNAUTHORIZED};
  snprintf(e.reason, sizeof e.reason, "not you\n\x1b[2Jdf-node: FORGED-EXIT");
  fc_send(c, &e, NULL, 0);
  fc_log_wait(c, "refused by the coordinator", 5000);
}

typedef struct probe {
  const char *name;
  void (*fn)(fc *, int);
  int arg;
  const char *memory;  /* --memory */
  uint64_t rss_mib;    /* peak RSS bound */
  const char *what;
} probe;

static const probe PROBES[] = {
    {"baseline", probe_baseline, 0, "1G", 256, "a well-formed session (checks the harness)"},
    {"assign_dims", probe_assign, A_DIMS, "1G", 256, "hidden, inter, max_rows at 2^20"},
    {"assign_nbytes", probe_assign, A_NBYTES, "1G", 256, "a tensor's nbytes 2^62 for its shape"},
    {"assign_zero", probe_assign, A_ZERO, "1G", 256, "an empty tensor (shape [0, n], 0 bytes)"},
    {"assign_dtype", probe_assign, A_DTYPE, "1G", 256, "an unknown dtype of control bytes"},
    {"assign_shape", probe_assign, A_SHAPE, "1G", 256, "down_proj [inter, hidden] (transposed)"},
    {"assign_huge", probe_assign, A_HUGE, "1G", 256, "consistent 2^40-element tensors: 12 TiB"},
    {"assign_budget", probe_assign, A_BUDGET, "8M", 256, "9 MiB for a node of --memory 8M"},
    {"assign_scales", probe_assign, A_SCALES, "1G", 256, "FP8 `block` over F32 weights"},
    {"assign_pairs", probe_assign_pairs, 0, "1G", 256, "2^20 + 1 pairs"},
    {"assign_dup", probe_assign_dup, 0, "1G", 256, "the same pair twice"},
    {"chunk_sha", probe_chunk, T_SHA, "1G", 256, "a chunk byte flipped: SHA-256 mismatch"},
    {"chunk_short", probe_chunk, T_SHORT, "1G", 256, "the last chunk one byte short"},
    {"chunk_long", probe_chunk, T_LONG, "1G", 256, "the last chunk one byte long"},
    {"chunk_empty", probe_chunk, T_EMPTY, "1G", 256, "the last chunk empty"},
    {"chunk_total", probe_chunk, T_TOTAL, "1G", 256, "`total` other than the manifest's"},
    {"chunk_gap", probe_chunk, T_GAP, "1G", 256, "`offset` 4 KiB past the one asked"},
    {"chunk_offset", probe_chunk, T_OFFSET, "1G", 256, "`offset` past `total`"},
    {"chunk_frames", probe_chunk, T_FRAMES, "1G", 256, "a chunk with an extra frame"},
    {"chunk_nobytes", probe_chunk, T_NOBYTES, "1G", 256, "a chunk without its bytes frame"},
    {"chunk_index", probe_chunk, T_INDEX, "1G", 256, "a chunk of tensor 2^32 - 1"},
    {"names", probe_names, 0, "1G", 256, "tensor names with /, .., absolute paths, control bytes"},
    {"ffn", probe_ffn, 0, "1G", 256, "FFNs whose header and payload disagree, unheld experts"},
    {"ffn_nan", probe_ffn_nan, 0, "1G", 256, "FFN rows holding NaN, Inf, 3e38"},
    {"ops", probe_ops, 0, "1G", 256, "garbage headers, version 99, unknown/unexpected ops, frames"},
    {"hdr_big", probe_hdr_big, 0, "1G", 512, "a 65 MiB header (limit 64 MiB)"},
    {"hdr_nils", probe_hdr_nils, 0, "1G", 512, "a 4 MiB header of 4 M nils"},
    {"hdr_values", probe_hdr_nils, 1, "1G", 512, "a 20 MiB header of 20 M nils"},
    {"silent", probe_silent, 0, "1G", 256, "the coordinator stops talking after READY"},
    {"join_silent", probe_join_silent, 0, "1G", 256, "JOIN never answered"},
    {"gone", probe_gone, 0, "1G", 256, "the coordinator's socket closes, then comes back"},
    {"bye", probe_bye, 0, "1G", 256, "BYE with control bytes in its reason"},
    {"unauthorized", probe_unauthorized, 0, "1G", 256, "ERROR 3 with control bytes in its reason"},
};
#define N_PROBES (sizeof PROBES / sizeof *PROBES)

/* ---- the checks every probe ends with ---------------------------------------------------- */

/* nftw callback: every entry of the sandbox must be one the node may write (see the top). */
static int walk_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  fc *c = g_fc;
  const char *rel = path + strlen(c->work);
  if (*rel == '/') rel++;
  static const char *const dirs[] = {"", "cwd", "home", "state", "state/cache", "state/cache/sha256",
                                     "state/cache/tmp"};
  static const char *const files[] = {"token", "node.log", "state/node.key", "state/coordinator",
                                      "state/.lock", "state/node.lock"};
  if (type == FTW_D) {
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
      if (!strcmp(rel, dirs[i])) return 0;
  } else if (type == FTW_F) {
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
      if (!strcmp(rel, files[i])) return 0;
    const char *hex = rel + strlen("state/cache/sha256/");
    if (!strncmp(rel, "state/cache/sha256/", 19) && strlen(hex) == 64 &&
        strspn(hex, "0123456789abcdef") == 64) {
      /* a published tensor: its bytes must hash to its name */
      uint8_t h[32];
      char got[65];
      int fd = open(path, O_RDONLY);
      df_proto_sha256_ctx sc;
      df_proto_sha256_init(&sc);
      char buf[1 << 16];
      ssize_t r;
      while (fd >= 0 && (r = read(fd, buf, sizeof buf)) > 0) df_proto_sha256_update(&sc, buf, (size_t)r);
      if (fd >= 0) close(fd);
      df_proto_sha256_final(&sc, h);
      df_proto_hex(h, 32, got);
      CHECK(c, !strcmp(got, hex), "cache file %.16s... holds the bytes its name promises", hex);
      return 0;
    }
  }
  char sh[600];
  CHECK(c, false, "unexpected entry in the sandbox: '%s'", shown(rel, sh, sizeof sh));
  return 0;
}

/* End of every probe: liveness or the expected exit, memory, a clean SIGTERM, the log, the
 * sandbox. */
static void finish(fc *c) {
  if (!c->dfnode) return;
  if (c->expect_exit < 0) {
    if (c->router) fc_alive(c, "end of probe");
    uint64_t kb = node_peak_kb(c);
    CHECK(c, kb > 0 && kb <= c->rss_limit_kb, "peak RSS %.1f MiB (bound %llu MiB)", kb / 1024.0,
          (unsigned long long)(c->rss_limit_kb / 1024));
    if (node_running(c)) kill(c->pid, SIGTERM);
    bool gone = node_wait_exit(c, 10000);
    CHECK(c, gone && WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0,
          "SIGTERM: the node exits 0 within 10 s (status %#x)", gone ? c->status : -1);
  } else {
    bool gone = node_wait_exit(c, 5000);
    CHECK(c, gone && WIFEXITED(c->status) && WEXITSTATUS(c->status) == c->expect_exit,
          "the node exits %d within 5 s (status %#x)", c->expect_exit, gone ? c->status : -1);
  }
  if (node_running(c)) {
    kill(c->pid, SIGKILL);
    node_wait_exit(c, 5000);
  }
  size_t len = 0;
  char *log = log_read(c, &len);
  int bad_lines = 0, lines = 0;
  for (char *p = log; p && *p;) {
    char *e = memchr(p, '\n', len - (size_t)(p - log));
    size_t ll = e ? (size_t)(e - p) : strlen(p);
    bool ok = ll >= 9 && !memcmp(p, "df-node: ", 9);
    for (size_t i = 0; i < ll; i++)
      if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f) ok = false;
    if (!ok && bad_lines++ < 3) printf("fake_coord: bad log line: %.*s\n", (int)(ll < 200 ? ll : 200), p);
    lines++;
    p += ll + (e ? 1 : 0);
  }
  free(log);
  CHECK(c, lines > 0 && bad_lines == 0, "node log: %d lines, every one a printable \"df-node: \" line "
        "(%d not)", lines, bad_lines);
  g_fc = c;
  nftw(c->work, walk_entry, 16, FTW_PHYS);
}

/* Alarm: the run took too long; kill the node and fail. */
static void on_alarm(int s) {
  (void)s;
  if (g_fc && g_fc->pid) kill(g_fc->pid, SIGKILL);
  static const char msg[] = "FAIL  fake_coord: the probe did not finish within its time limit\n";
  ssize_t w = write(1, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}

/* Bind the fake (ROUTER + accept-all ZAP on a free 127.0.0.1 port), write the token, make the
 * sandbox. 0 or -1 (printed). */
static int setup(fc *c, const char *work_root) {
  char err[512];
  snprintf(c->work, sizeof c->work, "%s/%s", work_root, c->probe);
  if (strlen(c->work) > 900) return -1;
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->work); /* a previous run's sandbox */
  if (strchr(c->work, '\'') || system(cmd) != 0) return -1;
  snprintf(c->state, sizeof c->state, "%s/state", c->work);
  snprintf(c->cwd, sizeof c->cwd, "%s/cwd", c->work);
  snprintf(c->home, sizeof c->home, "%s/home", c->work);
  snprintf(c->logp, sizeof c->logp, "%s/node.log", c->work);
  snprintf(c->tokenp, sizeof c->tokenp, "%s/token", c->work);
  if (df_proto_state_mkdir(c->work, err, sizeof err) || mkdir(c->cwd, 0700) || mkdir(c->home, 0700)) {
    printf("fake_coord: sandbox %s: %s\n", c->work, err);
    return -1;
  }
  if (model_init(&c->m) != 0) return -1;
  c->ctx = zmq_ctx_new();
  if (zmq_curve_keypair(c->kp.pub, c->kp.sec) != 0 || !(c->zap = df_proto_zap_bind(c->ctx, err, sizeof err)) ||
      !(c->router = df_proto_server_open(c->ctx, "tcp://127.0.0.1:*", &c->kp, 64 << 20, err, sizeof err))) {
    printf("fake_coord: %s\n", err);
    return -1;
  }
  size_t el = sizeof c->endpoint;
  zmq_getsockopt(c->router, ZMQ_LAST_ENDPOINT, c->endpoint, &el);
  /* the token: dft1_<this key, hex>_<any 32 hex secret> */
  char hex[65], token[DF_PROTO_TOKEN_LEN + 2], sec[DF_PROTO_SECRET_HEX + 1];
  uint8_t r[16];
  if (df_proto_z85_to_hex(c->kp.pub, hex) != 0 || df_proto_random(r, sizeof r, err, sizeof err) != 0)
    return -1;
  df_proto_hex(r, sizeof r, sec);
  snprintf(token, sizeof token, "dft1_%s_%s\n", hex, sec);
  if (df_proto_write_atomic(c->tokenp, token, strlen(token), 0600, err, sizeof err) != 0) {
    printf("fake_coord: %s\n", err);
    return -1;
  }
  printf("fake_coord: %s: coordinator %s, token in %s\n", c->probe, c->endpoint, c->tokenp);
  return 0;
}

/* One probe against a df-node it starts (DF_NODE "-": started by hand): 0 when every check
 * passed, 1 otherwise, 2 on a set-up error. */
static int run_probe(const probe *pr, const char *dfnode_arg, const char *work_root) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  static fc cs;
  fc *c = &cs;
  c->probe = pr->name;
  static char dfnode[4096];
  if (strcmp(dfnode_arg, "-") && !realpath(dfnode_arg, dfnode)) { /* the node runs in cwd/ */
    fprintf(stderr, "fake_coord: %s: %s\n", dfnode_arg, strerror(errno));
    return 2;
  }
  c->dfnode = strcmp(dfnode_arg, "-") ? dfnode : NULL;
  c->expect_exit = -1;
  c->rss_limit_kb = pr->rss_mib * 1024;
  snprintf(c->memory, sizeof c->memory, "%s", pr->memory);
  g_fc = c;
  signal(SIGALRM, on_alarm);
  alarm(150);
  if (setup(c, work_root) != 0 || node_start(c) != 0) {
    printf("fake_coord: set-up failed\n");
    return 2;
  }
  printf("fake_coord: probe %s: %s\n", pr->name, pr->what);
  pr->fn(c, pr->arg);
  finish(c);
  if (c->have_fr) df_proto_frames_close(&c->fr);
  if (c->router) zmq_close(c->router);
  zmq_close(c->zap);
  zmq_ctx_term(c->ctx);
  for (int i = 0; i < 3 * NPAIRS; i++) free(c->m.w[i]);
  printf("%s  fake_coord %s: %d checks, %d failed\n", c->failures ? "FAIL" : "ok  ", pr->name,
         c->checks, c->failures);
  return c->failures ? 1 : 0;
}

static const probe *find_probe(const char *name, size_t len) {
  for (size_t i = 0; i < N_PROBES; i++)
    if (strlen(PROBES[i].name) == len && !strncmp(PROBES[i].name, name, len)) return &PROBES[i];
  fprintf(stderr, "fake_coord: unknown probe '%.*s' (fake_coord list)\n", (int)len, name);
  return NULL;
}

/* PROBE,PROBE,...: each probe in a process of its own, all at once (for probes that mostly wait
 * out the node's timers); each one's output is printed whole once all have ended. The worst
 * status: 1 when a check failed, else 2 when a set-up failed, else 0. */
static int run_probes(const probe **prs, int n, const char *dfnode_arg, const char *work_root) {
  if (mkdir(work_root, 0700) != 0 && errno != EEXIST) {
    printf("fake_coord: %s: %s\n", work_root, strerror(errno));
    return 2;
  }
  pid_t pids[N_PROBES];
  char outs[N_PROBES][1100];
  fflush(stdout);
  for (int i = 0; i < n; i++) {
    /* beside the probe's sandbox (WORK_DIR/PROBE), not in it: the sandbox is checked */
    snprintf(outs[i], sizeof outs[i], "%.900s/%s.out", work_root, prs[i]->name);
    pids[i] = fork();
    if (pids[i] < 0) {
      printf("fake_coord: fork: %s\n", strerror(errno));
      return 2;
    }
    if (pids[i] == 0) {
      int fd = open(outs[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(2);
      _exit(run_probe(prs[i], dfnode_arg, work_root));
    }
  }
  int worst = 0;
  for (int i = 0; i < n; i++) {
    int st = 0;
    int rc = waitpid(pids[i], &st, 0) == pids[i] && WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    printf("---- probe %s (exit %d)\n", prs[i]->name, rc);
    FILE *f = fopen(outs[i], "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) fputs(line, stdout);
    if (f) fclose(f);
    remove(outs[i]);
    if (rc == 1) worst = 1;
    else if (rc != 0 && worst == 0) worst = rc;
  }
  return worst;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "list")) {
    for (size_t i = 0; i < N_PROBES; i++) printf("%-14s %s\n", PROBES[i].name, PROBES[i].what);
    return 0;
  }
  if (argc != 4) {
    fprintf(stderr, "usage: fake_coord PROBE[,PROBE...] DF_NODE|- WORK_DIR\n"
                    "       fake_coord list\n");
    return 2;
  }
  const probe *prs[N_PROBES];
  int n = 0;
  for (const char *p = argv[1];; p++) {
    size_t len = strcspn(p, ",");
    if (n == (int)N_PROBES || !(prs[n++] = find_probe(p, len))) return 2;
    p += len;
    if (!*p) break;
  }
  if (n == 1) return run_probe(prs[0], argv[2], argv[3]);
  if (!strcmp(argv[2], "-")) {
    fprintf(stderr, "fake_coord: several probes need DF_NODE (they start their nodes)\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  return run_probes(prs, n, argv[2], argv[3]);
}
