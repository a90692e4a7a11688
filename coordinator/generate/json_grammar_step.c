/* coordinator/generate/json_grammar_step.c — the recogniser's byte step over a branch's stack
 * of frames, completion, and the fewest bytes left; see json_grammar.h for the output policy.
 *
 * A container (object, array, wrapper) that starts a child value first moves its own frame to
 * the state after that value, then pushes it as a link and feeds the byte to the child; a child
 * that ends pops back to it. Children that end on their last byte (strings, objects, arrays,
 * literals with no longer member) pop at once; numbers and literals that may still go on end
 * at the first byte that cannot continue them, which is then fed to the parent ("refeed").
 * anyOf / type arrays fork one branch per alternative that the byte and the nesting limit allow.
 *
 * No dead positions: every transition is taken only when the position after it still has a
 * completion: strings check counts against min/maxLength before each character, numbers check
 * that some value within the bounds still starts with the digits read (JSON grammar RFC 8259
 * §6), keys and items are started only when their value fits in the remaining nesting
 * (node.h = the fewest frames a complete value needs), "," only when another member can follow.
 */
#include "coordinator/generate/json_grammar_internal.h"

#include <stdlib.h>
#include <string.h>

enum { R_REJ, R_OK, R_DONE, R_REFEED, R_HANDLED };

static uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t s = a + b;
  return s > JSG_INF ? JSG_INF : s;
}

/* ---- stack ----------------------------------------------------------------------------- */

static uint32_t link_new(jsg_ctx *x, const jsg_br *br) {
  if (x->n == x->cap) {
    uint32_t cap = x->cap ? x->cap * 2 : 256;
    jsg_link *l = realloc(x->links, (size_t)cap * sizeof *l);
    if (!l) {
      x->oom = true;
      return JSG_NIL;
    }
    x->links = l;
    x->cap = cap;
  }
  x->links[x->n].f = br->top;
  x->links[x->n].up = br->parent;
  return x->n++;
}

static void pop(const jsg_link *links, jsg_br *br) {
  const jsg_link *l = &links[br->parent];
  br->top = l->f;
  br->parent = l->up;
  br->depth--;
}

void jsg_set_add(jsg_set *s, const jsg_br *b) {
  for (uint32_t i = 0; i < s->n; i++)
    if (s->b[i].parent == b->parent && s->b[i].depth == b->depth &&
        !memcmp(&s->b[i].top, &b->top, sizeof b->top))
      return;
  if (s->n < JSG_BRANCH_MAX) s->b[s->n++] = *b;
}

void jsg_initial(const jsg_grammar *g, jsg_br *out) {
  memset(out, 0, sizeof *out);
  out->top.node = g->root;
  out->top.st = g->nodes[g->root].pre_len ? W_PRE : W_VAL;
  out->parent = JSG_NIL;
  out->depth = 1;
}

/* A child value of `node` may start under a frame at parent_depth: it fits the nesting. */
static bool enter_ok(const jsg_grammar *g, uint32_t node, uint32_t parent_depth) {
  return node != JSG_NIL && parent_depth + g->nodes[node].h <= JSG_DEPTH_MAX;
}

/* ---- shared pieces ---------------------------------------------------------------------- */

/* Whitespace in a gap: 1 consumed, -1 a whitespace byte the run cannot take, 0 not whitespace. */
static int gap(jsg_frame *f, int c) {
  switch (c) {
  case ' ':
    if (f->ws == 0) {
      f->ws = 1;
      return 1;
    }
    /* fallthrough */
  case '\t':
    if (f->ws >= 2 && f->ws < 2 + JSG_WS_INDENT) {
      f->ws++;
      return 1;
    }
    return -1;
  case '\n':
    if (f->ws == 0) {
      f->ws = 2;
      return 1;
    }
    return -1;
  case '\r':
    return -1;
  default:
    return 0;
  }
}

/* UTF-8 (RFC 3629 table): a lead byte sets the continuation count and the second byte's
 * range (code 1: A0..BF after E0, 2: 80..9F after ED, 3: 90..BF after F0, 4: 80..8F after F4). */
static bool utf8_lead(int c, uint8_t *u8) {
  if (c >= 0xC2 && c <= 0xDF) *u8 = 1 << 4;
  else if (c == 0xE0) *u8 = 2 << 4 | 1;
  else if (c == 0xED) *u8 = 2 << 4 | 2;
  else if (c >= 0xE1 && c <= 0xEF) *u8 = 2 << 4;
  else if (c == 0xF0) *u8 = 3 << 4 | 3;
  else if (c >= 0xF1 && c <= 0xF3) *u8 = 3 << 4;
  else if (c == 0xF4) *u8 = 3 << 4 | 4;
  else return false;
  return true;
}

static bool utf8_cont(uint8_t *u8, int c) {
  static const uint8_t lo[5] = {0x80, 0xA0, 0x80, 0x90, 0x80};
  static const uint8_t hi[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
  int code = *u8 & 15;
  if (c < lo[code] || c > hi[code]) return false;
  int left = (*u8 >> 4) - 1;
  *u8 = (uint8_t)(left << 4);
  return true;
}

size_t jsg_text_char(const uint8_t *s, size_t n) {
  if (!n) return 0;
  int c = s[0];
  if (c < 0x80) return (c >= 0x20 && c != '"' && c != '\\') ? 1 : 0;
  uint8_t u8;
  if (!utf8_lead(c, &u8)) return 0;
  size_t k = (size_t)(u8 >> 4);
  if (n < k + 1) return 0;
  for (size_t i = 1; i <= k; i++)
    if (!utf8_cont(&u8, s[i])) return 0;
  return k + 1;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static uint32_t tchild(const jsg_grammar *g, uint32_t t, int c) {
  const jsg_tnode *p = &g->tn[t];
  uint32_t lo = 0, hi = p->nchild;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    int b = g->tn[p->child + mid].byte;
    if (b == c) return p->child + mid;
    if (b < c) lo = mid + 1;
    else hi = mid;
  }
  return JSG_NIL;
}

static void run(jsg_ctx *x, jsg_br *br, int c, jsg_set *out);

/* Start a value of `node` as the child of ch's parent (ch->parent / depth set) with byte c. */
static void start(jsg_ctx *x, jsg_br *ch, uint32_t node, int c, jsg_set *out) {
  const jsg_grammar *g = x->g;
  const jsg_node *n = &g->nodes[node];
  if (n->kind == K_UNION) {
    for (uint32_t i = 0; i < n->count; i++) {
      uint32_t a = g->kids[n->first + i];
      if (!enter_ok(g, a, ch->depth - 1)) continue;
      jsg_br b = *ch;
      start(x, &b, a, c, out);
    }
    return;
  }
  memset(&ch->top, 0, sizeof ch->top);
  ch->top.node = node;
  if (n->kind == K_LIT) ch->top.a = n->root;
  run(x, ch, c, out);
}

/* br's frame (already moved past the child) becomes a link; the child starts with c. */
static void push_value(jsg_ctx *x, const jsg_br *br, uint32_t node, int c, jsg_set *out) {
  uint32_t l = link_new(x, br);
  if (l == JSG_NIL) return;
  jsg_br ch;
  ch.parent = l;
  ch.depth = br->depth + 1;
  start(x, &ch, node, c, out);
}

/* ---- strings ---------------------------------------------------------------------------- */

/* Escape stage in f->x & 7: 0 none, 1 after '\', 2..5 hex digit 0..3 of \u, 6 '\' of the low
 * surrogate due, 7 its 'u' due; 0x80: this \u is the low half of a pair. Code points are
 * counted at a character's first byte, saturating at the largest bound that matters. */
static int step_str(const jsg_node *n, jsg_frame *f, int c) {
  if (f->st == S_START) {
    if (c != '"') return R_REJ;
    f->st = S_IN;
    return R_OK;
  }
  if (f->u8) return utf8_cont(&f->u8, c) ? R_OK : R_REJ;
  int e = f->x & 7;
  if (e == 1) {
    switch (c) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
      f->x = 0;
      return R_OK;
    case 'u':
      f->x = 2;
      f->b = 0;
      return R_OK;
    default:
      return R_REJ;
    }
  }
  if (e >= 2 && e <= 5) {
    int h = hexval(c), k = e - 2;
    bool low = f->x & 0x80;
    if (h < 0) return R_REJ;
    if (low) {
      if ((k == 0 && h != 0xD) || (k == 1 && h < 0xC)) return R_REJ;
    } else if (k == 1 && f->b == 0xD && h >= 0xC) {
      return R_REJ; /* \uDC00..\uDFFF without a high surrogate before it */
    }
    uint32_t v = f->b << 4 | (uint32_t)h;
    if (k < 3) {
      f->b = v;
      f->x = (uint8_t)((f->x & 0x80) | (e + 1));
      return R_OK;
    }
    f->b = 0;
    f->x = (!low && v >= 0xD800 && v <= 0xDBFF) ? 6 : 0;
    return R_OK;
  }
  if (e == 6) {
    if (c != '\\') return R_REJ;
    f->x = 7;
    return R_OK;
  }
  if (e == 7) {
    if (c != 'u') return R_REJ;
    f->x = 0x80 | 2;
    f->b = 0;
    return R_OK;
  }
  if (c == '"') return f->a >= n->min_len ? R_DONE : R_REJ;
  if (c < 0x20 || c > 0xFF) return R_REJ;
  if (n->max_len != JSG_NIL && f->a >= n->max_len) return R_REJ;
  if (c == '\\') f->x = 1;
  else if (c >= 0x80 && !utf8_lead(c, &f->u8)) return R_REJ;
  uint32_t cap = n->max_len != JSG_NIL ? n->max_len : n->min_len;
  if (f->a < cap) f->a++;
  return R_OK;
}

/* ---- numbers ---------------------------------------------------------------------------- */

static bool ivl_has(const jsg_node *n, int s, int nz, int64_t ip) {
  return ip >= n->ivl[s][nz][0] && ip <= n->ivl[s][nz][1];
}

/* Some integer part in [lo, hi] is allowed with sign s. */
static bool range_hits(const jsg_node *n, int s, int nz, int64_t lo, int64_t hi) {
  const int64_t *v = n->ivl[s][nz];
  return v[0] <= v[1] && lo <= v[1] && v[0] <= hi;
}

/* Fewest further bytes for an integer part that starts with p (k digits) to end a valid
 * number (2 more for a fraction ".d" where only a nonzero fraction is within the bounds). */
static uint64_t int_rem(const jsg_node *n, int s, int64_t p, uint32_t k) {
  uint64_t best = JSG_INF;
  if (k == 0) {
    int64_t lo = 0, hi = 9;
    for (uint32_t d = 1; d <= JSG_INT_DIGITS; d++) {
      for (int nz = 0; nz < 2; nz++)
        if (range_hits(n, s, nz, lo, hi) && d + 2u * (unsigned)nz < best) best = d + 2u * nz;
      lo = hi + 1;
      hi = hi * 10 + 9;
    }
    return best;
  }
  if (p == 0) {
    for (int nz = 0; nz < 2; nz++)
      if (ivl_has(n, s, nz, 0) && 2u * (unsigned)nz < best) best = 2u * nz;
    return best;
  }
  int64_t lo = p, span = 1;
  for (uint32_t j = 0; k + j <= JSG_INT_DIGITS; j++) {
    for (int nz = 0; nz < 2; nz++)
      if (range_hits(n, s, nz, lo, lo + span - 1) && j + 2u * (unsigned)nz < best)
        best = j + 2u * nz;
    lo *= 10;
    span *= 10;
  }
  return best;
}

static bool int_live(const jsg_node *n, int s, int64_t p, uint32_t k) {
  return int_rem(n, s, p, k) < JSG_INF;
}

static bool num_can_end(const jsg_node *n, const jsg_frame *f) {
  int s = f->x & 1, nz = (f->x >> 1) & 1;
  switch (f->st) {
  case N_INT: return f->a >= 1 && ivl_has(n, s, 0, f->v);
  case N_FRAC: return (f->b & 0xFF) >= 1 && ivl_has(n, s, nz, f->v);
  case N_EXP: return true;
  default: return false;
  }
}

/* Number frame: x bit0 sign, bit1 a nonzero fraction digit seen; a integer digits, v integer
 * part, b fraction digits | exponent digits << 8. */
static int step_num(const jsg_node *n, jsg_frame *f, int c) {
  int s = f->x & 1, nz = (f->x >> 1) & 1;
  bool dig = c >= '0' && c <= '9';
  switch (f->st) {
  case N_START:
    if (c == '-') {
      if (!range_hits(n, 1, 0, 0, JSG_MAX_IP) && !range_hits(n, 1, 1, 0, JSG_MAX_IP))
        return R_REJ;
      f->x = 1;
      f->st = N_INT;
      return R_OK;
    }
    if (!dig) return R_REJ;
    f->st = N_INT;
    /* fallthrough */
  case N_INT:
    if (dig && (f->a == 0 || (f->a < JSG_INT_DIGITS && f->v != 0))) {
      int64_t p = f->v * 10 + (c - '0');
      if (int_live(n, s, p, f->a + 1)) {
        f->v = p;
        f->a++;
        return R_OK;
      }
    }
    if (f->a == 0) return R_REJ;
    if (c == '.' && n->allow_frac && (ivl_has(n, s, 0, f->v) || ivl_has(n, s, 1, f->v))) {
      f->st = N_FRAC;
      return R_OK;
    }
    if ((c == 'e' || c == 'E') && n->allow_exp) {
      f->st = N_E;
      return R_OK;
    }
    return ivl_has(n, s, 0, f->v) ? R_REFEED : R_REJ;
  case N_FRAC: {
    uint32_t fd = f->b & 0xFF;
    if (dig && fd < n->fcap) {
      int nz2 = nz | (c != '0');
      bool ok = nz2 ? ivl_has(n, s, 1, f->v)
                    : (ivl_has(n, s, 0, f->v) || (fd + 1 < n->fcap && ivl_has(n, s, 1, f->v)));
      if (ok) {
        f->b = fd + 1;
        f->x = (uint8_t)(s | nz2 << 1);
        return R_OK;
      }
    }
    if (fd == 0) return R_REJ;
    if ((c == 'e' || c == 'E') && n->allow_exp) {
      f->st = N_E;
      return R_OK;
    }
    return ivl_has(n, s, nz, f->v) ? R_REFEED : R_REJ;
  }
  case N_E:
    if (c == '+' || c == '-') {
      f->st = N_ESIGN;
      return R_OK;
    }
    /* fallthrough */
  case N_ESIGN:
    if (!dig) return R_REJ;
    f->st = N_EXP;
    f->b += 1u << 8;
    return R_OK;
  case N_EXP:
    if (dig && (f->b >> 8) < JSG_EXP_DIGITS) {
      f->b += 1u << 8;
      return R_OK;
    }
    return R_REFEED;
  default:
    return R_REJ;
  }
}

static uint64_t num_rem(const jsg_node *n, const jsg_frame *f) {
  int s = f->x & 1, nz = (f->x >> 1) & 1;
  switch (f->st) {
  case N_START: {
    uint64_t a = int_rem(n, 0, 0, 0), b = sat_add(int_rem(n, 1, 0, 0), 1);
    return a < b ? a : b;
  }
  case N_INT: return int_rem(n, s, f->v, f->a);
  case N_FRAC: return ((f->b & 0xFF) >= 1 && ivl_has(n, s, nz, f->v)) ? 0 : 1;
  case N_E: case N_ESIGN: return 1;
  default: return 0;
  }
}

uint64_t jsg_num_min_len(const jsg_node *n) {
  jsg_frame f;
  memset(&f, 0, sizeof f);
  return num_rem(n, &f);
}

/* ---- literals (enum / const / true / false / null) ------------------------------------- */

static int step_lit(const jsg_grammar *g, jsg_frame *f, int c) {
  uint32_t ch = c < 256 ? tchild(g, f->a, c) : JSG_NIL;
  if (ch != JSG_NIL) {
    if (g->tn[ch].term >= 0 && g->tn[ch].nchild == 0) return R_DONE;
    f->a = ch;
    return R_OK;
  }
  return g->tn[f->a].term >= 0 ? R_REFEED : R_REJ;
}

/* ---- objects ---------------------------------------------------------------------------- */

static uint32_t next_req(const jsg_grammar *g, const jsg_node *n, uint32_t i) {
  return g->u32[n->aux + i];
}

static uint64_t rest(const jsg_grammar *g, const jsg_node *n, uint32_t i) {
  return g->u64[n->aux + i];
}

/* Some property in [next, first required at or after next] whose key passes through trie node
 * t can start here (it is not forbidden and its value fits the nesting). */
static bool key_cands(const jsg_grammar *g, const jsg_node *n, uint32_t t, uint32_t next,
                      uint32_t depth) {
  if (next >= n->count) return false;
  uint32_t lim = next_req(g, n, next);
  if (lim >= n->count) lim = n->count - 1;
  const jsg_tnode *p = &g->tn[t];
  const uint32_t *ix = g->tidx + p->ilo;
  uint32_t lo = 0, hi = p->in;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (ix[mid] < next) lo = mid + 1;
    else hi = mid;
  }
  for (uint32_t i = lo; i < p->in && ix[i] <= lim; i++)
    if (enter_ok(g, g->props[n->first + ix[i]].node, depth)) return true;
  return false;
}

static bool extra_ok(const jsg_grammar *g, const jsg_node *n, uint32_t next, uint32_t depth) {
  return n->extra != JSG_NIL && next_req(g, n, next) >= n->count &&
         enter_ok(g, n->extra, depth);
}

static bool more_keys(const jsg_grammar *g, const jsg_node *n, uint32_t next, uint32_t depth) {
  return (n->root != JSG_NIL && key_cands(g, n, n->root, next, depth)) ||
         extra_ok(g, n, next, depth);
}

/* Object frame: a = next property index (count after an extra key), b = key trie node while
 * reading a key (O_KEY; O_XKEY: the declared key it still equals a prefix of, or JSG_NIL), then
 * the chosen property (JSG_NIL: an extra key) until its value starts. */
static int step_obj(jsg_ctx *x, jsg_br *br, const jsg_node *n, int c, jsg_set *out) {
  const jsg_grammar *g = x->g;
  jsg_frame *f = &br->top;
  int w;
  switch (f->st) {
  case O_START:
    if (c != '{') return R_REJ;
    f->st = O_OPEN;
    return R_OK;
  case O_OPEN:
  case O_NEXT: {
    if ((w = gap(f, c))) return w > 0 ? R_OK : R_REJ;
    if (c == '}' && f->st == O_OPEN && next_req(g, n, f->a) >= n->count) return R_DONE;
    if (c != '"') return R_REJ;
    uint32_t kt = n->root != JSG_NIL ? tchild(g, n->root, '"') : JSG_NIL;
    jsg_br b = *br;
    b.top.ws = 0;
    if (kt != JSG_NIL && key_cands(g, n, kt, f->a, br->depth)) {
      b.top.st = O_KEY;
      b.top.b = kt;
      jsg_set_add(out, &b);
    }
    if (extra_ok(g, n, f->a, br->depth)) {
      b.top.st = O_XKEY;
      b.top.b = kt;
      jsg_set_add(out, &b);
    }
    return R_HANDLED;
  }
  case O_KEY: {
    uint32_t ch = c < 256 ? tchild(g, f->b, c) : JSG_NIL;
    if (ch == JSG_NIL || !key_cands(g, n, ch, f->a, br->depth)) return R_REJ;
    if (g->tn[ch].term >= 0) {
      f->st = O_COLON;
      f->b = (uint32_t)g->tn[ch].term;
    } else {
      f->b = ch;
    }
    return R_OK;
  }
  case O_XKEY:
    if (f->u8) {
      if (!utf8_cont(&f->u8, c)) return R_REJ;
    } else if (c == '"') {
      if (f->b != JSG_NIL) {
        uint32_t q = tchild(g, f->b, '"');
        if (q != JSG_NIL && g->tn[q].term >= 0) return R_REJ; /* a declared name */
      }
      f->st = O_COLON;
      f->b = JSG_NIL;
      return R_OK;
    } else if (c < 0x20 || c == '\\' || c > 0xFF) {
      return R_REJ;
    } else if (c >= 0x80 && !utf8_lead(c, &f->u8)) {
      return R_REJ;
    }
    if (f->b != JSG_NIL) f->b = tchild(g, f->b, c);
    return R_OK;
  case O_COLON:
    if ((w = gap(f, c))) return w > 0 ? R_OK : R_REJ;
    if (c != ':') return R_REJ;
    f->st = O_VAL;
    f->ws = 0;
    return R_OK;
  case O_VAL: {
    if ((w = gap(f, c))) return w > 0 ? R_OK : R_REJ;
    uint32_t node = f->b == JSG_NIL ? n->extra : g->props[n->first + f->b].node;
    f->a = f->b == JSG_NIL ? n->count : f->b + 1;
    f->st = O_AFTER;
    f->ws = 0;
    f->b = 0;
    push_value(x, br, node, c, out);
    return R_HANDLED;
  }
  case O_AFTER:
    if ((w = gap(f, c))) return w > 0 ? R_OK : R_REJ;
    if (c == ',') {
      if (!more_keys(g, n, f->a, br->depth)) return R_REJ;
      f->st = O_NEXT;
      f->ws = 0;
      return R_OK;
    }
    if (c == '}' && next_req(g, n, f->a) >= n->count) return R_DONE;
    return R_REJ;
  default:
    return R_REJ;
  }
}

/* ---- arrays ----------------------------------------------------------------------------- */

static uint32_t item(const jsg_grammar *g, const jsg_node *n, uint32_t i) {
  return i < n->count ? g->kids[n->first + i] : n->extra;
}

static bool item_ok(const jsg_grammar *g, const jsg_node *n, uint32_t i, uint32_t depth) {
  return i < n->max_items && enter_ok(g, item(g, n, i), depth);
}

/* Array frame: a = items begun. */
static int step_arr(jsg_ctx *x, jsg_br *br, const jsg_node *n, int c, jsg_set *out) {
  const jsg_grammar *g = x->g;
  jsg_frame *f = &br->top;
  int w;
  switch (f->st) {
  case A_START:
    if (c != '[') return R_REJ;
    f->st = A_OPEN;
    return R_OK;
  case A_OPEN:
  case A_NEXT: {
    if ((w = gap(f, c))) return w > 0 ? R_OK : R_REJ;
    if (f->st == A_OPEN) {
      if (c == ']') return n->min_items == 0 ? R_DONE : R_REJ;
      if (!item_ok(g, n, 0, br->depth)) return R_REJ;
    }
    uint32_t i = f->a;
    f->a = i + 1;
    f->st = A_AFTER;
    f->ws = 0;
    push_value(x, br, item(g, n, i), c, out);
    return R_HANDLED;
  }
  case A_AFTER:
    if ((w = gap(f, c))) return w > 0 ? R_OK : R_REJ;
    if (c == ',') {
      if (!item_ok(g, n, f->a, br->depth)) return R_REJ;
      f->st = A_NEXT;
      f->ws = 0;
      return R_OK;
    }
    if (c == ']' && f->a >= n->min_items) return R_DONE;
    return R_REJ;
  default:
    return R_REJ;
  }
}

/* ---- the wrapper: prefix, value, suffix ------------------------------------------------- */

static int step_wrap(jsg_ctx *x, jsg_br *br, const jsg_node *n, int c, jsg_set *out) {
  const jsg_grammar *g = x->g;
  jsg_frame *f = &br->top;
  switch (f->st) {
  case W_PRE:
    if (c != (uint8_t)g->bytes[n->pre + f->a]) return R_REJ;
    if (++f->a == n->pre_len) {
      f->st = W_VAL;
      f->a = 0;
    }
    return R_OK;
  case W_VAL:
    f->st = n->suf_len ? W_SUF : W_DONE;
    f->a = 0;
    push_value(x, br, n->value, c, out);
    return R_HANDLED;
  case W_SUF:
    if (c != (uint8_t)g->bytes[n->suf + f->a]) return R_REJ;
    if (++f->a == n->suf_len) {
      f->st = W_DONE;
      f->a = 0;
    }
    return R_OK;
  default:
    return R_REJ;
  }
}

/* ---- the step --------------------------------------------------------------------------- */

static void run(jsg_ctx *x, jsg_br *br, int c, jsg_set *out) {
  for (;;) {
    const jsg_node *n = &x->g->nodes[br->top.node];
    int r;
    switch (n->kind) {
    case K_STR: r = step_str(n, &br->top, c); break;
    case K_NUM: r = step_num(n, &br->top, c); break;
    case K_LIT: r = step_lit(x->g, &br->top, c); break;
    case K_OBJ: r = step_obj(x, br, n, c, out); break;
    case K_ARR: r = step_arr(x, br, n, c, out); break;
    case K_WRAP: r = step_wrap(x, br, n, c, out); break;
    default: r = R_REJ; break;
    }
    switch (r) {
    case R_OK:
      jsg_set_add(out, br);
      return;
    case R_DONE:
      pop(x->links, br);
      jsg_set_add(out, br);
      return;
    case R_REFEED:
      if (br->parent == JSG_NIL) return;
      pop(x->links, br);
      continue;
    default:
      return;
    }
  }
}

void jsg_feed(jsg_ctx *x, const jsg_br *in, int c, jsg_set *out) {
  jsg_br b = *in;
  run(x, &b, c, out);
}

bool jsg_can_end(const jsg_grammar *g, const jsg_link *links, const jsg_br *br) {
  jsg_br b = *br;
  for (;;) {
    const jsg_node *n = &g->nodes[b.top.node];
    switch (n->kind) {
    case K_NUM:
      if (!num_can_end(n, &b.top)) return false;
      break;
    case K_LIT:
      if (g->tn[b.top.a].term < 0) return false;
      break;
    case K_WRAP:
      return b.top.st == W_DONE;
    default:
      return false;
    }
    if (b.parent == JSG_NIL) return false;
    pop(links, &b);
  }
}

bool jsg_text_state(const jsg_grammar *g, const jsg_set *s, uint32_t *room) {
  /* Every branch must be in text; a token is allowed when one branch takes it, so the branch
   * with the most room decides. */
  uint32_t most = 0;
  if (!s->n) return false;
  for (uint32_t i = 0; i < s->n; i++) {
    const jsg_frame *f = &s->b[i].top;
    const jsg_node *n = &g->nodes[f->node];
    uint32_t r;
    if (f->u8) return false;
    if (n->kind == K_STR && f->st == S_IN && f->x == 0)
      r = n->max_len == JSG_NIL ? UINT32_MAX : n->max_len - f->a;
    else if (n->kind == K_OBJ && f->st == O_XKEY && f->b == JSG_NIL)
      r = UINT32_MAX;
    else
      return false;
    if (r > most) most = r;
  }
  *room = most;
  return true;
}

/* ---- fewest bytes left ------------------------------------------------------------------ */

/* Items min_items needs from index c on, each with its comma. */
static uint64_t items_needed(const jsg_grammar *g, const jsg_node *n, uint32_t c) {
  uint64_t s = 0;
  for (uint32_t i = c; i < n->min_items && i < n->count; i++)
    s = sat_add(s, 1 + g->nodes[g->kids[n->first + i]].mlen);
  uint32_t from = c > n->count ? c : n->count;
  if (n->min_items > from) {
    uint64_t each = n->extra == JSG_NIL ? JSG_INF : 1 + g->nodes[n->extra].mlen;
    uint64_t k = n->min_items - from;
    s = sat_add(s, each >= JSG_INF / k ? JSG_INF : each * k);
  }
  return s;
}

static uint64_t key_rem(const jsg_grammar *g, const jsg_node *n, uint32_t t, uint32_t next) {
  uint64_t best = JSG_INF;
  if (next >= n->count) return best;
  uint32_t lim = next_req(g, n, next);
  if (lim >= n->count) lim = n->count - 1;
  const jsg_tnode *p = &g->tn[t];
  for (uint32_t k = 0; k < p->in; k++) {
    uint32_t i = g->tidx[p->ilo + k];
    const jsg_prop *pp = &g->props[n->first + i];
    if (i < next || i > lim || pp->node == JSG_NIL) continue;
    uint64_t r = sat_add(sat_add(pp->klen - p->depth + 1, g->nodes[pp->node].mlen),
                         rest(g, n, i + 1));
    if (r < best) best = r;
  }
  return best;
}

static uint64_t frame_rem(const jsg_grammar *g, const jsg_frame *f) {
  const jsg_node *n = &g->nodes[f->node];
  switch (n->kind) {
  case K_STR: {
    if (f->st == S_START) return n->mlen;
    uint64_t r = f->u8 >> 4;
    int e = f->x & 7, k = e - 2;
    if (e == 1) r += 1;
    else if (e >= 2 && e <= 5) {
      r += (uint64_t)(4 - k);
      bool high = !(f->x & 0x80) && ((k == 2 && f->b >= 0xD8 && f->b <= 0xDB) ||
                                     (k == 3 && (f->b >> 4) >= 0xD8 && (f->b >> 4) <= 0xDB));
      if (high) r += 6;
    } else if (e == 6) r += 6;
    else if (e == 7) r += 5;
    if (f->a < n->min_len) r += n->min_len - f->a;
    return r + 1;
  }
  case K_NUM: return num_rem(n, f);
  case K_LIT: return g->tn[f->a].minrem;
  case K_OBJ: {
    uint64_t ex = n->extra == JSG_NIL ? JSG_INF : sat_add(g->nodes[n->extra].mlen, 1);
    switch (f->st) {
    case O_START: return n->mlen;
    case O_OPEN: return rest(g, n, f->a) ? rest(g, n, f->a) : 1;
    case O_NEXT: {
      uint64_t best = n->root != JSG_NIL ? key_rem(g, n, n->root, f->a) : JSG_INF;
      if (n->extra != JSG_NIL && next_req(g, n, f->a) >= n->count) {
        uint32_t q = n->root != JSG_NIL ? tchild(g, n->root, '"') : JSG_NIL;
        uint32_t q2 = q != JSG_NIL ? tchild(g, q, '"') : JSG_NIL;
        uint64_t e = sat_add((q2 != JSG_NIL ? 3 : 2) + 1, ex - 1);
        if (e < best) best = e;
      }
      return sat_add(best, 1);
    }
    case O_KEY: return sat_add(key_rem(g, n, f->b, f->a), 1);
    case O_XKEY: {
      uint64_t r = f->u8 >> 4;
      if (!r && f->b != JSG_NIL) {
        uint32_t q = tchild(g, f->b, '"');
        if (q != JSG_NIL && g->tn[q].term >= 0) r = 1;
      }
      return sat_add(r + 2, ex);
    }
    case O_COLON:
    case O_VAL: {
      uint64_t r = f->st == O_COLON ? 1 : 0;
      if (f->b == JSG_NIL) return sat_add(r, ex);
      const jsg_prop *pp = &g->props[n->first + f->b];
      return sat_add(sat_add(r + 1, g->nodes[pp->node].mlen), rest(g, n, f->b + 1));
    }
    case O_AFTER: return sat_add(rest(g, n, f->a), 1);
    default: return 0;
    }
  }
  case K_ARR:
    switch (f->st) {
    case A_START: return n->mlen;
    case A_OPEN: return n->min_items ? items_needed(g, n, 0) : 1;
    case A_AFTER: return sat_add(items_needed(g, n, f->a), 1);
    case A_NEXT: {
      uint32_t it = item(g, n, f->a);
      uint64_t m = it == JSG_NIL ? JSG_INF : g->nodes[it].mlen;
      return sat_add(sat_add(m, items_needed(g, n, f->a + 1)), 1);
    }
    default: return 0;
    }
  case K_WRAP:
    switch (f->st) {
    case W_PRE:
      return sat_add(n->pre_len - f->a + n->suf_len, g->nodes[n->value].mlen);
    case W_VAL: return sat_add(n->suf_len, g->nodes[n->value].mlen);
    case W_SUF: return n->suf_len - f->a;
    default: return 0;
    }
  default:
    return 0;
  }
}

uint64_t jsg_rem(const jsg_grammar *g, const jsg_link *links, const jsg_br *br) {
  uint64_t r = frame_rem(g, &br->top);
  for (uint32_t p = br->parent; p != JSG_NIL; p = links[p].up)
    r = sat_add(r, frame_rem(g, &links[p].f));
  return r;
}
