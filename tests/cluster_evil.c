/* tests/cluster_evil.c — a misbehaving cluster peer for tests/cluster_test.py.
 *
 *   cluster_evil MODE ENDPOINT TOKEN
 * MODE:
 *   garbage    join with TOKEN, then send a frame that is not msgpack: expect ERROR 1
 *   version    send a JOIN with protocol version 99: expect ERROR 2
 *   truncated  join, claim READY, answer the first FFN with a payload 4 bytes short:
 *              expect BYE (the coordinator drops us and reruns the layer itself)
 *   shape      same, but a RESULT with one row fewer than asked (header and payload agree)
 *   nan        same, but a well-shaped RESULT holding one NaN
 *   huge       same, but a well-shaped RESULT holding 3e38 (finite, but sums overflow)
 *   plain      connect over plain TCP (no CURVE) and write junk: the handshake must fail
 *   idle       open 1,500 TCP connections and send nothing: the coordinator must close every
 *              one within its handshake deadline (5 s; waited for 12 s)
 *   stranger   connect with a fresh key while TOKEN is open, without redeeming it, and send
 *              one message of 100,000 frames: the CURVE handshake must be refused (no key
 *              but allow-listed ones and open tokens' join keys passes, so nothing is read)
 *   churn      300 distinct keys one after another: join (each must get ASSIGN, never
 *              "cluster full"), say BYE, disconnect; more than the coordinator's 256 slots
 *   oldnode    join as a df-node from before JOIN `features` (every mode but this one
 *              joins so too; this one checks the answer): for a model whose experts need
 *              `act` / `mx` (Kimi K3) the ASSIGN must hold no pair and neither key
 * Every mode but plain and stranger first redeems TOKEN as df-node does (admit()).
 * Prints one line and exits 0 when the coordinator reacted as expected, 1 otherwise
 * (10 s timeout per wait).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "transport/codec.h"
#include "transport/keys.h"
#include "transport/sock.h"

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for a message whose op is `want` (others are answered or ignored). */
static int wait_op(void *s, df_proto_op want, df_proto_msg *out, df_proto_frames *fr) {
  for (;;) {
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 10000) <= 0) return -1;
    if (df_proto_recv(s, false, 0, fr) != 0) return -1;
    int code;
    char err[256];
    if (df_proto_decode(zmq_msg_data(&fr->hdr), zmq_msg_size(&fr->hdr), out, &code, err, sizeof err) != 0) {
      df_proto_frames_close(fr);
      continue;
    }
    if (out->op == want) return 0;
    if (out->op == DF_PROTO_ERROR || out->op == DF_PROTO_BYE)
      printf("evil: got %s %u: %s\n", df_proto_op_name(out->op), out->code, out->reason);
    df_proto_msg_free(out);
    df_proto_frames_close(fr);
  }
}

static int plain(const char *endpoint) {
  const char *hp = strstr(endpoint, "://");
  hp = hp ? hp + 3 : endpoint;
  char host[64];
  int port;
  if (sscanf(hp, "%63[^:]:%d", host, &port) != 2) return 1;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, host, &a.sin_addr);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) return 1;
  static const char junk[] = "GET / HTTP/1.0\r\n\r\n\xff\x00\x01garbage garbage garbage";
  ssize_t w = write(fd, junk, sizeof junk);
  char buf[256];
  ssize_t r = read(fd, buf, sizeof buf); /* the coordinator closes on us */
  close(fd);
  printf("evil: plain TCP wrote %zd bytes, read %zd, connection closed\n", w, r);
  return 0;
}

/* Redeem the token for `kp` as df-node does: connect with the token's join key, JOIN with
 * the token and kp's public key, wait for ADMIT. 0, or 1 (one line printed). */
static int admit(void *ctx, const char *ep, const char *server, const char *secret,
                 const df_proto_keypair *kp, const char *name) {
  df_proto_keypair jk;
  char err[512];
  if (df_proto_token_join_keypair(secret, &jk) != 0) return 1;
  void *s = df_proto_client_open(ctx, ep, &jk, server, 1 << 20, err, sizeof err);
  if (!s) {
    printf("evil: %s\n", err);
    return 1;
  }
  df_proto_msg join = {.op = DF_PROTO_JOIN, .id = 1, .memory = 1ull << 20}, m;
  df_proto_frames fr;
  snprintf(join.name, sizeof join.name, "%s", name); /* the name status and revoke will use */
  snprintf(join.token, sizeof join.token, "%s", secret);
  snprintf(join.key, sizeof join.key, "%s", kp->pub);
  int rc = 1;
  if (df_proto_send(s, NULL, 0, &join, NULL, 0, 0, err, sizeof err) == 0 &&
      wait_op(s, DF_PROTO_ADMIT, &m, &fr) == 0) {
    df_proto_msg_free(&m);
    df_proto_frames_close(&fr);
    rc = 0;
  } else {
    printf("evil: the token did not admit the key\n");
  }
  zmq_close(s);
  return rc;
}

/* A fresh key that never redeemed the open token: the handshake is refused before any
 * message is read. 0 when the monitor reports the ZAP refusal within 10 s. */
static int stranger(const char *ep, const char *token) {
  char server[DF_PROTO_Z85_KEY + 1], secret[DF_PROTO_SECRET_HEX + 1], err[512];
  if (df_proto_token_parse(token, server, secret, err, sizeof err) != 0) return 2;
  void *ctx = zmq_ctx_new();
  df_proto_keypair kp;
  zmq_curve_keypair(kp.pub, kp.sec);
  /* monitored before it connects: the refusal's event is never missed */
  void *s = df_proto_client_socket(ctx, &kp, server, 1 << 20, err, sizeof err);
  void *mon = s ? df_proto_monitor_open(ctx, s, "inproc://evil-mon",
                                        ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_SUCCEEDED,
                                        err, sizeof err)
                : NULL;
  if (!mon || df_proto_client_connect(s, ep, err, sizeof err) != 0) return 2;
  /* queue one message of 100,000 one-byte frames; never sent unless the handshake passes */
  int hwm = 0, zero = 0;
  zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_IMMEDIATE, &zero, sizeof zero);
  for (int i = 0; i < 100000; i++) zmq_send(s, "x", 1, i < 99999 ? ZMQ_SNDMORE | ZMQ_DONTWAIT : ZMQ_DONTWAIT);
  int rc = 1;
  zmq_pollitem_t it = {mon, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&it, 1, 10000) > 0) {
    zmq_msg_t a;
    zmq_msg_init(&a);
    uint16_t ev = 0;
    if (zmq_msg_recv(&a, mon, 0) >= 2) memcpy(&ev, zmq_msg_data(&a), 2);
    if (zmq_msg_more(&a)) zmq_recv(mon, err, sizeof err, 0);
    zmq_msg_close(&a);
    if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      printf("evil: stranger refused at the handshake while a token is open\n");
      rc = 0;
    } else {
      printf("evil: stranger's handshake succeeded (event %u)\n", ev);
    }
  } else {
    printf("evil: no handshake outcome within 10 s\n");
  }
  df_proto_monitor_close(s, &mon);
  zmq_close(s);
  zmq_ctx_term(ctx);
  return rc;
}

/* 1,500 raw TCP connections that never start a handshake: each must be closed by the
 * coordinator (EOF or reset) within 12 s. */
static int idle(const char *endpoint) {
  enum { N = 1500 };
  const char *hp = strstr(endpoint, "://");
  hp = hp ? hp + 3 : endpoint;
  char host[64];
  int port;
  if (sscanf(hp, "%63[^:]:%d", host, &port) != 2) return 2;
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < N + 64) {
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= N + 64 ? N + 64 : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  static struct pollfd p[N];
  int n = 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, host, &a.sin_addr);
  for (; n < N; n++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
      if (fd >= 0) close(fd);
      break;
    }
    p[n] = (struct pollfd){.fd = fd, .events = POLLIN};
  }
  int open_ = n;
  for (int64_t t0 = mono_ms(); open_ > 0 && mono_ms() - t0 < 12000;) {
    if (poll(p, (nfds_t)n, 500) <= 0) continue;
    for (int i = 0; i < n; i++) {
      char b[64];
      if (p[i].fd >= 0 && (p[i].revents & (POLLIN | POLLHUP | POLLERR)) && read(p[i].fd, b, sizeof b) <= 0) {
        close(p[i].fd);
        p[i].fd = -1;
        open_--;
      }
    }
  }
  for (int i = 0; i < n; i++)
    if (p[i].fd >= 0) close(p[i].fd);
  printf("evil: %d idle connections opened, %d still open after 12 s\n", n, open_);
  return n == N && open_ == 0 ? 0 : 1;
}

/* Join with `n` fresh keys in turn; each must be admitted (ASSIGN), then leaves with BYE. */
static int churn(const char *ep, const char *token) {
  char server[DF_PROTO_Z85_KEY + 1], secret[DF_PROTO_SECRET_HEX + 1], err[512];
  if (df_proto_token_parse(token, server, secret, err, sizeof err) != 0) return 2;
  void *ctx = zmq_ctx_new();
  int rc = 0;
  for (int i = 0; i < 300 && rc == 0; i++) {
    df_proto_keypair kp;
    zmq_curve_keypair(kp.pub, kp.sec);
    char nm[32];
    snprintf(nm, sizeof nm, "churn-%d", i);
    if (admit(ctx, ep, server, secret, &kp, nm) != 0) {
      printf("evil: churn key %d was not admitted by the token\n", i);
      rc = 1;
      break;
    }
    void *s = df_proto_client_open(ctx, ep, &kp, server, 1 << 20, err, sizeof err);
    if (!s) return 2;
    df_proto_msg join = {.op = DF_PROTO_JOIN, .id = 1, .memory = 1ull << 20}, m;
    df_proto_frames fr;
    snprintf(join.name, sizeof join.name, "churn-%d", i);
    if (df_proto_send(s, NULL, 0, &join, NULL, 0, 0, err, sizeof err) != 0 ||
        wait_op(s, DF_PROTO_ASSIGN, &m, &fr) != 0) {
      printf("evil: churn key %d was not admitted\n", i);
      rc = 1;
    } else {
      df_proto_msg_free(&m);
      df_proto_frames_close(&fr);
      df_proto_msg bye = {.op = DF_PROTO_BYE, .id = 2};
      df_proto_send(s, NULL, 0, &bye, NULL, 0, 0, err, sizeof err);
    }
    int linger = 200;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(s);
  }
  zmq_ctx_term(ctx);
  if (rc == 0) printf("evil: churn: 300 keys joined and left, every one admitted\n");
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: cluster_evil MODE ENDPOINT TOKEN\n");
    return 2;
  }
  const char *mode = argv[1], *ep = argv[2], *token = argv[3];
  if (!strcmp(mode, "plain")) return plain(ep);
  if (!strcmp(mode, "idle")) return idle(ep);
  if (!strcmp(mode, "churn")) return churn(ep, token);
  if (!strcmp(mode, "stranger")) return stranger(ep, token);
  char server[DF_PROTO_Z85_KEY + 1], secret[DF_PROTO_SECRET_HEX + 1], err[512];
  if (df_proto_token_parse(token, server, secret, err, sizeof err) != 0) {
    fprintf(stderr, "evil: %s\n", err);
    return 2;
  }
  df_proto_keypair kp;
  zmq_curve_keypair(kp.pub, kp.sec);
  void *ctx = zmq_ctx_new();
  char nm[DF_PROTO_MAX_NAME + 1];
  snprintf(nm, sizeof nm, "evil-%s", mode);
  if (admit(ctx, ep, server, secret, &kp, nm) != 0) return 1;
  void *s = df_proto_client_open(ctx, ep, &kp, server, 1 << 30, err, sizeof err);
  if (!s) {
    fprintf(stderr, "evil: %s\n", err);
    return 2;
  }
  int rc = 1;
  df_proto_msg m;
  df_proto_frames fr;
  memset(&m, 0, sizeof m);
  df_proto_msg join = {.op = DF_PROTO_JOIN, .id = 1, .memory = 1ull << 30};
  snprintf(join.name, sizeof join.name, "evil-%s", mode);
  if (!strcmp(mode, "version")) join.v = 99;
  /* the DEALER queues nothing before the handshake (ZMQ_IMMEDIATE): send blocking */
  if (df_proto_send(s, NULL, 0, &join, NULL, 0, 0, err, sizeof err) != 0) goto done;
  if (!strcmp(mode, "version")) {
    if (wait_op(s, DF_PROTO_ERROR, &m, &fr) == 0) {
      printf("evil: version refused: ERROR %u: %s (peer speaks v%u)\n", m.code, m.reason, m.v);
      rc = m.code == DF_PROTO_E_VERSION ? 0 : 1;
    }
    goto done;
  }
  if (wait_op(s, DF_PROTO_ASSIGN, &m, &fr) != 0) {
    printf("evil: no ASSIGN\n");
    goto done;
  }
  if (!strcmp(mode, "oldnode")) {
    printf("evil: an old node got an ASSIGN of %lld pairs, %lld tensors, act %u, mx %lld, "
           "hidden %lld\n", (long long)m.n_pairs, (long long)m.n_tensors, m.act_kind,
           (long long)m.mx, (long long)m.hidden);
    rc = m.n_pairs == 0 && m.n_tensors == 0 && m.act_kind == DF_PROTO_ACT_SILU && m.mx == 0 ? 0 : 1;
    goto done;
  }
  uint64_t epoch = m.epoch;
  df_proto_msg_free(&m);
  df_proto_frames_close(&fr);
  if (!strcmp(mode, "garbage")) {
    static const uint8_t junk[] = {0xc1, 0xde, 0xad, 0xbe, 0xef, 0xdd, 0xff, 0xff, 0xff, 0xff};
    zmq_send(s, junk, sizeof junk, 0);
    if (wait_op(s, DF_PROTO_ERROR, &m, &fr) == 0) {
      printf("evil: garbage refused: ERROR %u: %s\n", m.code, m.reason);
      rc = m.code == DF_PROTO_E_MALFORMED ? 0 : 1;
    }
    goto done;
  }
  df_proto_msg ready = {.op = DF_PROTO_READY, .id = 2, .epoch = epoch};
  df_proto_send(s, NULL, 0, &ready, NULL, 0, 0, err, sizeof err);
  for (;;) { /* answer FFN; later ASSIGNs (replans) get READY too */
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 20000) <= 0) {
      printf("evil: no FFN\n");
      goto done;
    }
    df_proto_recv(s, false, 0, &fr);
    int code;
    if (df_proto_decode(zmq_msg_data(&fr.hdr), zmq_msg_size(&fr.hdr), &m, &code, err, sizeof err) != 0) {
      df_proto_frames_close(&fr);
      continue;
    }
    if (m.op == DF_PROTO_ASSIGN) {
      df_proto_msg r = {.op = DF_PROTO_READY, .id = 3, .epoch = m.epoch};
      df_proto_send(s, NULL, 0, &r, NULL, 0, 0, err, sizeof err);
    } else if (m.op == DF_PROTO_PING) {
      df_proto_msg r = {.op = DF_PROTO_PONG, .id = m.id};
      df_proto_send(s, NULL, 0, &r, NULL, 0, 0, err, sizeof err);
    } else if (m.op == DF_PROTO_FFN) {
      int64_t rows = m.total_rows - (!strcmp(mode, "shape") ? 1 : 0);
      size_t bytes = (size_t)(rows * m.cols * 4) - (!strcmp(mode, "truncated") ? 4 : 0);
      float *junk = calloc(1, bytes + 4);
      if (junk && !strcmp(mode, "nan")) junk[bytes / 4 / 2] = NAN;
      if (junk && !strcmp(mode, "huge")) junk[bytes / 4 - 1] = 3e38f;
      df_proto_msg r = {.op = DF_PROTO_RESULT, .id = m.id, .total_rows = rows, .cols = m.cols};
      df_proto_send(s, NULL, 0, &r, junk, bytes, 0, err, sizeof err);
      free(junk);
      df_proto_msg_free(&m);
      df_proto_frames_close(&fr);
      if (wait_op(s, DF_PROTO_BYE, &m, &fr) == 0) {
        printf("evil: dropped after a %s RESULT: BYE %s\n", mode, m.reason);
        rc = 0;
      }
      goto done;
    }
    df_proto_msg_free(&m);
    df_proto_frames_close(&fr);
  }
done:
  df_proto_msg_free(&m);
  zmq_close(s);
  zmq_ctx_term(ctx);
  return rc;
}
