/* engine/text/tokenizer_internal.h — the private layout of df_tok, shared by the tokenizer's
 * own files (engine/text/tokenizer*.c). Not a public contract: nothing outside them includes
 * it.
 *
 * Owns: struct df_tok and the types it is built of (pre-tokenizer steps, added tokens, merge
 * table, word cache); the byte-level alphabet, vocab table and piece store that
 * engine/text/tokenizer.c defines; the load error context shared by the files that parse
 * tokenizer.json; and the per-call encode scratch (enc) shared by the encode stages. Does not
 * own: the stages' own interfaces (engine/text/tokenizer_normalize.h, tokenizer_pretok.h,
 * tokenizer_bpe.h), the helpers below df_tok (engine/text/tokenizer_util.h,
 * tokenizer_utf8.h), or the public API (engine/text/tokenizer.h).
 */
#ifndef DF_ENGINE_TOKENIZER_INTERNAL_H
#define DF_ENGINE_TOKENIZER_INTERNAL_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_util.h"

#include <jansson.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#define DF_TOK_CACHE_SLOTS (1 << 16)  /* word cache slots (a power of two) */

/* ---- types ------------------------------------------------------------------------------ */

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
  bool kimi_unicode;      /* PT_SPLIT: match with the reference's Unicode (unicode_kimi.h) */
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
  bool ignore_merges;      /* look a whole word up before merging (tiktoken does, always) */
  size_t max_piece_bytes;  /* the longest decode bytes of any id: longer words are no token */
  bool tiktoken_guards;    /* Kimi TikTokenTokenizer's input slicing (tokenizer_encode.c) */
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

/* ---- byte-level alphabet (engine/text/tokenizer.c) -------------------------------------- */

/* GPT-2 bytes_to_unicode: the code point of each byte's character in byte-level pieces, and
 * back (-1 for code points that are not in the alphabet). Filled by df_tok__alphabet_init. */
extern uint32_t df_tok__byte_cp[256];
extern int16_t df_tok__cp_byte[324];

/* Fill the two tables, once per process (thread-safe; later calls do nothing). */
void df_tok__alphabet_init(void);

/* ---- vocab table and pieces (engine/text/tokenizer.c) ----------------------------------- */

/* Id of the model.vocab entry whose piece is s[0..n) (byte-level form; added tokens are not
 * looked at), or -1. */
int32_t df_tok__vocab_find(const df_tok *t, const char *s, size_t n);

/* Enter id, whose piece is already set, into the vocab table (t->vslots has a free slot). */
void df_tok__vocab_insert(df_tok *t, int32_t id);

/* The smallest power of two >= n, and at least 16 (hash table sizes). */
size_t df_tok__pow2_at_least(size_t n);

/* Append a piece s[0..n) (NUL-terminated) to t->pieces and assign it to id (< t->n_ids).
 * Returns 0, or -1 when out of memory or past 4 GiB of pieces. */
int df_tok__set_piece(df_tok *t, int32_t id, const char *s, size_t n);

/* ---- loading: each error is one line "FILE: FIELD: what was expected" ------------------- */

/* Where a load error goes: L->err (errlen bytes), prefixed with the file name. */
typedef struct load_ctx {
  df_tok *t;
  const char *file;
  char *err;
  size_t errlen;
} load_ctx;

/* Format one load error into L->err as "FILE: message". */
#define LERR(L, ...)                                             \
  do {                                                           \
    char m_[400];                                                \
    snprintf(m_, sizeof m_, __VA_ARGS__);                        \
    df_tok__seterr((L)->err, (L)->errlen, "%s: %s", (L)->file, m_); \
  } while (0)

/* The JSON boolean o[key], or dflt when it is missing or not a boolean. */
static inline bool df_tok__jbool(json_t *o, const char *key, bool dflt) {
  json_t *v = json_object_get(o, key);
  if (json_is_boolean(v)) return json_is_true(v);
  return dflt;
}

/* ---- encode scratch (engine/text/tokenizer_encode.c and its stages) --------------------- */

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
  df_tok_buf rb;        /* a piece with stand-ins for a kimi_unicode step */
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
  size_t piece_at;      /* ids before the last piece (pre-tokenizer split or added token) */
  char *err;
  size_t errlen;
} enc;

#endif
