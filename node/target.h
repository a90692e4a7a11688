/* node/target.h — which coordinator a df-node dials, and by which key it knows it.
 *
 * Owns: the pinned coordinator key (from the join token, or from STATE/coordinator written at
 * an earlier join), the token's secret and join key, the address to dial — the HOST:PORT given
 * on the command line, or else one found by DNS-SD discovery (transport/dnssd.h) among the
 * announcers whose key fingerprint is the pinned key's — and STATE/coordinator, which records
 * both ("<key Z85>[ tcp://HOST:PORT]\n", mode 0600). Does not own: the socket and the join
 * state machine (node/node.c), nor what proves the peer: the CURVE handshake against the
 * pinned key (an announcement is only a hint; docs/SECURITY.md).
 */
#ifndef DF_NODE_TARGET_H
#define DF_NODE_TARGET_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/keys.h"

#define DF_NODE_AVOID 8 /* discovered endpoints remembered as failed */

/* One progress line (no prefix, no newline; the callee may rate-limit it). */
typedef void (*df_node_logf)(void *user, const char *line);

typedef struct df_node_target {
  char pub[DF_PROTO_Z85_KEY + 1];       /* pinned coordinator key, Z85 */
  char fp[17];                          /* its fingerprint (df_proto_key_fingerprint) */
  char secret[DF_PROTO_SECRET_HEX + 1]; /* the token's secret; "" without one or once spent */
  df_proto_keypair join_kp;             /* the token's join key (valid while secret[0]) */
  bool discover;                        /* no address given: endpoints come from discovery */
  char endpoint[300];                   /* "tcp://HOST:PORT" to dial; "" = to be found */
  char recorded[300];                   /* the address STATE/coordinator holds, "" = none */
  char avoid[DF_NODE_AVOID][300];       /* discovered endpoints that failed lately */
  int64_t avoid_ms[DF_NODE_AVOID];      /* when (monotonic ms); entries expire after 60 s */
  int n_avoid;
} df_node_target;

/* Fill *t for a join: with `token` ("dft1_..."), its key and secret, recorded in
 * STATE/coordinator with `endpoint` (kept is the address recorded before when endpoint is NULL
 * and the file held the same key); without, the key STATE/coordinator holds. `endpoint`
 * ("tcp://HOST:PORT") or NULL to find the coordinator by discovery (t->discover). 0, or -1
 * with a one-line message in err: a malformed token, CURVE unavailable, no token and no
 * stored key, the file cannot be written. t is the caller's; nothing is allocated. */
int df_node_target_load(df_node_target *t, const char *state_dir, const char *token,
                        const char *endpoint, char *err, size_t errlen);

/* Discovery mode: choose t->endpoint. Browses `_deltafin._tcp` (a few seconds each time) until
 * an announcer with the pinned key's fingerprint and this protocol version answers, logging
 * each announcer it skips (address, port, name and fingerprint) and each that it tries;
 * endpoints that failed lately (df_node_target_avoid) come after the others. When discovery
 * finds none, or cannot run (no avahi-daemon: one line saying so), the recorded address is
 * tried if it did not fail lately; otherwise it looks again after a pause, forever, as for a
 * coordinator that is down. Returns 1 with t->endpoint set, 0 when *stop became non-zero,
 * -1 with a message in err when this build has no discovery and nothing is recorded. */
int df_node_target_find(df_node_target *t, volatile sig_atomic_t *stop, df_node_logf log,
                        void *user, char *err, size_t errlen);

/* Remember t->endpoint as failed (for 60 s) and clear it, so that the next
 * df_node_target_find looks again. Discovery mode only; no-op otherwise. */
void df_node_target_avoid(df_node_target *t);

/* The CURVE handshake with t->endpoint succeeded (the peer holds the pinned key): record the
 * address in STATE/coordinator when it differs from the recorded one. 0, or -1 + message. */
int df_node_target_record(df_node_target *t, const char *state_dir, char *err, size_t errlen);

#endif
