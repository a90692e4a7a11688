/* engine/text/tokenizer_pretok.c — the pre-tokenizer stage: tokenizer.json's "pre_tokenizer",
 * and splitting normalized text into pieces by it.
 *
 * Owns: parsing Split / Digits / ByteLevel / Sequence into df_tok.steps (their load errors
 * included), the Oniguruma -> PCRE2 pattern rewrite and compilation, and applying one step
 * (the Split behaviours and invert, Digits, ByteLevel's add_prefix_space and GPT-2 regex).
 * Does not own: running the steps in order over a section (engine/text/tokenizer_encode.c),
 * the ByteLevel-last rule (engine/text/tokenizer_load.c), or BPE of the pieces
 * (engine/text/tokenizer_bpe.c).
 */
#include "engine/text/tokenizer_pretok.h"
#include "engine/text/tokenizer_utf8.h"
#include "engine/text/unicode_kimi.h"

#include <stdlib.h>
#include <string.h>

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

int df_tok__load_pretok(load_ctx *L, json_t *p, const char *where) {
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
      if (df_tok__load_pretok(L, v, sub) != 0) return -1;
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
    s->invert = df_tok__jbool(p, "invert", false);
    return 0;
  }
  if (strcmp(type, "Digits") == 0) {
    pt_step *s = add_step(L);
    if (!s) return -1;
    s->kind = PT_DIGITS;
    s->individual_digits = df_tok__jbool(p, "individual_digits", false);
    return 0;
  }
  if (strcmp(type, "ByteLevel") == 0) {
    pcre2_code *re = NULL;
    if (df_tok__jbool(p, "use_regex", true)) {
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
    s->add_prefix_space = df_tok__jbool(p, "add_prefix_space", false);
    return 0;
  }
  LERR(L, "%s.type: unsupported pre-tokenizer \"%.40s\" (supported: Split, Digits, ByteLevel, "
          "Sequence)", where, type);
  return -1;
}

int df_tok__add_regex_step(load_ctx *L, const char *pat, int behavior, bool invert,
                           const char *where) {
  pcre2_code *re = compile_re(L, pat, strlen(pat), false, where);
  if (!re) return -1;
  pt_step *s = add_step(L);
  if (!s) {
    pcre2_code_free(re);
    return -1;
  }
  s->kind = PT_SPLIT;
  s->re = re;
  s->behavior = behavior;
  s->invert = invert;
  return 0;
}

/* ---- splitting -------------------------------------------------------------------------- */

uint32_t df_tok__kimi_stand_in(uint32_t cp) {
  size_t lo = 0, hi = sizeof df_kimi_remaps / sizeof *df_kimi_remaps;
  if (cp < df_kimi_remaps[0].lo || cp > df_kimi_remaps[hi - 1].hi) return 0;
  while (lo < hi) {
    size_t m = lo + (hi - lo) / 2;
    if (cp > df_kimi_remaps[m].hi) lo = m + 1;
    else if (cp < df_kimi_remaps[m].lo) hi = m;
    else return df_kimi_remaps[m].stand_in;
  }
  return 0;
}

/* Whether the character whose lead byte is s[i] (>= 0xE0) may be listed: false when its
 * 64-code-point block, read off the lead and continuation bytes, has no listed code point
 * (df_kimi_blocks). Malformed bytes give some block; the caller then decodes them as before. */
static inline bool kimi_block_listed(const uint8_t *s, size_t n, size_t i) {
  uint32_t b;
  if (s[i] < 0xF0) {
    if (i + 1 >= n) return true;
    b = (uint32_t)(s[i] & 0x0F) << 6 | (s[i + 1] & 0x3F);
  } else {
    if (i + 2 >= n) return true;
    b = (uint32_t)(s[i] & 0x07) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
  }
  return b < DF_KIMI_N_BLOCKS && (df_kimi_blocks[b >> 3] >> (b & 7) & 1);
}

/* The text a kimi_unicode step matches: s itself, or a copy in e->rb with every code point of
 * unicode_kimi.h replaced by its stand-in (same length, so the match offsets are those of s).
 * Every listed code point is 3 or 4 bytes long, so only lead bytes 0xE0.. are looked at, and
 * only those of a block with a listed code point are decoded and looked up (the continuation
 * bytes of a skipped character are < 0xE0, so skipping the lead byte alone is the same). NULL
 * when out of memory. */
static const char *kimi_view(enc *e, const char *s, size_t n) {
  bool copied = false;
  for (size_t i = 0; i < n; i++) {
    if ((uint8_t)s[i] < 0xE0 || !kimi_block_listed((const uint8_t *)s, n, i)) continue;
    size_t clen;
    uint32_t p = df_tok__kimi_stand_in(df_tok__cp_at(s, n, i, &clen));
    if (p) {
      if (!copied) {
        e->rb.n = 0;
        if (df_tok__buf_reserve(&e->rb, n) != 0) return NULL;
        memcpy(e->rb.p, s, n);
        e->rb.p[n] = 0;
        copied = true;
      }
      df_tok__cp_to_utf8(p, e->rb.p + i);
    }
    i += clen - 1;
  }
  return copied ? e->rb.p : s;
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
    if (df_tok__grow((void **)&e->mt, &e->cap_mt, k + 3, sizeof *e->mt) != 0) return -1;
    if (ms > gap) e->mt[k++] = (mspan){gap, ms, false};
    e->mt[k++] = (mspan){ms, me, true};
    gap = me;
    if (me == ms) {
      if (me >= n) break;
      size_t clen;
      df_tok__cp_at(s, n, me, &clen);
      start = me + clen;
    } else {
      start = me;
    }
  }
  if (df_tok__grow((void **)&e->mt, &e->cap_mt, k + 1, sizeof *e->mt) != 0) return -1;
  if (gap < n) e->mt[k++] = (mspan){gap, n, false};
  *nm = k;
  return 0;
}

int df_tok__split_pieces(enc *e, const pt_step *st, size_t nin, size_t *nout) {
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
        uint32_t cp = df_tok__cp_at(s, in.len, i, &clen);
        if (df_tok__cp_is_numeric(cp)) {
          if (df_tok__grow((void **)&e->mt, &e->cap_mt, nm + 2, sizeof *e->mt) != 0) return -1;
          if (gap < i) e->mt[nm++] = (mspan){gap, i, false};
          e->mt[nm++] = (mspan){i, i + clen, true};
          gap = i + clen;
        }
        i += clen;
      }
      if (df_tok__grow((void **)&e->mt, &e->cap_mt, nm + 1, sizeof *e->mt) != 0) return -1;
      if (gap < in.len) e->mt[nm++] = (mspan){gap, in.len, false};
    } else if (st->re) {
      const char *m = st->kimi_unicode ? kimi_view(e, s, in.len) : s;
      if (!m) return -1;
      int r = run_match(e, st->re, m, in.len, &nm);
      if (r != 0) return r;
    } else {
      if (df_tok__grow((void **)&e->mt, &e->cap_mt, 1, sizeof *e->mt) != 0) return -1;
      e->mt[nm++] = (mspan){0, in.len, false};
    }
    int beh = st->kind == PT_DIGITS ? (st->individual_digits ? BEH_ISOLATED : BEH_CONTIGUOUS)
                                    : st->behavior;
    if (st->invert)
      for (size_t i = 0; i < nm; i++) e->mt[i].m = !e->mt[i].m;
    if (df_tok__grow((void **)&e->pb, &e->cap_pb, no + nm + 1, sizeof *e->pb) != 0) return -1;
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
