/* transport/keys.h — CURVE keypairs, join tokens, the node allow-list, and the small
 * crypto/file helpers they need (SHA-256, CTR-DRBG randomness, constant-time comparison,
 * atomic file publication).
 *
 * Owns: the files of a state directory listed in docs/PROTOCOL.md §1 (keys, tokens, nodes)
 * and their formats; every file is written 0600 through a temporary file + rename, under an
 * flock on STATE/.lock, so a CLI and a running coordinator can share a directory.
 * Does not own: sockets (transport/sock.h), what a node holds (node/), membership state of
 * a running coordinator (coordinator/cluster/cluster.c).
 */
#ifndef DF_TRANSPORT_KEYS_H
#define DF_TRANSPORT_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DF_PROTO_Z85_KEY 40   /* Z85 characters of a 32-byte CURVE key */
#define DF_PROTO_SECRET_HEX 32 /* hex characters of a token secret (128 bits) */
#define DF_PROTO_TOKEN_LEN (5 + 64 + 1 + DF_PROTO_SECRET_HEX) /* "dft1_" hex-key "_" secret */

typedef struct df_proto_keypair {
  char pub[DF_PROTO_Z85_KEY + 1]; /* Z85, NUL-terminated */
  char sec[DF_PROTO_Z85_KEY + 1];
} df_proto_keypair;

/* The default state directory of `kind` ("deltafin" or "deltafin-node"):
 * $XDG_STATE_HOME/kind, else $HOME/.local/state/kind. 0, or -1 when neither variable is set
 * or the path does not fit in cap. */
int df_proto_state_default(const char *kind, char *out, size_t cap, char *err, size_t errlen);

/* mkdir -p `dir` with mode 0700 for what it creates. 0 or -1 + message. */
int df_proto_state_mkdir(const char *dir, char *err, size_t errlen);

/* Load the keypair at `path` ("public Z85\nsecret Z85\n"), or create it with
 * zmq_curve_keypair and write it 0600 when the file does not exist. *created (may be NULL)
 * says which. Errors: unreadable or malformed file (message names it), group/other
 * permission bits set on an existing key file, CURVE unavailable in libzmq, write failure. */
int df_proto_keys_load(const char *path, bool create, df_proto_keypair *kp, bool *created,
                       char *err, size_t errlen);

/* Short fingerprint of a Z85 public key for logs and status: the first 16 hex characters of
 * SHA-256(raw key). out must hold 17 bytes. */
void df_proto_key_fingerprint(const char *pub_z85, char out[17]);

/* Z85 key <-> 64 hex characters. 0 or -1 on a malformed input. */
int df_proto_z85_to_hex(const char *z85, char hex[65]);
int df_proto_hex_to_z85(const char *hex, size_t hexlen, char z85[DF_PROTO_Z85_KEY + 1]);

/* ---- join tokens (coordinator state dir) ---- */

/* Create a token for the coordinator whose public key is `pub_z85`, valid `ttl_s` seconds
 * (0 = no expiry), single-use unless `reusable`; append its digest to STATE/tokens and
 * write the token text (DF_PROTO_TOKEN_LEN chars + NUL) into the caller's buffer out (cap
 * bytes). *expiry (may be NULL) gets the expiry recorded in STATE/tokens: Unix seconds, or 0
 * when the token never expires. Allocates nothing the caller frees. 0, or -1 with a message
 * in err (out and *expiry unset): cap too small, malformed key, no randomness, CURVE
 * unavailable, the state directory cannot be locked or STATE/tokens cannot be written. */
int df_proto_token_create(const char *state_dir, const char *pub_z85, int64_t ttl_s,
                          bool reusable, char *out, size_t cap, int64_t *expiry, char *err,
                          size_t errlen);

/* Split a token into the coordinator key (Z85) and the secret (hex). -1 + message when the
 * text is not "dft1_<64 hex>_<32 hex>". */
int df_proto_token_parse(const char *token, char pub_z85[DF_PROTO_Z85_KEY + 1],
                         char secret[DF_PROTO_SECRET_HEX + 1], char *err, size_t errlen);

/* The CURVE keypair a node holding a token connects with to redeem it (docs/PROTOCOL.md §1):
 * secret = SHA-256("deltafin join key v1:" || secret_hex), public = its Curve25519 public key.
 * Only the token's holder can compute the secret; the coordinator stores the public key with
 * the token's digest so that its ZAP handler admits exactly the keys of open tokens, and a
 * peer without a token never completes a handshake (nothing it sends is buffered). 0, or -1
 * when secret_hex is not DF_PROTO_SECRET_HEX hex characters or CURVE is unavailable. */
int df_proto_token_join_keypair(const char *secret_hex, df_proto_keypair *kp);

/* Check a presented secret against STATE/tokens in constant time per entry; when it matches
 * an unexpired entry, consume it (single-use entries are marked used, file rewritten
 * atomically). conn_pub (may be NULL): the CURVE key the secret arrived on, which must be the
 * token's join key (df_proto_token_join_keypair). 0 = accepted; -1 with the refusal reason in
 * err ("unknown token", "token expired", "token already used", "token of another key", or an
 * I/O error). */
int df_proto_token_redeem(const char *state_dir, const char *secret, const char *conn_pub,
                          char *err, size_t errlen);

/* A JOIN on a token's join connection (docs/PROTOCOL.md §1): redeem `secret`, which must be
 * the token of conn_pub (the connection's key), and add node_pub (the node's own key, Z85)
 * to the allow-list under `name` (bytes outside printable ASCII, quotes and backslashes
 * become '_'). 0, or -1 with the reason in err: no token or no valid node key, a revoked
 * node key (df_proto_key_revoked; the token is not spent), any refusal of
 * df_proto_token_redeem, or an I/O error writing the allow-list. */
int df_proto_token_admit(const char *state_dir, const char *secret, const char *conn_pub,
                         const char *node_pub, const char *name, char *err, size_t errlen);

/* Whether `pub_z85` is the join key of a token on STATE/tokens that is unexpired and not used
 * up (the ZAP decision for a key that is not on the allow-list). false with the reason in why
 * (may be NULL): "no open token has this key", "its token expired", "its token was already
 * used". Entries written before tokens had join keys match no key. */
bool df_proto_token_join_key_open(const char *state_dir, const char *pub_z85, char *why,
                                  size_t whylen);

/* ---- allow-list (coordinator state dir) ---- */

/* True when `pub_z85` is on STATE/nodes; its recorded name is copied to name (may be NULL). */
bool df_proto_allow_has(const char *state_dir, const char *pub_z85, char *name, size_t cap);
/* Keys STATE/nodes may hold: a reusable token admits every new key that presents it, so the
 * list is bounded (revoke departed nodes with `deltafin cluster revoke`). */
#define DF_PROTO_MAX_ALLOW 4096

/* Add (or keep) `pub_z85` with `name` on STATE/nodes. 0 or -1 + message (also when the list
 * already holds DF_PROTO_MAX_ALLOW keys). */
int df_proto_allow_add(const char *state_dir, const char *pub_z85, const char *name, char *err,
                       size_t errlen);

/* Whether pub_z85 is on STATE/revoked (df_proto_allow_revoke): no token admits it again. */
bool df_proto_key_revoked(const char *state_dir, const char *pub_z85);

/* Remove from STATE/nodes every key whose recorded name is `who`, or whose fingerprint
 * (df_proto_key_fingerprint) starts with `who` (at least 8 hex characters). One line per
 * removed key ("<fingerprint> <name>\n") is appended to `removed` (cap bytes, may be NULL).
 * The removed lines are appended to STATE/revoked, so that no token admits those keys again
 * (df_proto_token_admit). Returns the number removed (0: none matched, the files unchanged),
 * or -1 + message (I/O). */
int df_proto_allow_revoke(const char *state_dir, const char *who, char *removed, size_t cap,
                          char *err, size_t errlen);

/* Claim STATE/<name> ("coordinator.lock", "node.lock") for this process: an exclusive flock
 * held until the returned descriptor is closed (or the process ends), the holder's pid written
 * in the file. Two coordinators, or two nodes, on one state directory would share its
 * tokens, allow-list and status, or one node key. Returns the descriptor (>= 0); -1 with a
 * message naming the directory and the other process's pid when it is taken, or the error. */
int df_proto_state_claim(const char *state_dir, const char *name, const char *what, char *err,
                         size_t errlen);

/* ---- helpers ---- */

/* n random bytes from mbedTLS CTR-DRBG seeded by the platform entropy source. 0 or -1. */
int df_proto_random(uint8_t *out, size_t n, char *err, size_t errlen);
/* SHA-256 of buf[0..len). */
void df_proto_sha256(const void *buf, size_t len, uint8_t out[32]);
/* Lower-case hex of n bytes into out (2n+1 bytes). */
void df_proto_hex(const uint8_t *b, size_t n, char *out);
/* Constant-time equality of n bytes (time depends only on n). */
bool df_proto_ct_equal(const void *a, const void *b, size_t n);
/* Write data to `path` atomically: path.tmp.PID with `mode`, fsync, rename. 0 or -1. */
int df_proto_write_atomic(const char *path, const void *data, size_t len, int mode, char *err,
                          size_t errlen);

/* Incremental SHA-256 (wraps mbedtls_sha256_context without exposing mbedTLS headers). */
typedef struct df_proto_sha256_ctx {
  _Alignas(16) unsigned char opaque[256];
} df_proto_sha256_ctx;
void df_proto_sha256_init(df_proto_sha256_ctx *c);
void df_proto_sha256_update(df_proto_sha256_ctx *c, const void *buf, size_t len);
void df_proto_sha256_final(df_proto_sha256_ctx *c, uint8_t out[32]);

#endif
