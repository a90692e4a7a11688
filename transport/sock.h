/* transport/sock.h — the cluster's ZeroMQ sockets: CURVE server (ROUTER) and client
 * (DEALER) set-up, the ZAP handler, and sending/receiving one protocol message.
 *
 * Owns: socket options (CURVE, ZMTP heartbeats, reconnect backoff, message size bound,
 * linger), the ZAP request/reply exchange (RFC 27), the frame layout of a message
 * ([routing id] header [payload]) with the payload received into a zmq_msg_t (no copy).
 * Does not own: header encoding (transport/codec.h), keys and tokens (transport/keys.h),
 * the admission decision (the caller's callback). Not thread-safe: like every ZeroMQ
 * socket, each socket here is used by one thread only.
 */
#ifndef DF_TRANSPORT_SOCK_H
#define DF_TRANSPORT_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "transport/codec.h"
#include "transport/keys.h"

#define DF_PROTO_DEFAULT_PORT 7070
#define DF_PROTO_HEARTBEAT_MS 1000
#define DF_PROTO_HEARTBEAT_TIMEOUT_MS 10000
/* A TCP connection to the cluster port that has not completed its CurveZMQ handshake within
 * this is closed (libzmq's default is 30 s): idle connections hold descriptors no longer. */
#define DF_PROTO_HANDSHAKE_MS 5000

/* A bound ROUTER: CURVE server with `kp`, ZAP domain "deltafin", ZMTP heartbeats, ROUTER
 * mandatory (sending to a vanished peer fails with EHOSTUNREACH instead of vanishing),
 * inbound messages larger than max_msg bytes refused by libzmq, linger 0, a connection that
 * has not completed its handshake within DF_PROTO_HANDSHAKE_MS closed. Raises the process's
 * soft RLIMIT_NOFILE to its hard limit (at most 65536): connections take descriptors before
 * the handshake can refuse them. The caller must
 * have bound the ZAP handler (df_proto_zap_bind) in the same context first, or every client
 * key is admitted. NULL + message (naming the endpoint) on failure. */
void *df_proto_server_open(void *ctx, const char *endpoint, const df_proto_keypair *kp,
                           int64_t max_msg, char *err, size_t errlen);

/* A DEALER connected to `endpoint` as CURVE client with keypair `kp`, pinning server key
 * `server_pub` (Z85); reconnect backoff 100 ms doubling to 5 s, heartbeats, immediate
 * (nothing queued before the handshake completes), linger 0, max_msg as above. A caller that
 * monitors the socket uses df_proto_client_socket + df_proto_monitor_open +
 * df_proto_client_connect instead: events of a connection made before the monitor exists
 * are never delivered (a HANDSHAKE_SUCCEEDED lost that way left a node waiting forever). */
void *df_proto_client_open(void *ctx, const char *endpoint, const df_proto_keypair *kp,
                           const char *server_pub, int64_t max_msg, char *err, size_t errlen);

/* The DEALER of df_proto_client_open, configured but not connected. NULL + message. */
void *df_proto_client_socket(void *ctx, const df_proto_keypair *kp, const char *server_pub,
                             int64_t max_msg, char *err, size_t errlen);

/* Connect a df_proto_client_socket to `endpoint`. 0, or -1 + message naming the endpoint
 * (the socket stays open: the caller closes it). */
int df_proto_client_connect(void *sock, const char *endpoint, char *err, size_t errlen);

/* The ZAP handler socket (REP on inproc://zeromq.zap.01) of `ctx`. NULL + message. */
void *df_proto_zap_bind(void *ctx, char *err, size_t errlen);

/* Admission callback: return true to admit the CURVE client whose key is `pub_z85`, coming
 * from `address`; on refusal write a reason into `why`. */
typedef bool (*df_proto_zap_fn)(void *user, const char *pub_z85, const char *address,
                                char *why, size_t whylen);

/* Answer one pending ZAP request on `zap` (call when it is readable). Admitted clients get
 * their Z85 key as User-Id (readable per message as df_proto_frames.user). Non-CURVE
 * mechanisms are refused. 0 when a request was answered, -1 when none could be read. */
int df_proto_zap_handle(void *zap, df_proto_zap_fn decide, void *user);

/* Monitor `sock` (zmq_socket_monitor with `events` on the inproc endpoint `ep`, unique in
 * its context) and return the PAIR socket that reads the events; NULL + message.
 * libzmq's I/O thread writes each event with a blocking send while holding the socket's
 * monitor lock, so a reader it cannot deliver to stalls every connection of the context, and
 * then wedges zmq_socket_monitor(sock, NULL, 0), forever. Hence the reader is connected
 * before the monitor exists (no window without a peer), takes events without a high-water
 * mark (a reader nobody drains, e.g. after its thread stopped polling, never blocks the I/O
 * thread), and lingers 0. Close with df_proto_monitor_close, never with zmq_close alone. */
void *df_proto_monitor_open(void *ctx, void *sock, const char *ep, int events, char *err,
                            size_t errlen);

/* Stop monitoring `sock` (may be NULL: nothing to stop), then close *reader and NULL it.
 * In that order: closing the reader first leaves libzmq an event to deliver to nobody
 * between the two calls (a peer disconnecting as we shut down), which deadlocks. */
void df_proto_monitor_close(void *sock, void **reader);

/* One received message. */
typedef struct df_proto_frames {
  uint8_t rid[256];        /* routing id (ROUTER only) */
  size_t rid_len;
  zmq_msg_t hdr;           /* header frame */
  zmq_msg_t payload;       /* payload frame (valid when has_payload) */
  bool has_payload;
  int n_frames;            /* frames after the routing id */
  char user[DF_PROTO_Z85_KEY + 1]; /* ZAP User-Id of the connection ("" if none) */
  int fd;                  /* the connection's file descriptor (ZMQ_SRCFD), -1 if unknown */
} df_proto_frames;

/* Receive one whole message (blocking per `flags`, e.g. ZMQ_DONTWAIT). router: the first
 * frame is a routing id. Messages with more than 3 frames after the routing id are drained
 * and reported as n_frames > 2 (caller treats as malformed). 0, or -1 (errno from zmq:
 * EAGAIN when nothing is waiting, ETERM ...). Free with df_proto_frames_close. */
int df_proto_recv(void *sock, bool router, int flags, df_proto_frames *f);
void df_proto_frames_close(df_proto_frames *f);

/* Encode and send one message: [rid] header [payload]. rid NULL for DEALER. payload NULL
 * for none. The payload is copied into the message. flags: ZMQ_DONTWAIT or 0.
 * 0, or -1 with a message (encode failure, EHOSTUNREACH, EAGAIN when the peer's queue is
 * full). */
int df_proto_send(void *sock, const uint8_t *rid, size_t rid_len, const df_proto_msg *m,
                  const void *payload, size_t payload_len, int flags, char *err, size_t errlen);

/* Send an ERROR {code, reason} replying to request `id`. Best effort (non-blocking). */
void df_proto_send_error(void *sock, const uint8_t *rid, size_t rid_len, uint64_t id,
                         uint32_t code, const char *reason);

#endif
