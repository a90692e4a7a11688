/* transport/codec.h — the cluster message codec: header frames <-> df_proto_msg.
 *
 * Owns: the msgpack header of every protocol-2 message (docs/PROTOCOL.md §2): encoding a
 * df_proto_msg into bytes, and decoding untrusted bytes into one with bounded work and
 * memory (every length checked against the DF_PROTO_MAX_* limits before allocation, one
 * "malformed" exit). Does not own: sockets (transport/sock.h), payload frames (their size
 * is checked against the header by df_proto_payload_bytes), what an op means to a node or
 * the coordinator.
 */
#ifndef DF_TRANSPORT_CODEC_H
#define DF_TRANSPORT_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 2: ASSIGN may carry `block` and six tensors per pair (FP8 weights + their block scales).
 * Optional keys added within version 2 (absent = what version 2 meant before them): JOIN
 * `device` (absent = 0) and `features` (absent = none); ASSIGN `act` (absent = SiLU) and `mx`
 * (absent = no MXFP4), sent only to a node whose JOIN listed "act" / "mx32"; JOIN `key` and the
 * op ADMIT, used only on a token's join connection (docs/PROTOCOL.md §1). */
#define DF_PROTO_VERSION 2

/* Limits a decoder enforces (inclusive). */
#define DF_PROTO_MAX_NAME 63        /* JOIN name bytes */
#define DF_PROTO_MAX_TOKEN 127      /* JOIN token bytes */
#define DF_PROTO_KEY_Z85 40         /* JOIN key bytes: a Z85 CURVE public key, exactly */
#define DF_PROTO_MAX_REASON 255     /* ERROR/BYE reason bytes */
#define DF_PROTO_MAX_TNAME 255      /* tensor name bytes in ASSIGN */
#define DF_PROTO_MAX_GROUPS 4096    /* experts in one FFN */
#define DF_PROTO_MAX_PAIRS 1048576  /* (layer, expert) pairs in one ASSIGN */
#define DF_PROTO_MAX_DIM 1048576    /* hidden, inter, cols */
#define DF_PROTO_MAX_ROWS 1048576   /* rows of one expert group, and of one FFN */
#define DF_PROTO_MAX_CHUNK (4u << 20) /* FETCH length */
#define DF_PROTO_MAX_BLOCK 65536    /* ASSIGN block sizes */
#define DF_PROTO_MAX_FEATURES 16    /* JOIN features entries */
#define DF_PROTO_MAX_FEATURE 31     /* bytes of one JOIN features entry */
#define DF_PROTO_MX_BLOCK 32        /* ASSIGN mx: the only MX block size (OCP MX v1.0) */
#define DF_PROTO_MAX_BETA 1e30f     /* ASSIGN act betas: finite and at most this */
#define DF_PROTO_MAX_DEPTH 6        /* msgpack nesting */
#define DF_PROTO_MAX_VALUES (1u << 24) /* msgpack values in one header (Kimi K3's whole
                                          ASSIGN, 896 x 61 pairs of six tensors, is ~2.8 M) */

/* Error codes carried by ERROR (docs/PROTOCOL.md §2). */
enum {
  DF_PROTO_E_MALFORMED = 1,
  DF_PROTO_E_VERSION = 2,
  DF_PROTO_E_UNAUTHORIZED = 3,
  DF_PROTO_E_BAD_REQUEST = 4,
  DF_PROTO_E_NOT_READY = 5,
  DF_PROTO_E_INTERNAL = 6,
};

/* JOIN `features`: what a node understands beyond version 2's first ASSIGN (a node lists
 * them; unknown names are ignored, so newer nodes may list more). */
enum {
  DF_PROTO_FEAT_ACT = 1u << 0, /* "act": ASSIGN `act` (the experts' gated activation) */
  DF_PROTO_FEAT_MX = 1u << 1,  /* "mx32": ASSIGN `mx` (MXFP4 experts, six tensors per pair,
                                  * summed in kernels.h's 32-chain order) */
};

/* ASSIGN `act` kinds: the routed experts' gated activation (engine/kernels/kernels.h df_k_act
 * numbers them the same way). */
enum { DF_PROTO_ACT_SILU = 0, DF_PROTO_ACT_SITU = 1 };

typedef enum df_proto_op {
  DF_PROTO_JOIN = 1,
  DF_PROTO_ASSIGN,
  DF_PROTO_FETCH,
  DF_PROTO_SHARD_CHUNK,
  DF_PROTO_READY,
  DF_PROTO_FFN,
  DF_PROTO_RESULT,
  DF_PROTO_PING,
  DF_PROTO_PONG,
  DF_PROTO_STATS,
  DF_PROTO_BYE,
  DF_PROTO_ERROR,
  DF_PROTO_ADMIT, /* coord -> node on a token's join connection: key admitted, rejoin with it */
  DF_PROTO_OP_COUNT
} df_proto_op;

/* One expert tensor of an ASSIGN manifest. */
typedef struct df_proto_tensor {
  char name[DF_PROTO_MAX_TNAME + 1]; /* safetensors name */
  char dtype[8];                     /* safetensors dtype name ("BF16", "F8_E4M3", "F32", "U8") */
  int64_t shape[2];                  /* [d0, d1] */
  uint64_t nbytes;                   /* = d0 * d1 * dtype size */
  uint8_t sha256[32];                /* of the tensor's bytes */
} df_proto_tensor;

/* A decoded or to-be-encoded header. Fields not used by `op` are zero. Arrays are owned by
 * the message when it came from df_proto_decode (free with df_proto_msg_free); a caller
 * building a message to encode may point them at its own memory (and must not call
 * df_proto_msg_free on it). */
typedef struct df_proto_msg {
  uint32_t v;      /* protocol version */
  df_proto_op op;
  uint64_t id;     /* request id (replies echo it) */
  /* JOIN */
  char name[DF_PROTO_MAX_NAME + 1];
  char token[DF_PROTO_MAX_TOKEN + 1]; /* "" = none */
  char key[DF_PROTO_KEY_Z85 + 1];     /* optional: the node's own CURVE public key (Z85), sent
                                         with `token` on the token's join connection; "" = none */
  uint64_t memory;                    /* expert memory budget, bytes */
  uint64_t device;                    /* of it, bytes the node keeps on its GPU (optional key,
                                         <= memory; 0 = a CPU node, and encoded as absent) */
  bool has_model;
  uint32_t features;                  /* DF_PROTO_FEAT_* the node understands (optional key
                                         `features`, names; 0 = none, encoded as absent) */
  /* ASSIGN, FETCH, SHARD_CHUNK, READY */
  uint64_t epoch;
  /* ASSIGN */
  int64_t hidden;            /* the width the routed experts run in: hidden_size, or a latent
                                MoE's latent width (routed_expert_hidden_size) */
  int64_t inter, max_rows;
  int64_t n_pairs;
  int32_t *pairs;            /* [n_pairs][2] (layer, expert) */
  int64_t block_n, block_k;  /* FP8 block size [n, k] (weight_block_size); 0 = no scales */
  int64_t mx;                /* MXFP4 experts: DF_PROTO_MX_BLOCK; 0 = none (not with block) */
  uint32_t act_kind;         /* DF_PROTO_ACT_*: SILU (0) is encoded as an absent `act` */
  float act_beta, act_beta_lin; /* SITU: beta finite > 0, beta_lin finite >= 0 (0 = the up
                                   branch passes unchanged); SILU: both 0 */
  int64_t n_tensors;         /* = df_proto_assign_per_pair(m) * n_pairs */
  df_proto_tensor *tensors;  /* [n_tensors] per pair: gate, up, down weights, then (block_n
                                > 0) their F32 weight_scale_inv in the same order; with mx
                                the three U8 weight_packed [N, K/2], then the three U8
                                weight_scale [N, K/32] */
  /* FETCH, SHARD_CHUNK */
  uint64_t tensor, offset, length, total;
  /* READY, STATS */
  uint64_t held;             /* bytes of expert tensors held */
  uint64_t served, rows_done, busy_us; /* STATS reply */
  /* FFN, RESULT */
  int32_t layer;
  int32_t n_groups;
  int32_t *experts;          /* [n_groups] */
  int64_t *rows;             /* [n_groups] rows per expert (FFN) */
  int64_t total_rows;        /* FFN: sum of rows; RESULT: rows */
  int64_t cols;              /* FFN/RESULT row length (= hidden) */
  /* ERROR, BYE */
  uint32_t code;
  char reason[DF_PROTO_MAX_REASON + 1];
} df_proto_msg;

/* Tensors per (layer, expert) pair in an ASSIGN: 6 when m->block_n > 0 (three F8_E4M3
 * weights, then their three F32 block-scale tensors) or m->mx > 0 (three MXFP4 weight_packed,
 * then their three E8M0 weight_scale), else 3. */
int df_proto_assign_per_pair(const df_proto_msg *m);

/* Whether the gated activation (kind, beta, beta_lin) is one a receiver accepts: SILU with
 * both betas 0, or SITU with beta finite in (0, DF_PROTO_MAX_BETA] and beta_lin 0 or finite
 * in (0, DF_PROTO_MAX_BETA]. The decoder refuses every other `act`. */
bool df_proto_act_valid(uint32_t kind, float beta, float beta_lin);

/* Name of an op as on the wire ("FFN"); "?" for values outside the enum. */
const char *df_proto_op_name(df_proto_op op);

/* Encode `m` (m->v is written as given; 0 means DF_PROTO_VERSION) into a malloc'd buffer:
 * *out, *out_len (caller frees). Strings longer than their limit are an error. Returns 0,
 * or -1 with a message (out of memory, a field over its limit). */
int df_proto_encode(const df_proto_msg *m, uint8_t **out, size_t *out_len, char *err,
                    size_t errlen);

/* Decode an untrusted header frame of `len` bytes into *m (zeroed first). Work and memory
 * are bounded by len and the DF_PROTO_MAX_* limits: the bytes are scanned once (container
 * sizes, depth, string lengths) before msgpack-c builds objects.
 * Returns 0; -1 with *code = DF_PROTO_E_MALFORMED (not one msgpack map, trailing bytes, a
 * required key missing or mistyped, a length over a limit, FFN rows not summing in range),
 * or *code = DF_PROTO_E_VERSION with m->v, m->op and m->id filled when they could be read;
 * err names the offending key. On error *m holds no allocations. */
int df_proto_decode(const uint8_t *buf, size_t len, df_proto_msg *m, int *code, char *err,
                    size_t errlen);

/* Free arrays a decoded message owns and zero it. NULL-safe. */
void df_proto_msg_free(df_proto_msg *m);

/* Bytes the single payload frame of a decoded message must have: FFN total_rows*cols*4,
 * RESULT rows*cols*4, SHARD_CHUNK: not known from the header alone (returns -1); 0 for ops
 * without payload. Checked 64-bit arithmetic (the decoder's limits keep it < 2^62). */
int64_t df_proto_payload_bytes(const df_proto_msg *m);

/* The index of the first of the n little-endian fp32 values at p (a RESULT payload; need not
 * be aligned) that is NaN, Inf or of magnitude above max_abs, with the value in *bad; n when
 * every value is finite and within max_abs. A peer's numbers are checked before use. */
size_t df_proto_first_implausible(const void *p, size_t n, float max_abs, float *bad);

#endif
