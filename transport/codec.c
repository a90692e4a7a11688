/* transport/codec.c — protocol header encoding and bounded decoding; see codec.h.
 *
 * Decoding is two passes over untrusted bytes: scan() walks the msgpack structure with an
 * explicit stack and rejects anything whose declared sizes exceed the bytes that remain
 * (so msgpack-c, which allocates a container's elements before reading them, never
 * allocates more than a few times the frame length), then msgpack-c builds the objects and
 * the per-op schema below copies them into a df_proto_msg.
 */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "transport/codec.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

static const char *const op_names[DF_PROTO_OP_COUNT] = {
    [DF_PROTO_JOIN] = "JOIN",   [DF_PROTO_ASSIGN] = "ASSIGN", [DF_PROTO_FETCH] = "FETCH",
    [DF_PROTO_SHARD_CHUNK] = "SHARD_CHUNK", [DF_PROTO_READY] = "READY",
    [DF_PROTO_FFN] = "FFN",     [DF_PROTO_RESULT] = "RESULT", [DF_PROTO_PING] = "PING",
    [DF_PROTO_PONG] = "PONG",   [DF_PROTO_STATS] = "STATS",   [DF_PROTO_BYE] = "BYE",
    [DF_PROTO_ERROR] = "ERROR", [DF_PROTO_ADMIT] = "ADMIT",
};

int df_proto_assign_per_pair(const df_proto_msg *m) {
  return m->block_n > 0 || m->mx > 0 ? 6 : 3;
}

/* JOIN `features` names, by bit (DF_PROTO_FEAT_*). MXFP4 is "mx32": the 32-chain sum order of
 * engine/kernels/kernels.h; a node of before it said "mx" and summed in another order, so its
 * "mx" is not recognised and it is given no MXFP4 experts (its bits would differ). */
static const char *const feature_names[] = {"act", "mx32"};
#define N_FEATURES (sizeof feature_names / sizeof *feature_names)

bool df_proto_act_valid(uint32_t kind, float beta, float beta_lin) {
  if (kind == DF_PROTO_ACT_SILU) return beta == 0 && beta_lin == 0;
  if (kind != DF_PROTO_ACT_SITU) return false;
  /* NaN fails every comparison below */
  return beta > 0 && beta <= DF_PROTO_MAX_BETA &&
         (beta_lin == 0 || (beta_lin > 0 && beta_lin <= DF_PROTO_MAX_BETA));
}

const char *df_proto_op_name(df_proto_op op) {
  return op > 0 && op < DF_PROTO_OP_COUNT ? op_names[op] : "?";
}

/* ---- encoding ---------------------------------------------------------------------- */

static void pk_key(msgpack_packer *pk, const char *k) { msgpack_pack_str_with_body(pk, k, strlen(k)); }
static void pk_uint(msgpack_packer *pk, const char *k, uint64_t v) {
  pk_key(pk, k);
  msgpack_pack_uint64(pk, v);
}
static void pk_str(msgpack_packer *pk, const char *k, const char *s) {
  pk_key(pk, k);
  msgpack_pack_str_with_body(pk, s, strlen(s));
}

int df_proto_encode(const df_proto_msg *m, uint8_t **out, size_t *out_len, char *err,
                    size_t errlen) {
  *out = NULL;
  *out_len = 0;
  if (m->op <= 0 || m->op >= DF_PROTO_OP_COUNT) {
    snprintf(err, errlen, "encode: op %d out of range", (int)m->op);
    return -1;
  }
  if (strnlen(m->name, sizeof m->name) > DF_PROTO_MAX_NAME ||
      strnlen(m->token, sizeof m->token) > DF_PROTO_MAX_TOKEN ||
      strnlen(m->reason, sizeof m->reason) > DF_PROTO_MAX_REASON) {
    snprintf(err, errlen, "encode: a string field is over its limit");
    return -1;
  }
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  uint32_t n = 3;
  switch (m->op) {
  case DF_PROTO_JOIN:
    n += 3 + (m->token[0] != 0) + (m->key[0] != 0) + (m->device > 0) + (m->features != 0);
    break;
  case DF_PROTO_ASSIGN:
    n += 6 + (m->block_n > 0) + (m->act_kind != DF_PROTO_ACT_SILU) + (m->mx > 0);
    break;
  case DF_PROTO_FETCH: case DF_PROTO_SHARD_CHUNK: n += 4; break;
  case DF_PROTO_READY: n += 2; break;
  case DF_PROTO_FFN: n += 5; break;
  case DF_PROTO_RESULT: n += 3; break;
  case DF_PROTO_STATS: n += 4; break;
  case DF_PROTO_BYE: n += 1; break;
  case DF_PROTO_ERROR: n += 2; break;
  default: break;
  }
  msgpack_pack_map(&pk, n);
  pk_uint(&pk, "v", m->v ? m->v : DF_PROTO_VERSION);
  pk_str(&pk, "op", df_proto_op_name(m->op));
  pk_uint(&pk, "id", m->id);
  switch (m->op) {
  case DF_PROTO_JOIN:
    pk_str(&pk, "name", m->name);
    pk_uint(&pk, "memory", m->memory);
    pk_key(&pk, "has_model");
    if (m->has_model) msgpack_pack_true(&pk); else msgpack_pack_false(&pk);
    if (m->token[0]) pk_str(&pk, "token", m->token);
    if (m->key[0]) pk_str(&pk, "key", m->key); /* absent: not a token's join connection */
    if (m->device > 0) pk_uint(&pk, "device", m->device); /* absent = 0 (a CPU node) */
    if (m->features) { /* absent = none: an older node's JOIN, byte for byte */
      uint32_t cnt = 0;
      for (size_t b = 0; b < N_FEATURES; b++) cnt += (m->features >> b) & 1u;
      pk_key(&pk, "features");
      msgpack_pack_array(&pk, cnt);
      for (size_t b = 0; b < N_FEATURES; b++)
        if ((m->features >> b) & 1u)
          msgpack_pack_str_with_body(&pk, feature_names[b], strlen(feature_names[b]));
    }
    break;
  case DF_PROTO_ASSIGN:
    pk_uint(&pk, "epoch", m->epoch);
    pk_uint(&pk, "hidden", (uint64_t)m->hidden);
    pk_uint(&pk, "inter", (uint64_t)m->inter);
    pk_uint(&pk, "max_rows", (uint64_t)m->max_rows);
    if (m->block_n > 0) {
      pk_key(&pk, "block");
      msgpack_pack_array(&pk, 2);
      msgpack_pack_uint64(&pk, (uint64_t)m->block_n);
      msgpack_pack_uint64(&pk, (uint64_t)m->block_k);
    }
    if (m->act_kind != DF_PROTO_ACT_SILU) { /* absent = SiLU, as before the key */
      pk_key(&pk, "act");
      msgpack_pack_array(&pk, 3);
      msgpack_pack_uint32(&pk, m->act_kind);
      msgpack_pack_float(&pk, m->act_beta); /* float32: the receiver's value bit for bit */
      msgpack_pack_float(&pk, m->act_beta_lin);
    }
    if (m->mx > 0) pk_uint(&pk, "mx", (uint64_t)m->mx);
    pk_key(&pk, "pairs");
    msgpack_pack_array(&pk, (size_t)m->n_pairs);
    for (int64_t i = 0; i < m->n_pairs; i++) {
      msgpack_pack_array(&pk, 2);
      msgpack_pack_uint32(&pk, (uint32_t)m->pairs[2 * i]);
      msgpack_pack_uint32(&pk, (uint32_t)m->pairs[2 * i + 1]);
    }
    pk_key(&pk, "tensors");
    msgpack_pack_array(&pk, (size_t)m->n_tensors);
    for (int64_t i = 0; i < m->n_tensors; i++) {
      const df_proto_tensor *t = &m->tensors[i];
      msgpack_pack_array(&pk, 5);
      msgpack_pack_str_with_body(&pk, t->name, strlen(t->name));
      msgpack_pack_str_with_body(&pk, t->dtype, strlen(t->dtype));
      msgpack_pack_array(&pk, 2);
      msgpack_pack_uint64(&pk, (uint64_t)t->shape[0]);
      msgpack_pack_uint64(&pk, (uint64_t)t->shape[1]);
      msgpack_pack_uint64(&pk, t->nbytes);
      msgpack_pack_bin_with_body(&pk, t->sha256, 32);
    }
    break;
  case DF_PROTO_FETCH:
  case DF_PROTO_SHARD_CHUNK:
    pk_uint(&pk, "epoch", m->epoch);
    pk_uint(&pk, "tensor", m->tensor);
    pk_uint(&pk, "offset", m->offset);
    if (m->op == DF_PROTO_FETCH) pk_uint(&pk, "length", m->length);
    else pk_uint(&pk, "total", m->total);
    break;
  case DF_PROTO_READY:
    pk_uint(&pk, "epoch", m->epoch);
    pk_uint(&pk, "held", m->held);
    break;
  case DF_PROTO_FFN:
    pk_uint(&pk, "layer", (uint64_t)m->layer);
    pk_key(&pk, "experts");
    msgpack_pack_array(&pk, (size_t)m->n_groups);
    for (int i = 0; i < m->n_groups; i++) msgpack_pack_uint32(&pk, (uint32_t)m->experts[i]);
    pk_key(&pk, "rows");
    msgpack_pack_array(&pk, (size_t)m->n_groups);
    for (int i = 0; i < m->n_groups; i++) msgpack_pack_uint64(&pk, (uint64_t)m->rows[i]);
    pk_uint(&pk, "cols", (uint64_t)m->cols);
    pk_str(&pk, "dtype", "F32");
    break;
  case DF_PROTO_RESULT:
    pk_uint(&pk, "rows", (uint64_t)m->total_rows);
    pk_uint(&pk, "cols", (uint64_t)m->cols);
    pk_str(&pk, "dtype", "F32");
    break;
  case DF_PROTO_STATS:
    pk_uint(&pk, "held", m->held);
    pk_uint(&pk, "served", m->served);
    pk_uint(&pk, "rows", m->rows_done);
    pk_uint(&pk, "busy_us", m->busy_us);
    break;
  case DF_PROTO_BYE:
    pk_str(&pk, "reason", m->reason);
    break;
  case DF_PROTO_ERROR:
    pk_uint(&pk, "code", m->code);
    pk_str(&pk, "reason", m->reason);
    break;
  default:
    break;
  }
  if (!sb.data) {
    snprintf(err, errlen, "encode: out of memory");
    return -1;
  }
  *out = (uint8_t *)sb.data; /* sbuffer memory is malloc'd; the caller frees it */
  *out_len = sb.size;
  return 0;
}

/* ---- bounded scan ------------------------------------------------------------------ */

static uint64_t be(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | p[i];
  return v;
}

/* Walk one complete msgpack value at buf[0..len): 0 when it spans exactly len bytes, with
 * no container declaring more elements than bytes remain, no nesting deeper than
 * DF_PROTO_MAX_DEPTH, at most DF_PROTO_MAX_VALUES values (msgpack-c spends ~24 bytes on
 * each, so a header of one-byte nils would cost 24x its size), no ext types. */
static int scan(const uint8_t *buf, size_t len) {
  uint64_t values = 0;
  uint64_t left[DF_PROTO_MAX_DEPTH + 2]; /* elements still to read at each level */
  int depth = 0;
  left[0] = 1;
  size_t p = 0;
  while (depth >= 0) {
    if (left[depth] == 0) {
      depth--;
      continue;
    }
    left[depth]--;
    if (p >= len || ++values > DF_PROTO_MAX_VALUES) return -1;
    uint8_t b = buf[p++];
    uint64_t body = 0, count = 0;
    int hdr = 0;
    bool container = false;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
      /* fixint, nil, bool */
    } else if (b >= 0x80 && b <= 0x8f) {
      container = true, count = 2u * (b & 0x0f);
    } else if (b >= 0x90 && b <= 0x9f) {
      container = true, count = b & 0x0f;
    } else if (b >= 0xa0 && b <= 0xbf) {
      body = b & 0x1f;
    } else {
      switch (b) {
      case 0xc4: case 0xd9: hdr = 1; break;
      case 0xc5: case 0xda: hdr = 2; break;
      case 0xc6: case 0xdb: hdr = 4; break;
      case 0xca: body = 4; break;
      case 0xcb: body = 8; break;
      case 0xcc: case 0xd0: body = 1; break;
      case 0xcd: case 0xd1: body = 2; break;
      case 0xce: case 0xd2: body = 4; break;
      case 0xcf: case 0xd3: body = 8; break;
      case 0xdc: container = true, hdr = 2; break;
      case 0xdd: container = true, hdr = 4; break;
      case 0xde: container = true, hdr = 2; break;
      case 0xdf: container = true, hdr = 4; break;
      default: return -1; /* 0xc1, ext types */
      }
      if (hdr) {
        if (len - p < (size_t)hdr) return -1;
        uint64_t n = be(buf + p, hdr);
        p += (size_t)hdr;
        if (container) count = (b == 0xde || b == 0xdf) ? 2 * n : n;
        else body = n;
      }
    }
    if (container) {
      if (count > len - p) return -1; /* every element takes at least one byte */
      if (count) {
        if (depth + 1 > DF_PROTO_MAX_DEPTH) return -1;
        left[++depth] = count;
      }
    } else {
      if (body > len - p) return -1;
      p += (size_t)body;
    }
  }
  return p == len ? 0 : -1;
}

/* ---- schema ------------------------------------------------------------------------ */

typedef struct dec {
  const msgpack_object_map *map;
  char *err;
  size_t errlen;
} dec;

static const msgpack_object *get(const dec *d, const char *k) {
  size_t kl = strlen(k);
  for (uint32_t i = 0; i < d->map->size; i++) {
    const msgpack_object *key = &d->map->ptr[i].key;
    if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == kl && kl > 0 &&
        !memcmp(key->via.str.ptr, k, kl))
      return &d->map->ptr[i].val;
  }
  return NULL;
}

static int bad(const dec *d, const char *k, const char *what) {
  snprintf(d->err, d->errlen, "malformed header: '%s' %s", k, what);
  return -1;
}

static int get_uint(const dec *d, const char *k, uint64_t max, uint64_t *out) {
  const msgpack_object *o = get(d, k);
  if (!o) return bad(d, k, "missing");
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return bad(d, k, "is not an unsigned integer");
  if (o->via.u64 > max) return bad(d, k, "is out of range");
  *out = o->via.u64;
  return 0;
}

static int opt_uint(const dec *d, const char *k, uint64_t max, uint64_t *out) {
  if (!get(d, k)) {
    *out = 0;
    return 0;
  }
  return get_uint(d, k, max, out);
}

static int obj_str(const dec *d, const char *k, const msgpack_object *o, char *out, size_t cap) {
  if (o->type != MSGPACK_OBJECT_STR) return bad(d, k, "is not a string");
  if (o->via.str.size >= cap) return bad(d, k, "is too long");
  if (o->via.str.size && memchr(o->via.str.ptr, 0, o->via.str.size))
    return bad(d, k, "contains a NUL byte");
  if (o->via.str.size) memcpy(out, o->via.str.ptr, o->via.str.size);
  out[o->via.str.size] = 0;
  return 0;
}

static int get_str(const dec *d, const char *k, bool required, char *out, size_t cap) {
  const msgpack_object *o = get(d, k);
  out[0] = 0;
  if (!o) return required ? bad(d, k, "missing") : 0;
  return obj_str(d, k, o, out, cap);
}

static int get_array(const dec *d, const char *k, uint64_t max, const msgpack_object_array **out) {
  const msgpack_object *o = get(d, k);
  if (!o) return bad(d, k, "missing");
  if (o->type != MSGPACK_OBJECT_ARRAY) return bad(d, k, "is not an array");
  if (o->via.array.size > max) return bad(d, k, "has too many elements");
  *out = &o->via.array;
  return 0;
}

static bool is_uint(const msgpack_object *o, uint64_t max) {
  return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= max;
}

/* A number of `act`: a float32 or float64, or an unsigned integer below 2^24 (exact as a
 * float), as the receiver's float; -1 otherwise. */
static int obj_float(const msgpack_object *o, float *out) {
  if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64) {
    double v = o->via.f64;
    if (!(v >= -3.4e38 && v <= 3.4e38)) return -1; /* NaN, Inf, past float */
    *out = (float)v;
    return 0;
  }
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 < (1u << 24)) {
    *out = (float)o->via.u64;
    return 0;
  }
  return -1;
}

/* ASSIGN `act` (optional): [kind uint, beta, beta_lin]; absent = SiLU. */
static int dec_act(const dec *d, df_proto_msg *m) {
  const msgpack_object *o = get(d, "act");
  if (!o) return 0;
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3 ||
      !is_uint(&o->via.array.ptr[0], UINT32_MAX))
    return bad(d, "act", "is not [kind, beta, beta_lin]");
  float b = 0, bl = 0;
  uint32_t kind = (uint32_t)o->via.array.ptr[0].via.u64;
  if (obj_float(&o->via.array.ptr[1], &b) || obj_float(&o->via.array.ptr[2], &bl))
    return bad(d, "act", "has a beta that is not a finite number");
  if (kind != DF_PROTO_ACT_SILU && kind != DF_PROTO_ACT_SITU)
    return bad(d, "act", "names an unknown activation kind");
  if (!df_proto_act_valid(kind, b, bl))
    return bad(d, "act", kind == DF_PROTO_ACT_SITU
                             ? "has a SiTU beta that is not in (0, 1e30] or a beta_lin that "
                               "is not 0 or in (0, 1e30]"
                             : "has SiLU with nonzero betas");
  m->act_kind = kind, m->act_beta = b, m->act_beta_lin = bl;
  return 0;
}

static int dec_assign(const dec *d, df_proto_msg *m) {
  uint64_t h, in, mr;
  const msgpack_object_array *pa, *ta;
  if (get_uint(d, "epoch", UINT64_MAX, &m->epoch) || get_uint(d, "hidden", DF_PROTO_MAX_DIM, &h) ||
      get_uint(d, "inter", DF_PROTO_MAX_DIM, &in) ||
      get_uint(d, "max_rows", DF_PROTO_MAX_ROWS, &mr) ||
      get_array(d, "pairs", DF_PROTO_MAX_PAIRS, &pa) ||
      get_array(d, "tensors", 6ull * DF_PROTO_MAX_PAIRS, &ta))
    return -1;
  m->hidden = (int64_t)h, m->inter = (int64_t)in, m->max_rows = (int64_t)mr;
  const msgpack_object *bo = get(d, "block");
  if (bo) {
    if (bo->type != MSGPACK_OBJECT_ARRAY || bo->via.array.size != 2 ||
        !is_uint(&bo->via.array.ptr[0], DF_PROTO_MAX_BLOCK) ||
        !is_uint(&bo->via.array.ptr[1], DF_PROTO_MAX_BLOCK) || bo->via.array.ptr[0].via.u64 == 0 ||
        bo->via.array.ptr[1].via.u64 == 0)
      return bad(d, "block", "is not [block_n, block_k] in [1, max]");
    m->block_n = (int64_t)bo->via.array.ptr[0].via.u64;
    m->block_k = (int64_t)bo->via.array.ptr[1].via.u64;
  }
  if (get(d, "mx")) {
    uint64_t mx;
    if (get_uint(d, "mx", UINT32_MAX, &mx)) return -1;
    if (mx != DF_PROTO_MX_BLOCK) return bad(d, "mx", "is not the MX block size 32");
    if (bo) return bad(d, "mx", "comes with 'block' (MXFP4 and FP8 experts at once)");
    m->mx = (int64_t)mx;
  }
  if (dec_act(d, m)) return -1;
  if (ta->size != (uint64_t)df_proto_assign_per_pair(m) * pa->size)
    return bad(d, "tensors", bo || m->mx ? "is not six per pair" : "is not three per pair");
  m->n_pairs = pa->size;
  m->n_tensors = ta->size;
  m->pairs = calloc(pa->size ? 2 * (size_t)pa->size : 1, sizeof *m->pairs);
  m->tensors = calloc(ta->size ? ta->size : 1, sizeof *m->tensors);
  if (!m->pairs || !m->tensors) return bad(d, "pairs", "does not fit in memory");
  for (uint32_t i = 0; i < pa->size; i++) {
    const msgpack_object *e = &pa->ptr[i];
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2 ||
        !is_uint(&e->via.array.ptr[0], INT32_MAX) || !is_uint(&e->via.array.ptr[1], INT32_MAX))
      return bad(d, "pairs", "has an element that is not [layer, expert]");
    m->pairs[2 * i] = (int32_t)e->via.array.ptr[0].via.u64;
    m->pairs[2 * i + 1] = (int32_t)e->via.array.ptr[1].via.u64;
  }
  for (uint32_t i = 0; i < ta->size; i++) {
    const msgpack_object *e = &ta->ptr[i];
    df_proto_tensor *t = &m->tensors[i];
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 5)
      return bad(d, "tensors", "has an element that is not [name, dtype, shape, nbytes, sha256]");
    const msgpack_object *f = e->via.array.ptr;
    if (obj_str(d, "tensors.name", &f[0], t->name, sizeof t->name) ||
        obj_str(d, "tensors.dtype", &f[1], t->dtype, sizeof t->dtype))
      return -1;
    if (f[2].type != MSGPACK_OBJECT_ARRAY || f[2].via.array.size != 2 ||
        !is_uint(&f[2].via.array.ptr[0], DF_PROTO_MAX_DIM) ||
        !is_uint(&f[2].via.array.ptr[1], DF_PROTO_MAX_DIM))
      return bad(d, "tensors.shape", "is not [d0, d1]");
    t->shape[0] = (int64_t)f[2].via.array.ptr[0].via.u64;
    t->shape[1] = (int64_t)f[2].via.array.ptr[1].via.u64;
    if (!is_uint(&f[3], UINT64_MAX / 2)) return bad(d, "tensors.nbytes", "is not an unsigned integer");
    t->nbytes = f[3].via.u64;
    if (f[4].type != MSGPACK_OBJECT_BIN || f[4].via.bin.size != 32)
      return bad(d, "tensors.sha256", "is not 32 bytes");
    memcpy(t->sha256, f[4].via.bin.ptr, 32);
  }
  return 0;
}

static int dec_ffn(const dec *d, df_proto_msg *m) {
  uint64_t layer, cols;
  const msgpack_object_array *ea, *ra;
  char dt[8];
  if (get_uint(d, "layer", INT32_MAX, &layer) || get_array(d, "experts", DF_PROTO_MAX_GROUPS, &ea) ||
      get_array(d, "rows", DF_PROTO_MAX_GROUPS, &ra) || get_uint(d, "cols", DF_PROTO_MAX_DIM, &cols) ||
      get_str(d, "dtype", true, dt, sizeof dt))
    return -1;
  if (strcmp(dt, "F32")) return bad(d, "dtype", "is not F32");
  if (ea->size != ra->size) return bad(d, "rows", "does not match 'experts' in length");
  if (ea->size == 0) return bad(d, "experts", "is empty");
  if (cols == 0) return bad(d, "cols", "is zero");
  m->layer = (int32_t)layer;
  m->cols = (int64_t)cols;
  m->n_groups = (int32_t)ea->size;
  m->experts = calloc(ea->size, sizeof *m->experts);
  m->rows = calloc(ea->size, sizeof *m->rows);
  if (!m->experts || !m->rows) return bad(d, "experts", "does not fit in memory");
  int64_t total = 0;
  for (uint32_t i = 0; i < ea->size; i++) {
    if (!is_uint(&ea->ptr[i], INT32_MAX)) return bad(d, "experts", "has a non-integer element");
    if (!is_uint(&ra->ptr[i], DF_PROTO_MAX_ROWS) || ra->ptr[i].via.u64 == 0)
      return bad(d, "rows", "has an element out of [1, max]");
    m->experts[i] = (int32_t)ea->ptr[i].via.u64;
    m->rows[i] = (int64_t)ra->ptr[i].via.u64;
    total += m->rows[i];
    if (total > DF_PROTO_MAX_ROWS) return bad(d, "rows", "sums past the limit");
  }
  m->total_rows = total;
  return 0;
}

static int dec_ops(const dec *d, df_proto_msg *m) {
  uint64_t u;
  switch (m->op) {
  case DF_PROTO_JOIN: {
    const msgpack_object *hm = get(d, "has_model");
    if (get_str(d, "name", true, m->name, sizeof m->name) ||
        get_uint(d, "memory", UINT64_MAX, &m->memory) ||
        get_str(d, "token", false, m->token, sizeof m->token) ||
        get_str(d, "key", false, m->key, sizeof m->key))
      return -1;
    if (m->key[0] && strlen(m->key) != DF_PROTO_KEY_Z85) return bad(d, "key", "is not 40 Z85 characters");
    if (!hm || hm->type != MSGPACK_OBJECT_BOOLEAN) return bad(d, "has_model", "is not a boolean");
    m->has_model = hm->via.boolean;
    /* optional (absent: a CPU node, or a peer from before the key); never over `memory` */
    if (opt_uint(d, "device", m->memory, &m->device)) return -1;
    /* optional (absent: none); names this peer does not know are ignored */
    const msgpack_object *fo = get(d, "features");
    if (!fo) return 0;
    if (fo->type != MSGPACK_OBJECT_ARRAY || fo->via.array.size > DF_PROTO_MAX_FEATURES)
      return bad(d, "features", "is not an array of at most 16 names");
    for (uint32_t i = 0; i < fo->via.array.size; i++) {
      char nm[DF_PROTO_MAX_FEATURE + 1];
      if (obj_str(d, "features", &fo->via.array.ptr[i], nm, sizeof nm)) return -1;
      for (size_t b = 0; b < N_FEATURES; b++)
        if (!strcmp(nm, feature_names[b])) m->features |= 1u << b;
    }
    return 0;
  }
  case DF_PROTO_ASSIGN: return dec_assign(d, m);
  case DF_PROTO_FETCH:
    if (get_uint(d, "epoch", UINT64_MAX, &m->epoch) || get_uint(d, "tensor", UINT32_MAX, &m->tensor) ||
        get_uint(d, "offset", UINT64_MAX / 2, &m->offset) || get_uint(d, "length", DF_PROTO_MAX_CHUNK, &m->length))
      return -1;
    if (m->length == 0) return bad(d, "length", "is zero");
    return 0;
  case DF_PROTO_SHARD_CHUNK:
    if (get_uint(d, "epoch", UINT64_MAX, &m->epoch) || get_uint(d, "tensor", UINT32_MAX, &m->tensor) ||
        get_uint(d, "offset", UINT64_MAX / 2, &m->offset) || get_uint(d, "total", UINT64_MAX / 2, &m->total))
      return -1;
    if (m->offset > m->total) return bad(d, "offset", "is past 'total'");
    return 0;
  case DF_PROTO_READY:
    return get_uint(d, "epoch", UINT64_MAX, &m->epoch) || get_uint(d, "held", UINT64_MAX, &m->held) ? -1 : 0;
  case DF_PROTO_FFN: return dec_ffn(d, m);
  case DF_PROTO_RESULT: {
    char dt[8];
    uint64_t cols;
    if (get_uint(d, "rows", DF_PROTO_MAX_ROWS, &u) || get_uint(d, "cols", DF_PROTO_MAX_DIM, &cols) ||
        get_str(d, "dtype", true, dt, sizeof dt))
      return -1;
    if (strcmp(dt, "F32")) return bad(d, "dtype", "is not F32");
    m->total_rows = (int64_t)u;
    m->cols = (int64_t)cols;
    return 0;
  }
  case DF_PROTO_STATS:
    return opt_uint(d, "held", UINT64_MAX, &m->held) || opt_uint(d, "served", UINT64_MAX, &m->served) ||
                   opt_uint(d, "rows", UINT64_MAX, &m->rows_done) ||
                   opt_uint(d, "busy_us", UINT64_MAX, &m->busy_us)
               ? -1 : 0;
  case DF_PROTO_BYE: return get_str(d, "reason", false, m->reason, sizeof m->reason);
  case DF_PROTO_ERROR:
    if (get_uint(d, "code", UINT32_MAX, &u) || get_str(d, "reason", false, m->reason, sizeof m->reason))
      return -1;
    m->code = (uint32_t)u;
    return 0;
  default: return 0; /* PING, PONG */
  }
}

int df_proto_decode(const uint8_t *buf, size_t len, df_proto_msg *m, int *code, char *err,
                    size_t errlen) {
  memset(m, 0, sizeof *m);
  *code = DF_PROTO_E_MALFORMED;
  if (len == 0 || scan(buf, len) != 0) {
    snprintf(err, errlen, "malformed header: not one bounded msgpack value (%zu bytes)", len);
    return -1;
  }
  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  size_t off = 0;
  int rc = -1;
  if (msgpack_unpack_next(&up, (const char *)buf, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len) {
    snprintf(err, errlen, "malformed header: msgpack decoding failed");
    goto done;
  }
  if (up.data.type != MSGPACK_OBJECT_MAP) {
    snprintf(err, errlen, "malformed header: not a map");
    goto done;
  }
  dec d = {&up.data.via.map, err, errlen};
  if (d.map->size > 32) { /* no op has more than 12 keys; bounds the duplicate check below */
    snprintf(err, errlen, "malformed header: %u keys", d.map->size);
    goto done;
  }
  /* strict: keys are distinct strings */
  for (uint32_t i = 0; i < d.map->size; i++) {
    const msgpack_object *k = &d.map->ptr[i].key;
    if (k->type != MSGPACK_OBJECT_STR) {
      snprintf(err, errlen, "malformed header: a key is not a string");
      goto done;
    }
    for (uint32_t j = 0; j < i; j++) {
      const msgpack_object *k2 = &d.map->ptr[j].key;
      if (k2->via.str.size == k->via.str.size &&
          (k->via.str.size == 0 || !memcmp(k2->via.str.ptr, k->via.str.ptr, k->via.str.size))) {
        snprintf(err, errlen, "malformed header: duplicate key");
        goto done;
      }
    }
  }
  uint64_t v, id = 0;
  char opname[16];
  if (get_uint(&d, "v", UINT32_MAX, &v)) goto done;
  m->v = (uint32_t)v;
  const msgpack_object *ido = get(&d, "id");
  if (ido && ido->type == MSGPACK_OBJECT_POSITIVE_INTEGER) id = ido->via.u64;
  m->id = id;
  const msgpack_object *opo = get(&d, "op");
  if (opo && opo->type == MSGPACK_OBJECT_STR)
    for (int o = 1; o < DF_PROTO_OP_COUNT; o++)
      if (opo->via.str.size == strlen(op_names[o]) && opo->via.str.size > 0 &&
          !memcmp(opo->via.str.ptr, op_names[o], opo->via.str.size))
        m->op = (df_proto_op)o;
  if (v != DF_PROTO_VERSION) {
    *code = DF_PROTO_E_VERSION;
    snprintf(err, errlen, "unsupported protocol version %llu (this peer speaks %d)",
             (unsigned long long)v, DF_PROTO_VERSION);
    goto done;
  }
  if (!ido || ido->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
    bad(&d, "id", "missing or not an unsigned integer");
    goto done;
  }
  if (get_str(&d, "op", true, opname, sizeof opname)) goto done;
  if (!m->op) {
    for (char *q = opname; *q; q++) /* peer text: printable ASCII only in messages */
      if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e) *q = '?';
    snprintf(err, errlen, "malformed header: unknown op '%s'", opname);
    goto done;
  }
  if (dec_ops(&d, m) != 0) goto done;
  rc = 0;
done:
  msgpack_unpacked_destroy(&up);
  if (rc != 0) {
    /* keep what identifies the message for the error reply, drop the rest */
    uint32_t vv = m->v;
    df_proto_op op = m->op;
    uint64_t idd = m->id;
    df_proto_msg_free(m);
    m->v = vv, m->op = op, m->id = idd;
  }
  return rc;
}

void df_proto_msg_free(df_proto_msg *m) {
  if (!m) return;
  free(m->pairs);
  free(m->tensors);
  free(m->experts);
  free(m->rows);
  memset(m, 0, sizeof *m);
}

int64_t df_proto_payload_bytes(const df_proto_msg *m) {
  switch (m->op) {
  case DF_PROTO_FFN:
  case DF_PROTO_RESULT: return m->total_rows * m->cols * 4;
  case DF_PROTO_SHARD_CHUNK: return -1;
  default: return 0;
  }
}

size_t df_proto_first_implausible(const void *p, size_t n, float max_abs, float *bad) {
  for (size_t i = 0; i < n; i++) {
    float v;
    memcpy(&v, (const char *)p + i * sizeof v, sizeof v);
    if (!(fabsf(v) <= max_abs)) {
      *bad = v;
      return i;
    }
  }
  return n;
}
