/* coordinator/generate/json_grammar.c — the vocabulary trie, runs, the token mask and
 * advancing by tokens; see json_grammar.h. (Schema compiling: json_grammar_compile.c; the byte
 * step: json_grammar_step.c.)
 *
 * The mask walks the vocabulary's byte trie depth first from the run's current branches,
 * stepping one byte per trie edge on a copy of the branch set and pruning a subtree at the
 * first byte no branch takes; links pushed below a trie node are dropped when the walk leaves
 * it. Inside a string (or an extra key) whole subtrees whose tokens are all plain text are
 * taken at once: ids are numbered in byte order, so a subtree is one range of the sorted ids.
 */
#define _GNU_SOURCE
#include "coordinator/generate/json_grammar_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct vnode {
  uint32_t child;   /* first child (children contiguous, ascending byte) */
  uint32_t tlo, thi; /* the subtree's ids: v->sorted[tlo .. thi) */
  uint16_t nchild;
  uint16_t nhere;   /* ids whose bytes end here: v->sorted[tlo .. tlo + nhere) */
  uint16_t maxcp;   /* plain: most code points of a token's bytes from this node's byte on */
  uint8_t byte;
  uint8_t plain;    /* every token below has whole plain-text UTF-8 from this byte on */
} vnode;

enum { V_NONE, V_REG, V_ADDED };

struct df_jsg_vocab {
  const df_tok *tok;
  int64_t ntok;
  vnode *nodes;
  uint32_t n_nodes, maxlen;
  uint32_t *sorted;
  uint8_t *cls;
  uint32_t *added;
  uint32_t n_added;
};

struct df_jsg_run {
  const df_jsg *g;
  const df_jsg_vocab *v;
  int32_t *end;
  int n_end;
  bool finished;
  jsg_set cur;
  jsg_ctx x;         /* links [0, npersist) belong to cur; above are scratch */
  uint32_t npersist;
  jsg_set **lv;      /* mask walk: the branch set at each trie depth */
  uint32_t nlv;
  uint64_t *bits;    /* allowed ids of the last walk */
  int64_t nbits;
  jsg_set tmp[2];
};

static void set_err(char *err, size_t errlen, const char *msg) {
  if (err && errlen) snprintf(err, errlen, "%s", msg);
}

/* ---- vocab ------------------------------------------------------------------------------ */

typedef struct tok_ent {
  const uint8_t *p;
  uint32_t len, id;
} tok_ent;

static int tok_cmp(const void *a, const void *b) {
  const tok_ent *x = a, *y = b;
  uint32_t n = x->len < y->len ? x->len : y->len;
  int r = memcmp(x->p, y->p, n);
  if (r) return r;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

void df_jsg_vocab_destroy(df_jsg_vocab **vp) {
  if (!vp || !*vp) return;
  df_jsg_vocab *v = *vp;
  free(v->nodes);
  free(v->sorted);
  free(v->cls);
  free(v->added);
  free(v);
  *vp = NULL;
}

int64_t df_jsg_vocab_size(const df_jsg_vocab *v) {
  return v->ntok;
}

df_jsg_vocab *df_jsg_vocab_new(const df_tok *tok, char *err, size_t errlen) {
  size_t ntok = df_tok_vocab_size(tok);
  if (!ntok || ntok > INT32_MAX) {
    set_err(err, errlen, "json grammar: the tokenizer has no ids");
    return NULL;
  }
  df_jsg_vocab *v = calloc(1, sizeof *v);
  tok_ent *e = calloc(ntok, sizeof *e);
  uint32_t *depth = NULL, cap = 0;
  if (!v || !e) goto oom;
  v->tok = tok;
  v->ntok = (int64_t)ntok;
  v->cls = calloc(ntok, 1);
  v->sorted = calloc(ntok, sizeof *v->sorted);
  v->added = calloc(ntok, sizeof *v->added);
  if (!v->cls || !v->sorted || !v->added) goto oom;
  uint32_t n = 0;
  for (size_t id = 0; id < ntok; id++) {
    size_t len;
    const uint8_t *b = df_tok_id_to_bytes(tok, (int32_t)id, &len);
    if (!b || !len || len > UINT16_MAX) continue;
    if (df_tok_is_added(tok, (int32_t)id)) {
      v->cls[id] = V_ADDED;
      v->added[v->n_added++] = (uint32_t)id;
      continue;
    }
    v->cls[id] = V_REG;
    e[n++] = (tok_ent){b, (uint32_t)len, (uint32_t)id};
    if (len > v->maxlen) v->maxlen = (uint32_t)len;
  }
  qsort(e, n, sizeof *e, tok_cmp);
  for (uint32_t i = 0; i < n; i++) v->sorted[i] = e[i].id;
  /* Breadth first over the sorted tokens: node t covers [tlo, thi) at depth[t]. */
  cap = 1024;
  v->nodes = malloc(cap * sizeof *v->nodes);
  depth = malloc(cap * sizeof *depth);
  if (!v->nodes || !depth) goto oom;
  memset(&v->nodes[0], 0, sizeof v->nodes[0]);
  v->nodes[0].thi = n;
  depth[0] = 0;
  v->n_nodes = 1;
  for (uint32_t t = 0; t < v->n_nodes; t++) {
    uint32_t lo = v->nodes[t].tlo, hi = v->nodes[t].thi, d = depth[t];
    while (lo < hi && e[lo].len == d) lo++;
    v->nodes[t].nhere = (uint16_t)(lo - v->nodes[t].tlo);
    uint32_t nch = 0;
    for (uint32_t i = lo; i < hi; i++)
      if (i == lo || e[i].p[d] != e[i - 1].p[d]) nch++;
    if (v->n_nodes + nch > cap) {
      while (v->n_nodes + nch > cap) cap *= 2;
      vnode *nn = realloc(v->nodes, cap * sizeof *nn);
      if (nn) v->nodes = nn;
      uint32_t *nd = realloc(depth, cap * sizeof *nd);
      if (nd) depth = nd;
      if (!nn || !nd) goto oom;
    }
    v->nodes[t].child = v->n_nodes;
    v->nodes[t].nchild = (uint16_t)nch;
    for (uint32_t i = lo; i < hi;) {
      uint32_t j = i + 1;
      while (j < hi && e[j].p[d] == e[i].p[d]) j++;
      vnode *c = &v->nodes[v->n_nodes];
      memset(c, 0, sizeof *c);
      c->byte = e[i].p[d];
      c->tlo = i;
      c->thi = j;
      depth[v->n_nodes++] = d + 1;
      i = j;
    }
  }
  /* plain / maxcp: every token below node t (depth d) is whole text from byte d-1 on. */
  for (uint32_t t = 1; t < v->n_nodes; t++) {
    vnode *c = &v->nodes[t];
    uint32_t off = depth[t] - 1, most = 0;
    bool plain = true;
    for (uint32_t i = c->tlo; i < c->thi && plain; i++) {
      uint32_t cps = 0;
      for (uint32_t o = off; o < e[i].len;) {
        size_t k = jsg_text_char(e[i].p + o, e[i].len - o);
        if (!k) {
          plain = false;
          break;
        }
        o += (uint32_t)k;
        cps++;
      }
      if (cps > most) most = cps;
    }
    c->plain = plain && most <= UINT16_MAX;
    c->maxcp = (uint16_t)(plain ? most : 0);
  }
  free(depth);
  free(e);
  return v;
oom:
  free(depth);
  free(e);
  df_jsg_vocab_destroy(&v);
  set_err(err, errlen, "json grammar: out of memory building the vocabulary trie");
  return NULL;
}

/* ---- runs ------------------------------------------------------------------------------- */

df_jsg_run *df_jsg_run_new(const df_jsg *g, const df_jsg_vocab *v, const int32_t *end_ids,
                           int n_end, char *err, size_t errlen) {
  if (n_end < 0) n_end = 0;
  for (int i = 0; i < n_end; i++)
    if (end_ids[i] < 0) {
      set_err(err, errlen, "json grammar: negative end id");
      return NULL;
    }
  df_jsg_run *r = calloc(1, sizeof *r);
  if (!r) goto oom;
  r->g = g;
  r->v = v;
  r->x.g = g;
  r->n_end = n_end;
  r->end = malloc((size_t)(n_end ? n_end : 1) * sizeof *r->end);
  if (!r->end) goto oom;
  if (n_end) memcpy(r->end, end_ids, (size_t)n_end * sizeof *end_ids);
  int64_t nb = v ? v->ntok : 0;
  for (int i = 0; i < n_end; i++)
    if (end_ids[i] >= nb) nb = (int64_t)end_ids[i] + 1;
  r->nbits = nb;
  r->bits = calloc((size_t)(nb + 63) / 64 + 1, sizeof *r->bits);
  if (!r->bits) goto oom;
  jsg_initial(g, &r->cur.b[0]);
  r->cur.n = 1;
  return r;
oom:
  df_jsg_run_destroy(&r);
  set_err(err, errlen, "json grammar: out of memory");
  return NULL;
}

df_jsg_run *df_jsg_run_clone(const df_jsg_run *r, char *err, size_t errlen) {
  df_jsg_run *c = df_jsg_run_new(r->g, r->v, r->end, r->n_end, err, errlen);
  if (!c) return NULL;
  if (r->npersist) {
    c->x.links = malloc(r->npersist * sizeof *c->x.links);
    if (!c->x.links) {
      df_jsg_run_destroy(&c);
      set_err(err, errlen, "json grammar: out of memory");
      return NULL;
    }
    memcpy(c->x.links, r->x.links, r->npersist * sizeof *c->x.links);
    c->x.cap = c->x.n = c->npersist = r->npersist;
  }
  c->cur = r->cur;
  c->finished = r->finished;
  return c;
}

void df_jsg_run_destroy(df_jsg_run **rp) {
  if (!rp || !*rp) return;
  df_jsg_run *r = *rp;
  for (uint32_t i = 0; i < r->nlv; i++) free(r->lv[i]);
  free(r->lv);
  free(r->x.links);
  free(r->end);
  free(r->bits);
  free(r);
  *rp = NULL;
}

static bool is_end(const df_jsg_run *r, int32_t id) {
  for (int i = 0; i < r->n_end; i++)
    if (r->end[i] == id) return true;
  return false;
}

bool df_jsg_complete(const df_jsg_run *r) {
  if (r->finished) return false;
  for (uint32_t i = 0; i < r->cur.n; i++)
    if (jsg_can_end(r->g, r->x.links, &r->cur.b[i])) return true;
  return false;
}

uint64_t df_jsg_min_bytes_left(const df_jsg_run *r) {
  if (r->finished) return 0;
  uint64_t best = JSG_INF;
  for (uint32_t i = 0; i < r->cur.n; i++) {
    uint64_t m = jsg_rem(r->g, r->x.links, &r->cur.b[i]);
    if (m < best) best = m;
  }
  return best;
}

/* Keep only the links the current branches reach, renumbered in order (a link's parent
 * always has a lower index, so one ascending pass remaps them in place). */
static int compact(df_jsg_run *r) {
  uint32_t n = r->x.n;
  if (!n) return 0;
  uint32_t *map = malloc(n * sizeof *map);
  if (!map) return -1;
  for (uint32_t i = 0; i < n; i++) map[i] = 0;
  for (uint32_t b = 0; b < r->cur.n; b++)
    for (uint32_t p = r->cur.b[b].parent; p != JSG_NIL && !map[p]; p = r->x.links[p].up) map[p] = 1;
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (!map[i]) continue;
    jsg_link l = r->x.links[i];
    if (l.up != JSG_NIL) l.up = map[l.up];
    r->x.links[k] = l;
    map[i] = k++;
  }
  for (uint32_t b = 0; b < r->cur.n; b++)
    if (r->cur.b[b].parent != JSG_NIL) r->cur.b[b].parent = map[r->cur.b[b].parent];
  free(map);
  r->x.n = r->npersist = k;
  return 0;
}

/* A branch that may take a byte of an added token: at the literal prefix or suffix. */
static bool at_literal(const df_jsg_run *r, const jsg_br *b) {
  return b->depth == 1 && b->top.node == r->g->root &&
         (b->top.st == W_PRE || b->top.st == W_SUF);
}

/* Step the current set through bytes into r->tmp (links above npersist). Returns the index
 * of the first byte no branch takes, or n with the result in *res; -1 out of memory. */
static int64_t walk(df_jsg_run *r, const uint8_t *b, size_t n, bool literal, jsg_set **res) {
  jsg_set *a = &r->tmp[0], *nx = &r->tmp[1];
  a->n = r->cur.n;
  memcpy(a->b, r->cur.b, r->cur.n * sizeof *a->b);
  for (size_t i = 0; i < n; i++) {
    nx->n = 0;
    for (uint32_t k = 0; k < a->n; k++)
      if (!literal || at_literal(r, &a->b[k])) jsg_feed(&r->x, &a->b[k], b[i], nx);
    if (r->x.oom) return -1;
    if (!nx->n) return (int64_t)i;
    jsg_set *t = a;
    a = nx;
    nx = t;
  }
  *res = a;
  return (int64_t)n;
}

static int64_t advance(df_jsg_run *r, const uint8_t *b, size_t n, bool literal) {
  jsg_set *res = NULL;
  int64_t k = walk(r, b, n, literal, &res);
  if (k != (int64_t)n) {
    r->x.n = r->npersist;
    r->x.oom = false;
    return k;
  }
  r->cur.n = res->n;
  memcpy(r->cur.b, res->b, res->n * sizeof *res->b);
  if (compact(r)) return -1;
  return k;
}

int64_t df_jsg_accept_bytes(df_jsg_run *r, const void *bytes, size_t len) {
  if (r->finished) return -1;
  return advance(r, bytes, len, false);
}

int df_jsg_accept(df_jsg_run *r, int32_t id) {
  if (r->finished || id < 0) return -1;
  if (is_end(r, id)) {
    if (!df_jsg_complete(r)) return -1;
    r->finished = true;
    return 0;
  }
  if (!r->v || id >= r->v->ntok || r->v->cls[id] == V_NONE) return -1;
  size_t len;
  const uint8_t *b = df_tok_id_to_bytes(r->v->tok, id, &len);
  if (!b || !len) return -1;
  return advance(r, b, len, r->v->cls[id] == V_ADDED) == (int64_t)len ? 0 : -1;
}

/* ---- the mask --------------------------------------------------------------------------- */

static jsg_set *level(df_jsg_run *r, uint32_t i) {
  if (i >= r->nlv) {
    uint32_t n = r->v->maxlen + 2;
    if (!r->lv) {
      r->lv = calloc(n, sizeof *r->lv);
      if (!r->lv) return NULL;
      r->nlv = n;
    }
    if (i >= r->nlv) return NULL;
  }
  if (!r->lv[i]) r->lv[i] = malloc(sizeof *r->lv[i]);
  return r->lv[i];
}

static void mark(df_jsg_run *r, uint32_t lo, uint32_t hi) {
  const uint32_t *s = r->v->sorted;
  for (uint32_t i = lo; i < hi; i++) r->bits[s[i] >> 6] |= UINT64_C(1) << (s[i] & 63);
}

static void dfs(df_jsg_run *r, uint32_t vn, uint32_t depth) {
  const df_jsg_vocab *v = r->v;
  jsg_set *cur = level(r, depth), *nx = level(r, depth + 1);
  if (!cur || !nx) {
    r->x.oom = true;
    return;
  }
  uint32_t room = 0;
  bool text = jsg_text_state(r->g, cur, &room);
  const vnode *p = &v->nodes[vn];
  for (uint32_t k = 0; k < p->nchild && !r->x.oom; k++) {
    const vnode *c = &v->nodes[p->child + k];
    if (text && c->plain && c->maxcp <= room) {
      mark(r, c->tlo, c->thi);
      continue;
    }
    uint32_t m = r->x.n;
    nx->n = 0;
    for (uint32_t i = 0; i < cur->n; i++) jsg_feed(&r->x, &cur->b[i], c->byte, nx);
    if (nx->n) {
      mark(r, c->tlo, c->tlo + c->nhere);
      if (c->nchild) dfs(r, p->child + k, depth + 1);
    }
    r->x.n = m;
  }
}

/* Fill r->bits with the allowed ids. Returns 0 or -1 (out of memory). */
static int allowed(df_jsg_run *r) {
  memset(r->bits, 0, (size_t)(r->nbits + 63) / 64 * sizeof *r->bits);
  if (r->finished) return 0;
  jsg_set *l0 = level(r, 0);
  if (!l0) return -1;
  *l0 = r->cur;
  r->x.oom = false;
  dfs(r, 0, 0);
  r->x.n = r->npersist;
  if (r->x.oom) {
    r->x.oom = false;
    return -1;
  }
  for (uint32_t i = 0; i < r->v->n_added; i++) {
    uint32_t id = r->v->added[i];
    size_t len;
    const uint8_t *b = df_tok_id_to_bytes(r->v->tok, (int32_t)id, &len);
    jsg_set *res;
    if (walk(r, b, len, true, &res) == (int64_t)len) r->bits[id >> 6] |= UINT64_C(1) << (id & 63);
    r->x.n = r->npersist;
    r->x.oom = false;
  }
  bool done = df_jsg_complete(r);
  for (int i = 0; i < r->n_end; i++) {
    uint32_t id = (uint32_t)r->end[i];
    if (done) r->bits[id >> 6] |= UINT64_C(1) << (id & 63);
    else r->bits[id >> 6] &= ~(UINT64_C(1) << (id & 63));
  }
  return 0;
}

int64_t df_jsg_mask(df_jsg_run *r, float *logits, int64_t V) {
  if (!r->v || V < 0) return -1;
  if (allowed(r)) return -1;
  int64_t cnt = 0, nb = V < r->nbits ? V : r->nbits;
  for (int64_t i = 0; i < nb; i++) {
    if (r->bits[i >> 6] >> (i & 63) & 1) cnt++;
    else logits[i] = -INFINITY;
  }
  for (int64_t i = nb; i < V; i++) logits[i] = -INFINITY;
  return cnt;
}
