/* coordinator/generate/json_grammar_graph.c — passes over the compiled grammar graph: literal
 * tries, $ref resolution, and the fixed points every position's liveness rests on; see
 * json_grammar_internal.h.
 *
 * After compiling (json_grammar_compile.c) the graph may hold aliases ($ref) and cycles
 * (recursive $refs). Linking replaces every alias by the node it stands for, refuses cycles
 * that never reach a value (a definition that is only a $ref to itself, or its own anyOf
 * alternative), then computes by fixed point over the graph: h, the fewest stack frames a
 * complete value needs (none for a schema with no finite instance), mlen, its fewest bytes,
 * and tset, the JSON types the schema accepts (to prove oneOf alternatives disjoint).
 */
#include "coordinator/generate/json_grammar_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { F_OBJ = 1, F_ARR = 2, F_STR = 4, F_NUM = 8, F_TRUE = 16, F_FALSE = 32, F_NULL = 64 };

bool jsg_grow(void **p, uint32_t *cap, uint64_t need, size_t elem) {
  if (need <= *cap) return true;
  uint64_t nc = *cap ? *cap : 16;
  while (nc < need) nc *= 2;
  void *q = nc < UINT32_MAX / 2 ? realloc(*p, (size_t)nc * elem) : NULL;
  if (!q) return false;
  *p = q;
  *cap = (uint32_t)nc;
  return true;
}

static int lerr(jsg_lerr *e, const char *kw, uint32_t node, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  e->kw = kw;
  e->node = node;
  return -1;
}

/* ---- literal tries ---------------------------------------------------------------------- */

static int lit_cmp(const void *a, const void *b) {
  const jsg_lit *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int r = memcmp(x->p, y->p, n);
  if (r) return r;
  return x->len < y->len ? -1 : x->len > y->len;
}

static int u32_cmp(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

uint32_t jsg_build_trie(df_jsg *g, jsg_lit *e, uint32_t n) {
  bool ok = false;
  uint32_t *rng = NULL, cap_rng = 0;
  qsort(e, n, sizeof *e, lit_cmp);
  uint32_t root = g->n_tn;
  if (!jsg_grow((void **)&g->tn, &g->cap_tn, root + 1u, sizeof *g->tn) ||
      !jsg_grow((void **)&rng, &cap_rng, 2, sizeof *rng))
    goto out;
  memset(&g->tn[root], 0, sizeof g->tn[root]);
  g->n_tn++;
  rng[0] = 0;
  rng[1] = n;
  for (uint32_t t = root; t < g->n_tn; t++) {
    uint32_t lo = rng[2 * (t - root)], hi = rng[2 * (t - root) + 1], d = g->tn[t].depth;
    if (!jsg_grow((void **)&g->tidx, &g->cap_tidx, (uint64_t)g->n_tidx + (hi - lo), 4)) goto out;
    g->tn[t].ilo = g->n_tidx;
    g->tn[t].in = hi - lo;
    for (uint32_t i = lo; i < hi; i++) g->tidx[g->n_tidx++] = e[i].id;
    qsort(g->tidx + g->tn[t].ilo, hi - lo, 4, u32_cmp);
    g->tn[t].term = -1;
    while (lo < hi && e[lo].len == d) {
      if (g->tn[t].term < 0) g->tn[t].term = (int32_t)e[lo].id;
      lo++;
    }
    uint32_t nch = 0;
    for (uint32_t i = lo; i < hi; i++)
      if (i == lo || (uint8_t)e[i].p[d] != (uint8_t)e[i - 1].p[d]) nch++;
    uint32_t first = g->n_tn;
    if (!jsg_grow((void **)&g->tn, &g->cap_tn, (uint64_t)first + nch, sizeof *g->tn) ||
        !jsg_grow((void **)&rng, &cap_rng, 2ull * (first + nch - root), sizeof *rng))
      goto out;
    g->tn[t].child = first;
    g->tn[t].nchild = nch;
    for (uint32_t i = lo; i < hi;) {
      uint32_t j = i + 1;
      while (j < hi && e[j].p[d] == e[i].p[d]) j++;
      jsg_tnode *ch = &g->tn[g->n_tn];
      memset(ch, 0, sizeof *ch);
      ch->byte = (uint8_t)e[i].p[d];
      ch->depth = d + 1;
      rng[2 * (g->n_tn - root)] = i;
      rng[2 * (g->n_tn - root) + 1] = j;
      g->n_tn++;
      i = j;
    }
  }
  for (uint32_t t = g->n_tn; t-- > root;) {
    jsg_tnode *p = &g->tn[t];
    p->minrem = p->term >= 0 ? 0 : JSG_INF;
    for (uint32_t k = 0; k < p->nchild; k++)
      if (g->tn[p->child + k].minrem + 1 < p->minrem) p->minrem = g->tn[p->child + k].minrem + 1;
  }
  ok = true;
out:
  free(rng);
  return ok ? root : JSG_NIL;
}

/* ---- linking ---------------------------------------------------------------------------- */

/* The node an alias chain ends at; JSG_NIL (and *bad = the alias) for a cycle. */
static uint32_t resolve(const df_jsg *g, uint32_t x, uint32_t *bad) {
  uint32_t steps = 0, start = x;
  while (x != JSG_NIL && g->nodes[x].kind == K_ALIAS) {
    x = g->nodes[x].alias;
    if (++steps > g->n_nodes || x == JSG_NIL) {
      if (*bad == JSG_NIL) *bad = start;
      return JSG_NIL;
    }
  }
  return x;
}

static int resolve_all(df_jsg *g, jsg_lerr *e) {
  uint32_t bad = JSG_NIL;
  for (uint32_t i = 0; i < g->n_props; i++)
    if (g->props[i].node != JSG_NIL) g->props[i].node = resolve(g, g->props[i].node, &bad);
  for (uint32_t i = 0; i < g->n_kids; i++) g->kids[i] = resolve(g, g->kids[i], &bad);
  for (uint32_t i = 0; i < g->n_nodes; i++) {
    jsg_node *n = &g->nodes[i];
    if ((n->kind == K_OBJ || n->kind == K_ARR) && n->extra != JSG_NIL)
      n->extra = resolve(g, n->extra, &bad);
    if (n->kind == K_WRAP) n->value = resolve(g, n->value, &bad);
  }
  if (bad != JSG_NIL)
    return lerr(e, "$ref", bad, "$ref cycle: the definition is only a reference to itself");
  /* A union that is (through other unions) its own alternative would fork forever; a long
   * chain of them forks deeply at every value start. ud: unions nested directly, 0 unknown. */
  uint32_t *ud = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *ud);
  if (!ud) return lerr(e, "", JSG_NIL, "out of memory compiling the schema");
  for (bool ch = true; ch;) {
    ch = false;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
      const jsg_node *n = &g->nodes[i];
      if (ud[i]) continue;
      uint32_t d = 1;
      if (n->kind == K_UNION)
        for (uint32_t k = 0; k < n->count && d; k++) {
          uint32_t a = g->kids[n->first + k];
          if (g->nodes[a].kind != K_UNION) continue;
          if (!ud[a]) d = 0;
          else if (ud[a] + 1 > d) d = ud[a] + 1;
        }
      if (d) ud[i] = d, ch = true;
    }
  }
  int rc = 0;
  for (uint32_t i = 0; i < g->n_nodes && !rc; i++) {
    if (!ud[i])
      rc = lerr(e, "$ref", i,
                "left-recursive $ref (a schema that is its own anyOf alternative) is not "
                "supported");
    else if (ud[i] > JSG_UNION_DEPTH_MAX)
      rc = lerr(e, "anyOf", i, "anyOf / oneOf / type unions nest deeper than %d",
                JSG_UNION_DEPTH_MAX);
  }
  free(ud);
  return rc;
}

static uint32_t first_types(const df_jsg *g, const jsg_node *n) {
  if (n->loose) return F_OBJ | F_ARR | F_STR | F_NUM | F_TRUE | F_FALSE | F_NULL;
  switch (n->kind) {
  case K_STR: return F_STR;
  case K_NUM: return F_NUM;
  case K_OBJ: return F_OBJ;
  case K_ARR: return F_ARR;
  case K_LIT: {
    uint32_t t = 0;
    const jsg_tnode *r = &g->tn[n->root];
    for (uint32_t k = 0; k < r->nchild; k++) {
      uint8_t b = g->tn[r->child + k].byte;
      t |= b == '"' ? F_STR : b == '{' ? F_OBJ : b == '[' ? F_ARR : b == 't' ? F_TRUE
           : b == 'f' ? F_FALSE : b == 'n' ? F_NULL : F_NUM;
    }
    return t;
  }
  case K_UNION: {
    uint32_t t = 0;
    for (uint32_t k = 0; k < n->count; k++) t |= g->nodes[g->kids[n->first + k]].tset;
    return t;
  }
  case K_WRAP: return g->nodes[n->value].tset;
  default: return 0;
  }
}

static uint64_t sadd(uint64_t a, uint64_t b) {
  return a + b > JSG_INF ? JSG_INF : a + b;
}

/* Fixed point of h, mlen and tset (decreasing from "none" / increasing from empty). */
static void fixpoint(df_jsg *g) {
  bool changed = true;
  for (uint32_t iter = 0; changed && iter <= g->n_nodes + 1; iter++) {
    changed = false;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
      jsg_node *n = &g->nodes[i];
      uint64_t h = JSG_HINF, m = JSG_INF;
      switch (n->kind) {
      case K_STR: h = 1, m = sadd(2, n->min_len); break;
      case K_NUM: h = 1, m = n->mlen; break;
      case K_LIT: h = 1, m = g->tn[n->root].minrem; break;
      case K_OBJ: {
        uint64_t hm = 0, s = 0;
        bool any = false;
        for (uint32_t k = 0; k < n->count; k++) {
          const jsg_prop *p = &g->props[n->first + k];
          if (!p->req) continue;
          any = true;
          if (g->nodes[p->node].h > hm) hm = g->nodes[p->node].h;
          s = sadd(s, sadd(p->klen + 2u, g->nodes[p->node].mlen));
        }
        h = hm + 1;
        m = any ? sadd(s, 1) : 2;
        break;
      }
      case K_ARR: {
        uint64_t hm = 0, s = 0;
        for (uint32_t k = 0; k < n->min_items && k < n->count; k++) {
          const jsg_node *it = &g->nodes[g->kids[n->first + k]];
          if (it->h > hm) hm = it->h;
          s = sadd(s, sadd(1, it->mlen));
        }
        if (n->min_items > n->count) {
          if (n->extra == JSG_NIL) hm = JSG_HINF, s = JSG_INF;
          else {
            const jsg_node *it = &g->nodes[n->extra];
            uint64_t each = sadd(1, it->mlen), cnt = n->min_items - n->count;
            if (it->h > hm) hm = it->h;
            s = sadd(s, each >= JSG_INF / cnt ? JSG_INF : each * cnt);
          }
        }
        h = hm + 1;
        m = n->min_items ? sadd(s, 1) : 2;
        break;
      }
      case K_UNION:
        for (uint32_t k = 0; k < n->count; k++) {
          const jsg_node *a = &g->nodes[g->kids[n->first + k]];
          if (a->h < h) h = a->h;
          if (a->mlen < m) m = a->mlen;
        }
        break;
      case K_WRAP:
        h = (uint64_t)g->nodes[n->value].h + 1;
        m = sadd(n->pre_len + (uint64_t)n->suf_len, g->nodes[n->value].mlen);
        break;
      default:
        continue;
      }
      if (h > JSG_HINF) h = JSG_HINF;
      uint32_t t = first_types(g, n);
      if (h != n->h || m != n->mlen || t != n->tset) {
        n->h = (uint32_t)h;
        n->mlen = m;
        n->tset = t;
        changed = true;
      }
    }
  }
}

int jsg_finish(df_jsg *g, jsg_lerr *e) {
  if (resolve_all(g, e)) return -1;
  fixpoint(g);
  const jsg_node *w = &g->nodes[g->root];
  if (w->h > JSG_DEPTH_MAX) {
    if (g->nodes[w->value].h >= JSG_HINF)
      return lerr(e, "", g->root, "the schema has no finite instance (false, or a recursion "
                  "that never ends)");
    return lerr(e, "", g->root, "every instance of the schema nests deeper than %d",
                JSG_DEPTH_MAX - 1);
  }
  for (uint32_t i = 0; i < g->n_nodes; i++) {
    jsg_node *n = &g->nodes[i];
    if (n->kind == K_UNION && n->one_of)
      for (uint32_t a = 0; a < n->count; a++)
        for (uint32_t b = a + 1; b < n->count; b++)
          if (g->nodes[g->kids[n->first + a]].tset & g->nodes[g->kids[n->first + b]].tset)
            return lerr(e, "oneOf", i,
                        "'oneOf' alternatives %u and %u can match the same value (only "
                        "alternatives of disjoint JSON types are supported; use 'anyOf')", a, b);
    if (n->kind == K_OBJ) { /* rest(i): required members from i on, each ,"key":value */
      g->u64[n->aux + n->count] = 0;
      for (uint32_t k = n->count; k-- > 0;) {
        const jsg_prop *p = &g->props[n->first + k];
        g->u64[n->aux + k] = sadd(g->u64[n->aux + k + 1],
                                  p->req ? sadd(p->klen + 2u, g->nodes[p->node].mlen) : 0);
      }
    }
  }
  return 0;
}

void df_jsg_destroy(df_jsg **gp) {
  if (!gp || !*gp) return;
  df_jsg *g = *gp;
  free(g->nodes);
  free(g->props);
  free(g->kids);
  free(g->tn);
  free(g->tidx);
  free(g->u32);
  free(g->u64);
  free(g->bytes);
  free(g);
  *gp = NULL;
}