/* engine/text/tokenizer_load.c — df_tok_load and df_tok_destroy: reading and validating
 * tokenizer.json (+ tokenizer_config.json) into a df_tok, and freeing it.
 *
 * Owns: finding the two files, the id table sizes, model.vocab, the model options (type,
 * prefix / suffix, dropout, ignore_merges, unk_token), the ByteLevel-last and decoder checks,
 * the post-processor ids (TemplateProcessing), added tokens and their matching sets, the
 * per-id decode bytes, tokenizer_config.json's special ids, and the load errors of all of
 * these. Does not own: the sections that a stage parses itself (normalizer:
 * engine/text/tokenizer_normalize.c; pre_tokenizer: engine/text/tokenizer_pretok.c;
 * model.merges: engine/text/tokenizer_bpe.c), encoding (engine/text/tokenizer_encode.c) or
 * decoding (engine/text/tokenizer_decode.c).
 */
#include "engine/text/tokenizer_bpe.h"
#include "engine/text/tokenizer_internal.h"
#include "engine/text/tokenizer_normalize.h"
#include "engine/text/tokenizer_pretok.h"
#include "engine/text/tokenizer_tiktoken.h"
#include "engine/text/tokenizer_utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DF_TOK_MAX_ID (1 << 24)    /* ids at or above are refused (hostile allocation) */

/* Ids: the highest of model.vocab and added_tokens decides the table size. */
static int size_ids(load_ctx *L, json_t *vocab, json_t *added) {
  df_tok *t = L->t;
  int64_t max_id = -1;
  const char *key;
  json_t *val;
  json_object_foreach(vocab, key, val) {
    if (!json_is_integer(val) || json_integer_value(val) < 0 ||
        json_integer_value(val) >= DF_TOK_MAX_ID) {
      LERR(L, "model.vocab[\"%.60s\"]: expected an integer id in [0, %d)", key, DF_TOK_MAX_ID);
      return -1;
    }
    if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
  }
  size_t i;
  json_array_foreach(added, i, val) {
    json_t *id = json_object_get(val, "id");
    if (!json_is_object(val) || !json_is_integer(id) || json_integer_value(id) < 0 ||
        json_integer_value(id) >= DF_TOK_MAX_ID) {
      LERR(L, "added_tokens[%zu].id: expected an integer id in [0, %d)", i, DF_TOK_MAX_ID);
      return -1;
    }
    if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
  }
  if (max_id < 0) {
    LERR(L, "model.vocab: empty vocabulary");
    return -1;
  }
  t->n_ids = (size_t)max_id + 1;
  t->piece_off = malloc(t->n_ids * sizeof *t->piece_off);
  t->piece_len = calloc(t->n_ids, sizeof *t->piece_len);
  t->bytes_off = calloc(t->n_ids, sizeof *t->bytes_off);
  t->bytes_len = calloc(t->n_ids, sizeof *t->bytes_len);
  t->flags = calloc(t->n_ids, 1);
  if (!t->piece_off || !t->piece_len || !t->bytes_off || !t->bytes_len || !t->flags) {
    LERR(L, "out of memory for %zu ids", t->n_ids);
    return -1;
  }
  memset(t->piece_off, 0xFF, t->n_ids * sizeof *t->piece_off);
  return 0;
}

static int load_vocab(load_ctx *L, json_t *vocab) {
  df_tok *t = L->t;
  size_t n = json_object_size(vocab);
  t->vcap = df_tok__pow2_at_least(n * 2 + 1);
  t->vslots = calloc(t->vcap, sizeof *t->vslots);
  if (!t->vslots) {
    LERR(L, "out of memory");
    return -1;
  }
  const char *key;
  json_t *val;
  json_object_foreach(vocab, key, val) {
    int32_t id = (int32_t)json_integer_value(val);
    if (t->piece_off[id] != UINT32_MAX) {
      LERR(L, "model.vocab[\"%.60s\"]: id %d is already used by \"%.60s\"", key, (int)id,
           t->pieces.p + t->piece_off[id]);
      return -1;
    }
    size_t klen = strlen(key);
    if (df_tok__set_piece(t, id, key, klen) != 0) {
      LERR(L, "out of memory");
      return -1;
    }
    df_tok__vocab_insert(t, id);
  }
  return 0;
}

/* Post-processors ---------------------------------------------------------------------------- */

static int push_ids(int32_t **arr, size_t *n, const int32_t *v, size_t k) {
  int32_t *p = realloc(*arr, (*n + k + 1) * sizeof *p);
  if (!p) return -1;
  memcpy(p + *n, v, k * sizeof *v);
  *arr = p;
  *n += k;
  return 0;
}

static int load_postproc(load_ctx *L, json_t *p, const char *where) {
  df_tok *t = L->t;
  if (!p || json_is_null(p)) return 0;
  const char *type = json_string_value(json_object_get(p, "type"));
  if (!type) {
    LERR(L, "%s.type: expected a string", where);
    return -1;
  }
  char sub[160];
  if (strcmp(type, "ByteLevel") == 0) return 0; /* offsets only */
  if (strcmp(type, "Sequence") == 0) {
    json_t *list = json_object_get(p, "processors");
    if (!json_is_array(list)) {
      LERR(L, "%s.processors: expected an array", where);
      return -1;
    }
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
      snprintf(sub, sizeof sub, "%s.processors[%zu]", where, i);
      if (load_postproc(L, v, sub) != 0) return -1;
    }
    return 0;
  }
  if (strcmp(type, "TemplateProcessing") == 0) {
    json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
    if (!json_is_array(single)) {
      LERR(L, "%s.single: expected an array", where);
      return -1;
    }
    bool seen_seq = false;
    size_t i;
    json_t *v;
    json_array_foreach(single, i, v) {
      json_t *sp = json_object_get(v, "SpecialToken");
      if (json_object_get(v, "Sequence")) {
        seen_seq = true;
        continue;
      }
      const char *name = json_string_value(json_object_get(sp, "id"));
      json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
      if (!name || !json_is_array(ids)) {
        LERR(L, "%s.single[%zu]: expected {\"SpecialToken\": {\"id\": name}} with name in "
                "special_tokens", where, i);
        return -1;
      }
      size_t j;
      json_t *idv;
      json_array_foreach(ids, j, idv) {
        int64_t id = json_integer_value(idv);
        if (!json_is_integer(idv) || id < 0 || (size_t)id >= t->n_ids) {
          LERR(L, "%s.special_tokens[\"%.40s\"].ids[%zu]: expected an id in [0, %zu)", where,
               name, j, t->n_ids);
          return -1;
        }
        int32_t id32 = (int32_t)id;
        if (push_ids(seen_seq ? &t->post_ids : &t->pre_ids, seen_seq ? &t->n_post : &t->n_pre,
                     &id32, 1) != 0) {
          LERR(L, "out of memory");
          return -1;
        }
      }
    }
    return 0;
  }
  LERR(L, "%s.type: unsupported post-processor \"%.40s\" (supported: ByteLevel, "
          "TemplateProcessing, Sequence)", where, type);
  return -1;
}

/* Added tokens ------------------------------------------------------------------------------- */

typedef struct sort_ent {
  uint8_t b;    /* first byte */
  size_t len;   /* bytes */
  int32_t idx;  /* into df_tok.added */
} sort_ent;

/* By first byte, then longest first, then file order. */
static int cmp_sort_ent(const void *a, const void *b) {
  const sort_ent *x = a, *y = b;
  if (x->b != y->b) return x->b < y->b ? -1 : 1;
  if (x->len != y->len) return x->len > y->len ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

static int build_set(df_tok *t, added_set *set, bool normalized) {
  size_t n = 0;
  for (size_t i = 0; i < t->n_added; i++)
    if (t->added[i].normalized == normalized && t->added[i].len > 0) n++;
  set->idx = malloc((n + 1) * sizeof *set->idx);
  if (!set->idx) return -1;
  set->n = 0;
  for (size_t i = 0; i < t->n_added; i++)
    if (t->added[i].normalized == normalized && t->added[i].len > 0) set->idx[set->n++] = (int32_t)i;
  sort_ent *se = malloc((set->n + 1) * sizeof *se);
  if (!se) return -1;
  for (size_t i = 0; i < set->n; i++)
    se[i] = (sort_ent){(uint8_t)t->added[set->idx[i]].content[0], t->added[set->idx[i]].len,
                       set->idx[i]};
  qsort(se, set->n, sizeof *se, cmp_sort_ent);
  for (size_t i = 0; i < set->n; i++) set->idx[i] = se[i].idx;
  free(se);
  memset(set->off, 0, sizeof set->off);
  for (size_t i = 0; i < set->n; i++) set->off[(uint8_t)t->added[set->idx[i]].content[0] + 1]++;
  for (int b = 0; b < 256; b++) set->off[b + 1] += set->off[b];
  return 0;
}

static int load_added(load_ctx *L, json_t *added) {
  df_tok *t = L->t;
  size_t n = json_array_size(added);
  t->added = calloc(n + 1, sizeof *t->added);
  df_tok_buf nb = {0};
  int rc = -1;
  if (!t->added) goto oom;
  size_t i;
  json_t *v;
  json_array_foreach(added, i, v) {
    json_t *content = json_object_get(v, "content");
    if (!json_is_string(content) || json_string_length(content) == 0) {
      LERR(L, "added_tokens[%zu].content: expected a non-empty string", i);
      goto done;
    }
    const char *c = json_string_value(content);
    size_t clen = json_string_length(content);
    if (!df_tok__utf8_valid((const uint8_t *)c, clen)) {
      LERR(L, "added_tokens[%zu].content: not valid UTF-8", i);
      goto done;
    }
    added_tok *a = &t->added[t->n_added++];
    a->id = (int32_t)json_integer_value(json_object_get(v, "id"));
    a->special = df_tok__jbool(v, "special", false);
    a->normalized = df_tok__jbool(v, "normalized", !a->special);
    a->lstrip = df_tok__jbool(v, "lstrip", false);
    a->rstrip = df_tok__jbool(v, "rstrip", false);
    a->single_word = df_tok__jbool(v, "single_word", false);
    /* The piece of an added token is its content; it replaces a vocab entry of the same id. */
    if (df_tok__set_piece(t, a->id, c, clen) != 0) goto oom;
    t->flags[a->id] |= 1 | (a->special ? 2 : 0);
    if (a->normalized && t->n_norm > 0) {
      if (df_tok__normalize(t, c, clen, &nb) != 0) goto oom;
      c = nb.p;
      clen = nb.n;
    }
    a->content = malloc(clen + 1);
    if (!a->content) goto oom;
    memcpy(a->content, c, clen);
    a->content[clen] = 0;
    a->len = clen;
  }
  if (build_set(t, &t->raw_set, false) != 0 || build_set(t, &t->norm_set, true) != 0) goto oom;
  rc = 0;
  goto done;
oom:
  LERR(L, "out of memory");
done:
  df_tok__buf_free(&nb);
  return rc;
}

/* Decode bytes of every id: a piece whose every character is in the byte-level alphabet maps
 * to those bytes; any other piece (added tokens like "<｜begin▁of▁sentence｜>") to its UTF-8. */
static int build_decode_table(load_ctx *L) {
  df_tok *t = L->t;
  for (size_t id = 0; id < t->n_ids; id++) {
    if (t->piece_off[id] == UINT32_MAX) continue;
    const char *p = t->pieces.p + t->piece_off[id];
    size_t n = t->piece_len[id];
    if (t->dbytes.n > UINT32_MAX - n - 1) goto oom;
    uint32_t off = (uint32_t)t->dbytes.n;
    if (df_tok__buf_reserve(&t->dbytes, n) != 0) goto oom;
    size_t i = 0, k = 0;
    bool all = true;
    while (i < n) {
      size_t clen;
      uint32_t cp = df_tok__cp_at(p, n, i, &clen);
      if (cp >= 324 || df_tok__cp_byte[cp] < 0) {
        all = false;
        break;
      }
      t->dbytes.p[off + k++] = (char)df_tok__cp_byte[cp];
      i += clen;
    }
    if (!all) {
      memcpy(t->dbytes.p + off, p, n);
      k = n;
    }
    t->dbytes.n = off + k;
    if (k > t->max_piece_bytes) t->max_piece_bytes = k;
    t->bytes_off[id] = off;
    t->bytes_len[id] = (uint32_t)k;
  }
  return 0;
oom:
  LERR(L, "out of memory");
  return -1;
}

/* tokenizer_config.json: special token ids and add_bos/add_eos. Missing file is fine. */
static int32_t config_token_id(df_tok *t, json_t *v) {
  const char *s = NULL;
  size_t n = 0;
  if (json_is_string(v)) {
    s = json_string_value(v);
    n = json_string_length(v);
  } else if (json_is_object(v) && json_is_string(json_object_get(v, "content"))) {
    s = json_string_value(json_object_get(v, "content"));
    n = json_string_length(json_object_get(v, "content"));
  }
  return s ? df_tok_token_to_id(t, s, n) : -1;
}

static int load_config(df_tok *t, const char *cfgpath, char *err, size_t errlen) {
  struct stat st;
  if (stat(cfgpath, &st) != 0) return 0;
  json_t *c = df_tok__load_json(cfgpath, err, errlen);
  if (!c) return -1;
  int rc = -1;
  if (!json_is_object(c)) {
    df_tok__seterr(err, errlen, "%s: expected a JSON object", cfgpath);
    goto done;
  }
  static const char *names[3] = {"bos_token", "eos_token", "pad_token"};
  int32_t *dst[3] = {&t->bos_id, &t->eos_id, &t->pad_id};
  for (int i = 0; i < 3; i++) {
    json_t *v = json_object_get(c, names[i]);
    if (!v || json_is_null(v)) continue;
    *dst[i] = config_token_id(t, v);
    if (*dst[i] < 0) {
      df_tok__seterr(err, errlen, "%s: %s: not a token of the vocabulary", cfgpath, names[i]);
      goto done;
    }
  }
  for (int i = 0; i < 2; i++) {
    const char *k = i ? "add_eos_token" : "add_bos_token";
    json_t *v = json_object_get(c, k);
    if (v && !json_is_boolean(v) && !json_is_null(v)) {
      df_tok__seterr(err, errlen, "%s: %s: expected true or false", cfgpath, k);
      goto done;
    }
  }
  t->add_bos = df_tok__jbool(c, "add_bos_token", false) && t->bos_id >= 0;
  t->add_eos = df_tok__jbool(c, "add_eos_token", false) && t->eos_id >= 0;
  rc = 0;
done:
  json_decref(c);
  return rc;
}

/* A new tokenizer named `path` with no ids set yet; NULL + message when out of memory. */
static df_tok *tok_new(const char *path, char *err, size_t errlen) {
  df_tok *t = calloc(1, sizeof *t);
  if (!t) {
    df_tok__seterr(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  snprintf(t->path, sizeof t->path, "%s", path);
  t->unk_id = t->bos_id = t->eos_id = t->pad_id = -1;
  pthread_mutex_init(&t->cache.mu, NULL);
  return t;
}

/* The steps every format ends with: the decode table, the word cache and
 * tokenizer_config.json (cfg). 0, or -1 with the message set. */
static int tok_finish(load_ctx *L, const char *cfg) {
  df_tok *t = L->t;
  if (build_decode_table(L) != 0) return -1;
  t->cache.slots = calloc(DF_TOK_CACHE_SLOTS, sizeof *t->cache.slots);
  if (!t->cache.slots) {
    LERR(L, "out of memory");
    return -1;
  }
  return load_config(t, cfg, L->err, L->errlen);
}

/* A Kimi TikTokenTokenizer: tiktoken.model + tokenizer_config.json (engine/text/
 * tokenizer_tiktoken.c), then the steps shared with tokenizer.json. */
static int load_tiktoken(const char *model, const char *cfg, df_tok **out, char *err,
                         size_t errlen) {
  df_tok *t = tok_new(model, err, errlen);
  if (!t) return -1;
  load_ctx L = {t, model, err, errlen};
  int rc = -1;
  if (df_tok__load_tiktoken(&L, model, cfg) != 0) goto done;
  if (build_set(t, &t->raw_set, false) != 0 || build_set(t, &t->norm_set, true) != 0) {
    LERR(&L, "out of memory");
    goto done;
  }
  rc = tok_finish(&L, cfg);
done:
  if (rc != 0) df_tok_destroy(&t);
  *out = t;
  return rc;
}

static bool is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int df_tok_load(const char *path, df_tok **out, char *err, size_t errlen) {
  *out = NULL;
  df_tok__alphabet_init();
  char file[512], cfg[512];
  struct stat st;
  if (!path || stat(path, &st) != 0) {
    df_tok__seterr(err, errlen, "%s: %s", path ? path : "(null)", strerror(errno));
    return -1;
  }
  int w;
  if (S_ISDIR(st.st_mode)) {
    w = snprintf(file, sizeof file, "%s/tokenizer.json", path);
    if (w > 0 && (size_t)w < sizeof file) w = snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", path);
  } else {
    w = snprintf(file, sizeof file, "%s", path);
    const char *slash = strrchr(path, '/');
    int dl = slash ? (int)(slash - path) : 1;
    if (w > 0 && (size_t)w < sizeof file)
      w = snprintf(cfg, sizeof cfg, "%.*s/tokenizer_config.json", dl, slash ? path : ".");
  }
  if (w < 0 || (size_t)w >= sizeof file) {
    df_tok__seterr(err, errlen, "%.200s...: path too long", path);
    return -1;
  }
  /* tiktoken.model (a folder without tokenizer.json, or the file itself) */
  {
    char tt[512];
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (S_ISDIR(st.st_mode) && !is_file(file)) {
      /* anything named tiktoken.model (a FIFO, a folder) is this format: its loader says
       * what is wrong with it */
      struct stat ts;
      w = snprintf(tt, sizeof tt, "%s/tiktoken.model", path);
      if (w > 0 && (size_t)w < sizeof tt && stat(tt, &ts) == 0)
        return load_tiktoken(tt, cfg, out, err, errlen);
    } else if (!S_ISDIR(st.st_mode) && strcmp(base, "tiktoken.model") == 0) {
      return load_tiktoken(file, cfg, out, err, errlen);
    }
  }
  json_t *root = df_tok__load_json(file, err, errlen);
  if (!root) {
    return -1;
  }
  df_tok *t = tok_new(file, err, errlen);
  int rc = -1;
  if (!t) goto done;
  load_ctx L = {t, file, err, errlen};
  if (!json_is_object(root)) {
    LERR(&L, "expected a JSON object");
    goto done;
  }
  json_t *model = json_object_get(root, "model");
  if (!json_is_object(model)) {
    LERR(&L, "model: missing or not an object");
    goto done;
  }
  const char *mtype = json_string_value(json_object_get(model, "type"));
  if (mtype && strcmp(mtype, "BPE") != 0) {
    LERR(&L, "model.type: unsupported model \"%.40s\" (supported: BPE)", mtype);
    goto done;
  }
  const char *cs = json_string_value(json_object_get(model, "continuing_subword_prefix"));
  const char *ew = json_string_value(json_object_get(model, "end_of_word_suffix"));
  if ((cs && *cs) || (ew && *ew)) {
    LERR(&L, "model.%s: unsupported (byte-level BPE uses none)",
         cs && *cs ? "continuing_subword_prefix" : "end_of_word_suffix");
    goto done;
  }
  json_t *drop = json_object_get(model, "dropout");
  if (json_is_number(drop) && json_number_value(drop) > 0) {
    LERR(&L, "model.dropout: unsupported (encoding must be deterministic)");
    goto done;
  }
  t->ignore_merges = df_tok__jbool(model, "ignore_merges", false);
  json_t *vocab = json_object_get(model, "vocab");
  json_t *added = json_object_get(root, "added_tokens");
  if (!json_is_object(vocab)) {
    LERR(&L, "model.vocab: expected an object of token -> id");
    goto done;
  }
  if (added && !json_is_null(added) && !json_is_array(added)) {
    LERR(&L, "added_tokens: expected an array");
    goto done;
  }
  if (size_ids(&L, vocab, added) != 0 || load_vocab(&L, vocab) != 0 ||
      df_tok__load_merges(&L, model) != 0)
    goto done;
  for (int b = 0; b < 256; b++) {
    char u[4];
    size_t k = df_tok__cp_to_utf8(df_tok__byte_cp[b], u);
    t->byte_id[b] = df_tok__vocab_find(t, u, k);
  }
  json_t *unk = json_object_get(model, "unk_token");
  if (json_is_string(unk))
    t->unk_id = df_tok__vocab_find(t, json_string_value(unk), json_string_length(unk));
  if (df_tok__load_normalizer(&L, json_object_get(root, "normalizer"), "normalizer") != 0)
    goto done;
  json_t *pre = json_object_get(root, "pre_tokenizer");
  if (!pre || json_is_null(pre)) {
    LERR(&L, "pre_tokenizer: null, but a byte-level BPE tokenizer needs a ByteLevel pre-tokenizer");
    goto done;
  }
  if (df_tok__load_pretok(&L, pre, "pre_tokenizer") != 0) goto done;
  for (size_t i = 0; i < t->n_steps; i++) {
    if (t->steps[i].kind == PT_BYTELEVEL && i + 1 != t->n_steps) {
      LERR(&L, "pre_tokenizer: ByteLevel must be the last pre-tokenizer");
      goto done;
    }
  }
  if (t->n_steps == 0 || t->steps[t->n_steps - 1].kind != PT_BYTELEVEL) {
    LERR(&L, "pre_tokenizer: no ByteLevel pre-tokenizer (only byte-level BPE is supported)");
    goto done;
  }
  json_t *dec = json_object_get(root, "decoder");
  const char *dtype = json_string_value(json_object_get(dec, "type"));
  if (dec && !json_is_null(dec) && (!dtype || strcmp(dtype, "ByteLevel") != 0)) {
    LERR(&L, "decoder.type: unsupported decoder \"%.40s\" (supported: ByteLevel)",
         dtype ? dtype : "(missing)");
    goto done;
  }
  if (load_added(&L, added) != 0 || load_postproc(&L, json_object_get(root, "post_processor"),
                                                  "post_processor") != 0)
    goto done;
  rc = tok_finish(&L, cfg);
done:
  json_decref(root);
  if (rc != 0) df_tok_destroy(&t);
  *out = t;
  return rc;
}

void df_tok_destroy(df_tok **pt) {
  if (!pt || !*pt) return;
  df_tok *t = *pt;
  free(t->piece_off);
  free(t->piece_len);
  df_tok__buf_free(&t->pieces);
  free(t->bytes_off);
  free(t->bytes_len);
  df_tok__buf_free(&t->dbytes);
  free(t->flags);
  free(t->vslots);
  free(t->merges);
  for (size_t i = 0; i < t->n_added; i++) free(t->added[i].content);
  free(t->added);
  free(t->raw_set.idx);
  free(t->norm_set.idx);
  for (size_t i = 0; i < t->n_steps; i++) pcre2_code_free(t->steps[i].re);
  free(t->steps);
  free(t->pre_ids);
  free(t->post_ids);
  free(t->cache.slots);
  df_tok__buf_free(&t->cache.keys);
  free(t->cache.vals);
  pthread_mutex_destroy(&t->cache.mu);
  free(t);
  *pt = NULL;
}
