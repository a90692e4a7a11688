/* engine/text/tokenizer.c — loading tokenizer.json and byte-level BPE encode / decode.
 *
 * Owns: the df_tok object (vocabulary, merge ranks, added tokens, normalizer, pre-tokenizer
 * steps, post-processor ids, per-id decode bytes), the encode pipeline and one-shot decode.
 * The pipeline is the reference library's: (1) split out added tokens that are not
 * "normalized" on the raw text, (2) normalize each remaining section, (3) split out
 * "normalized" added tokens, (4) run the pre-tokenizer steps, (5) BPE each piece on its bytes
 * (the ByteLevel byte->char mapping is folded into the merge table: symbols are token ids),
 * (6) post-process. Does not own: UTF-8 repair and the streaming decoder
 * (engine/text/tokenizer_utf8.c), chat templates (engine/text/chat_template.c).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_internal.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#define DF_TOK_MAX_ID (1 << 24)    /* ids at or above are refused (hostile allocation) */
#define DF_TOK_CACHE_MAX_WORD 128  /* longer words are not cached */
#define DF_TOK_CACHE_SLOTS (1 << 16)

/* ---- hashing -------------------------------------------------------------------------- */

static uint64_t hash_bytes(const void *p, size_t n) {
  const uint8_t *s = p;
  uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, s + i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ULL;
  h ^= h >> 32;
  return h;
}

static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

/* ---- types ---------------------------------------------------------------------------- */

enum { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD };
enum { BEH_REMOVED, BEH_ISOLATED, BEH_MERGED_PREV, BEH_MERGED_NEXT, BEH_CONTIGUOUS };
enum { PT_SPLIT, PT_DIGITS, PT_BYTELEVEL };

typedef struct pt_step {
  int kind;
  pcre2_code *re;         /* PT_SPLIT; PT_BYTELEVEL when use_regex */
  int behavior;           /* PT_SPLIT */
  bool invert;            /* PT_SPLIT */
  bool individual_digits; /* PT_DIGITS */
  bool add_prefix_space;  /* PT_BYTELEVEL */
} pt_step;

typedef struct added_tok {
  int32_t id;
  char *content; /* as matched: normalized when `normalized` */
  size_t len;
  bool special, normalized, lstrip, rstrip, single_word;
} added_tok;

/* Added tokens of one matching pass, bucketed by first byte, longest first. */
typedef struct added_set {
  int32_t *idx;      /* indices into df_tok.added, grouped by first byte */
  uint32_t off[257]; /* bucket b is idx[off[b] .. off[b+1]) */
  size_t n;
} added_set;

typedef struct merge_slot {
  uint64_t key; /* (left id << 32) | right id; UINT64_MAX = empty */
  uint32_t rank;
  int32_t id; /* merged token */
} merge_slot;

typedef struct wc_slot {
  uint64_t hash;
  uint32_t koff, klen; /* key bytes in cache.keys */
  uint32_t voff, vlen; /* ids in cache.vals */
  bool used;
} wc_slot;

typedef struct word_cache {
  pthread_mutex_t mu;
  wc_slot *slots; /* DF_TOK_CACHE_SLOTS */
  size_t count;
  df_tok_buf keys;
  int32_t *vals;
  size_t nvals, capvals;
} word_cache;

struct df_tok {
  char path[512];        /* tokenizer.json, for messages */
  size_t n_ids;          /* 1 + highest id */
  uint32_t *piece_off;   /* [n_ids] offset into pieces, UINT32_MAX = unassigned */
  uint32_t *piece_len;   /* [n_ids] */
  df_tok_buf pieces;     /* all pieces, each NUL-terminated */
  uint32_t *bytes_off;   /* [n_ids] decoded bytes offset into dbytes */
  uint32_t *bytes_len;   /* [n_ids] */
  df_tok_buf dbytes;     /* decoded bytes of every id */
  uint8_t *flags;        /* [n_ids] bit0 added, bit1 special */
  /* vocab lookup (model.vocab only): open addressing, slot = id + 1, 0 = empty */
  uint32_t *vslots;
  size_t vcap;
  merge_slot *merges;
  size_t mcap;
  int32_t byte_id[256]; /* id of the one-byte piece for each byte, -1 when missing */
  int32_t unk_id;
  bool ignore_merges;
  /* added tokens */
  added_tok *added;
  size_t n_added;
  added_set raw_set, norm_set;
  /* pipeline */
  int norm[8];
  int n_norm;
  pt_step *steps;
  size_t n_steps;
  int32_t *pre_ids, *post_ids; /* TemplateProcessing single: around the sequence */
  size_t n_pre, n_post;
  int32_t bos_id, eos_id, pad_id;
  bool add_bos, add_eos;
  word_cache cache;
};

/* ---- byte-level alphabet (GPT-2 bytes_to_unicode) --------------------------------------- */

static uint32_t g_byte_cp[256];
static int16_t g_cp_byte[324]; /* code point -> byte, -1 when not in the alphabet */
static pthread_once_t g_alpha_once = PTHREAD_ONCE_INIT;

static void alpha_init(void) {
  int n = 0;
  for (int i = 0; i < 324; i++) g_cp_byte[i] = -1;
  for (int b = 0; b < 256; b++) {
    bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    g_byte_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
    g_cp_byte[g_byte_cp[b]] = (int16_t)b;
  }
}

static size_t cp_to_utf8(uint32_t cp, char *o) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* ---- vocab / merge tables ---------------------------------------------------------------- */

static int32_t vocab_find(const df_tok *t, const char *s, size_t n) {
  if (!t->vcap) return -1;
  size_t mask = t->vcap - 1, i = (size_t)hash_bytes(s, n) & mask;
  for (;;) {
    uint32_t v = t->vslots[i];
    if (!v) return -1;
    int32_t id = (int32_t)(v - 1);
    if (t->piece_len[id] == n && memcmp(t->pieces.p + t->piece_off[id], s, n) == 0) return id;
    i = (i + 1) & mask;
  }
}

static void vocab_insert(df_tok *t, int32_t id) {
  size_t mask = t->vcap - 1;
  size_t i = (size_t)hash_bytes(t->pieces.p + t->piece_off[id], t->piece_len[id]) & mask;
  while (t->vslots[i]) i = (i + 1) & mask;
  t->vslots[i] = (uint32_t)id + 1;
}

static const merge_slot *merge_find(const df_tok *t, int32_t a, int32_t b) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  size_t mask = t->mcap - 1, i = (size_t)hash_u64(key) & mask;
  for (;;) {
    const merge_slot *m = &t->merges[i];
    if (m->key == key) return m;
    if (m->key == UINT64_MAX) return NULL;
    i = (i + 1) & mask;
  }
}

/* Later duplicates overwrite earlier ones, as a hash map built from the list does. */
static void merge_insert(df_tok *t, int32_t a, int32_t b, uint32_t rank, int32_t id) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  size_t mask = t->mcap - 1, i = (size_t)hash_u64(key) & mask;
  while (t->merges[i].key != UINT64_MAX && t->merges[i].key != key) i = (i + 1) & mask;
  t->merges[i].key = key;
  t->merges[i].rank = rank;
  t->merges[i].id = id;
}

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c <<= 1;
  return c;
}

/* ---- unicode helpers ---------------------------------------------------------------------- */

static bool cp_is_ws(uint32_t c) { /* Unicode White_Space (Rust char::is_whitespace) */
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

static bool cp_is_numeric(uint32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

static bool cp_is_alnum(uint32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
         (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

/* Decode the (valid) character at s[i] of s[0..n). */
static uint32_t cp_at(const char *s, size_t n, size_t i, size_t *clen) {
  uint32_t cp = 0;
  size_t bad;
  int k = df_tok__utf8_seq((const uint8_t *)s + i, n - i, &cp, &bad);
  if (k <= 0) {
    *clen = 1;
    return 0xFFFD;
  }
  *clen = (size_t)k;
  return cp;
}

/* Code point of the character that ends at s[end] (exclusive); start in *start. */
static uint32_t cp_before(const char *s, size_t end, size_t *start) {
  size_t i = end;
  while (i > 0 && ((uint8_t)s[i - 1] & 0xC0) == 0x80 && end - i < 3) i--;
  if (i > 0) i--;
  size_t clen;
  uint32_t c = cp_at(s, end, i, &clen);
  *start = i;
  return c;
}

/* ---- loading ------------------------------------------------------------------------------- */

typedef struct load_ctx {
  df_tok *t;
  const char *file;
  char *err;
  size_t errlen;
} load_ctx;

#define LERR(L, ...)                                             \
  do {                                                           \
    char m_[400];                                                \
    snprintf(m_, sizeof m_, __VA_ARGS__);                        \
    df_tok__seterr((L)->err, (L)->errlen, "%s: %s", (L)->file, m_); \
  } while (0)

static bool jbool(json_t *o, const char *key, bool dflt) {
  json_t *v = json_object_get(o, key);
  if (json_is_boolean(v)) return json_is_true(v);
  return dflt;
}

/* Append a piece (NUL-terminated) to t->pieces and assign it to id. */
static int set_piece(df_tok *t, int32_t id, const char *s, size_t n) {
  if (t->pieces.n > UINT32_MAX - n - 2) return -1;
  uint32_t off = (uint32_t)t->pieces.n;
  if (df_tok__buf_put(&t->pieces, s, n) != 0 || df_tok__buf_put(&t->pieces, "", 1) != 0) return -1;
  t->piece_off[id] = off;
  t->piece_len[id] = (uint32_t)n;
  return 0;
}

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
  t->vcap = pow2_at_least(n * 2 + 1);
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
    if (set_piece(t, id, key, klen) != 0) {
      LERR(L, "out of memory");
      return -1;
    }
    vocab_insert(t, id);
  }
  return 0;
}

/* Split a merge entry ("a b" or ["a","b"]) into its two pieces. */
static int merge_parts(load_ctx *L, json_t *m, size_t i, const char **a, size_t *alen,
                       const char **b, size_t *blen) {
  if (json_is_string(m)) {
    const char *s = json_string_value(m);
    size_t n = json_string_length(m);
    const char *sp = memchr(s, ' ', n);
    if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) {
      LERR(L, "model.merges[%zu]: \"%.80s\": expected two tokens separated by one space", i, s);
      return -1;
    }
    *a = s;
    *alen = (size_t)(sp - s);
    *b = sp + 1;
    *blen = n - *alen - 1;
    return 0;
  }
  if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
      json_is_string(json_array_get(m, 1))) {
    *a = json_string_value(json_array_get(m, 0));
    *alen = json_string_length(json_array_get(m, 0));
    *b = json_string_value(json_array_get(m, 1));
    *blen = json_string_length(json_array_get(m, 1));
    return 0;
  }
  LERR(L, "model.merges[%zu]: expected a string \"a b\" or an array [\"a\", \"b\"]", i);
  return -1;
}

static int load_merges(load_ctx *L, json_t *model) {
  df_tok *t = L->t;
  json_t *merges = json_object_get(model, "merges");
  if (!json_is_array(merges)) {
    LERR(L, "model.merges: expected an array");
    return -1;
  }
  size_t n = json_array_size(merges);
  t->mcap = pow2_at_least(n * 2 + 1);
  t->merges = malloc(t->mcap * sizeof *t->merges);
  df_tok_buf cat = {0};
  int rc = -1;
  if (!t->merges) {
    LERR(L, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < t->mcap; i++) t->merges[i].key = UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    const char *a, *b;
    size_t alen, blen;
    if (merge_parts(L, json_array_get(merges, i), i, &a, &alen, &b, &blen) != 0) goto done;
    int32_t ia = vocab_find(t, a, alen), ib = vocab_find(t, b, blen);
    if (ia < 0 || ib < 0) {
      LERR(L, "model.merges[%zu]: token \"%.*s\" is not in model.vocab", i,
           (int)(ia < 0 ? (alen > 60 ? 60 : alen) : (blen > 60 ? 60 : blen)), ia < 0 ? a : b);
      goto done;
    }
    cat.n = 0;
    if (df_tok__buf_put(&cat, a, alen) != 0 || df_tok__buf_put(&cat, b, blen) != 0) {
      LERR(L, "out of memory");
      goto done;
    }
    int32_t im = vocab_find(t, cat.p, cat.n);
    if (im < 0) {
      LERR(L, "model.merges[%zu]: merged token \"%.60s\" is not in model.vocab", i, cat.p);
      goto done;
    }
    merge_insert(t, ia, ib, (uint32_t)i, im);
  }
  rc = 0;
done:
  df_tok__buf_free(&cat);
  return rc;
}

/* Normalizers -------------------------------------------------------------------------------- */

static int load_normalizer(load_ctx *L, json_t *n, const char *where) {
  df_tok *t = L->t;
  if (!n || json_is_null(n)) return 0;
  const char *type = json_string_value(json_object_get(n, "type"));
  if (!type) {
    LERR(L, "%s.type: expected a string", where);
    return -1;
  }
  if (strcmp(type, "Sequence") == 0) {
    json_t *list = json_object_get(n, "normalizers");
    if (!json_is_array(list)) {
      LERR(L, "%s.normalizers: expected an array", where);
      return -1;
    }
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
      char sub[128];
      snprintf(sub, sizeof sub, "%s.normalizers[%zu]", where, i);
      if (load_normalizer(L, v, sub) != 0) return -1;
    }
    return 0;
  }
  int k;
  if (strcmp(type, "NFC") == 0) k = NORM_NFC;
  else if (strcmp(type, "NFD") == 0) k = NORM_NFD;
  else if (strcmp(type, "NFKC") == 0) k = NORM_NFKC;
  else if (strcmp(type, "NFKD") == 0) k = NORM_NFKD;
  else {
    LERR(L, "%s.type: unsupported normalizer \"%.40s\" (supported: NFC, NFD, NFKC, NFKD, "
            "Sequence)", where, type);
    return -1;
  }
  if (t->n_norm >= (int)(sizeof t->norm / sizeof t->norm[0])) {
    LERR(L, "%s: too many normalizers", where);
    return -1;
  }
  t->norm[t->n_norm++] = k;
  return 0;
}

/* Pre-tokenizers ----------------------------------------------------------------------------- */

/* Rewrite an Oniguruma pattern for PCRE2: \s and \S become White_Space properties. */
static int translate_regex(const char *src, size_t n, df_tok_buf *out) {
  out->n = 0;
  for (size_t i = 0; i < n; i++) {
    if (src[i] == '\\' && i + 1 < n) {
      char c = src[i + 1];
      int rc;
      if (c == 's') rc = df_tok__buf_puts(out, "\\p{White_Space}");
      else if (c == 'S') rc = df_tok__buf_puts(out, "\\P{White_Space}");
      else rc = df_tok__buf_put(out, src + i, 2);
      if (rc != 0) return -1;
      i++;
      continue;
    }
    if (df_tok__buf_put(out, src + i, 1) != 0) return -1;
  }
  return df_tok__buf_put(out, "", 0);
}

static pcre2_code *compile_re(load_ctx *L, const char *pat, size_t n, bool literal,
                              const char *where) {
  df_tok_buf tr = {0};
  pcre2_code *re = NULL;
  int ec;
  PCRE2_SIZE eo;
  uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  if (literal) {
    if (df_tok__buf_put(&tr, pat, n) != 0) goto oom;
  } else if (translate_regex(pat, n, &tr) != 0) {
    goto oom;
  }
  re = pcre2_compile((PCRE2_SPTR)tr.p, tr.n, opts, &ec, &eo, NULL);
  if (!re) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(ec, msg, sizeof msg);
    LERR(L, "%s: regex does not compile at offset %zu: %s", where, (size_t)eo, (char *)msg);
    goto done;
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* interpreter fallback when JIT is unavailable */
  goto done;
oom:
  LERR(L, "out of memory");
done:
  df_tok__buf_free(&tr);
  return re;
}

static pt_step *add_step(load_ctx *L) {
  df_tok *t = L->t;
  pt_step *s = realloc(t->steps, (t->n_steps + 1) * sizeof *s);
  if (!s) {
    LERR(L, "out of memory");
    return NULL;
  }
  t->steps = s;
  memset(&s[t->n_steps], 0, sizeof *s);
  return &s[t->n_steps++];
}

static const char k_gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int load_pretok(load_ctx *L, json_t *p, const char *where) {
  const char *type = json_string_value(json_object_get(p, "type"));
  if (!type) {
    LERR(L, "%s.type: expected a string", where);
    return -1;
  }
  char sub[160];
  if (strcmp(type, "Sequence") == 0) {
    json_t *list = json_object_get(p, "pretokenizers");
    if (!json_is_array(list)) {
      LERR(L, "%s.pretokenizers: expected an array", where);
      return -1;
    }
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
      snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", where, i);
      if (load_pretok(L, v, sub) != 0) return -1;
    }
    return 0;
  }
  if (strcmp(type, "Split") == 0) {
    json_t *pat = json_object_get(p, "pattern");
    json_t *rx = json_object_get(pat, "Regex"), *st = json_object_get(pat, "String");
    if (!json_is_string(rx) && !json_is_string(st)) {
      LERR(L, "%s.pattern: expected {\"Regex\": string} or {\"String\": string}", where);
      return -1;
    }
    const char *beh = json_string_value(json_object_get(p, "behavior"));
    int b;
    if (!beh) b = -1;
    else if (strcmp(beh, "Removed") == 0) b = BEH_REMOVED;
    else if (strcmp(beh, "Isolated") == 0) b = BEH_ISOLATED;
    else if (strcmp(beh, "MergedWithPrevious") == 0) b = BEH_MERGED_PREV;
    else if (strcmp(beh, "MergedWithNext") == 0) b = BEH_MERGED_NEXT;
    else if (strcmp(beh, "Contiguous") == 0) b = BEH_CONTIGUOUS;
    else b = -1;
    if (b < 0) {
      LERR(L, "%s.behavior: expected one of Removed, Isolated, MergedWithPrevious, "
              "MergedWithNext, Contiguous, got \"%.40s\"", where, beh ? beh : "(missing)");
      return -1;
    }
    snprintf(sub, sizeof sub, "%s.pattern", where);
    json_t *ps = rx ? rx : st;
    pcre2_code *re = compile_re(L, json_string_value(ps), json_string_length(ps), !rx, sub);
    if (!re) return -1;
    pt_step *s = add_step(L);
    if (!s) {
      pcre2_code_free(re);
      return -1;
    }
    s->kind = PT_SPLIT;
    s->re = re;
    s->behavior = b;
    s->invert = jbool(p, "invert", false);
    return 0;
  }
  if (strcmp(type, "Digits") == 0) {
    pt_step *s = add_step(L);
    if (!s) return -1;
    s->kind = PT_DIGITS;
    s->individual_digits = jbool(p, "individual_digits", false);
    return 0;
  }
  if (strcmp(type, "ByteLevel") == 0) {
    pcre2_code *re = NULL;
    if (jbool(p, "use_regex", true)) {
      re = compile_re(L, k_gpt2_re, strlen(k_gpt2_re), false, where);
      if (!re) return -1;
    }
    pt_step *s = add_step(L);
    if (!s) {
      pcre2_code_free(re);
      return -1;
    }
    s->kind = PT_BYTELEVEL;
    s->re = re;
    s->behavior = BEH_ISOLATED;
    s->add_prefix_space = jbool(p, "add_prefix_space", false);
    return 0;
  }
  LERR(L, "%s.type: unsupported pre-tokenizer \"%.40s\" (supported: Split, Digits, ByteLevel, "
          "Sequence)", where, type);
  return -1;
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

static int normalize(const df_tok *t, const char *s, size_t n, df_tok_buf *out);

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
    a->special = jbool(v, "special", false);
    a->normalized = jbool(v, "normalized", !a->special);
    a->lstrip = jbool(v, "lstrip", false);
    a->rstrip = jbool(v, "rstrip", false);
    a->single_word = jbool(v, "single_word", false);
    /* The piece of an added token is its content; it replaces a vocab entry of the same id. */
    if (set_piece(t, a->id, c, clen) != 0) goto oom;
    t->flags[a->id] |= 1 | (a->special ? 2 : 0);
    if (a->normalized && t->n_norm > 0) {
      if (normalize(t, c, clen, &nb) != 0) goto oom;
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
      uint32_t cp = cp_at(p, n, i, &clen);
      if (cp >= 324 || g_cp_byte[cp] < 0) {
        all = false;
        break;
      }
      t->dbytes.p[off + k++] = (char)g_cp_byte[cp];
      i += clen;
    }
    if (!all) {
      memcpy(t->dbytes.p + off, p, n);
      k = n;
    }
    t->dbytes.n = off + k;
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
  json_error_t je;
  json_t *c = json_load_file(cfgpath, 0, &je);
  if (!c) {
    df_tok__seterr(err, errlen, "%s: line %d column %d: %s", cfgpath, je.line, je.column, je.text);
    return -1;
  }
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
  t->add_bos = jbool(c, "add_bos_token", false) && t->bos_id >= 0;
  t->add_eos = jbool(c, "add_eos_token", false) && t->eos_id >= 0;
  rc = 0;
done:
  json_decref(c);
  return rc;
}

int df_tok_load(const char *path, df_tok **out, char *err, size_t errlen) {
  *out = NULL;
  pthread_once(&g_alpha_once, alpha_init);
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
  json_error_t je;
  json_t *root = json_load_file(file, 0, &je);
  if (!root) {
    if (je.line < 0) /* the file itself could not be read: jansson gives no position */
      df_tok__seterr(err, errlen, "%s: %s", file, je.text);
    else
      df_tok__seterr(err, errlen, "%s: line %d column %d: %s", file, je.line, je.column, je.text);
    return -1;
  }
  df_tok *t = calloc(1, sizeof *t);
  int rc = -1;
  if (!t) {
    df_tok__seterr(err, errlen, "%s: out of memory", file);
    goto done;
  }
  snprintf(t->path, sizeof t->path, "%s", file);
  t->unk_id = t->bos_id = t->eos_id = t->pad_id = -1;
  pthread_mutex_init(&t->cache.mu, NULL);
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
  t->ignore_merges = jbool(model, "ignore_merges", false);
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
  if (size_ids(&L, vocab, added) != 0 || load_vocab(&L, vocab) != 0 || load_merges(&L, model) != 0)
    goto done;
  for (int b = 0; b < 256; b++) {
    char u[4];
    size_t k = cp_to_utf8(g_byte_cp[b], u);
    t->byte_id[b] = vocab_find(t, u, k);
  }
  json_t *unk = json_object_get(model, "unk_token");
  if (json_is_string(unk)) t->unk_id = vocab_find(t, json_string_value(unk), json_string_length(unk));
  if (load_normalizer(&L, json_object_get(root, "normalizer"), "normalizer") != 0) goto done;
  json_t *pre = json_object_get(root, "pre_tokenizer");
  if (!pre || json_is_null(pre)) {
    LERR(&L, "pre_tokenizer: null, but a byte-level BPE tokenizer needs a ByteLevel pre-tokenizer");
    goto done;
  }
  if (load_pretok(&L, pre, "pre_tokenizer") != 0) goto done;
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
  if (build_decode_table(&L) != 0) goto done;
  t->cache.slots = calloc(DF_TOK_CACHE_SLOTS, sizeof *t->cache.slots);
  if (!t->cache.slots) {
    LERR(&L, "out of memory");
    goto done;
  }
  if (load_config(t, cfg, err, errlen) != 0) goto done;
  rc = 0;
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

/* ---- encode ----------------------------------------------------------------------------- */

typedef struct piece {
  size_t off, len; /* into enc.wb */
} piece;

typedef struct mspan {
  size_t s, e; /* byte range within the piece */
  bool m;      /* a match of the pattern (else the text between matches) */
} mspan;

typedef struct heap_ent {
  uint32_t rank;
  uint32_t pos;
} heap_ent;

/* Per-call scratch: nothing in df_tok is written during encode except the guarded cache. */
typedef struct enc {
  const df_tok *t;
  unsigned flags;
  int32_t *ids;
  size_t n, cap;
  df_tok_buf wb;        /* normalized text of the current section + prefix-space copies */
  df_tok_buf nb;        /* normalizer scratch */
  piece *pa, *pb;       /* piece lists (double buffer) */
  size_t cap_pa, cap_pb;
  mspan *mt;            /* split matches of one piece */
  size_t cap_mt;
  int32_t *sym;
  int32_t *nxt, *prv;
  heap_ent *heap;
  size_t cap_sym, cap_heap;
  pcre2_match_data *md;
  df_tok_span *subsp;   /* protected spans of the current raw section */
  size_t *submax;       /* their running maximum end (prot.maxend) */
  size_t cap_subsp, cap_submax;
  bool cache_held;
  char *err;
  size_t errlen;
} enc;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) {
    if (c > SIZE_MAX / 2 / elem) return -1;
    c *= 2;
  }
  void *q = realloc(*p, c * elem);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

static int emit(enc *e, int32_t id) {
  if (e->n == e->cap && grow((void **)&e->ids, &e->cap, e->n + 1, sizeof *e->ids) != 0) return -1;
  e->ids[e->n++] = id;
  return 0;
}

static void heap_push(heap_ent *h, size_t *n, heap_ent v) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p].rank < v.rank || (h[p].rank == v.rank && h[p].pos < v.pos)) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = v;
}

static heap_ent heap_pop(heap_ent *h, size_t *n) {
  heap_ent top = h[0], last = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && (h[c + 1].rank < h[c].rank || (h[c + 1].rank == h[c].rank && h[c + 1].pos < h[c].pos)))
      c++;
    if (last.rank < h[c].rank || (last.rank == h[c].rank && last.pos < h[c].pos)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = last;
  return top;
}

/* BPE of one word (raw bytes). Appends ids to e. Merges apply lowest rank first, leftmost
 * first among equal ranks — the reference library's order. */
static int bpe_word(enc *e, const uint8_t *w, size_t n, size_t *first_out) {
  const df_tok *t = e->t;
  *first_out = e->n;
  if (n == 0) return 0;
  if (t->ignore_merges) {
    char tmp[4 * 64];
    if (n <= 64) {
      size_t k = 0;
      for (size_t i = 0; i < n; i++) k += cp_to_utf8(g_byte_cp[w[i]], tmp + k);
      int32_t id = vocab_find(t, tmp, k);
      if (id >= 0) return emit(e, id);
    }
  }
  if (n == 1) {
    int32_t id = t->byte_id[w[0]];
    if (id < 0) id = t->unk_id;
    return id >= 0 ? emit(e, id) : 0;
  }
  if (n > UINT32_MAX / 4) return -1;
  if (n > e->cap_sym) {
    size_t c = n < 64 ? 64 : n * 2;
    int32_t *a = realloc(e->sym, c * sizeof *a);
    if (a) e->sym = a;
    int32_t *b = realloc(e->nxt, c * sizeof *b);
    if (b) e->nxt = b;
    int32_t *d = realloc(e->prv, c * sizeof *d);
    if (d) e->prv = d;
    if (!a || !b || !d) return -1;
    e->cap_sym = c;
  }
  if (grow((void **)&e->heap, &e->cap_heap, 3 * n, sizeof *e->heap) != 0) return -1;
  int32_t *sym = e->sym, *nxt = e->nxt, *prv = e->prv;
  heap_ent *h = e->heap;
  size_t hn = 0;
  for (size_t i = 0; i < n; i++) {
    sym[i] = t->byte_id[w[i]];
    nxt[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
    prv[i] = (int32_t)i - 1;
  }
  for (size_t i = 0; i + 1 < n; i++) {
    if (sym[i] < 0 || sym[i + 1] < 0) continue;
    const merge_slot *m = merge_find(t, sym[i], sym[i + 1]);
    if (m) heap_push(h, &hn, (heap_ent){m->rank, (uint32_t)i});
  }
  while (hn) {
    heap_ent top = heap_pop(h, &hn);
    int32_t p = (int32_t)top.pos, q = nxt[p];
    if (sym[p] < 0 || q < 0 || sym[q] < 0) continue;
    const merge_slot *m = merge_find(t, sym[p], sym[q]);
    if (!m || m->rank != top.rank) continue;
    sym[p] = m->id;
    sym[q] = -2; /* dead */
    nxt[p] = nxt[q];
    if (nxt[q] >= 0) prv[nxt[q]] = p;
    if (prv[p] >= 0 && sym[prv[p]] >= 0) {
      const merge_slot *ml = merge_find(t, sym[prv[p]], sym[p]);
      if (ml) heap_push(h, &hn, (heap_ent){ml->rank, (uint32_t)prv[p]});
    }
    if (nxt[p] >= 0 && sym[nxt[p]] >= 0) {
      const merge_slot *mr = merge_find(t, sym[p], sym[nxt[p]]);
      if (mr) heap_push(h, &hn, (heap_ent){mr->rank, (uint32_t)p});
    }
  }
  for (int32_t i = 0; i >= 0; i = nxt[i]) {
    int32_t id = sym[i];
    if (id == -1) id = t->unk_id;
    if (id >= 0 && emit(e, id) != 0) return -1;
  }
  return 0;
}

/* Word cache (only while this call holds the cache lock). */
static int cache_lookup(enc *e, const uint8_t *w, size_t n, uint64_t hsh) {
  word_cache *c = (word_cache *)&e->t->cache;
  size_t mask = DF_TOK_CACHE_SLOTS - 1, i = (size_t)hsh & mask;
  for (;;) {
    wc_slot *s = &c->slots[i];
    if (!s->used) return 0;
    if (s->hash == hsh && s->klen == n && memcmp(c->keys.p + s->koff, w, n) == 0) {
      if (e->n + s->vlen > e->cap &&
          grow((void **)&e->ids, &e->cap, e->n + s->vlen, sizeof *e->ids) != 0)
        return -1;
      memcpy(e->ids + e->n, c->vals + s->voff, s->vlen * sizeof *e->ids);
      e->n += s->vlen;
      return 1;
    }
    i = (i + 1) & mask;
  }
}

static void cache_clear(word_cache *c) {
  memset(c->slots, 0, DF_TOK_CACHE_SLOTS * sizeof *c->slots);
  c->count = 0;
  c->keys.n = 0;
  c->nvals = 0;
}

static void cache_store(enc *e, const uint8_t *w, size_t n, uint64_t hsh, const int32_t *ids,
                        size_t k) {
  word_cache *c = (word_cache *)&e->t->cache;
  if (c->count >= DF_TOK_CACHE_SLOTS / 2 || c->keys.n > (64u << 20)) cache_clear(c);
  if (grow((void **)&c->vals, &c->capvals, c->nvals + k, sizeof *c->vals) != 0) return;
  if (df_tok__buf_put(&c->keys, w, n) != 0) return;
  size_t mask = DF_TOK_CACHE_SLOTS - 1, i = (size_t)hsh & mask;
  while (c->slots[i].used) i = (i + 1) & mask;
  c->slots[i] = (wc_slot){hsh, (uint32_t)(c->keys.n - n), (uint32_t)n, (uint32_t)c->nvals,
                          (uint32_t)k, true};
  memcpy(c->vals + c->nvals, ids, k * sizeof *ids);
  c->nvals += k;
  c->count++;
}

static int encode_word(enc *e, const uint8_t *w, size_t n) {
  if (n == 0) return 0;
  bool cacheable = e->cache_held && n <= DF_TOK_CACHE_MAX_WORD;
  uint64_t hsh = 0;
  if (cacheable) {
    hsh = hash_bytes(w, n);
    int r = cache_lookup(e, w, n, hsh);
    if (r != 0) return r < 0 ? -1 : 0;
  }
  size_t first;
  if (bpe_word(e, w, n, &first) != 0) return -1;
  if (cacheable) cache_store(e, w, n, hsh, e->ids + first, e->n - first);
  return 0;
}

static int normalize(const df_tok *t, const char *s, size_t n, df_tok_buf *out) {
  out->n = 0;
  if (df_tok__buf_put(out, s, n) != 0) return -1;
  for (int k = 0; k < t->n_norm; k++) {
    int f = t->norm[k];
    bool ascii = true, below300 = true;
    for (size_t i = 0; i < out->n; i++) {
      uint8_t b = (uint8_t)out->p[i];
      if (b >= 0x80) ascii = false;
      if (b >= 0xCC) {
        below300 = false;
        break;
      }
    }
    if (ascii || (f == NORM_NFC && below300)) continue; /* already in that form */
    utf8proc_option_t o = UTF8PROC_STABLE;
    o |= (f == NORM_NFC || f == NORM_NFKC) ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
    if (f == NORM_NFKC || f == NORM_NFKD) o |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *dst = NULL;
    if (out->n > (size_t)INT32_MAX) return -1;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)out->p, (utf8proc_ssize_t)out->n,
                                      &dst, o);
    if (r < 0) return -1;
    out->n = 0;
    int rc = df_tok__buf_put(out, dst, (size_t)r);
    free(dst);
    if (rc != 0) return -1;
  }
  return 0;
}

/* All matches of `re` in s[0,n) and the text between them, in order, covering s. Empty
 * matches are kept as zero-length match pieces; the search then resumes one character on. */
static int run_match(enc *e, pcre2_code *re, const char *s, size_t n, size_t *nm) {
  size_t k = 0, start = 0, gap = 0;
  if (!e->md) {
    e->md = pcre2_match_data_create(4, NULL);
    if (!e->md) return -1;
  }
  while (start <= n) {
    int r = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, e->md, NULL);
    if (r == PCRE2_ERROR_NOMATCH) break;
    if (r < 0) {
      PCRE2_UCHAR msg[120];
      pcre2_get_error_message(r, msg, sizeof msg);
      df_tok__seterr(e->err, e->errlen, "%s: pre-tokenizer regex failed: %s", e->t->path,
                     (char *)msg);
      return -2;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
    size_t ms = ov[0], me = ov[1];
    if (grow((void **)&e->mt, &e->cap_mt, k + 3, sizeof *e->mt) != 0) return -1;
    if (ms > gap) e->mt[k++] = (mspan){gap, ms, false};
    e->mt[k++] = (mspan){ms, me, true};
    gap = me;
    if (me == ms) {
      if (me >= n) break;
      size_t clen;
      cp_at(s, n, me, &clen);
      start = me + clen;
    } else {
      start = me;
    }
  }
  if (grow((void **)&e->mt, &e->cap_mt, k + 1, sizeof *e->mt) != 0) return -1;
  if (gap < n) e->mt[k++] = (mspan){gap, n, false};
  *nm = k;
  return 0;
}

static int split_pieces(enc *e, const pt_step *st, size_t nin, size_t *nout) {
  size_t no = 0;
  for (size_t pi = 0; pi < nin; pi++) {
    piece in = e->pa[pi];
    if (st->kind == PT_BYTELEVEL && st->add_prefix_space &&
        !(in.len > 0 && e->wb.p[in.off] == ' ')) {
      size_t off = e->wb.n;
      if (df_tok__buf_reserve(&e->wb, in.len + 1) != 0) return -1;
      e->wb.p[off] = ' ';
      memcpy(e->wb.p + off + 1, e->wb.p + in.off, in.len);
      e->wb.n += in.len + 1;
      e->wb.p[e->wb.n] = 0;
      in.off = off;
      in.len += 1;
    }
    const char *s = e->wb.p + in.off;
    size_t nm = 0;
    if (st->kind == PT_DIGITS) {
      size_t i = 0, gap = 0;
      while (i < in.len) {
        size_t clen;
        uint32_t cp = cp_at(s, in.len, i, &clen);
        if (cp_is_numeric(cp)) {
          if (grow((void **)&e->mt, &e->cap_mt, nm + 2, sizeof *e->mt) != 0) return -1;
          if (gap < i) e->mt[nm++] = (mspan){gap, i, false};
          e->mt[nm++] = (mspan){i, i + clen, true};
          gap = i + clen;
        }
        i += clen;
      }
      if (grow((void **)&e->mt, &e->cap_mt, nm + 1, sizeof *e->mt) != 0) return -1;
      if (gap < in.len) e->mt[nm++] = (mspan){gap, in.len, false};
    } else if (st->re) {
      int r = run_match(e, st->re, s, in.len, &nm);
      if (r != 0) return r;
    } else {
      if (grow((void **)&e->mt, &e->cap_mt, 1, sizeof *e->mt) != 0) return -1;
      e->mt[nm++] = (mspan){0, in.len, false};
    }
    int beh = st->kind == PT_DIGITS ? (st->individual_digits ? BEH_ISOLATED : BEH_CONTIGUOUS)
                                    : st->behavior;
    if (st->invert)
      for (size_t i = 0; i < nm; i++) e->mt[i].m = !e->mt[i].m;
    if (grow((void **)&e->pb, &e->cap_pb, no + nm + 1, sizeof *e->pb) != 0) return -1;
    size_t first = no;
    bool prev_m = false;
    if (beh == BEH_MERGED_NEXT) {
      /* walk backwards, as the reference does */
      size_t cnt = 0;
      for (size_t j = nm; j-- > 0;) {
        if (e->mt[j].m && !prev_m && cnt > 0) {
          e->pb[no - 1].off = in.off + e->mt[j].s;
          e->pb[no - 1].len += e->mt[j].e - e->mt[j].s;
        } else {
          e->pb[no++] = (piece){in.off + e->mt[j].s, e->mt[j].e - e->mt[j].s};
          cnt++;
        }
        prev_m = e->mt[j].m;
      }
      for (size_t a = first, b = no; a + 1 < b; a++, b--) {
        piece tmp = e->pb[a];
        e->pb[a] = e->pb[b - 1];
        e->pb[b - 1] = tmp;
      }
    } else {
      for (size_t j = 0; j < nm; j++) {
        size_t ps = e->mt[j].s, pl = e->mt[j].e - e->mt[j].s;
        bool m = e->mt[j].m;
        if (beh == BEH_REMOVED) {
          if (!m) e->pb[no++] = (piece){in.off + ps, pl};
        } else if (beh == BEH_ISOLATED) {
          e->pb[no++] = (piece){in.off + ps, pl};
        } else if (beh == BEH_MERGED_PREV) {
          if (m && !prev_m && no > first) e->pb[no - 1].len += pl;
          else e->pb[no++] = (piece){in.off + ps, pl};
        } else { /* contiguous */
          if (m == prev_m && no > first) e->pb[no - 1].len += pl;
          else e->pb[no++] = (piece){in.off + ps, pl};
        }
        prev_m = m;
      }
    }
    /* drop empty pieces */
    size_t w = first;
    for (size_t j = first; j < no; j++)
      if (e->pb[j].len) e->pb[w++] = e->pb[j];
    no = w;
  }
  *nout = no;
  return 0;
}

/* Pre-tokenize and BPE one normalized section held in e->wb[off, off+len). */
static int encode_normalized(enc *e, size_t off, size_t len) {
  if (len == 0) return 0;
  if (grow((void **)&e->pa, &e->cap_pa, 1, sizeof *e->pa) != 0) return -1;
  e->pa[0] = (piece){off, len};
  size_t n = 1;
  for (size_t k = 0; k < e->t->n_steps; k++) {
    size_t no;
    int r = split_pieces(e, &e->t->steps[k], n, &no);
    if (r != 0) return r;
    piece *tp = e->pa;
    size_t tc = e->cap_pa;
    e->pa = e->pb;
    e->cap_pa = e->cap_pb;
    e->pb = tp;
    e->cap_pb = tc;
    n = no;
  }
  for (size_t i = 0; i < n; i++)
    if (encode_word(e, (const uint8_t *)e->wb.p + e->pa[i].off, e->pa[i].len) != 0) return -1;
  return 0;
}

/* Protected spans sorted by offset (they may overlap), relative to the current string, with
 * maxend[i] = the largest off + len of sp[0..i]: the queries below are binary searches, so a
 * chat of n messages costs O(log n) per added-token candidate and per section, not O(n). */
typedef struct prot {
  const df_tok_span *sp;
  const size_t *maxend;
  size_t n;
} prot;

/* The number of spans with off < x (they are a prefix: sp is sorted by off). */
static size_t spans_before(const prot *p, size_t x) {
  size_t lo = 0, hi = p->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (p->sp[mid].off < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Whether some span has off < e and off + len > s. */
static bool overlaps(const prot *p, size_t s, size_t e) {
  size_t k = spans_before(p, e);
  return k > 0 && p->maxend[k - 1] > s;
}

/* Find the next added token of `set` in s[from, n): leftmost, then longest. */
static bool find_added(const df_tok *t, const added_set *set, const char *s, size_t n,
                       size_t from, const prot *pr, size_t *ms, size_t *me, int32_t *ai) {
  for (size_t p = from; p < n; p++) {
    uint8_t b = (uint8_t)s[p];
    uint32_t lo = set->off[b], hi = set->off[b + 1];
    if (lo == hi) continue;
    for (uint32_t k = lo; k < hi; k++) {
      const added_tok *a = &t->added[set->idx[k]];
      if (a->len > n - p || memcmp(s + p, a->content, a->len) != 0) continue;
      if (pr && overlaps(pr, p, p + a->len)) continue;
      if (a->single_word) {
        size_t st, cl;
        bool ok_l = p == 0 || !cp_is_alnum(cp_before(s, p, &st));
        bool ok_r = p + a->len == n || !cp_is_alnum(cp_at(s, n, p + a->len, &cl));
        if (!ok_l || !ok_r) {
          p += a->len - 1; /* the matcher moves past a rejected match */
          goto next_pos;
        }
      }
      *ms = p;
      *me = p + a->len;
      *ai = set->idx[k];
      return true;
    }
  next_pos:;
  }
  return false;
}

/* Split s[0,n) by the added tokens of `set`; call section() for text between them. */
typedef int (*section_fn)(enc *e, const char *s, size_t n, const prot *pr);

/* Call section() on s[a,b) (a < b) with the protected spans clipped to it and shifted to
 * start at 0 (no spans: NULL). The spans that start before a and reach past it all clip to
 * [0, y): only the largest y matters to overlaps(), so they become that one span; the others
 * are those starting in [a, b), found by binary search. */
static int call_section(enc *e, const char *s, size_t a, size_t b, const prot *pr,
                        section_fn section) {
  if (!pr || !pr->n) return section(e, s + a, b - a, NULL);
  size_t lo = spans_before(pr, a), hi = spans_before(pr, b);
  if (grow((void **)&e->subsp, &e->cap_subsp, hi - lo + 1, sizeof *e->subsp) != 0 ||
      grow((void **)&e->submax, &e->cap_submax, hi - lo + 1, sizeof *e->submax) != 0)
    return -1;
  prot sub = {e->subsp, e->submax, 0};
  size_t top = 0; /* running maximum end, relative to a */
  if (lo > 0 && pr->maxend[lo - 1] > a) {
    top = (pr->maxend[lo - 1] < b ? pr->maxend[lo - 1] : b) - a;
    e->subsp[0] = (df_tok_span){0, top};
    e->submax[sub.n++] = top;
  }
  for (size_t i = lo; i < hi; i++) {
    size_t x = pr->sp[i].off, y = pr->sp[i].off + pr->sp[i].len;
    if (y > b) y = b;
    if (x < y) {
      if (y - a > top) top = y - a;
      e->subsp[sub.n] = (df_tok_span){x - a, y - x};
      e->submax[sub.n++] = top;
    }
  }
  return section(e, s + a, b - a, &sub);
}

static int split_added(enc *e, const added_set *set, const char *s, size_t n, const prot *pr,
                       section_fn section) {
  const df_tok *t = e->t;
  size_t pos = 0, from = 0;
  size_t ms, me;
  int32_t ai;
  while (from < n && find_added(t, set, s, n, from, pr, &ms, &me, &ai)) {
    const added_tok *a = &t->added[ai];
    size_t st = ms, en = me;
    if (a->lstrip) {
      while (st > pos) {
        size_t b;
        uint32_t c = cp_before(s, st, &b);
        if (!cp_is_ws(c)) break;
        st = b;
      }
    }
    if (a->rstrip) {
      while (en < n) {
        size_t cl;
        uint32_t c = cp_at(s, n, en, &cl);
        if (!cp_is_ws(c)) break;
        en += cl;
      }
    }
    if (st > pos) {
      int r = call_section(e, s, pos, st, pr, section);
      if (r != 0) return r;
    }
    if (emit(e, a->id) != 0) return -1;
    pos = en;
    from = me > en ? me : en;
  }
  if (pos < n) return call_section(e, s, pos, n, pr, section);
  return 0;
}

static int section_normalized(enc *e, const char *s, size_t n, const prot *pr) {
  (void)pr;
  /* s points into e->wb, which encode_normalized may grow: work from an offset */
  size_t off = (size_t)(s - e->wb.p);
  return encode_normalized(e, off, n);
}

/* A raw section (between non-normalized added tokens): normalize, split normalized tokens. */
static int section_raw(enc *e, const char *s, size_t n, const prot *pr) {
  const df_tok *t = e->t;
  e->wb.n = 0;
  if (t->n_norm > 0) {
    if (normalize(t, s, n, &e->nb) != 0) return -1;
    if (df_tok__buf_put(&e->wb, e->nb.p, e->nb.n) != 0) return -1;
  } else if (df_tok__buf_put(&e->wb, s, n) != 0) {
    return -1;
  }
  size_t len = e->wb.n;
  bool match = !(e->flags & DF_TOK_PLAIN) && t->norm_set.n > 0;
  if (match && pr && pr->n) {
    /* Protected spans survive normalization only when it changed nothing. */
    if (len != n || memcmp(e->wb.p, s, n) != 0) match = false;
  }
  if (!match) return encode_normalized(e, 0, len);
  /* Split on normalized added tokens; sections refer into wb (stable while we only append). */
  size_t pos = 0, from = 0, ms, me;
  int32_t ai;
  while (from < len && find_added(t, &t->norm_set, e->wb.p, len, from, pr, &ms, &me, &ai)) {
    const added_tok *a = &t->added[ai];
    size_t st = ms, en = me;
    if (a->lstrip)
      while (st > pos) {
        size_t b;
        if (!cp_is_ws(cp_before(e->wb.p, st, &b))) break;
        st = b;
      }
    if (a->rstrip)
      while (en < len) {
        size_t cl;
        if (!cp_is_ws(cp_at(e->wb.p, len, en, &cl))) break;
        en += cl;
      }
    if (st > pos && section_normalized(e, e->wb.p + pos, st - pos, NULL) != 0) return -1;
    if (emit(e, a->id) != 0) return -1;
    pos = en;
    from = me > en ? me : en;
  }
  if (pos < len) return encode_normalized(e, pos, len - pos);
  return 0;
}

static int cmp_span(const void *a, const void *b) {
  const df_tok_span *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

int df_tok_encode_spans(const df_tok *t, const char *text, size_t len, unsigned flags,
                        const df_tok_span *plain, size_t n_plain, int32_t **ids, size_t *n,
                        char *err, size_t errlen) {
  *ids = NULL;
  *n = 0;
  enc e = {0};
  e.t = t;
  e.flags = flags;
  e.err = err;
  e.errlen = errlen;
  char *clean = NULL;
  df_tok_span *sp = NULL;
  size_t *maxend = NULL;
  int rc = -1;
  const char *s = text ? text : "";
  if (!text) len = 0;
  if (!df_tok__utf8_valid((const uint8_t *)s, len)) {
    if (n_plain) {
      df_tok__seterr(err, errlen, "tokenizer: text with protected spans must be valid UTF-8");
      goto done;
    }
    clean = df_tok_utf8_sanitize(s, len, &len);
    if (!clean) goto oom;
    s = clean;
  }
  prot pr = {0};
  if (n_plain) {
    sp = malloc(n_plain * sizeof *sp);
    maxend = malloc(n_plain * sizeof *maxend);
    if (!sp || !maxend) goto oom;
    for (size_t i = 0; i < n_plain; i++) {
      if (plain[i].off > len || plain[i].len > len - plain[i].off) {
        df_tok__seterr(err, errlen, "tokenizer: protected span %zu [%zu, +%zu) is outside the "
                       "text (%zu bytes)", i, plain[i].off, plain[i].len, len);
        goto done;
      }
      sp[i] = plain[i];
    }
    qsort(sp, n_plain, sizeof *sp, cmp_span);
    for (size_t i = 0; i < n_plain; i++) {
      size_t end = sp[i].off + sp[i].len;
      maxend[i] = i > 0 && maxend[i - 1] > end ? maxend[i - 1] : end;
    }
    pr.sp = sp;
    pr.maxend = maxend;
    pr.n = n_plain;
  }
  e.cache_held = pthread_mutex_trylock((pthread_mutex_t *)&t->cache.mu) == 0;
  if ((flags & DF_TOK_ADD_SPECIAL)) {
    if (t->add_bos && (t->n_pre == 0 || t->pre_ids[0] != t->bos_id) && emit(&e, t->bos_id) != 0)
      goto oom_unlock;
    for (size_t i = 0; i < t->n_pre; i++)
      if (emit(&e, t->pre_ids[i]) != 0) goto oom_unlock;
  }
  int r;
  if (flags & DF_TOK_PLAIN) r = section_raw(&e, s, len, NULL);
  else r = split_added(&e, &t->raw_set, s, len, n_plain ? &pr : NULL, section_raw);
  if (r == -2) goto unlock;
  if (r != 0) goto oom_unlock;
  if ((flags & DF_TOK_ADD_SPECIAL)) {
    for (size_t i = 0; i < t->n_post; i++)
      if (emit(&e, t->post_ids[i]) != 0) goto oom_unlock;
    if (t->add_eos && (t->n_post == 0 || t->post_ids[t->n_post - 1] != t->eos_id) &&
        emit(&e, t->eos_id) != 0)
      goto oom_unlock;
  }
  rc = 0;
  goto unlock;
oom_unlock:
  df_tok__seterr(err, errlen, "tokenizer: out of memory");
unlock:
  if (e.cache_held) pthread_mutex_unlock((pthread_mutex_t *)&t->cache.mu);
  goto done;
oom:
  df_tok__seterr(err, errlen, "tokenizer: out of memory");
done:
  if (rc == 0) {
    *ids = e.ids;
    *n = e.n;
  } else {
    free(e.ids);
  }
  free(clean);
  free(sp);
  free(maxend);
  df_tok__buf_free(&e.wb);
  df_tok__buf_free(&e.nb);
  free(e.pa);
  free(e.pb);
  free(e.mt);
  free(e.sym);
  free(e.nxt);
  free(e.prv);
  free(e.heap);
  free(e.subsp);
  free(e.submax);
  if (e.md) pcre2_match_data_free(e.md);
  return rc;
}

int df_tok_encode(const df_tok *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                  size_t *n, char *err, size_t errlen) {
  return df_tok_encode_spans(t, text, len, flags, NULL, 0, ids, n, err, errlen);
}

/* ---- decode and lookups ---------------------------------------------------------------- */

int df_tok_decode(const df_tok *t, const int32_t *ids, size_t n, unsigned flags, char **text,
                  size_t *len, char *err, size_t errlen) {
  *text = NULL;
  *len = 0;
  df_tok_buf raw = {0}, out = {0};
  int rc = -1;
  for (size_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0) {
      df_tok__seterr(err, errlen, "tokenizer: ids[%zu] = %ld is not a token id", i, (long)id);
      goto done;
    }
    /* ids without a token (a model's padding rows past the tokenizer's vocabulary) decode
     * to nothing, as the reference tokenizer's decode skips them */
    if ((size_t)id >= t->n_ids || t->piece_off[id] == UINT32_MAX) continue;
    if ((flags & DF_TOK_SKIP_SPECIAL) && (t->flags[id] & 2)) continue;
    if (df_tok__buf_put(&raw, t->dbytes.p + t->bytes_off[id], t->bytes_len[id]) != 0) goto oom;
  }
  if (df_tok__buf_reserve(&out, 0) != 0 ||
      df_tok__utf8_lossy_append(&out, (const uint8_t *)raw.p, raw.n, false, NULL) != 0)
    goto oom;
  *text = out.p;
  *len = out.n;
  out.p = NULL;
  rc = 0;
  goto done;
oom:
  df_tok__seterr(err, errlen, "tokenizer: out of memory");
done:
  df_tok__buf_free(&raw);
  df_tok__buf_free(&out);
  return rc;
}

size_t df_tok_vocab_size(const df_tok *t) { return t->n_ids; }

int32_t df_tok_token_to_id(const df_tok *t, const char *piece, size_t len) {
  for (size_t i = 0; i < t->n_added; i++) {
    int32_t id = t->added[i].id;
    if (t->piece_len[id] == len && memcmp(t->pieces.p + t->piece_off[id], piece, len) == 0)
      return id;
  }
  return vocab_find(t, piece, len);
}

const char *df_tok_id_to_piece(const df_tok *t, int32_t id, size_t *len) {
  if (id < 0 || (size_t)id >= t->n_ids || t->piece_off[id] == UINT32_MAX) return NULL;
  if (len) *len = t->piece_len[id];
  return t->pieces.p + t->piece_off[id];
}

const uint8_t *df_tok_id_to_bytes(const df_tok *t, int32_t id, size_t *len) {
  if (id < 0 || (size_t)id >= t->n_ids || t->piece_off[id] == UINT32_MAX) return NULL;
  if (len) *len = t->bytes_len[id];
  return (const uint8_t *)t->dbytes.p + t->bytes_off[id];
}

bool df_tok_is_added(const df_tok *t, int32_t id) {
  return id >= 0 && (size_t)id < t->n_ids && (t->flags[id] & 1);
}

bool df_tok_is_special(const df_tok *t, int32_t id) {
  return id >= 0 && (size_t)id < t->n_ids && (t->flags[id] & 2);
}

int32_t df_tok_bos_id(const df_tok *t) { return t->bos_id; }
int32_t df_tok_eos_id(const df_tok *t) { return t->eos_id; }
int32_t df_tok_pad_id(const df_tok *t) { return t->pad_id; }
