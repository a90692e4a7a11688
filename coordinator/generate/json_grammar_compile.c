/* coordinator/generate/json_grammar_compile.c — JSON Schema (2020-12 subset) text -> grammar
 * nodes; see json_grammar.h for the keywords and the output policy.
 *
 * One node per schema position and type: a schema with several types (a "type" array, or no
 * "type" and keywords of several kinds) becomes a union of one node per type; anyOf / oneOf a
 * union of its subschemas; enum / const a literal trie of their compact serializations; $ref
 * an alias of the referenced definition, compiled once (so recursion is a cycle in the graph)
 * and resolved away by json_grammar_graph.c's jsg_finish, which also computes what liveness
 * needs. Errors name the keyword and its JSON Pointer (RFC 6901).
 */
#define _GNU_SOURCE
#include "coordinator/generate/json_grammar_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES 20000
#define MAX_SCHEMA_DEPTH 64
#define MAX_MEMBERS 4096          /* enum members / properties per node */
#define MAX_LIT_BYTES (256u << 10) /* enum text + key text per grammar */
#define MAX_AFFIX (64u << 10)
#define PTR_MAX 400

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_NUM = 16, T_INT = 32, T_STR = 64 };

typedef struct def_ent {
  json_t *schema; /* NULL for "#" (the root itself) */
  char *ref;
  char ptr[PTR_MAX];
  uint32_t node;  /* the K_ALIAS standing for it */
} def_ent;

typedef struct cc {
  df_jsg *g;
  json_t *root;
  char *err, *param;
  size_t errlen, paramcap;
  bool failed;
  def_ent *defs;
  uint32_t n_defs, cap_defs;
  uint32_t any;
  uint32_t lit_bytes;
} cc;

static const char *const ANNOT[] = {"title", "description", "default", "examples", "$schema",
                                    "$id", "$comment", "deprecated", "readOnly", "writeOnly",
                                    "$defs", "definitions", NULL};
static const char *const KW_STR[] = {"minLength", "maxLength", NULL};
static const char *const KW_NUM[] = {"minimum", "maximum", "exclusiveMinimum",
                                     "exclusiveMaximum", NULL};
static const char *const KW_OBJ[] = {"properties", "required", "additionalProperties", NULL};
static const char *const KW_ARR[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
static const char *const KW_GEN[] = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
                                     NULL};

static bool in_list(const char *const *l, const char *k) {
  for (; *l; l++)
    if (!strcmp(*l, k)) return true;
  return false;
}

static uint32_t fail(cc *c, const char *kw, const char *ptr, const char *fmt, ...) {
  if (c->failed) return JSG_NIL;
  c->failed = true;
  char msg[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->err && c->errlen) {
    if (ptr) snprintf(c->err, c->errlen, "%s at %s", msg, *ptr ? ptr : "(root)");
    else snprintf(c->err, c->errlen, "%s", msg);
  }
  if (c->param && c->paramcap) snprintf(c->param, c->paramcap, "%s", kw ? kw : "");
  return JSG_NIL;
}

static bool grow(cc *c, void **p, uint32_t *cap, uint64_t need, size_t elem) {
  if (jsg_grow(p, cap, need, elem)) return true;
  fail(c, "", NULL, "out of memory compiling the schema");
  return false;
}

static uint32_t add_bytes(cc *c, const char *s, size_t n) {
  df_jsg *g = c->g;
  if (!grow(c, (void **)&g->bytes, &c->g->cap_bytes, (uint64_t)g->n_bytes + n + 1, 1)) return 0;
  uint32_t off = g->n_bytes;
  if (n) memcpy(g->bytes + off, s, n);
  g->bytes[off + n] = 0;
  g->n_bytes += (uint32_t)n + 1;
  return off;
}

static uint32_t new_node(cc *c, int kind, const char *ptr) {
  df_jsg *g = c->g;
  if (c->failed) return JSG_NIL;
  if (g->n_nodes >= MAX_NODES)
    return fail(c, "", ptr, "the schema compiles to more than %d nodes", MAX_NODES);
  if (!grow(c, (void **)&g->nodes, &c->g->cap_nodes, g->n_nodes + 1u, sizeof *g->nodes))
    return JSG_NIL;
  uint32_t p = add_bytes(c, ptr, strlen(ptr));
  if (c->failed) return JSG_NIL;
  jsg_node *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->kind = (uint8_t)kind;
  n->ptr = p;
  n->root = n->extra = n->alias = JSG_NIL;
  n->max_len = n->max_items = JSG_NIL;
  n->h = JSG_HINF;
  n->mlen = JSG_INF;
  return g->n_nodes++;
}

static uint32_t add_kids(cc *c, const uint32_t *k, uint32_t n) {
  df_jsg *g = c->g;
  if (!grow(c, (void **)&g->kids, &c->g->cap_kids, (uint64_t)g->n_kids + n + 1, sizeof *g->kids))
    return 0;
  uint32_t off = g->n_kids;
  if (n) memcpy(g->kids + off, k, n * sizeof *k);
  g->n_kids += n;
  return off;
}

static uint32_t alloc_aux(cc *c, uint32_t count) {
  df_jsg *g = c->g;
  uint32_t cap_u64 = g->cap_aux;
  if (!grow(c, (void **)&g->u32, &g->cap_aux, (uint64_t)g->n_aux + count + 1, sizeof *g->u32))
    return 0;
  if (!grow(c, (void **)&g->u64, &cap_u64, g->cap_aux, sizeof *g->u64)) return 0;
  uint32_t off = g->n_aux;
  g->n_aux += count + 1;
  return off;
}

/* base + "/" + key, the key escaped per RFC 6901 (~0, ~1), truncated with "..." if long: out
 * [PTR_MAX] gets at most PTR_MAX - 1 bytes and its NUL whatever the lengths (a base already
 * near the limit is cut first). out and base may be the same buffer. */
static void ptr_join(char *out, const char *base, const char *key) {
  size_t n = strlen(base);
  if (n > PTR_MAX - 8) n = PTR_MAX - 8;
  memmove(out, base, n);
  out[n++] = '/';
  for (const char *k = key; *k; k++) {
    if (n + 6 >= PTR_MAX) {
      memcpy(out + n, "...", 4);
      return;
    }
    if (*k == '~') out[n++] = '~', out[n++] = '0';
    else if (*k == '/') out[n++] = '~', out[n++] = '1';
    else out[n++] = *k;
  }
  out[n] = 0;
}

static void ptr_join2(char *out, const char *base, const char *a, const char *b) {
  char t[PTR_MAX];
  ptr_join(t, base, a);
  ptr_join(out, t, b);
}

/* A non-negative integer keyword (a real with an integral value counts, as in 2020-12);
 * absent leaves *out. Values past 2^32 - 2 saturate. */
static bool get_count(cc *c, json_t *s, const char *kw, const char *ptr, uint32_t *out) {
  json_t *v = json_object_get(s, kw);
  if (!v) return true;
  double d = json_is_integer(v) ? (double)json_integer_value(v)
             : json_is_real(v)  ? json_real_value(v) : -1;
  if (d < 0 || d != floor(d)) {
    fail(c, kw, ptr, "'%s' must be a non-negative integer", kw);
    return false;
  }
  *out = d > 4294967294.0 ? 4294967294u : (uint32_t)d;
  return true;
}

/* ---- node builders ---------------------------------------------------------------------- */

static uint32_t compile(cc *c, json_t *s, const char *ptr, int depth);

static uint32_t str_node(cc *c, const char *ptr, uint32_t min_len, uint32_t max_len) {
  uint32_t i = new_node(c, K_STR, ptr);
  if (i == JSG_NIL) return i;
  c->g->nodes[i].min_len = min_len;
  c->g->nodes[i].max_len = max_len;
  return i;
}

static uint32_t lit_node(cc *c, const char *ptr, char **strs, uint32_t n) {
  jsg_lit *e = calloc(n ? n : 1, sizeof *e);
  if (!e) return fail(c, "", NULL, "out of memory compiling the schema");
  for (uint32_t i = 0; i < n; i++) e[i] = (jsg_lit){strs[i], strlen(strs[i]), i};
  uint32_t root = jsg_build_trie(c->g, e, n);
  free(e);
  if (root == JSG_NIL) return fail(c, "", NULL, "out of memory compiling the schema");
  uint32_t i = root == JSG_NIL ? JSG_NIL : new_node(c, K_LIT, ptr);
  if (i != JSG_NIL) c->g->nodes[i].root = root;
  return i;
}

static void set_ivl(int64_t *v, int64_t lo, int64_t hi) {
  if (lo < 0) lo = 0;
  if (hi > JSG_MAX_IP) hi = JSG_MAX_IP;
  if (lo > hi) lo = 1, hi = 0;
  v[0] = lo;
  v[1] = hi;
}

typedef struct bnd {
  bool has, excl;
  int64_t v;
} bnd;

static int64_t clamp_ip(double d) {
  if (d > 1e17) return JSG_MAX_IP + 1;
  if (d < -1e17) return -(JSG_MAX_IP + 1);
  return (int64_t)d;
}

/* Number / integer node. Bounds for "integer" become inclusive integers (ceil / floor);
 * for "number" they must be integers themselves (so the bound can be checked exactly on the
 * integer part and whether the fraction is zero), exclusive ones within 2^32 (fraction digits
 * are capped at 6, so a value never rounds onto an exclusive bound when parsed as a double). */
static uint32_t num_node(cc *c, json_t *s, const char *ptr, bool is_int) {
  bnd lo = {0}, hi = {0};
  for (int k = 0; k < 4; k++) {
    static const char *const kws[4] = {"minimum", "exclusiveMinimum", "maximum",
                                       "exclusiveMaximum"};
    json_t *v = json_object_get(s, kws[k]);
    if (!v) continue;
    if (!json_is_number(v))
      return fail(c, kws[k], ptr, "'%s' must be a number (JSON Schema 2020-12)", kws[k]);
    bool excl = k == 1 || k == 3, lower = k < 2;
    double d = json_number_value(v);
    int64_t b;
    if (is_int) {
      double r = lower ? (excl ? floor(d) + 1 : ceil(d)) : (excl ? ceil(d) - 1 : floor(d));
      b = json_is_integer(v) ? (json_integer_value(v) > JSG_MAX_IP     ? JSG_MAX_IP + 1
                                : json_integer_value(v) < -JSG_MAX_IP ? -(JSG_MAX_IP + 1)
                                                                       : json_integer_value(v))
                             : clamp_ip(r);
      if (json_is_integer(v) && excl && b > -(JSG_MAX_IP + 1) && b < JSG_MAX_IP + 1)
        b += lower ? 1 : -1;
      excl = false;
    } else {
      if (d != floor(d))
        return fail(c, kws[k], ptr,
                    "non-integer '%s' on type number is not supported (only integer bounds are "
                    "enforced exactly)", kws[k]);
      if (excl && fabs(d) >= 4294967296.0)
        return fail(c, kws[k], ptr, "'%s' beyond 2^32 on type number is not supported",
                    kws[k]);
      b = json_is_integer(v) ? (json_integer_value(v) > JSG_MAX_IP     ? JSG_MAX_IP + 1
                                : json_integer_value(v) < -JSG_MAX_IP ? -(JSG_MAX_IP + 1)
                                                                       : json_integer_value(v))
                             : clamp_ip(d);
    }
    bnd *t = lower ? &lo : &hi;
    bool tighter = !t->has || (lower ? b > t->v : b < t->v) || (b == t->v && excl);
    if (tighter) *t = (bnd){true, excl, b};
  }
  uint32_t i = new_node(c, K_NUM, ptr);
  if (i == JSG_NIL) return i;
  jsg_node *n = &c->g->nodes[i];
  bool bounded = lo.has || hi.has;
  n->is_int = is_int;
  n->allow_frac = !is_int;
  n->allow_exp = !is_int && !bounded;
  n->fcap = bounded ? JSG_FRAC_DIGITS_B : JSG_FRAC_DIGITS;
  const int64_t BIG = JSG_MAX_IP + 1;
  /* x = +(ip + f): f == 0 (nz 0) or f > 0 (nz 1); x = -(ip + f) likewise. */
  set_ivl(n->ivl[0][0], lo.has ? (lo.excl ? lo.v + 1 : lo.v) : 0,
          hi.has ? (hi.excl ? hi.v - 1 : hi.v) : BIG);
  set_ivl(n->ivl[0][1], lo.has ? lo.v : 0, hi.has ? hi.v - 1 : BIG);
  set_ivl(n->ivl[1][0], hi.has ? (hi.excl ? -hi.v + 1 : -hi.v) : 0,
          lo.has ? (lo.excl ? -lo.v - 1 : -lo.v) : BIG);
  set_ivl(n->ivl[1][1], hi.has ? -hi.v : 0, lo.has ? -lo.v - 1 : BIG);
  if (is_int) set_ivl(n->ivl[0][1], 1, 0), set_ivl(n->ivl[1][1], 1, 0);
  bool any = false;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) any |= n->ivl[a][b][0] <= n->ivl[a][b][1];
  if (!any)
    return fail(c, hi.has ? (json_object_get(s, "maximum") ? "maximum" : "exclusiveMaximum")
                          : (json_object_get(s, "minimum") ? "minimum" : "exclusiveMinimum"),
                ptr, "no %s of at most %d digits satisfies the bounds",
                is_int ? "integer" : "number", JSG_INT_DIGITS);
  n->mlen = jsg_num_min_len(n);
  return i;
}

static uint32_t any_node(cc *c, const char *ptr) {
  if (c->any != JSG_NIL) return c->any;
  uint32_t u = new_node(c, K_UNION, ptr);
  if (u == JSG_NIL) return u;
  c->any = u;
  uint32_t k[5];
  k[0] = new_node(c, K_OBJ, ptr);
  k[1] = new_node(c, K_ARR, ptr);
  k[2] = str_node(c, ptr, 0, JSG_NIL);
  k[3] = num_node(c, NULL, ptr, false);
  char *tfn[3] = {"true", "false", "null"};
  k[4] = lit_node(c, ptr, tfn, 3);
  uint32_t aux = alloc_aux(c, 0);
  if (c->failed) return JSG_NIL;
  df_jsg *g = c->g;
  g->nodes[k[0]].extra = u;
  g->nodes[k[0]].aux = aux;
  g->u32[aux] = 0;
  g->nodes[k[1]].extra = u;
  g->nodes[u].first = add_kids(c, k, 5);
  g->nodes[u].count = 5;
  return c->failed ? JSG_NIL : u;
}

static unsigned json_types(json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return T_OBJ;
  case JSON_ARRAY: return T_ARR;
  case JSON_STRING: return T_STR;
  case JSON_INTEGER: return T_INT | T_NUM;
  case JSON_REAL: return T_NUM | (json_real_value(v) == floor(json_real_value(v)) ? T_INT : 0);
  case JSON_TRUE: case JSON_FALSE: return T_BOOL;
  default: return T_NULL;
  }
}

static uint32_t enum_node(cc *c, json_t *s, const char *ptr, unsigned tmask) {
  json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
  const char *kw = en ? "enum" : "const";
  if (en && cn) return fail(c, "const", ptr, "'const' alongside 'enum' is not supported");
  if (en && (!json_is_array(en) || !json_array_size(en)))
    return fail(c, "enum", ptr, "'enum' must be a non-empty array");
  size_t n = en ? json_array_size(en) : 1;
  if (n > MAX_MEMBERS)
    return fail(c, kw, ptr, "'enum' has more than %d members", MAX_MEMBERS);
  char **strs = calloc(n, sizeof *strs);
  if (!strs) return fail(c, "", NULL, "out of memory compiling the schema");
  uint32_t k = 0;
  for (size_t i = 0; i < n && !c->failed; i++) {
    json_t *v = en ? json_array_get(en, i) : cn;
    if (tmask && !(json_types(v) & tmask)) continue;
    strs[k] = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!strs[k]) {
      fail(c, "", NULL, "out of memory compiling the schema");
      break;
    }
    c->lit_bytes += (uint32_t)strlen(strs[k++]);
    if (c->lit_bytes > MAX_LIT_BYTES)
      fail(c, kw, ptr, "enum and key text exceeds %u bytes", MAX_LIT_BYTES);
  }
  uint32_t r = JSG_NIL;
  if (!c->failed && !k) fail(c, kw, ptr, "no '%s' value matches 'type'", kw);
  else if (!c->failed) r = lit_node(c, ptr, strs, k);
  for (uint32_t i = 0; i < k; i++) free(strs[i]);
  free(strs);
  return r;
}

/* The quoted key of a property as it is produced: '"' and '\' escaped, control characters as
 * \u00XX (RFC 8259 §7). */
static char *quote_key(const char *k, size_t *len) {
  size_t n = strlen(k);
  char *q = malloc(6 * n + 3);
  if (!q) return NULL;
  size_t o = 0;
  q[o++] = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)k[i];
    if (ch == '"' || ch == '\\') q[o++] = '\\', q[o++] = (char)ch;
    else if (ch < 0x20) o += (size_t)sprintf(q + o, "\\u%04x", ch);
    else q[o++] = (char)ch;
  }
  q[o++] = '"';
  q[o] = 0;
  *len = o;
  return q;
}

static uint32_t obj_node(cc *c, json_t *s, const char *ptr, int depth) {
  json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
  json_t *ap = json_object_get(s, "additionalProperties");
  char p[PTR_MAX];
  if (props && !json_is_object(props))
    return fail(c, "properties", ptr, "'properties' must be an object");
  if (req && !json_is_array(req))
    return fail(c, "required", ptr, "'required' must be an array of strings");
  if (ap && !json_is_object(ap) && !json_is_boolean(ap))
    return fail(c, "additionalProperties", ptr, "'additionalProperties' must be a schema");
  size_t cap = (props ? json_object_size(props) : 0) + (req ? json_array_size(req) : 0);
  if (cap > MAX_MEMBERS)
    return fail(c, "properties", ptr, "more than %d properties", MAX_MEMBERS);
  const char **names = calloc(cap + 1, sizeof *names);
  jsg_prop *pr = calloc(cap + 1, sizeof *pr);
  jsg_lit *e = calloc(cap + 1, sizeof *e);
  char **keys = calloc(cap + 1, sizeof *keys);
  uint32_t n = 0, extra = JSG_NIL, r = JSG_NIL;
  if (!names || !pr || !e || !keys) {
    fail(c, "", NULL, "out of memory compiling the schema");
    goto out;
  }
  const char *k;
  json_t *v;
  json_object_foreach(props, k, v) {
    ptr_join2(p, ptr, "properties", k);
    names[n] = k;
    pr[n].node = json_is_false(v) ? JSG_NIL : compile(c, v, p, depth + 1);
    if (c->failed) goto out;
    n++;
  }
  if (ap && !json_is_false(ap)) {
    ptr_join(p, ptr, "additionalProperties");
    extra = json_is_true(ap) ? any_node(c, p) : compile(c, ap, p, depth + 1);
    if (c->failed) goto out;
  }
  for (size_t i = 0; req && i < json_array_size(req); i++) {
    const char *name = json_string_value(json_array_get(req, i));
    if (!name) {
      fail(c, "required", ptr, "'required' must be an array of strings");
      goto out;
    }
    uint32_t j = 0;
    while (j < n && strcmp(names[j], name)) j++;
    if (j == n) {
      if (ap && json_is_false(ap)) {
        fail(c, "required", ptr,
             "required property '%s' is not in 'properties' and 'additionalProperties' is false",
             name);
        goto out;
      }
      names[n] = name;
      pr[n].node = extra != JSG_NIL ? extra : any_node(c, ptr);
      if (c->failed) goto out;
      n++;
    }
    if (pr[j].node == JSG_NIL) {
      fail(c, "required", ptr, "required property '%s' has the schema false", name);
      goto out;
    }
    pr[j].req = true;
  }
  for (uint32_t i = 0; i < n; i++) {
    size_t kl;
    keys[i] = quote_key(names[i], &kl);
    if (!keys[i]) {
      fail(c, "", NULL, "out of memory compiling the schema");
      goto out;
    }
    pr[i].klen = (uint32_t)kl;
    e[i] = (jsg_lit){keys[i], kl, i};
    c->lit_bytes += (uint32_t)kl;
  }
  if (c->lit_bytes > MAX_LIT_BYTES) {
    fail(c, "properties", ptr, "enum and key text exceeds %u bytes", MAX_LIT_BYTES);
    goto out;
  }
  uint32_t root = n ? jsg_build_trie(c->g, e, n) : JSG_NIL;
  df_jsg *g = c->g;
  if (n && root == JSG_NIL) {
    fail(c, "", NULL, "out of memory compiling the schema");
    goto out;
  }
  if (c->failed ||
      !grow(c, (void **)&g->props, &c->g->cap_props, (uint64_t)g->n_props + n + 1, sizeof *pr))
    goto out;
  uint32_t first = g->n_props;
  memcpy(g->props + first, pr, n * sizeof *pr);
  g->n_props += n;
  uint32_t aux = alloc_aux(c, n);
  r = new_node(c, K_OBJ, ptr);
  if (r == JSG_NIL) goto out;
  jsg_node *o = &g->nodes[r];
  o->root = root;
  o->first = first;
  o->count = n;
  o->extra = extra;
  o->aux = aux;
  g->u32[aux + n] = n;
  for (uint32_t i = n; i-- > 0;) g->u32[aux + i] = pr[i].req ? i : g->u32[aux + i + 1];
out:
  for (uint32_t i = 0; keys && i < n; i++) free(keys[i]);
  free(keys);
  free(names);
  free(pr);
  free(e);
  return c->failed ? JSG_NIL : r;
}

static uint32_t arr_node(cc *c, json_t *s, const char *ptr, int depth) {
  json_t *pre = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
  char p[PTR_MAX];
  uint32_t min = 0, max = JSG_NIL, extra = JSG_NIL;
  if (pre && !json_is_array(pre))
    return fail(c, "prefixItems", ptr, "'prefixItems' must be an array of schemas");
  if (items && !json_is_object(items) && !json_is_boolean(items))
    return fail(c, "items", ptr, "'items' must be a schema");
  if (!get_count(c, s, "minItems", ptr, &min) || !get_count(c, s, "maxItems", ptr, &max))
    return JSG_NIL;
  if (max != JSG_NIL && min > max)
    return fail(c, "minItems", ptr, "'minItems' %u is greater than 'maxItems' %u", min, max);
  size_t np = pre ? json_array_size(pre) : 0;
  if (np > MAX_MEMBERS) return fail(c, "prefixItems", ptr, "more than %d prefixItems", MAX_MEMBERS);
  uint32_t *k = calloc(np + 1, sizeof *k);
  if (!k) return fail(c, "", NULL, "out of memory compiling the schema");
  for (size_t i = 0; i < np && !c->failed; i++) {
    char idx[24];
    snprintf(idx, sizeof idx, "%zu", i);
    ptr_join2(p, ptr, "prefixItems", idx);
    k[i] = compile(c, json_array_get(pre, i), p, depth + 1);
  }
  if (!c->failed && (!items || !json_is_false(items))) {
    ptr_join(p, ptr, "items");
    extra = !items || json_is_true(items) ? any_node(c, p) : compile(c, items, p, depth + 1);
  }
  uint32_t eff = max;
  if (!items && np) eff = min > np ? min : (uint32_t)np; /* extra items only to reach minItems */
  if (items && json_is_false(items)) {
    if (min > np) {
      free(k);
      return fail(c, "minItems", ptr, "'minItems' %u needs more items than 'prefixItems' allows "
                  "with 'items' false", min);
    }
    eff = (uint32_t)np;
  }
  if (max < eff) eff = max;
  uint32_t first = c->failed ? 0 : add_kids(c, k, (uint32_t)np);
  free(k);
  uint32_t r = new_node(c, K_ARR, ptr);
  if (r == JSG_NIL) return r;
  jsg_node *a = &c->g->nodes[r];
  a->first = first;
  a->count = (uint32_t)np;
  a->extra = extra;
  a->min_items = min;
  a->max_items = eff;
  return r;
}

static uint32_t ref_node(cc *c, const char *ref, const char *ptr) {
  const char *name = NULL;
  const char *where = NULL;
  if (strcmp(ref, "#")) {
    if (!strncmp(ref, "#/$defs/", 8)) name = ref + 8, where = "$defs";
    else if (!strncmp(ref, "#/definitions/", 14)) name = ref + 14, where = "definitions";
    if (!name || !*name || strchr(name, '/'))
      return fail(c, "$ref", ptr,
                  "unsupported $ref '%s' (only \"#\", \"#/$defs/NAME\" and "
                  "\"#/definitions/NAME\")", ref);
  }
  for (uint32_t i = 0; i < c->n_defs; i++)
    if (!strcmp(c->defs[i].ref, ref)) return c->defs[i].node;
  json_t *sch = NULL;
  char key[PTR_MAX];
  if (name) {
    size_t o = 0;
    for (const char *q = name; *q; q++) {
      if (o + 1 >= sizeof key) return fail(c, "$ref", ptr, "$ref '%.64s...' is too long", ref);
      if (q[0] == '~' && q[1] == '0') key[o++] = '~', q++;
      else if (q[0] == '~' && q[1] == '1') key[o++] = '/', q++;
      else key[o++] = *q;
    }
    key[o] = 0;
    sch = json_object_get(json_object_get(c->root, where), key);
    if (!sch) return fail(c, "$ref", ptr, "$ref '%s' does not resolve", ref);
  }
  if (!grow(c, (void **)&c->defs, &c->cap_defs, c->n_defs + 1u, sizeof *c->defs)) return JSG_NIL;
  def_ent *d = &c->defs[c->n_defs];
  memset(d, 0, sizeof *d);
  d->schema = sch;
  d->ref = strdup(ref);
  if (name) ptr_join2(d->ptr, "", where, key);
  d->node = new_node(c, K_ALIAS, name ? d->ptr : "");
  if (!d->ref) return fail(c, "", NULL, "out of memory compiling the schema");
  c->n_defs++;
  return d->node;
}

static uint32_t union_node(cc *c, const uint32_t *k, uint32_t n, const char *ptr) {
  if (n == 1) return k[0];
  uint32_t first = add_kids(c, k, n);
  uint32_t u = new_node(c, K_UNION, ptr);
  if (u == JSG_NIL) return u;
  c->g->nodes[u].first = first;
  c->g->nodes[u].count = n;
  return u;
}

static int parse_type(cc *c, json_t *t, const char *ptr, unsigned *mask) {
  static const char *const names[] = {"null", "boolean", "object", "array", "number",
                                      "integer", "string"};
  size_t n = json_is_array(t) ? json_array_size(t) : 1;
  *mask = 0;
  if (!n || (!json_is_array(t) && !json_is_string(t))) goto bad;
  for (size_t i = 0; i < n; i++) {
    const char *s = json_string_value(json_is_array(t) ? json_array_get(t, i) : t);
    if (!s) goto bad;
    unsigned b = 0;
    for (int j = 0; j < 7; j++)
      if (!strcmp(s, names[j])) b = 1u << j;
    if (!b) {
      fail(c, "type", ptr, "unknown type '%s'", s);
      return -1;
    }
    *mask |= b;
  }
  return 0;
bad:
  fail(c, "type", ptr, "'type' must be a type name or a non-empty array of them");
  return -1;
}

static uint32_t compile(cc *c, json_t *s, const char *ptr, int depth) {
  if (c->failed) return JSG_NIL;
  if (depth > MAX_SCHEMA_DEPTH)
    return fail(c, "", ptr, "the schema nests deeper than %d", MAX_SCHEMA_DEPTH);
  if (json_is_true(s)) return any_node(c, ptr);
  if (json_is_false(s)) return fail(c, "", ptr, "the schema false allows no value here");
  if (!json_is_object(s)) return fail(c, "", ptr, "a schema must be an object or a boolean");
  const char *k;
  json_t *v;
  unsigned cats = 0;
  const char *comb = NULL, *other = NULL;
  json_object_foreach(s, k, v) {
    if (in_list(ANNOT, k)) continue;
    if (in_list(KW_STR, k)) cats |= T_STR;
    else if (in_list(KW_NUM, k)) cats |= T_NUM;
    else if (in_list(KW_OBJ, k)) cats |= T_OBJ;
    else if (in_list(KW_ARR, k)) cats |= T_ARR;
    else if (!in_list(KW_GEN, k))
      return fail(c, k, ptr, "unsupported JSON Schema keyword '%s'", k);
    if (!strcmp(k, "anyOf") || !strcmp(k, "oneOf") || !strcmp(k, "allOf") || !strcmp(k, "$ref")) {
      if (comb) return fail(c, k, ptr, "'%s' alongside '%s' is not supported", k, comb);
      comb = k;
    } else if (!other) {
      other = k;
    }
  }
  if (comb && other)
    return fail(c, other, ptr, "'%s' alongside '%s' is not supported", other, comb);
  if (comb && !strcmp(comb, "$ref")) {
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref) return fail(c, "$ref", ptr, "'$ref' must be a string");
    return ref_node(c, ref, ptr);
  }
  char p[PTR_MAX];
  if (comb) {
    json_t *a = json_object_get(s, comb);
    size_t n = json_is_array(a) ? json_array_size(a) : 0;
    if (!n) return fail(c, comb, ptr, "'%s' must be a non-empty array of schemas", comb);
    if (!strcmp(comb, "allOf")) {
      if (n != 1)
        return fail(c, "allOf", ptr, "'allOf' with more than one subschema is not supported");
      ptr_join2(p, ptr, "allOf", "0");
      return compile(c, json_array_get(a, 0), p, depth + 1);
    }
    if (n > JSG_BRANCH_MAX)
      return fail(c, comb, ptr, "'%s' with more than %d alternatives", comb, JSG_BRANCH_MAX);
    uint32_t k2[JSG_BRANCH_MAX];
    for (size_t i = 0; i < n; i++) {
      char idx[24];
      snprintf(idx, sizeof idx, "%zu", i);
      ptr_join2(p, ptr, comb, idx);
      json_t *alt = json_array_get(a, i);
      k2[i] = compile(c, alt, p, depth + 1);
      if (c->failed) return JSG_NIL;
    }
    uint32_t u = new_node(c, K_UNION, ptr);
    uint32_t first = add_kids(c, k2, (uint32_t)n);
    if (c->failed) return JSG_NIL;
    c->g->nodes[u].first = first;
    c->g->nodes[u].count = (uint32_t)n;
    c->g->nodes[u].one_of = !strcmp(comb, "oneOf");
    return u;
  }
  unsigned tmask = 0;
  json_t *t = json_object_get(s, "type");
  if (t && parse_type(c, t, ptr, &tmask)) return JSG_NIL;
  if (json_object_get(s, "enum") || json_object_get(s, "const")) {
    json_object_foreach(s, k, v) {
      if (!in_list(ANNOT, k) && strcmp(k, "type") && strcmp(k, "enum") && strcmp(k, "const"))
        return fail(c, k, ptr, "'%s' alongside '%s' is not supported", k,
                    json_object_get(s, "enum") ? "enum" : "const");
    }
    return enum_node(c, s, ptr, tmask);
  }
  if (!t) tmask = cats ? cats : (T_NULL | T_BOOL | T_OBJ | T_ARR | T_NUM | T_STR);
  if (tmask == (T_NULL | T_BOOL | T_OBJ | T_ARR | T_NUM | T_STR) && !cats)
    return any_node(c, ptr);
  uint32_t kids[6], n = 0;
  if (tmask & T_OBJ) kids[n++] = obj_node(c, s, ptr, depth);
  if (tmask & T_ARR) kids[n++] = arr_node(c, s, ptr, depth);
  if (tmask & T_STR) {
    uint32_t mn = 0, mx = JSG_NIL;
    if (get_count(c, s, "minLength", ptr, &mn) && get_count(c, s, "maxLength", ptr, &mx)) {
      if (mx != JSG_NIL && mn > mx)
        return fail(c, "minLength", ptr, "'minLength' %u is greater than 'maxLength' %u", mn,
                    mx);
      kids[n++] = str_node(c, ptr, mn, mx);
    }
  }
  if (tmask & (T_NUM | T_INT)) kids[n++] = num_node(c, s, ptr, !(tmask & T_NUM));
  if (tmask & (T_BOOL | T_NULL)) {
    char *lits[3];
    uint32_t nl = 0;
    if (tmask & T_BOOL) lits[nl++] = "true", lits[nl++] = "false";
    if (tmask & T_NULL) lits[nl++] = "null";
    kids[n++] = lit_node(c, ptr, lits, nl);
  }
  if (c->failed) return JSG_NIL;
  uint32_t u = union_node(c, kids, n, ptr);
  if (u != JSG_NIL && !t) c->g->nodes[u].loose = true; /* e.g. {"properties": ..} takes 1 too */
  return u;
}

int df_jsg_compile(const char *schema, size_t len, const char *prefix, const char *suffix,
                   df_jsg **out, char *param_out, size_t param_cap, char *err, size_t errlen) {
  cc c;
  memset(&c, 0, sizeof c);
  c.err = err;
  c.errlen = errlen;
  c.param = param_out;
  c.paramcap = param_cap;
  c.any = JSG_NIL;
  if (err && errlen) err[0] = 0;
  if (param_out && param_cap) param_out[0] = 0;
  *out = NULL;
  size_t pl = prefix ? strlen(prefix) : 0, sl = suffix ? strlen(suffix) : 0;
  c.g = calloc(1, sizeof *c.g);
  if (!c.g) return fail(&c, "", NULL, "out of memory compiling the schema"), -1;
  df_jsg *g = c.g;
  json_error_t je;
  if (pl > MAX_AFFIX || sl > MAX_AFFIX) {
    fail(&c, "", NULL, "prefix or suffix longer than %u bytes", MAX_AFFIX);
    goto done;
  }
  if (schema) {
    c.root = json_loadb(schema, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!c.root) {
      fail(&c, "", NULL, "schema is not valid JSON: %s (line %d, column %d)", je.text, je.line,
           je.column);
      goto done;
    }
  } else {
    c.root = json_pack("{s:s, s:b}", "type", "object", "additionalProperties", 1);
    if (!c.root) {
      fail(&c, "", NULL, "out of memory compiling the schema");
      goto done;
    }
  }
  uint32_t value = compile(&c, c.root, "", 0);
  for (uint32_t i = 0; i < c.n_defs && !c.failed; i++) {
    uint32_t t = c.defs[i].schema ? compile(&c, c.defs[i].schema, c.defs[i].ptr, 1) : value;
    if (!c.failed) g->nodes[c.defs[i].node].alias = t;
  }
  if (c.failed) goto done;
  uint32_t w = new_node(&c, K_WRAP, "");
  uint32_t pre = add_bytes(&c, prefix ? prefix : "", pl);
  uint32_t suf = add_bytes(&c, suffix ? suffix : "", sl);
  if (c.failed) goto done;
  g->nodes[w].pre = pre;
  g->nodes[w].pre_len = (uint32_t)pl;
  g->nodes[w].suf = suf;
  g->nodes[w].suf_len = (uint32_t)sl;
  g->nodes[w].value = value;
  g->root = w;
  jsg_lerr le;
  if (jsg_finish(g, &le))
    fail(&c, le.kw, le.node == JSG_NIL ? NULL : g->bytes + g->nodes[le.node].ptr, "%s", le.msg);
done:
  json_decref(c.root);
  for (uint32_t i = 0; i < c.n_defs; i++) free(c.defs[i].ref);
  free(c.defs);
  if (c.failed) {
    df_jsg_destroy(&c.g);
    return -1;
  }
  *out = g;
  return 0;
}
