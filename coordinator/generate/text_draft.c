/* coordinator/generate/text_draft.c — cross-tokenizer drafting; see text_draft.h.
 *
 * State: tx[0..tn) is the committed text. The draft's tokens ids[0..n) are in two runs:
 * ids[0..pfirst) are text tokens, whose bytes are tx[0..end[pfirst-1]) (end[i] is the text
 * offset after token i, or -1 where an encode did not give each token's bytes back exactly);
 * ids[pfirst..n) are the latest proposal, whose bytes pb[0..pn) continue from text offset p0
 * (end[i] = p0 + the bytes up to token i). The KV cache holds ids[0..kv->len), kv->len <= n.
 * The draft's tokens start at text offset start (0 until the draft's context first fills: then
 * the draft re-reads a window of recent text, see slide_window).
 */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/generate/text_draft.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv_cache.h"
#include "engine/sampler.h"

/* Draft tokens generated for k target tokens asked for: 3k/2 + 2 (a small vocabulary splits
 * words into more tokens than a large one, and the last piece is not proposed), at most
 * DRAFT_MAX per round. */
#define DRAFT_MAX 32
/* Tokens the catch-up may go back to find a word boundary. */
#define BACKOFF_MAX 8

struct df_text_draft {
  df_model *d;
  const df_tok *dt, *tt;
  df_kv_cache *kv;
  int64_t Vd, Vt; /* the draft's and the target model's vocabulary rows */
  float *logits; /* [Vd] */
  uint8_t *tx;
  size_t tn, tcap;
  int32_t *ids;
  int64_t *end;
  int64_t n, cap, pfirst;
  uint8_t *pb;
  size_t pn, pcap, p0;
  size_t start;
  size_t read_end; /* the text offset the draft's tokens end at after a catch-up */
  df_text_draft_stats st;
};

static int grow_bytes(uint8_t **b, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 256;
  while (c < need) c *= 2;
  uint8_t *nb = realloc(*b, c);
  if (!nb) return -1;
  *b = nb;
  *cap = c;
  return 0;
}

static int grow_tokens(df_text_draft *x, int64_t need) {
  if (need <= x->cap) return 0;
  int64_t c = x->cap ? x->cap : 256;
  while (c < need) c *= 2;
  int32_t *ni = realloc(x->ids, (size_t)c * sizeof *ni);
  if (!ni) return -1;
  x->ids = ni;
  int64_t *ne = realloc(x->end, (size_t)c * sizeof *ne);
  if (!ne) return -1;
  x->end = ne;
  x->cap = c;
  return 0;
}

int df_text_draft_new(df_model *draft, const df_tok *dtok, const df_tok *ttok,
                      int64_t target_vocab, df_text_draft **out, char *why, size_t whylen) {
  *out = NULL;
  df_text_draft *x = calloc(1, sizeof *x);
  if (!x) goto oom;
  x->d = draft;
  x->dt = dtok;
  x->tt = ttok;
  x->Vt = target_vocab;
  x->Vd = df_model_cfg(draft)->vocab_size;
  if (!(x->logits = malloc((size_t)x->Vd * sizeof(float)))) goto oom;
  char e[256];
  if (df_model_max_ctx(draft) < DF_TEXT_DRAFT_MIN_CTX) {
    snprintf(why, whylen, "the draft's context (%lld tokens) is too short to draft text (at "
             "least %d)", (long long)df_model_max_ctx(draft), DF_TEXT_DRAFT_MIN_CTX);
    df_text_draft_destroy(&x);
    return -1;
  }
  if (!(x->kv = df_model_kv_new(draft, df_model_max_ctx(draft), e, sizeof e))) {
    snprintf(why, whylen, "draft KV cache: %s", e);
    df_text_draft_destroy(&x);
    return -1;
  }
  *out = x;
  return 0;
oom:
  snprintf(why, whylen, "text draft: out of memory");
  df_text_draft_destroy(&x);
  return -1;
}

void df_text_draft_destroy(df_text_draft **xp) {
  if (!xp || !*xp) return;
  df_text_draft *x = *xp;
  df_kv_destroy(&x->kv);
  free(x->logits);
  free(x->tx);
  free(x->ids);
  free(x->end);
  free(x->pb);
  free(x);
  *xp = NULL;
}

size_t df_text_draft_text_len(const df_text_draft *x) { return x->tn; }
int64_t df_text_draft_cached(const df_text_draft *x) { return x->kv->len; }
df_text_draft_stats df_text_draft_get_stats(const df_text_draft *x) { return x->st; }

int df_text_draft_commit(df_text_draft *x, const int32_t *ids, int64_t n, char *err,
                         size_t errlen) {
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0) {
      snprintf(err, errlen, "text draft: negative token id %d", ids[i]);
      return -1;
    }
    size_t bl = 0;
    const uint8_t *b = df_tok_id_to_bytes(x->tt, ids[i], &bl);
    if (!b || !bl) continue; /* an id no token has (padding rows) decodes to nothing */
    if (grow_bytes(&x->tx, &x->tcap, x->tn + bl) != 0) {
      snprintf(err, errlen, "text draft: out of memory");
      return -1;
    }
    memcpy(x->tx + x->tn, b, bl);
    x->tn += bl;
  }
  return 0;
}

/* The committed text's length without a trailing incomplete UTF-8 character (the draft's
 * tokenizer would replace it by U+FFFD, and then its tokens no longer spell the text). */
static size_t complete_len(const df_text_draft *x) {
  size_t n = x->tn;
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    uint8_t c = x->tx[n - back];
    if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

static bool word_byte(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

/* Whether a draft token boundary at text offset e is where the draft's own tokenizer would
 * start a new word piece: not inside a word, and not between a space and the word it leads
 * (byte-level BPE pieces are " word"). A heuristic: it only decides how the draft re-reads the
 * text, never what the target emits. */
static bool word_boundary(const df_text_draft *x, size_t e) {
  if (e == 0 || e >= x->tn) return true;
  uint8_t a = x->tx[e - 1], b = x->tx[e];
  if (word_byte(a) && word_byte(b)) return false;
  if (a == ' ' && word_byte(b)) return false;
  return true;
}

/* The draft's greedy choice among the tokens whose bytes agree with rem[0..n) (the committed
 * bytes its text has not spelled yet): a prefix of them, or starting with all of them; no
 * special token. Ties go to the lower id, as df_argmax_f32. -1 when no token agrees. */
static int32_t heal_argmax(const df_text_draft *x, const uint8_t *rem, size_t n) {
  int32_t best = -1;
  for (int64_t id = 0; id < x->Vd; id++) {
    if (best >= 0 && !(x->logits[id] > x->logits[best])) continue;
    size_t bl = 0;
    const uint8_t *b = df_tok_id_to_bytes(x->dt, (int32_t)id, &bl);
    if (!b || !bl || df_tok_is_special(x->dt, (int32_t)id)) continue;
    if (memcmp(b, rem, bl < n ? bl : n) == 0) best = (int32_t)id;
  }
  return best;
}

/* Append draft tokens for text tx[from..to): their ends where the encode spells the text
 * back byte for byte, else only the last. Returns 0, or -1 with a message. */
static int encode_text(df_text_draft *x, size_t from, size_t to, char *err, size_t errlen) {
  int32_t *ids = NULL;
  size_t m = 0;
  if (df_tok_encode(x->dt, (const char *)x->tx + from, to - from, 0, &ids, &m, err, errlen) != 0)
    return -1;
  if (grow_tokens(x, x->n + (int64_t)m) != 0) {
    free(ids);
    snprintf(err, errlen, "text draft: out of memory");
    return -1;
  }
  size_t off = from;
  bool exact = true;
  for (size_t i = 0; i < m; i++) {
    size_t bl = 0;
    const uint8_t *b = df_tok_id_to_bytes(x->dt, ids[i], &bl);
    if (exact && b && off + bl <= to && memcmp(b, x->tx + off, bl) == 0)
      off += bl;
    else
      exact = false;
    x->ids[x->n + (int64_t)i] = ids[i];
    x->end[x->n + (int64_t)i] = exact ? (int64_t)off : -1;
  }
  if (m) x->end[x->n + (int64_t)m - 1] = (int64_t)to;
  x->n += (int64_t)m;
  x->st.encoded_tokens += (int64_t)m;
  free(ids);
  return 0;
}

/* The draft's context holds the committed text's last part only: when a round could overflow
 * it, the draft drops its tokens and re-reads about half its context's worth of the latest
 * text, from a word boundary (the byte count estimated from its tokens so far), at positions
 * from 0. Which text the draft reads decides only what it proposes, never what the target
 * emits. Returns 0, or -1 with a message (an encode error, out of memory). */
static int slide_window(df_text_draft *x, size_t cs, char *err, size_t errlen) {
  int64_t want = (x->kv->ctx - DRAFT_MAX - 1) / 2;
  for (int tries = 0; tries < 4; tries++) {
    double per_token = (double)(cs - x->start) / (double)(x->n > 0 ? x->n : 1);
    size_t back = (size_t)(per_token * (double)want);
    size_t off = back < cs - x->start ? cs - back : x->start;
    /* to a character start, then past the rest of a word (at most 64 bytes on) */
    size_t lim = off + 64 < cs ? off + 64 : cs;
    while (off < cs && (x->tx[off] & 0xC0) == 0x80) off++;
    for (size_t o = off; o < lim; o++)
      if ((x->tx[o] & 0xC0) != 0x80 && word_boundary(x, o)) {
        off = o;
        break;
      }
    if (off >= cs) off = x->start; /* no complete character in reach: keep the tokens' start */
    x->n = x->pfirst = 0;
    x->start = off;
    if (encode_text(x, off, cs, err, errlen) != 0) return -1;
    x->pfirst = x->n;
    x->st.windows++;
    if (x->n + DRAFT_MAX + 1 <= x->kv->ctx) return 0;
    want /= 2; /* text that needs more tokens than the estimate: a shorter window */
  }
  snprintf(err, errlen, "the draft's context is full (%lld of its tokens)", (long long)x->kv->ctx);
  return -1;
}

/* Step 1 of text_draft.h: the draft's tokens spell the committed text up to its last complete
 * character, the cache holds all but at least the last of them, and logits holds the draft's
 * next-token logits. Returns 1, 0 when there is no text to continue, -1 on error. */
static int catch_up(df_text_draft *x, size_t cs, char *err, size_t errlen) {
  /* the proposal's tokens whose bytes the target wrote stay */
  int64_t keep = x->pfirst;
  for (int64_t i = x->pfirst; i < x->n; i++) {
    size_t e = (size_t)x->end[i];
    if (e > cs || memcmp(x->pb, x->tx + x->p0, e - x->p0) != 0) break;
    keep = i + 1;
  }
  x->st.reused_tokens += keep - x->pfirst;
  x->n = x->pfirst = keep;
  x->pn = 0;
  int64_t fresh = x->n;
  size_t e = x->n ? (size_t)x->end[x->n - 1] : x->start;
  if (e < cs) {
    /* more text to read: start it at a word boundary a few tokens back (from an offset the
     * tokens spell exactly), else where the tokens end */
    int64_t at = x->n;
    for (int64_t i = x->n; i >= 0 && x->n - i < BACKOFF_MAX; i--)
      if (i == 0 || (x->end[i - 1] >= 0 && word_boundary(x, (size_t)x->end[i - 1]))) {
        at = i;
        break;
      }
    x->n = at;
    e = x->n ? (size_t)x->end[x->n - 1] : x->start;
    fresh = x->n; /* tokens from here on are new: the cache holds other ids there */
    if (encode_text(x, e, cs, err, errlen) != 0) return -1;
    x->pfirst = x->n;
  }
  if (x->n == 0) return 0;
  if (x->n + DRAFT_MAX + 1 > x->kv->ctx) { /* no room for a round: a window of recent text */
    if (slide_window(x, cs, err, errlen) != 0) return -1;
    fresh = 0;
  }
  x->read_end = cs;
  int64_t from = x->kv->len < x->n - 1 ? x->kv->len : x->n - 1;
  if (from > fresh) from = fresh;
  /* token healing: the target's tokens end where its tokenizer splits, often inside what
   * the draft's tokenizer holds as one piece (Qwen's lone " " before digits, "coun" of
   * "county"); the draft's encoding then ends with a token it would not have written itself,
   * and from such an end it guesses badly. Its own choice at the last token's position,
   * among the tokens that agree with that token's bytes, decides: when it is a longer token
   * (the draft reads the bytes as the start of a longer piece), the draft drops its last
   * token and re-writes its bytes, its choices held to tokens that agree with them
   * (heal_argmax); otherwise it reads the token as it is. */
  bool heal = x->n >= 2 && x->end[x->n - 2] >= 0 && !df_tok_is_special(x->dt, x->ids[x->n - 1]);
  if (heal && from > x->n - 2) from = x->n - 2;
  from = df_kv_truncate_or_reset(x->kv, from);
  int64_t upto = heal && from < x->n - 1 ? x->n - 1 : x->n;
  if (df_model_forward(x->d, x->kv, x->ids + from, upto - from, DF_LOGITS_LAST, x->logits, err,
                       errlen) != 0)
    return -1;
  if (upto == x->n) return 1;
  size_t ll = 0, bl = 0;
  const uint8_t *lb = df_tok_id_to_bytes(x->dt, x->ids[x->n - 1], &ll);
  int32_t best = lb && ll ? heal_argmax(x, lb, ll) : -1;
  if (best >= 0 && df_tok_id_to_bytes(x->dt, best, &bl) && bl > ll) {
    x->n--;
    if (x->pfirst > x->n) x->pfirst = x->n;
    x->read_end = (size_t)x->end[x->n - 1];
    x->st.healed++;
    return 1;
  }
  return df_model_forward(x->d, x->kv, x->ids + x->n - 1, 1, DF_LOGITS_LAST, x->logits, err,
                          errlen) == 0 ? 1 : -1;
}

/* Step 3 of text_draft.h: the target ids (at most k, into out) of the complete pieces of the
 * draft's bytes after the committed end (all of them after a special token: the draft's text
 * ends there). The draft's text starts at text offset cs: it must first spell the committed
 * bytes after cs (a character the target began), else nothing is proposed; bytes after the
 * last complete character are left out. Returns the count, or -1 (an encode error). */
static int target_ids(df_text_draft *x, size_t cs, bool special_end, int k, int32_t *out,
                      char *err, size_t errlen) {
  size_t skip = x->tn - cs;
  if (x->pn < skip || memcmp(x->pb, x->tx + cs, skip) != 0) return 0;
  const char *p = (const char *)x->pb + skip;
  size_t plen = x->pn - skip;
  size_t vlen = df_tok_utf8_invalid_at(p, plen);
  if (vlen == 0) return 0;
  int32_t *tids = NULL;
  size_t tn = 0, stable = 0;
  if (df_tok_encode_stable(x->tt, p, vlen, 0, &tids, &tn, &stable, err, errlen) != 0) return -1;
  size_t m = special_end && vlen == plen ? tn : stable;
  if (m > (size_t)k) m = (size_t)k;
  for (size_t i = 0; i < m; i++)
    if (tids[i] >= x->Vt) m = i; /* an id the target's model has no row for */
  memcpy(out, tids, m * sizeof *out);
  free(tids);
  return (int)m;
}

int df_text_draft_propose(df_text_draft *x, int k, int32_t *out, char *err, size_t errlen) {
  if (k < 1) return 0;
  if (k > DF_TEXT_DRAFT_K_MAX) k = DF_TEXT_DRAFT_K_MAX;
  int r = catch_up(x, complete_len(x), err, errlen);
  if (r <= 0) return r;
  size_t cs = x->read_end;
  /* step 2: the draft continues, until its text holds k complete target pieces (first
   * re-writing the committed bytes after cs) */
  size_t tail = x->tn - cs;
  int kd = k * 3 / 2 + 2 + (tail ? 2 : 0);
  if (kd > DRAFT_MAX) kd = DRAFT_MAX;
  if (grow_tokens(x, x->n + kd) != 0) goto oom;
  x->p0 = cs;
  x->pn = 0;
  int m = 0;
  for (int g = 0; g < kd; g++) {
    int32_t id = x->pn < tail ? heal_argmax(x, x->tx + cs + x->pn, tail - x->pn)
                              : df_argmax_f32(x->logits, x->Vd);
    if (id < 0) break; /* no token of the draft spells the committed bytes */
    size_t bl = 0;
    const uint8_t *b = df_tok_id_to_bytes(x->dt, id, &bl);
    if (!b) break; /* a padding row: no text */
    if (grow_bytes(&x->pb, &x->pcap, x->pn + bl) != 0) goto oom;
    memcpy(x->pb + x->pn, b, bl);
    x->pn += bl;
    x->ids[x->n] = id;
    x->end[x->n] = (int64_t)(x->p0 + x->pn);
    x->n++;
    x->st.draft_tokens++;
    bool special = df_tok_is_special(x->dt, id);
    m = target_ids(x, cs, special, k, out, err, errlen);
    if (m < 0) return -1;
    if (special || m == k || g + 1 == kd || x->kv->len + 1 > x->kv->ctx) break;
    if (df_model_forward(x->d, x->kv, &id, 1, DF_LOGITS_LAST, x->logits, err, errlen) != 0)
      return -1;
  }
  if (m == 0) x->st.empty_rounds++;
  return m;
oom:
  snprintf(err, errlen, "text draft: out of memory");
  return -1;
}
