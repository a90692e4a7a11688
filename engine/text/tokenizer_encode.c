/* engine/text/tokenizer_encode.c — the encode pipeline of engine/text/tokenizer.h:
 * df_tok_encode and df_tok_encode_spans.
 *
 * Owns: the order of the stages and the added-token matching around them. The pipeline is the
 * reference library's: (1) split out added tokens that are not "normalized" on the raw text,
 * (2) normalize each remaining section, (3) split out "normalized" added tokens, (4) run the
 * pre-tokenizer steps, (5) BPE each piece on its bytes (the ByteLevel byte->char mapping is
 * folded into the merge table: symbols are token ids), (6) post-process. Also owns the
 * protected (plain-text) spans and the U+FFFD repair of invalid input. Does not own: the
 * stages themselves (engine/text/tokenizer_normalize.c, tokenizer_pretok.c, tokenizer_bpe.c),
 * loading (engine/text/tokenizer_load.c), decoding (engine/text/tokenizer_decode.c), chat
 * templates (engine/text/chat_template.c).
 */
#include "engine/text/tokenizer_bpe.h"
#include "engine/text/tokenizer_internal.h"
#include "engine/text/tokenizer_normalize.h"
#include "engine/text/tokenizer_pretok.h"
#include "engine/text/tokenizer_utf8.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Pre-tokenize and BPE one normalized section held in e->wb[off, off+len). */
static int encode_normalized(enc *e, size_t off, size_t len) {
  if (len == 0) return 0;
  if (df_tok__grow((void **)&e->pa, &e->cap_pa, 1, sizeof *e->pa) != 0) return -1;
  e->pa[0] = (piece){off, len};
  size_t n = 1;
  for (size_t k = 0; k < e->t->n_steps; k++) {
    size_t no;
    int r = df_tok__split_pieces(e, &e->t->steps[k], n, &no);
    if (r != 0) return r;
    piece *tp = e->pa;
    size_t tc = e->cap_pa;
    e->pa = e->pb;
    e->cap_pa = e->cap_pb;
    e->pb = tp;
    e->cap_pb = tc;
    n = no;
  }
  for (size_t i = 0; i < n; i++) {
    e->piece_at = e->n;
    if (df_tok__encode_word(e, (const uint8_t *)e->wb.p + e->pa[i].off, e->pa[i].len) != 0)
      return -1;
  }
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
        bool ok_l = p == 0 || !df_tok__cp_is_alnum(df_tok__cp_before(s, p, &st));
        bool ok_r = p + a->len == n || !df_tok__cp_is_alnum(df_tok__cp_at(s, n, p + a->len, &cl));
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
  if (df_tok__grow((void **)&e->subsp, &e->cap_subsp, hi - lo + 1, sizeof *e->subsp) != 0 ||
      df_tok__grow((void **)&e->submax, &e->cap_submax, hi - lo + 1, sizeof *e->submax) != 0)
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
        uint32_t c = df_tok__cp_before(s, st, &b);
        if (!df_tok__cp_is_ws(c)) break;
        st = b;
      }
    }
    if (a->rstrip) {
      while (en < n) {
        size_t cl;
        uint32_t c = df_tok__cp_at(s, n, en, &cl);
        if (!df_tok__cp_is_ws(c)) break;
        en += cl;
      }
    }
    if (st > pos) {
      int r = call_section(e, s, pos, st, pr, section);
      if (r != 0) return r;
    }
    e->piece_at = e->n;
    if (df_tok__emit(e, a->id) != 0) return -1;
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
    if (df_tok__normalize(t, s, n, &e->nb) != 0) return -1;
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
        if (!df_tok__cp_is_ws(df_tok__cp_before(e->wb.p, st, &b))) break;
        st = b;
      }
    if (a->rstrip)
      while (en < len) {
        size_t cl;
        if (!df_tok__cp_is_ws(df_tok__cp_at(e->wb.p, len, en, &cl))) break;
        en += cl;
      }
    if (st > pos && section_normalized(e, e->wb.p + pos, st - pos, NULL) != 0) return -1;
    e->piece_at = e->n;
    if (df_tok__emit(e, a->id) != 0) return -1;
    pos = en;
    from = me > en ? me : en;
  }
  if (pos < len) return encode_normalized(e, pos, len - pos);
  return 0;
}

/* Added tokens, then the pipeline, over s[0,n). */
static int encode_text(enc *e, const char *s, size_t n, const prot *pr) {
  if (e->flags & DF_TOK_PLAIN) return section_raw(e, s, n, NULL);
  return split_added(e, &e->t->raw_set, s, n, pr, section_raw);
}

/* encode_text on s[a,b) with the spans clipped to it (own arrays: split_added uses e->subsp). */
static int encode_slice(enc *e, const char *s, size_t a, size_t b, const prot *pr) {
  if (a >= b) return 0;
  if (!pr || !pr->n) return encode_text(e, s + a, b - a, NULL);
  df_tok_span *sp = malloc(pr->n * sizeof *sp);
  size_t *mx = malloc(pr->n * sizeof *mx);
  int rc = -1;
  if (!sp || !mx) goto done;
  prot sub = {sp, mx, 0};
  for (size_t i = 0; i < pr->n; i++) {
    size_t x = pr->sp[i].off, y = x + pr->sp[i].len;
    if (x < a) x = a;
    if (y > b) y = b;
    if (x >= y) continue;
    sp[sub.n] = (df_tok_span){x - a, y - x};
    mx[sub.n] = sub.n > 0 && mx[sub.n - 1] > y - a ? mx[sub.n - 1] : y - a;
    sub.n++;
  }
  rc = encode_text(e, s + a, b - a, &sub);
done:
  free(sp);
  free(mx);
  return rc;
}

/* Python's str.isspace(): general category Zs, or bidirectional class WS, B or S. */
static bool py_isspace(uint32_t c) {
  const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)c);
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

#define TT_SLICE_CHARS 400000 /* tokenization_kimi.py TIKTOKEN_MAX_ENCODE_CHARS */
#define TT_MAX_RUN 25000      /* MAX_NO_WHITESPACES_CHARS */

/* The Kimi tokenizer's guards (tokenization_kimi.py encode): the text is cut into slices of
 * 400,000 code points, each slice is cut before the code point that would make a run of more
 * than 25,000 consecutive all-isspace() or all-non-isspace() code points, and each piece is
 * encoded on its own (added tokens included). Other tokenizers: the whole text at once. */
static int encode_guarded(enc *e, const char *s, size_t len, const prot *pr) {
  if (!e->t->tiktoken_guards || len <= TT_MAX_RUN) return encode_text(e, s, len, pr);
  size_t seg = 0, i = 0, nch = 0, run = 0;
  bool cur = false;
  while (i < len) {
    if (nch == TT_SLICE_CHARS) {
      int r = encode_slice(e, s, seg, i, pr);
      if (r != 0) return r;
      seg = i;
      nch = 0;
    }
    size_t cl;
    bool sp = py_isspace(df_tok__cp_at(s, len, i, &cl));
    if (nch == 0) {
      cur = sp;
      run = 0;
    }
    if (sp != cur) {
      cur = sp;
      run = 1;
    } else if (++run > TT_MAX_RUN) {
      int r = encode_slice(e, s, seg, i, pr);
      if (r != 0) return r;
      seg = i;
      run = 1;
    }
    nch++;
    i += cl;
  }
  return encode_slice(e, s, seg, len, pr);
}

static int cmp_span(const void *a, const void *b) {
  const df_tok_span *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* df_tok_encode_spans, and with stable non-NULL df_tok_encode_stable's count. */
static int encode_all(const df_tok *t, const char *text, size_t len, unsigned flags,
                      const df_tok_span *plain, size_t n_plain, int32_t **ids, size_t *n,
                      size_t *stable, char *err, size_t errlen) {
  *ids = NULL;
  *n = 0;
  if (stable) *stable = 0;
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
    if (t->add_bos && (t->n_pre == 0 || t->pre_ids[0] != t->bos_id) &&
        df_tok__emit(&e, t->bos_id) != 0)
      goto oom_unlock;
    for (size_t i = 0; i < t->n_pre; i++)
      if (df_tok__emit(&e, t->pre_ids[i]) != 0) goto oom_unlock;
  }
  size_t n_head = e.n; /* ids the post-processor put in front of the text */
  int r = encode_guarded(&e, s, len, n_plain ? &pr : NULL);
  if (r == -2) goto unlock;
  if (r != 0) goto oom_unlock;
  if ((flags & DF_TOK_ADD_SPECIAL) && (flags & DF_TOK_BOS_ONCE) && t->bos_id >= 0 &&
      n_head > 0 && e.ids[0] == t->bos_id && e.n > n_head && e.ids[n_head] == t->bos_id) {
    memmove(e.ids, e.ids + 1, (e.n - 1) * sizeof *e.ids); /* the text's own BOS stays */
    e.n--;
  }
  if ((flags & DF_TOK_ADD_SPECIAL)) {
    for (size_t i = 0; i < t->n_post; i++)
      if (df_tok__emit(&e, t->post_ids[i]) != 0) goto oom_unlock;
    if (t->add_eos && (t->n_post == 0 || t->post_ids[t->n_post - 1] != t->eos_id) &&
        df_tok__emit(&e, t->eos_id) != 0)
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
    if (stable) *stable = e.piece_at < e.n ? e.piece_at : e.n;
  } else {
    free(e.ids);
  }
  free(clean);
  free(sp);
  free(maxend);
  df_tok__buf_free(&e.wb);
  df_tok__buf_free(&e.nb);
  df_tok__buf_free(&e.rb);
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

int df_tok_encode_spans(const df_tok *t, const char *text, size_t len, unsigned flags,
                        const df_tok_span *plain, size_t n_plain, int32_t **ids, size_t *n,
                        char *err, size_t errlen) {
  return encode_all(t, text, len, flags, plain, n_plain, ids, n, NULL, err, errlen);
}

int df_tok_encode(const df_tok *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                  size_t *n, char *err, size_t errlen) {
  return encode_all(t, text, len, flags, NULL, 0, ids, n, NULL, err, errlen);
}

int df_tok_encode_stable(const df_tok *t, const char *text, size_t len, unsigned flags,
                         int32_t **ids, size_t *n, size_t *stable, char *err, size_t errlen) {
  if (flags & DF_TOK_ADD_SPECIAL) {
    *ids = NULL;
    *n = *stable = 0;
    df_tok__seterr(err, errlen, "tokenizer: df_tok_encode_stable takes no DF_TOK_ADD_SPECIAL");
    return -1;
  }
  return encode_all(t, text, len, flags, NULL, 0, ids, n, stable, err, errlen);
}
