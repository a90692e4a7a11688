/* engine/kv_cache.h — a sequence's attention KV cache, preallocated, truncatable.
 *
 * Owns: per-layer key and value tensors [n_kv, ctx, head_dim] fp32 — or, for multi-head
 * latent attention (MLA, DeepSeek-V2/V3), the compressed latent c_kv [ctx, kv_lora_rank] and
 * the RoPE key shared by all heads [ctx, rope_dim] per layer, never expanded per head —, a
 * layer's recurrent state (df_kv_rec, e.g. KDA's, engine/layers/kda.h) and the number of
 * positions filled. Truncation (speculative decoding's rollback) moves the length (positions
 * past it are overwritten by the next forward) and puts every recurrent state back exactly.
 * Snapshots (df_kv_snap) keep the recurrent states of a length to continue from it later.
 * Does not own: how K/V or a recurrent state are computed (the token mixers, engine/layers/).
 */
#ifndef DF_ENGINE_KV_CACHE_H
#define DF_ENGINE_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/tensor/torch_shim.h"

/* A recurrent (length-independent) state of one layer, such as KDA's delta-rule state and
 * conv windows (engine/layers/kda.h), owned by the cache slot of its layer. */
typedef struct df_kv_rec df_kv_rec;
/* A layer kind's deep copy of one recurrent state at some position (df_kv_snap's per-layer
 * part); its layout is private to the kind that made it (the ops below). */
typedef struct df_kv_rec_snap df_kv_rec_snap;
typedef struct df_kv_rec_ops {
  /* True when the state can be put back exactly as if only the first n positions had been
   * fed (n <= the positions it holds). */
  bool (*can_rollback)(const df_kv_rec *r, int64_t n);
  /* Put it back to n positions (can_rollback(n) true); n == 0 zeroes it. Never fails. */
  void (*rollback)(df_kv_rec *r, int64_t n);
  void (*destroy)(df_kv_rec *r); /* frees r */
  /* A new deep copy (caller-owned, free with snap_free) of what continues r from the len
   * positions it holds (KDA: S and the conv windows; not the rollback log). *bytes = the heap
   * bytes it holds. NULL + message: r does not hold exactly len positions, out of memory. */
  df_kv_rec_snap *(*snap_take)(const df_kv_rec *r, int64_t len, uint64_t *bytes, char *err,
                               size_t errlen);
  /* True when s (from snap_take of a state with these ops) fits r's shape; else false +
   * message naming the layer and both shapes. */
  bool (*snap_fits)(const df_kv_rec *r, const df_kv_rec_snap *s, char *err, size_t errlen);
  /* Put r to s (snap_fits true): the state s was taken at, holding s's positions, with its
   * rollback history reset (can_rollback(n) then holds for n == 0 and n == those positions
   * only, until more are fed). Never fails. */
  void (*snap_restore)(df_kv_rec *r, const df_kv_rec_snap *s);
  void (*snap_free)(df_kv_rec_snap *s); /* NULL-safe */
} df_kv_rec_ops;
struct df_kv_rec {
  const df_kv_rec_ops *ops;
};

typedef struct df_kv_cache {
  int64_t n_layers;
  int64_t n_kv;     /* key/value heads; 0 for an MLA cache */
  int64_t head_dim; /* MHA head width; MLA: rope_dim */
  int64_t ctx;      /* capacity in tokens */
  int64_t len;      /* positions filled: the next token is at position len */
  df_t_tensor **k;  /* [n_layers] each [n_kv, ctx, head_dim] fp32;
                       MLA: the normalised latent c_kv [ctx, kv_lora_rank] fp32 */
  df_t_tensor **v;  /* [n_layers] each [n_kv, ctx, head_dim] fp32;
                       MLA: the rotated shared key k_rope [ctx, rope_dim] fp32 */
  int64_t kv_lora_rank; /* > 0 marks an MLA cache */
  uint64_t bytes_per_token; /* state bytes one position takes over all layers */
  uint64_t bytes_per_seq;   /* state bytes independent of the length (recurrent states) */
  df_kv_rec **rec;          /* [n_layers] a layer's recurrent state (owned), or NULL: a layer
                               holds k/v tensors, a recurrent state, or both */
} df_kv_cache;

/* A cache of n_layers empty slots (k[l] = v[l] = NULL) for ctx tokens, for a model whose
 * layers allocate their own state into their slot (engine/layers/layer.h state_new);
 * bytes_per_token / bytes_per_seq are what those states will take. Errors (NULL, message):
 * non-positive sizes, size overflow, out of memory. Free with df_kv_destroy. */
df_kv_cache *df_kv_new_layers(int64_t n_layers, int64_t ctx, uint64_t bytes_per_token,
                              uint64_t bytes_per_seq, char *err, size_t errlen);

/* Allocate a zeroed cache: n_layers * 2 * n_kv * ctx * head_dim * 4 bytes.
 * Errors (NULL, message in err): non-positive sizes, size overflow, allocation failure
 * (message gives the bytes). Free with df_kv_destroy. */
df_kv_cache *df_kv_new(int64_t n_layers, int64_t n_kv, int64_t head_dim, int64_t ctx, char *err,
                       size_t errlen);

/* df_kv_new with the tensors on device `dev` (NULL or a host kind: as df_kv_new); a CUDA
 * cache is written and read only by the torch compute path (torch_shim.h df_tm_forward).
 * Same errors, the message naming the device. */
df_kv_cache *df_kv_new_on(const df_t_device *dev, int64_t n_layers, int64_t n_kv,
                          int64_t head_dim, int64_t ctx, char *err, size_t errlen);

/* Allocate a zeroed MLA cache: per layer c_kv [ctx, kv_lora_rank] and k_rope
 * [ctx, rope_dim], n_layers * (kv_lora_rank + rope_dim) * ctx * 4 bytes. Same errors as
 * df_kv_new. */
df_kv_cache *df_kv_new_mla(int64_t n_layers, int64_t kv_lora_rank, int64_t rope_dim, int64_t ctx,
                           char *err, size_t errlen);

/* df_kv_new_mla with the tensors on device `dev` (NULL or a host kind: as df_kv_new_mla),
 * for the torch compute path (torch_shim.h df_tm_forward, desc.mla). */
df_kv_cache *df_kv_new_mla_on(const df_t_device *dev, int64_t n_layers, int64_t kv_lora_rank,
                              int64_t rope_dim, int64_t ctx, char *err, size_t errlen);

/* Free; NULLs *kv; NULL-safe. */
void df_kv_destroy(df_kv_cache **kv);

/* Roll back to n positions (0 <= n <= len; asserts otherwise). The next forward continues
 * at position n exactly as if the positions past n had never been computed. A KV cache
 * only moves its length; a recurrent state (kv->rec) is restored exactly (kda.h: its
 * state before its last logged rows, then those rows up to n replayed), which reaches back
 * a bounded number of positions: n == 0 and n == len always work, other n only when
 * df_kv_can_truncate says so. Any other n aborts the process with a message on stderr
 * (a caller bug: the result would silently be wrong). */
void df_kv_truncate(df_kv_cache *kv, int64_t n);

/* True when df_kv_truncate(kv, n) is legal: 0 <= n <= len and every recurrent layer state
 * can be put back to n. */
bool df_kv_can_truncate(const df_kv_cache *kv, int64_t n);

/* Roll back to n positions when df_kv_can_truncate(kv, n), else to 0 (for a cache the
 * caller refills from its own copy of the ids, e.g. a speculative draft's). Returns the new
 * length (n or 0). */
int64_t df_kv_truncate_or_reset(df_kv_cache *kv, int64_t n);

/* After a failed forward: every recurrent layer state back to n positions (each layer may
 * hold more than len positions when the failure came mid-chunk) and len = n; when a layer
 * cannot reach n the whole cache is reset to 0. Returns the new length. */
int64_t df_kv_rewind(df_kv_cache *kv, int64_t n);

/* Bytes held by the cache: bytes_per_token * ctx + bytes_per_seq. */
uint64_t df_kv_bytes(const df_kv_cache *kv);

/* True when some layer holds a recurrent state (kv->rec[l] != NULL, e.g. KDA): such a cache
 * reaches back only a bounded window by truncation and needs a snapshot (below) to continue
 * from an older position. */
bool df_kv_has_rec(const df_kv_cache *kv);

/* ---- snapshots ---------------------------------------------------------------------------
 * A snapshot keeps what a cache needs to continue from its current length later, e.g. a
 * serving prefix cache's state at a message boundary: the length, a deep copy of every
 * recurrent layer state (KDA: the delta-rule state S [H, D, D] and the conv windows
 * [3, C, W-1], fp32; not its base copy or rollback log) and the cache's layout (layers, which
 * hold K/V and of what width, which hold a recurrent state of which kind). It holds nothing of
 * the attention K/V: positions < len stay valid in the cache itself as long as the caller
 * never refills them with other ids (truncating below len and feeding the same ids again is
 * fine: the engine's K/V of a position depend only on the ids up to it, bitwise). A snapshot
 * is independent of the cache it was taken from (may outlive it) and may be restored any
 * number of times, into that cache or another of the same model (or of a model of the same
 * layout and weights, e.g. the same checkpoint loaded with another max_rows). Taking one
 * reads the cache and restoring writes it: neither may run concurrently with a forward on
 * that cache. Works the same for device (CUDA) caches, whose K/V it does not touch. */
typedef struct df_kv_snap df_kv_snap;

/* A new snapshot of kv at kv->len (caller-owned; free with df_kv_snap_destroy).
 * NULL + message: out of memory (bytes named), a recurrent state that does not hold kv->len
 * positions (a forward failed and the cache was not rewound: df_kv_rewind). */
df_kv_snap *df_kv_snap_take(const df_kv_cache *kv, char *err, size_t errlen);

/* Put kv back to snapshot s (borrowed, unchanged): kv->len = s's length and every recurrent
 * state = its copy, with rollback history reset — df_kv_can_truncate(kv, n) then holds for
 * n == 0 and n == that length only (the rows before it are not logged) until more positions
 * are fed, then within the window behind the new length as after any forward.
 * Precondition (not checkable, the caller's): kv is the cache s was taken from, or one whose
 * first df_kv_snap_len(s) positions were fed the same ids (same K/V), and those positions have
 * not been refilled with other ids since. Returns 0, or -1 + message with kv unchanged: a
 * layout other than s's (layer count, a layer's K/V width or kind, a recurrent state's kind or
 * shape), or a cache holding attention K/V with kv->len < s's length (those positions may not
 * hold s's K/V; for a cache of recurrent layers only, s's length must fit kv->ctx). */
int df_kv_snap_restore(df_kv_cache *kv, const df_kv_snap *s, char *err, size_t errlen);

/* The length the snapshot was taken at (positions it continues from). */
int64_t df_kv_snap_len(const df_kv_snap *s);

/* Heap bytes the snapshot holds: its recurrent-state copies plus a small header (a few
 * dozen bytes per layer); a cache without recurrent layers needs only the header. */
uint64_t df_kv_snap_bytes(const df_kv_snap *s);

/* Free; NULLs *s; NULL-safe. */
void df_kv_snap_destroy(df_kv_snap **s);

/* Bytes one position takes over all layers (MHA: 2 * n_kv * head_dim * 4 per layer; MLA:
 * (kv_lora_rank + rope_dim) * 4 per layer; a model's cache: the sum of its layers'). */
uint64_t df_kv_bytes_per_token(const df_kv_cache *kv);

#endif
