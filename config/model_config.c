/* config/model_config.c — config.json (the keys every family shares) and
 * generation_config.json.
 *
 * Owns: strict JSON parsing (jansson, duplicate keys rejected, line:column on syntax errors),
 * the shared keys' defaults, range checks and derived values (head_dim,
 * num_key_value_heads), finding the family of a model_type among those the caller lists,
 * and the reader (df_cfg_reader) through which each family's parser in engine/models/ reads
 * its own keys, defaults and per-layer MoE map. Does not own: which families exist
 * (engine/models/families.c), tensors or the forward pass.
 *
 * Semantics follow transformers' config classes: head_dim = getattr(config, "head_dim",
 * hidden_size // num_attention_heads) (Qwen3MoeAttention), rope_scaling's legacy "type" key
 * overrides "rope_type" (Qwen3Config.__init__), and YaRN's beta_fast / beta_slow fall back to
 * 32 / 1 when absent or zero (_compute_yarn_parameters). Qwen3Config's own constructor
 * default for an absent head_dim is 128; published qwen3 configs always carry the key, and
 * this parser applies the modeling-code fallback to every family, as the header documents.
 */
#define _POSIX_C_SOURCE 200809L

#include "config/model_config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CFG_MAX_FILE (16u * 1024 * 1024) /* config files are a few KiB */
#define CFG_SUPPORTED_ROPE "default, linear, yarn"
#define CFG_MAX_DIM DF_CFG_MAX_DIM

typedef struct {
  const char *file; /* name used in messages */
  char *err;
  size_t errlen;
  char no_mscale_types[128]; /* model types whose rope_scaling refuses mscale (messages) */
  char pfx[96]; /* the object path of the keys being read, e.g. "text_config." (messages) */
} ctx;

/* What a family's parser reads through (model_config.h df_cfg_reader). */
struct df_cfg_reader {
  ctx *c;
  json_t *root;
  json_t *outer[4]; /* objects df_cfg_enter left, innermost last */
  size_t pfx_len[4];
  int depth;
};

static void fail(ctx *c, const char *fmt, ...) {
  if (!c->err || c->errlen == 0) return;
  int n = snprintf(c->err, c->errlen, "%s: ", c->file);
  if (n >= 0 && (size_t)n < c->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    va_end(ap);
  }
  for (char *p = c->err; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
}

static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a real number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL: return "null";
  }
  return "?";
}

/* A key that is absent or JSON null counts as absent (transformers reads both as None). */
static json_t *get(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_null(v) ? NULL : v;
}

/* Integer key in [lo, hi]; absent: error when required, else *out = def. */
static int get_int(ctx *c, json_t *o, const char *key, bool required, int64_t def, int64_t lo,
                   int64_t hi, int64_t *out) {
  json_t *v = get(o, key);
  if (!v) {
    if (required) {
      fail(c, "missing required key '%s%s'", c->pfx, key);
      return -1;
    }
    *out = def;
    return 0;
  }
  if (!json_is_integer(v)) {
    fail(c, "key '%s%s': expected an integer, got %s", c->pfx, key, type_name(v));
    return -1;
  }
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi) {
    fail(c, "key '%s%s': %lld is out of range (expected %lld..%lld)", c->pfx, key, (long long)x,
         (long long)lo, (long long)hi);
    return -1;
  }
  *out = (int64_t)x;
  return 0;
}

/* Number (integer or real) key; absent: *out = def. */
static int get_num(ctx *c, json_t *o, const char *key, double def, double *out) {
  json_t *v = get(o, key);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!json_is_number(v)) {
    fail(c, "key '%s%s': expected a number, got %s", c->pfx, key, type_name(v));
    return -1;
  }
  *out = json_number_value(v);
  return 0;
}

static int get_bool(ctx *c, json_t *o, const char *key, bool def, bool *out) {
  json_t *v = get(o, key);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!json_is_boolean(v)) {
    fail(c, "key '%s%s': expected true or false, got %s", c->pfx, key, type_name(v));
    return -1;
  }
  *out = json_is_true(v);
  return 0;
}

/* String key; absent: *out = def (may be NULL). */
static int get_str(ctx *c, json_t *o, const char *key, const char *def, const char **out) {
  json_t *v = get(o, key);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!json_is_string(v)) {
    fail(c, "key '%s%s': expected a string, got %s", c->pfx, key, type_name(v));
    return -1;
  }
  *out = json_string_value(v);
  return 0;
}

/* A token id key: integer or absent/null (-1). vocab <= 0: no upper bound. */
static int get_token(ctx *c, json_t *o, const char *key, int64_t vocab, int64_t *out) {
  int64_t hi = vocab > 0 ? vocab - 1 : INT64_MAX;
  return get_int(c, o, key, false, -1, 0, hi, out);
}

/* eos_token_id: an integer or a list of at most DF_CFG_MAX_EOS integers; absent: *n = 0. */
static int get_eos(ctx *c, json_t *o, const char *key, int64_t vocab, int64_t *ids, int *n,
                   bool *present) {
  json_t *v = get(o, key);
  int64_t hi = vocab > 0 ? vocab - 1 : INT64_MAX;
  *n = 0;
  if (present) *present = v != NULL;
  if (!v) return 0;
  if (json_is_integer(v)) return get_int(c, o, key, true, 0, 0, hi, &ids[(*n)++]);
  if (!json_is_array(v)) {
    fail(c, "key '%s%s': expected an integer or a list of integers, got %s", c->pfx, key, type_name(v));
    return -1;
  }
  size_t cnt = json_array_size(v);
  if (cnt > DF_CFG_MAX_EOS) {
    fail(c, "key '%s%s': %zu token ids, more than the %d supported", c->pfx, key, cnt, DF_CFG_MAX_EOS);
    return -1;
  }
  for (size_t i = 0; i < cnt; i++) {
    json_t *e = json_array_get(v, i);
    if (!json_is_integer(e)) {
      fail(c, "key '%s%s[%zu]': expected an integer, got %s", c->pfx, key, i, type_name(e));
      return -1;
    }
    json_int_t x = json_integer_value(e);
    if (x < 0 || x > hi) {
      fail(c, "key '%s[%zu]': token id %lld is out of range (expected 0..%lld)", key, i,
           (long long)x, (long long)hi);
      return -1;
    }
    ids[(*n)++] = (int64_t)x;
  }
  return 0;
}

/* rope_scaling (or transformers >= 5's rope_parameters), `key` names it in messages.
 * allow_mscale: YaRN mscale / mscale_all_dim are read (the family's rope_mscale) instead of
 * refused. */
static int parse_rope(ctx *c, json_t *rs, const char *key, bool allow_mscale,
                      df_rope_scaling *r) {
  memset(r, 0, sizeof *r);
  r->type = DF_ROPE_DEFAULT;
  r->factor = 1.0;
  if (!rs) return 0;
  if (!json_is_object(rs)) {
    fail(c, "key '%s': expected an object or null, got %s", key, type_name(rs));
    return -1;
  }
  json_t *tv = get(rs, "type"); /* legacy name; overrides rope_type as transformers does */
  const char *tkey = "type";
  if (!tv) {
    tv = get(rs, "rope_type");
    tkey = "rope_type";
  }
  if (!tv) {
    fail(c, "key '%s': missing 'rope_type' (supported: " CFG_SUPPORTED_ROPE ")", key);
    return -1;
  }
  if (!json_is_string(tv)) {
    fail(c, "key '%s.%s': expected a string, got %s", key, tkey, type_name(tv));
    return -1;
  }
  const char *t = json_string_value(tv);
  if (strcmp(t, "default") == 0) return 0;
  if (strcmp(t, "linear") == 0) r->type = DF_ROPE_LINEAR;
  else if (strcmp(t, "yarn") == 0) r->type = DF_ROPE_YARN;
  else {
    fail(c, "key '%s.%s': unsupported rope type '%.64s' (supported: " CFG_SUPPORTED_ROPE ")",
         key, tkey, t);
    return -1;
  }
  json_t *fv = get(rs, "factor");
  if (!fv) {
    fail(c, "key '%s': rope type '%s' requires 'factor'", key, t);
    return -1;
  }
  if (!json_is_number(fv)) {
    fail(c, "key '%s.factor': expected a number, got %s", key, type_name(fv));
    return -1;
  }
  r->factor = json_number_value(fv);
  if (!(r->factor >= 1.0)) {
    fail(c, "key '%s.factor': %g is out of range (expected >= 1)", key, r->factor);
    return -1;
  }
  if (r->type != DF_ROPE_YARN) return 0;

  static const char *mscales[] = {"mscale", "mscale_all_dim"};
  double *mdst[] = {&r->mscale, &r->mscale_all_dim};
  for (size_t i = 0; i < sizeof mscales / sizeof *mscales; i++) {
    json_t *v = get(rs, mscales[i]);
    if (!v) continue;
    if (!allow_mscale) {
      fail(c, "key '%s.%s': not supported for model types %s", key, mscales[i],
           c->no_mscale_types);
      return -1;
    }
    if (!json_is_number(v) || json_number_value(v) < 0.0) {
      fail(c, "key '%s.%s': expected a non-negative number, got %s", key, mscales[i],
           json_is_number(v) ? "a negative one" : type_name(v));
      return -1;
    }
    *mdst[i] = json_number_value(v);
  }
  json_t *tr = get(rs, "truncate");
  if (tr && !json_is_true(tr)) {
    fail(c, "key '%s.truncate': only true (the default) is supported", key);
    return -1;
  }
  json_t *ov = get(rs, "original_max_position_embeddings");
  if (ov) {
    if (!json_is_integer(ov) || json_integer_value(ov) <= 0 ||
        json_integer_value(ov) > CFG_MAX_DIM) {
      fail(c, "key '%s.original_max_position_embeddings': expected a positive integer", key);
      return -1;
    }
    r->original_max_position_embeddings = (int64_t)json_integer_value(ov);
  }
  struct {
    const char *name;
    double *dst;
    double def;
  } nums[] = {{"beta_fast", &r->beta_fast, 32.0},
              {"beta_slow", &r->beta_slow, 1.0},
              {"attention_factor", &r->attention_factor, 0.0}};
  for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
    json_t *v = get(rs, nums[i].name);
    if (v && !json_is_number(v)) {
      fail(c, "key '%s.%s': expected a number, got %s", key, nums[i].name, type_name(v));
      return -1;
    }
    double x = v ? json_number_value(v) : 0.0;
    *nums[i].dst = x != 0.0 ? x : nums[i].def; /* `or` semantics: 0 means the default */
  }
  if (r->attention_factor < 0.0) {
    fail(c, "key '%s.attention_factor': %g is negative", key, r->attention_factor);
    return -1;
  }
  if (r->beta_fast < r->beta_slow) {
    fail(c, "key '%s': beta_fast %g is below beta_slow %g", key, r->beta_fast, r->beta_slow);
    return -1;
  }
  return 0;
}

static int load_json(ctx *c, const char *json, size_t len, json_t **root) {
  json_error_t jerr;
  *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!*root) {
    /* fail() prefixes "file: "; syntax errors read "file:line:column: ..." instead. */
    if (c->err && c->errlen)
      snprintf(c->err, c->errlen, "%s:%d:%d: JSON syntax error: %s", c->file, jerr.line,
               jerr.column, jerr.text);
    return -1;
  }
  if (!json_is_object(*root)) {
    fail(c, "expected a JSON object at the top level, got %s", type_name(*root));
    json_decref(*root);
    *root = NULL;
    return -1;
  }
  return 0;
}

static void copy_str(char *dst, size_t cap, const char *src) {
  size_t n = strlen(src);
  if (n >= cap) n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* quantization_config (null or absent: unquantised): FP8 E4M3 with block scales. */
static int parse_quant(ctx *c, json_t *root, df_model_config *m) {
  json_t *q = get(root, "quantization_config");
  m->quant = DF_QUANT_NONE;
  if (!q) return 0;
  if (!json_is_object(q)) {
    fail(c, "key 'quantization_config': expected an object or null, got %s", type_name(q));
    return -1;
  }
  const char *meth, *fmt;
  if (get_str(c, q, "quant_method", NULL, &meth) || get_str(c, q, "fmt", "e4m3", &fmt))
    return -1;
  if (!meth || strcmp(meth, "fp8") != 0) {
    fail(c, "key 'quantization_config.quant_method': unsupported method '%.64s' (supported: fp8)",
         meth ? meth : "(absent)");
    return -1;
  }
  if (strcmp(fmt, "e4m3") != 0) {
    fail(c, "key 'quantization_config.fmt': unsupported FP8 format '%.64s' (supported: e4m3)",
         fmt);
    return -1;
  }
  json_t *bs = get(q, "weight_block_size");
  if (!bs || !json_is_array(bs) || json_array_size(bs) != 2 ||
      !json_is_integer(json_array_get(bs, 0)) || !json_is_integer(json_array_get(bs, 1)) ||
      json_integer_value(json_array_get(bs, 0)) < 1 ||
      json_integer_value(json_array_get(bs, 1)) < 1 ||
      json_integer_value(json_array_get(bs, 0)) > CFG_MAX_DIM ||
      json_integer_value(json_array_get(bs, 1)) > CFG_MAX_DIM) {
    fail(c, "key 'quantization_config.weight_block_size': expected [n, k] of two positive "
            "integers (per-tensor FP8 scales are not supported)");
    return -1;
  }
  m->quant = DF_QUANT_FP8_BLOCK;
  m->quant_block_n = (int64_t)json_integer_value(json_array_get(bs, 0));
  m->quant_block_k = (int64_t)json_integer_value(json_array_get(bs, 1));
  return 0;
}

/* ---- what family parsers read through (model_config.h) -------------------------------- */

void df_cfg_fail(df_cfg_reader *r, const char *fmt, ...) {
  ctx *c = r->c;
  if (!c->err || c->errlen == 0) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fail(c, "%s", msg);
}

bool df_cfg_has(df_cfg_reader *r, const char *key) { return get(r->root, key) != NULL; }

int df_cfg_int(df_cfg_reader *r, const char *key, bool required, int64_t def, int64_t lo,
               int64_t hi, int64_t *out) {
  return get_int(r->c, r->root, key, required, def, lo, hi, out);
}

int df_cfg_num(df_cfg_reader *r, const char *key, double def, double *out) {
  return get_num(r->c, r->root, key, def, out);
}

int df_cfg_bool(df_cfg_reader *r, const char *key, bool def, bool *out) {
  return get_bool(r->c, r->root, key, def, out);
}

int df_cfg_str(df_cfg_reader *r, const char *key, const char *def, const char **out) {
  return get_str(r->c, r->root, key, def, out);
}

int df_cfg_layer_list(df_cfg_reader *r, const char *key, int64_t n_layers, bool *in_list) {
  ctx *c = r->c;
  for (int64_t i = 0; i < n_layers; i++) in_list[i] = false;
  json_t *mo = get(r->root, key);
  if (!mo) return 0;
  if (!json_is_array(mo)) {
    fail(c, "key '%s%s': expected a list of layer indices, got %s", c->pfx, key, type_name(mo));
    return -1;
  }
  for (size_t i = 0; i < json_array_size(mo); i++) {
    json_t *e = json_array_get(mo, i);
    if (!json_is_integer(e)) {
      fail(c, "key '%s%s[%zu]': expected an integer, got %s", c->pfx, key, i, type_name(e));
      return -1;
    }
    json_int_t x = json_integer_value(e);
    if (x < 0 || x >= n_layers) {
      fail(c, "key '%s%s[%zu]': layer %lld is out of range (expected 0..%lld)", c->pfx, key, i,
           (long long)x, (long long)(n_layers - 1));
      return -1;
    }
    in_list[x] = true;
  }
  return 0;
}

int df_cfg_quant_fp8(df_cfg_reader *r, df_model_config *m) { return parse_quant(r->c, r->root, m); }

/* One config_groups entry's weights: 4-bit float, groups of 32, weight-only. */
static int mxfp4_group_ok(ctx *c, json_t *g, const char *gname) {
  json_t *w = json_is_object(g) ? get(g, "weights") : NULL;
  json_t *nb = w ? get(w, "num_bits") : NULL, *gs = w ? get(w, "group_size") : NULL,
         *ty = w ? get(w, "type") : NULL;
  if (!w || !json_is_integer(nb) || json_integer_value(nb) != 4 || !json_is_integer(gs) ||
      json_integer_value(gs) != 32 || !json_is_string(ty) ||
      strcmp(json_string_value(ty), "float") != 0) {
    fail(c, "key '%squantization_config.config_groups.%.64s.weights': expected num_bits 4, "
         "group_size 32, type \"float\" (MXFP4)", c->pfx, gname);
    return -1;
  }
  json_t *sym = get(w, "symmetric"), *strat = get(w, "strategy"), *sdt = get(w, "scale_dtype"),
         *gf = get(g, "format");
  if ((sym && !json_is_true(sym)) ||
      (strat && (!json_is_string(strat) || strcmp(json_string_value(strat), "group") != 0)) ||
      (sdt && (!json_is_string(sdt) || strcmp(json_string_value(sdt), "torch.uint8") != 0)) ||
      (gf && (!json_is_string(gf) ||
              strcmp(json_string_value(gf), "mxfp4-pack-quantized") != 0))) {
    fail(c, "key '%squantization_config.config_groups.%.64s': expected format "
         "mxfp4-pack-quantized with symmetric true, strategy \"group\" and scale_dtype "
         "\"torch.uint8\" (MXFP4: E8M0 scales, one per group of 32)", c->pfx, gname);
    return -1;
  }
  if (get(g, "input_activations")) {
    fail(c, "key '%squantization_config.config_groups.%.64s.input_activations': quantised "
         "activations are not supported (expected null: weight-only MXFP4)", c->pfx, gname);
    return -1;
  }
  return 0;
}

int df_cfg_quant_mxfp4(df_cfg_reader *r, df_model_config *m) {
  ctx *c = r->c;
  json_t *q = get(r->root, "quantization_config");
  m->quant = DF_QUANT_NONE;
  if (!q) return 0;
  if (!json_is_object(q)) {
    fail(c, "key '%squantization_config': expected an object or null, got %s", c->pfx,
         type_name(q));
    return -1;
  }
  const char *meth, *fmt;
  if (get_str(c, q, "quant_method", NULL, &meth) || get_str(c, q, "format", NULL, &fmt))
    return -1;
  if (!meth || strcmp(meth, "compressed-tensors") != 0) {
    fail(c, "key '%squantization_config.quant_method': unsupported method '%.64s' (supported: "
         "compressed-tensors with format mxfp4-pack-quantized)", c->pfx,
         meth ? meth : "(absent)");
    return -1;
  }
  if (!fmt || strcmp(fmt, "mxfp4-pack-quantized") != 0) {
    fail(c, "key '%squantization_config.format': unsupported format '%.64s' (supported: "
         "mxfp4-pack-quantized)", c->pfx, fmt ? fmt : "(absent)");
    return -1;
  }
  json_t *groups = get(q, "config_groups");
  if (!groups || !json_is_object(groups) || json_object_size(groups) == 0) {
    fail(c, "key '%squantization_config.config_groups': expected an object of at least one "
         "group, got %s", c->pfx, groups ? type_name(groups) : "(absent)");
    return -1;
  }
  const char *gname;
  json_t *g;
  json_object_foreach(groups, gname, g) if (mxfp4_group_ok(c, g, gname) != 0) return -1;
  m->quant = DF_QUANT_MXFP4;
  return 0;
}

int df_cfg_layer_list1(df_cfg_reader *r, const char *key, int64_t n_layers, bool *in_list) {
  ctx *c = r->c;
  for (int64_t i = 0; i < n_layers; i++) in_list[i] = false;
  json_t *mo = get(r->root, key);
  if (!mo) return 0;
  if (!json_is_array(mo)) {
    fail(c, "key '%s%s': expected a list of 1-based layer numbers, got %s", c->pfx, key,
         type_name(mo));
    return -1;
  }
  for (size_t i = 0; i < json_array_size(mo); i++) {
    json_t *e = json_array_get(mo, i);
    if (!json_is_integer(e)) {
      fail(c, "key '%s%s[%zu]': expected an integer, got %s", c->pfx, key, i, type_name(e));
      return -1;
    }
    json_int_t x = json_integer_value(e);
    if (x < 1 || x > n_layers) {
      fail(c, "key '%s%s[%zu]': layer %lld is out of range (1-based: expected 1..%lld)", c->pfx,
           key, i, (long long)x, (long long)n_layers);
      return -1;
    }
    in_list[x - 1] = true;
  }
  return 0;
}

int df_cfg_enter(df_cfg_reader *r, const char *key, bool required) {
  ctx *c = r->c;
  json_t *o = get(r->root, key);
  if (!o) {
    if (!required) return 1;
    fail(c, "missing required key '%s%s'", c->pfx, key);
    return -1;
  }
  if (!json_is_object(o)) {
    fail(c, "key '%s%s': expected an object, got %s", c->pfx, key, type_name(o));
    return -1;
  }
  if (r->depth >= 4) {
    fail(c, "key '%s%s': nested too deep", c->pfx, key);
    return -1;
  }
  r->outer[r->depth] = r->root;
  r->pfx_len[r->depth++] = strlen(c->pfx);
  size_t n = strlen(c->pfx);
  snprintf(c->pfx + n, sizeof c->pfx - n, "%s.", key);
  r->root = o;
  return 0;
}

void df_cfg_leave(df_cfg_reader *r) {
  if (r->depth <= 0) return;
  r->depth--;
  r->root = r->outer[r->depth];
  r->c->pfx[r->pfx_len[r->depth]] = '\0';
}

const char *df_cfg_prefix(const df_cfg_reader *r) { return r->c->pfx; }

/* The model_type values of families[0..n) joined by ", "; rope_mscale 0/1 keeps only the
 * families with that rope_mscale, -1 keeps all. */
static void type_list(const df_cfg_family *const *families, size_t n, int rope_mscale,
                      char *buf, size_t cap) {
  size_t o = 0;
  buf[0] = '\0';
  for (size_t f = 0; f < n; f++) {
    if (rope_mscale >= 0 && families[f]->rope_mscale != (rope_mscale == 1)) continue;
    for (const char *const *t = families[f]->model_types; *t && o < cap; t++)
      o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", *t);
    for (const char *const *t = families[f]->wrapper_types; t && *t && o < cap; t++)
      o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", *t);
  }
}

static int parse_model(ctx *c, json_t *root, const df_cfg_family *const *families, size_t n_fam,
                       df_model_config *m) {
  const char *mt;
  char supported[256];
  type_list(families, n_fam, -1, supported, sizeof supported);
  if (get_str(c, root, "model_type", NULL, &mt) != 0) return -1;
  if (!mt) {
    fail(c, "missing required key 'model_type' (supported: %s)", supported);
    return -1;
  }
  const df_cfg_family *fam = NULL;
  for (size_t f = 0; f < n_fam && !fam; f++)
    for (const char *const *t = families[f]->model_types; *t && !fam; t++)
      if (strcmp(mt, *t) == 0) fam = families[f];
  /* a wrapper (e.g. kimi_k3): the text model's config is its text_config object, its
   * tensors are named under "language_model." */
  for (size_t f = 0; f < n_fam && !fam; f++)
    for (const char *const *t = families[f]->wrapper_types; t && *t && !fam; t++) {
      if (strcmp(mt, *t) != 0) continue;
      json_t *tc = get(root, "text_config");
      if (!tc || !json_is_object(tc)) {
        fail(c, "key 'text_config': model type '%.64s' needs its text model's config as an "
             "object, got %s", mt, tc ? type_name(tc) : "nothing");
        return -1;
      }
      const char *tmt;
      if (get_str(c, tc, "model_type", NULL, &tmt) != 0) return -1;
      bool ok = false;
      for (const char *const *u = families[f]->model_types; tmt && *u && !ok; u++)
        ok = strcmp(tmt, *u) == 0;
      if (!ok) {
        fail(c, "key 'text_config.model_type': '%.64s' is not a text model of '%.64s' "
             "(supported: %s)", tmt ? tmt : "(absent)", mt, families[f]->model_types[0]);
        return -1;
      }
      fam = families[f];
      root = tc;
      copy_str(c->pfx, sizeof c->pfx, "text_config.");
      copy_str(m->tensor_prefix, sizeof m->tensor_prefix, "language_model.");
    }
  if (!fam) {
    fail(c, "key 'model_type': unsupported model type '%.64s' (supported: %s)", mt, supported);
    return -1;
  }
  type_list(families, n_fam, 0, c->no_mscale_types, sizeof c->no_mscale_types);
  copy_str(m->model_type, sizeof m->model_type, mt);
  m->family = fam;

  if (get_int(c, root, "vocab_size", true, 0, 1, CFG_MAX_DIM, &m->vocab_size) ||
      get_int(c, root, "hidden_size", true, 0, 1, CFG_MAX_DIM, &m->hidden_size) ||
      get_int(c, root, "num_hidden_layers", true, 0, 1, INT64_MAX, &m->num_hidden_layers) ||
      get_int(c, root, "num_attention_heads", true, 0, 1, CFG_MAX_DIM,
              &m->num_attention_heads))
    return -1;
  if (m->num_hidden_layers > DF_CFG_MAX_LAYERS) {
    fail(c, "key 'num_hidden_layers': %lld layers, more than the %d supported",
         (long long)m->num_hidden_layers, DF_CFG_MAX_LAYERS);
    return -1;
  }
  if (get_int(c, root, "num_key_value_heads", false, m->num_attention_heads, 1, CFG_MAX_DIM,
              &m->num_key_value_heads))
    return -1;
  if (m->num_attention_heads % m->num_key_value_heads != 0) {
    fail(c, "key 'num_key_value_heads': %lld query heads are not divisible by %lld kv heads",
         (long long)m->num_attention_heads, (long long)m->num_key_value_heads);
    return -1;
  }
  int64_t derived_hd = m->hidden_size / m->num_attention_heads;
  if (!get(root, "head_dim") && derived_hd == 0) {
    fail(c, "key 'head_dim' absent and hidden_size %lld / num_attention_heads %lld is 0",
         (long long)m->hidden_size, (long long)m->num_attention_heads);
    return -1;
  }
  if (get_int(c, root, "head_dim", false, derived_hd, 1, CFG_MAX_DIM, &m->head_dim)) return -1;

  const char *act;
  if (get_str(c, root, "hidden_act", "silu", &act)) return -1;
  if (fam->situ && strcmp(act, "situ") == 0) {
    m->hidden_act = DF_ACT_SITU;
  } else if (strcmp(act, "silu") != 0) {
    fail(c, "key '%shidden_act': unsupported activation '%.64s' (supported: silu%s)", c->pfx,
         act, fam->situ ? ", situ" : "");
    return -1;
  }
  bool sliding;
  if (get_bool(c, root, "use_sliding_window", false, &sliding)) return -1;
  if (sliding) {
    fail(c, "key 'use_sliding_window': sliding-window attention is not supported");
    return -1;
  }
  if (get_num(c, root, "rms_norm_eps", 1e-6, &m->rms_norm_eps)) return -1;
  if (!(m->rms_norm_eps > 0.0)) {
    fail(c, "key '%srms_norm_eps': %g is out of range (expected > 0)", c->pfx, m->rms_norm_eps);
    return -1;
  }
  /* transformers >= 5 folds rope_theta and rope_scaling into rope_parameters. */
  json_t *rp = get(root, "rope_parameters");
  if (rp && !json_is_object(rp)) {
    fail(c, "key 'rope_parameters': expected an object or null, got %s", type_name(rp));
    return -1;
  }
  double theta_def = 10000.0;
  json_t *rpt = rp ? get(rp, "rope_theta") : NULL;
  if (rpt) {
    if (!json_is_number(rpt)) {
      fail(c, "key 'rope_parameters.rope_theta': expected a number, got %s", type_name(rpt));
      return -1;
    }
    theta_def = json_number_value(rpt);
  }
  if (get_num(c, root, "rope_theta", theta_def, &m->rope_theta)) return -1;
  if (!(m->rope_theta > 0.0)) {
    fail(c, "key 'rope_theta': %g is out of range (expected > 0)", m->rope_theta);
    return -1;
  }
  json_t *rs = get(root, "rope_scaling");
  if (!rs && rp && !get(rp, "rope_type") && !get(rp, "type")) rp = NULL; /* theta only */
  if (rs ? parse_rope(c, rs, "rope_scaling", fam->rope_mscale, &m->rope_scaling)
         : parse_rope(c, rp, "rope_parameters", fam->rope_mscale, &m->rope_scaling))
    return -1;
  if (get_int(c, root, "max_position_embeddings", false, 32768, 1, CFG_MAX_DIM,
              &m->max_position_embeddings) ||
      get_bool(c, root, "tie_word_embeddings", false, &m->tie_word_embeddings) ||
      get_bool(c, root, "attention_bias", false, &m->attention_bias))
    return -1;
  const char *dt;
  if (get_str(c, root, "torch_dtype", NULL, &dt)) return -1;
  if (!dt && get_str(c, root, "dtype", NULL, &dt)) return -1; /* transformers >= 4.56 name */
  copy_str(m->torch_dtype, sizeof m->torch_dtype, dt ? dt : "");
  if (get_token(c, root, "bos_token_id", m->vocab_size, &m->bos_token_id) ||
      get_eos(c, root, "eos_token_id", m->vocab_size, m->eos_token_ids, &m->n_eos, NULL))
    return -1;

  return fam->parse(&(df_cfg_reader){.c = c, .root = root}, mt, m);
}

int df_cfg_parse_for(const char *json, size_t len, const char *name,
                     const df_cfg_family *const *families, size_t n_families,
                     df_model_config *out, char *err, size_t errlen) {
  ctx c = {name ? name : "config.json", err, errlen, "", ""};
  json_t *root = NULL;
  int rc = -1;
  df_model_config *m = NULL;
  if (!out) {
    fail(&c, "NULL output");
    return -1;
  }
  memset(out, 0, sizeof *out);
  if (!json) {
    fail(&c, "NULL text");
    goto done;
  }
  m = calloc(1, sizeof *m);
  if (!m) {
    fail(&c, "out of memory");
    goto done;
  }
  if (load_json(&c, json, len, &root) != 0) goto done;
  if (parse_model(&c, root, families, n_families, m) != 0) goto done;
  *out = *m;
  rc = 0;
done:
  free(m);
  json_decref(root);
  return rc;
}

/* Read DIR/NAME into a NUL-terminated buffer. Returns 0, -1 on error, or 1 when the file
 * does not exist and `optional` is set. *path_out is always set (owned by the caller). */
static int read_file(const char *dir, const char *name, bool optional, char **path_out,
                     char **buf, size_t *len, char *err, size_t errlen) {
  int rc = -1;
  FILE *f = NULL;
  char *b = NULL;
  *buf = NULL;
  *path_out = NULL;
  ctx c = {name, err, errlen, "", ""};
  if (!dir) {
    fail(&c, "NULL model folder");
    goto done;
  }
  size_t dl = strlen(dir), nl = strlen(name);
  char *path = malloc(dl + nl + 2);
  if (!path) {
    fail(&c, "out of memory");
    goto done;
  }
  *path_out = path;
  c.file = path;
  memcpy(path, dir, dl);
  size_t o = dl;
  if (dl > 0 && dir[dl - 1] != '/') path[o++] = '/';
  memcpy(path + o, name, nl + 1);
  /* O_NONBLOCK: a FIFO (or device) in the file's place must not block the open; the
   * regular-file check below refuses it. No effect on reading a regular file. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f && fd >= 0) close(fd);
  if (!f) {
    if (optional && errno == ENOENT) rc = 1;
    else fail(&c, "cannot open: %s", strerror(errno));
    goto done;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fail(&c, "not a regular file");
    goto done;
  }
  if (st.st_size < 0 || (uint64_t)st.st_size > CFG_MAX_FILE) {
    fail(&c, "%lld bytes, more than the %u-byte limit", (long long)st.st_size, CFG_MAX_FILE);
    goto done;
  }
  size_t n = (size_t)st.st_size;
  b = malloc(n + 1);
  if (!b) {
    fail(&c, "out of memory");
    goto done;
  }
  if (fread(b, 1, n, f) != n) {
    fail(&c, "read failed");
    goto done;
  }
  b[n] = '\0';
  *buf = b;
  *len = n;
  b = NULL;
  rc = 0;
done:
  free(b);
  if (f) fclose(f);
  return rc;
}

int df_cfg_load_for(const char *dir, const df_cfg_family *const *families, size_t n_families,
                    df_model_config *out, char *err, size_t errlen) {
  char *path = NULL, *text = NULL;
  size_t len = 0;
  if (out) memset(out, 0, sizeof *out);
  int rc = read_file(dir, "config.json", false, &path, &text, &len, err, errlen);
  if (rc == 0) rc = df_cfg_parse_for(text, len, path, families, n_families, out, err, errlen);
  free(text);
  free(path);
  return rc == 0 ? 0 : -1;
}

static void gen_defaults(const df_model_config *mc, df_gen_config *g) {
  memset(g, 0, sizeof *g);
  g->do_sample = false;
  g->temperature = 1.0;
  g->top_p = 1.0;
  g->top_k = 50;
  g->bos_token_id = mc ? mc->bos_token_id : -1;
  if (mc && mc->n_eos > 0 && mc->n_eos <= DF_CFG_MAX_EOS) {
    memcpy(g->eos_token_ids, mc->eos_token_ids, (size_t)mc->n_eos * sizeof(int64_t));
    g->n_eos = mc->n_eos;
  }
}

int df_gen_cfg_parse(const char *json, size_t len, const char *name, const df_model_config *mc,
                     df_gen_config *out, char *err, size_t errlen) {
  ctx c = {name ? name : "generation_config.json", err, errlen, "", ""};
  json_t *root = NULL;
  int rc = -1;
  if (!out) {
    fail(&c, "NULL output");
    return -1;
  }
  gen_defaults(mc, out);
  if (!json) {
    fail(&c, "NULL text");
    goto done;
  }
  if (load_json(&c, json, len, &root) != 0) goto done;
  df_gen_config g;
  gen_defaults(mc, &g);
  int64_t vocab = mc ? mc->vocab_size : 0;
  int64_t bos;
  bool eos_present;
  if (get_bool(&c, root, "do_sample", false, &g.do_sample) ||
      get_num(&c, root, "temperature", 1.0, &g.temperature) ||
      get_num(&c, root, "top_p", 1.0, &g.top_p) ||
      get_int(&c, root, "top_k", false, 50, 0, INT64_MAX, &g.top_k) ||
      get_token(&c, root, "bos_token_id", vocab, &bos))
    goto done;
  if (!(g.temperature >= 0.0)) {
    fail(&c, "key 'temperature': %g is negative", g.temperature);
    goto done;
  }
  if (!(g.top_p > 0.0 && g.top_p <= 1.0)) {
    fail(&c, "key 'top_p': %g is out of range (expected 0 < top_p <= 1)", g.top_p);
    goto done;
  }
  if (bos >= 0) g.bos_token_id = bos;
  int64_t ids[DF_CFG_MAX_EOS];
  int n_ids = 0;
  if (get_eos(&c, root, "eos_token_id", vocab, ids, &n_ids, &eos_present)) goto done;
  if (eos_present) {
    memcpy(g.eos_token_ids, ids, sizeof ids);
    g.n_eos = n_ids;
  }
  *out = g;
  rc = 0;
done:
  json_decref(root);
  return rc;
}

int df_gen_cfg_load(const char *dir, const df_model_config *mc, df_gen_config *out, char *err,
                    size_t errlen) {
  char *path = NULL, *text = NULL;
  size_t len = 0;
  if (out) gen_defaults(mc, out);
  int rc = read_file(dir, "generation_config.json", true, &path, &text, &len, err, errlen);
  if (rc == 1) rc = out ? 0 : -1; /* absent: the defaults */
  else if (rc == 0) rc = df_gen_cfg_parse(text, len, path, mc, out, err, errlen);
  free(text);
  free(path);
  return rc;
}
