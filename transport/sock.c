/* transport/sock.c — CURVE sockets, ZAP handler, message send/receive; see sock.h. */
#include "transport/sock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int setopt_int(void *s, int opt, int v) { return zmq_setsockopt(s, opt, &v, sizeof v); }

/* Options shared by both ends. */
static int common_opts(void *s, int64_t max_msg) {
  return setopt_int(s, ZMQ_LINGER, 0) || setopt_int(s, ZMQ_HEARTBEAT_IVL, DF_PROTO_HEARTBEAT_MS) ||
         setopt_int(s, ZMQ_HEARTBEAT_TIMEOUT, DF_PROTO_HEARTBEAT_TIMEOUT_MS) ||
         setopt_int(s, ZMQ_HEARTBEAT_TTL, DF_PROTO_HEARTBEAT_TIMEOUT_MS) ||
         zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
}

/* Raise the soft open-file limit to the hard one (at most 65536): every TCP connection to the
 * cluster port takes a descriptor before its handshake can be refused, and libzmq retries
 * accept() without pause while the process has none left. */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
  if (rl.rlim_cur >= want) return;
  rl.rlim_cur = want;
  setrlimit(RLIMIT_NOFILE, &rl);
}

void *df_proto_server_open(void *ctx, const char *endpoint, const df_proto_keypair *kp,
                           int64_t max_msg, char *err, size_t errlen) {
  raise_nofile();
  void *s = zmq_socket(ctx, ZMQ_ROUTER);
  if (!s) goto fail;
  if (common_opts(s, max_msg) || setopt_int(s, ZMQ_CURVE_SERVER, 1) ||
      setopt_int(s, ZMQ_HANDSHAKE_IVL, DF_PROTO_HANDSHAKE_MS) ||
      zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, kp->sec, DF_PROTO_Z85_KEY) ||
      zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, "deltafin", 8) || setopt_int(s, ZMQ_ROUTER_MANDATORY, 1))
    goto fail;
  if (zmq_bind(s, endpoint) != 0) {
    snprintf(err, errlen, "cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
    zmq_close(s);
    return NULL;
  }
  return s;
fail:
  snprintf(err, errlen, "cannot set up the cluster socket: %s", zmq_strerror(zmq_errno()));
  if (s) zmq_close(s);
  return NULL;
}

void *df_proto_client_socket(void *ctx, const df_proto_keypair *kp, const char *server_pub,
                             int64_t max_msg, char *err, size_t errlen) {
  void *s = zmq_socket(ctx, ZMQ_DEALER);
  if (!s || common_opts(s, max_msg) || setopt_int(s, ZMQ_RECONNECT_IVL, 100) ||
      setopt_int(s, ZMQ_RECONNECT_IVL_MAX, 5000) || setopt_int(s, ZMQ_IMMEDIATE, 1) ||
      zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_pub, DF_PROTO_Z85_KEY) ||
      zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, kp->pub, DF_PROTO_Z85_KEY) ||
      zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, kp->sec, DF_PROTO_Z85_KEY)) {
    snprintf(err, errlen, "cannot set up the node socket: %s", zmq_strerror(zmq_errno()));
    if (s) zmq_close(s);
    return NULL;
  }
  return s;
}

int df_proto_client_connect(void *sock, const char *endpoint, char *err, size_t errlen) {
  if (zmq_connect(sock, endpoint) != 0) {
    snprintf(err, errlen, "cannot connect to %s: %s", endpoint, zmq_strerror(zmq_errno()));
    return -1;
  }
  return 0;
}

void *df_proto_client_open(void *ctx, const char *endpoint, const df_proto_keypair *kp,
                           const char *server_pub, int64_t max_msg, char *err, size_t errlen) {
  void *s = df_proto_client_socket(ctx, kp, server_pub, max_msg, err, errlen);
  if (s && df_proto_client_connect(s, endpoint, err, errlen) != 0) {
    zmq_close(s);
    return NULL;
  }
  return s;
}

void *df_proto_zap_bind(void *ctx, char *err, size_t errlen) {
  void *s = zmq_socket(ctx, ZMQ_REP);
  if (!s || setopt_int(s, ZMQ_LINGER, 0) || zmq_bind(s, "inproc://zeromq.zap.01") != 0) {
    snprintf(err, errlen, "cannot bind the ZAP handler: %s", zmq_strerror(zmq_errno()));
    if (s) zmq_close(s);
    return NULL;
  }
  return s;
}

void *df_proto_monitor_open(void *ctx, void *sock, const char *ep, int events, char *err,
                            size_t errlen) {
  /* an inproc connect may precede the bind: zmq_socket_monitor's PAIR finds its peer
   * attached when it is created, so no event is ever sent while there is none */
  void *r = zmq_socket(ctx, ZMQ_PAIR);
  if (!r || setopt_int(r, ZMQ_LINGER, 0) || setopt_int(r, ZMQ_RCVHWM, 0) ||
      zmq_connect(r, ep) != 0 || zmq_socket_monitor(sock, ep, events) != 0) {
    snprintf(err, errlen, "cannot monitor the socket on %s: %s", ep, zmq_strerror(zmq_errno()));
    if (r) zmq_close(r);
    return NULL;
  }
  return r;
}

void df_proto_monitor_close(void *sock, void **reader) {
  if (sock) zmq_socket_monitor(sock, NULL, 0);
  if (reader && *reader) zmq_close(*reader);
  if (reader) *reader = NULL;
}

int df_proto_zap_handle(void *zap, df_proto_zap_fn decide, void *user) {
  /* request: version, request id, domain, address, identity, mechanism, credentials... */
  char part[8][256];
  size_t plen[8] = {0};
  int n = 0, more = 1;
  while (more) {
    zmq_msg_t f;
    zmq_msg_init(&f);
    if (zmq_msg_recv(&f, zap, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
      zmq_msg_close(&f);
      if (n == 0) return -1;
      break;
    }
    if (n < 8) {
      size_t l = zmq_msg_size(&f) < 255 ? zmq_msg_size(&f) : 255;
      memcpy(part[n], zmq_msg_data(&f), l);
      part[n][l] = 0;
      plen[n] = l;
    }
    n++;
    more = zmq_msg_more(&f);
    zmq_msg_close(&f);
  }
  char why[256] = "", user_id[DF_PROTO_Z85_KEY + 1] = "";
  bool ok = false;
  if (n >= 7 && !strcmp(part[0], "1.0") && !strcmp(part[5], "CURVE") && plen[6] == 32) {
    if (zmq_z85_encode(user_id, (const uint8_t *)part[6], 32)) ok = decide(user, user_id, part[3], why, sizeof why);
  } else {
    snprintf(why, sizeof why, "not a CURVE handshake");
  }
  const char *status = ok ? "200" : "400";
  zmq_send(zap, "1.0", 3, ZMQ_SNDMORE);
  zmq_send(zap, part[1], n > 1 ? plen[1] : 0, ZMQ_SNDMORE);
  zmq_send(zap, status, 3, ZMQ_SNDMORE);
  zmq_send(zap, ok ? "OK" : why, ok ? 2 : strlen(why), ZMQ_SNDMORE);
  zmq_send(zap, ok ? user_id : "", ok ? strlen(user_id) : 0, ZMQ_SNDMORE);
  zmq_send(zap, "", 0, 0);
  return 0;
}

int df_proto_recv(void *sock, bool router, int flags, df_proto_frames *f) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  zmq_msg_init(&f->hdr);
  zmq_msg_init(&f->payload);
  zmq_msg_t m;
  zmq_msg_init(&m);
  if (zmq_msg_recv(&m, sock, flags) < 0) {
    int e = zmq_errno();
    zmq_msg_close(&m);
    df_proto_frames_close(f);
    errno = e;
    return -1;
  }
  int idx = router ? -1 : 0; /* frame index after the routing id */
  for (;;) {
    bool more = zmq_msg_more(&m);
    if (idx == -1) {
      f->rid_len = zmq_msg_size(&m) < sizeof f->rid ? zmq_msg_size(&m) : sizeof f->rid;
      memcpy(f->rid, zmq_msg_data(&m), f->rid_len);
      zmq_msg_close(&m);
    } else if (idx == 0) {
      /* connection properties ride on every data frame */
      const char *uid = zmq_msg_gets(&m, "User-Id");
      if (uid && strlen(uid) == DF_PROTO_Z85_KEY) memcpy(f->user, uid, DF_PROTO_Z85_KEY + 1);
      f->fd = zmq_msg_get(&m, ZMQ_SRCFD);
      zmq_msg_move(&f->hdr, &m);
      zmq_msg_close(&m);
    } else if (idx == 1) {
      zmq_msg_move(&f->payload, &m);
      zmq_msg_close(&m);
      f->has_payload = true;
    } else {
      zmq_msg_close(&m); /* extra frames: drained, counted */
    }
    if (idx >= 0) f->n_frames++;
    idx++;
    if (!more) break;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, 0) < 0) { /* parts of a message arrive together */
      zmq_msg_close(&m);
      break;
    }
  }
  return 0;
}

void df_proto_frames_close(df_proto_frames *f) {
  zmq_msg_close(&f->hdr);
  zmq_msg_close(&f->payload);
  zmq_msg_init(&f->hdr);
  zmq_msg_init(&f->payload);
  f->has_payload = false;
}

int df_proto_send(void *sock, const uint8_t *rid, size_t rid_len, const df_proto_msg *m,
                  const void *payload, size_t payload_len, int flags, char *err, size_t errlen) {
  uint8_t *hdr = NULL;
  size_t hlen = 0;
  if (df_proto_encode(m, &hdr, &hlen, err, errlen) != 0) return -1;
  int rc = -1;
  if (rid && zmq_send(sock, rid, rid_len, ZMQ_SNDMORE | flags) < 0) goto fail;
  if (zmq_send(sock, hdr, hlen, (payload ? ZMQ_SNDMORE : 0) | flags) < 0) goto fail;
  if (payload) {
    zmq_msg_t pm;
    if (zmq_msg_init_size(&pm, payload_len) != 0) goto fail;
    if (payload_len) memcpy(zmq_msg_data(&pm), payload, payload_len);
    if (zmq_msg_send(&pm, sock, flags) < 0) {
      zmq_msg_close(&pm);
      goto fail;
    }
  }
  rc = 0;
  goto done;
fail:
  snprintf(err, errlen, "send %s: %s", df_proto_op_name(m->op), zmq_strerror(zmq_errno()));
done:
  free(hdr);
  return rc;
}

void df_proto_send_error(void *sock, const uint8_t *rid, size_t rid_len, uint64_t id,
                         uint32_t code, const char *reason) {
  df_proto_msg e = {.op = DF_PROTO_ERROR, .id = id, .code = code};
  snprintf(e.reason, sizeof e.reason, "%s", reason);
  char err[128];
  df_proto_send(sock, rid, rid_len, &e, NULL, 0, ZMQ_DONTWAIT, err, sizeof err);
}
