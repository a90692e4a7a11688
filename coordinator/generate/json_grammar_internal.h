/* coordinator/generate/json_grammar_internal.h — the compiled grammar and the recogniser's
 * state, shared by json_grammar.c (runs, vocab, mask), json_grammar_compile.c (schema ->
 * nodes) and json_grammar_step.c (the byte step). Not a public header.
 *
 * A grammar is a graph of nodes (one per schema position and type); a branch of the
 * recogniser is a stack of frames, the top one held by value and the rest as links in the
 * run's link array (parents before children, shared between branches forked at an anyOf).
 */
#ifndef DF_COORD_JSON_GRAMMAR_INTERNAL_H
#define DF_COORD_JSON_GRAMMAR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/generate/json_grammar.h"

#define JSG_NIL 0xFFFFFFFFu
#define JSG_DEPTH_MAX 64      /* frames on one branch's stack */
#define JSG_BRANCH_MAX 32     /* branches followed at once */
#define JSG_UNION_DEPTH_MAX 64 /* unions directly inside unions (through $ref) */
#define JSG_INT_DIGITS 16     /* integer-part digits */
#define JSG_FRAC_DIGITS 16    /* fraction digits, unbounded numbers */
#define JSG_FRAC_DIGITS_B 6   /* fraction digits, bounded numbers */
#define JSG_EXP_DIGITS 2
#define JSG_WS_INDENT 20      /* spaces / tabs after the newline of a whitespace run */
#define JSG_MAX_IP 9999999999999999LL /* largest integer part (16 digits) */
#define JSG_INF (UINT64_C(1) << 40)   /* "no finite instance" for mlen */
#define JSG_HINF (1u << 30)           /* "no finite instance" for h */
#define JSG_EOF 256

enum jsg_kind { K_STR, K_NUM, K_LIT, K_OBJ, K_ARR, K_UNION, K_WRAP, K_ALIAS };

/* Literal trie node (enum members, object keys): children contiguous in g->tn. */
typedef struct jsg_tnode {
  uint32_t child;  /* first child */
  uint32_t nchild;
  int32_t term;    /* member ending here, -1 none */
  uint32_t ilo;    /* member indices in the subtree, ascending: g->tidx[ilo .. ilo+in) */
  uint32_t in;
  uint32_t depth;  /* bytes from the root */
  uint64_t minrem; /* fewest bytes from here to a member's end */
  uint8_t byte;
} jsg_tnode;

typedef struct jsg_prop {
  uint32_t node; /* JSG_NIL: the property is forbidden (schema false): never produced */
  uint32_t klen; /* bytes of the quoted, escaped key */
  bool req;
} jsg_prop;

typedef struct jsg_node {
  uint8_t kind;
  uint8_t is_int, allow_frac, allow_exp, fcap; /* K_NUM */
  bool one_of;                                 /* K_UNION from oneOf (checked disjoint) */
  bool loose;  /* built from a schema without "type" / enum / const: accepts every JSON type
                  (generation picks the types its keywords imply) */
  uint32_t min_len, max_len;                   /* K_STR, code points; max JSG_NIL = none */
  int64_t ivl[2][2][2]; /* K_NUM: [sign + / -][fraction nonzero][lo, hi]: integer parts whose
                           value is within the bounds; lo > hi = none */
  uint32_t root;        /* K_LIT: member trie; K_OBJ: key trie (JSG_NIL: no properties) */
  uint32_t first, count; /* K_OBJ: g->props; K_ARR: prefix items, K_UNION: alternatives
                            (g->kids) */
  uint32_t extra;        /* K_OBJ: additionalProperties node; K_ARR: items node; JSG_NIL none */
  uint32_t min_items, max_items; /* K_ARR; max_items effective (items false / prefixItems) */
  uint32_t aux;          /* K_OBJ: g->u32[aux .. aux+count] = first required index >= i;
                            g->u64[aux .. aux+count] = rest(i) (see json_grammar_step.c) */
  uint32_t pre, pre_len, suf, suf_len, value; /* K_WRAP: g->bytes offsets; value node */
  uint32_t alias;        /* K_ALIAS: the node it stands for */
  uint32_t ptr;          /* offset of its JSON Pointer text in g->bytes (for messages) */
  uint32_t tset;         /* first-byte JSON types it accepts (every one when loose; for the
                            oneOf check) */
  uint32_t h;            /* fewest stack frames for a complete value (JSG_INF: none) */
  uint64_t mlen;         /* fewest bytes of a complete value */
} jsg_node;

struct df_jsg {
  jsg_node *nodes;
  uint32_t n_nodes, root; /* root: the K_WRAP node */
  jsg_prop *props;
  uint32_t n_props;
  uint32_t *kids;
  uint32_t n_kids;
  jsg_tnode *tn;
  uint32_t n_tn;
  uint32_t *tidx;
  uint32_t n_tidx;
  uint32_t *u32;
  uint64_t *u64;
  uint32_t n_aux;
  char *bytes;
  uint32_t n_bytes;
  uint32_t cap_nodes, cap_props, cap_kids, cap_tn, cap_tidx, cap_aux, cap_bytes; /* compiling */
};
/* The compiled grammar under its internal name (json_grammar_step.c walks it). */
typedef struct df_jsg jsg_grammar;


/* ---- building (json_grammar_compile.c, json_grammar_graph.c) ---- */

typedef struct jsg_lit {
  const char *p;
  size_t len;
  uint32_t id;
} jsg_lit;

typedef struct jsg_lerr {
  const char *kw; /* the keyword to name */
  uint32_t node;  /* whose JSON Pointer to name; JSG_NIL none */
  char msg[320];
} jsg_lerr;

/* Grow *p (*cap elements of elem bytes) to hold need; false when out of memory. */
bool jsg_grow(void **p, uint32_t *cap, uint64_t need, size_t elem);
/* Trie of the strings e [n] (sorted in place; id = the member index it ends), children
 * contiguous and sorted by byte, in g->tn / g->tidx. Returns the root, JSG_NIL out of memory. */
uint32_t jsg_build_trie(df_jsg *g, jsg_lit *e, uint32_t n);
/* Resolve aliases, refuse cycles without a value and over-deep unions, compute h / mlen / tset
 * and the objects' rest sums, check the nesting limit and oneOf. 0, or -1 with *e set. */
int jsg_finish(df_jsg *g, jsg_lerr *e);

/* One stack frame. Unused fields stay zero so equal positions compare equal bytewise. */
typedef struct jsg_frame {
  uint32_t node;
  uint8_t st; /* state within the node */
  uint8_t ws; /* whitespace run in the current gap: 0 none, 1 one space, 2+k "\n" + k */
  uint8_t x;  /* K_STR: escape stage | 0x80 low surrogate; K_NUM: sign | nonzero fraction<<1 */
  uint8_t u8; /* K_STR / extra keys: UTF-8 continuation bytes left << 4 | range code */
  uint32_t a; /* K_STR: code points; K_NUM: integer digits; K_LIT: trie node; K_OBJ: next
                 property; K_ARR: items begun; K_WRAP: literal position */
  uint32_t b; /* K_STR: \u value; K_NUM: fraction | exponent<<8 digits; K_OBJ: key trie node
                 or chosen property (JSG_NIL: an extra key) */
  int64_t v;  /* K_NUM: integer part */
} jsg_frame;

typedef struct jsg_link {
  jsg_frame f;
  uint32_t up; /* parent link or JSG_NIL */
} jsg_link;

typedef struct jsg_br {
  jsg_frame top;
  uint32_t parent; /* link index or JSG_NIL */
  uint32_t depth;  /* frames including top */
} jsg_br;

typedef struct jsg_set {
  uint32_t n;
  jsg_br b[JSG_BRANCH_MAX];
} jsg_set;

/* The mutable side of stepping: where new links go. */
typedef struct jsg_ctx {
  const df_jsg *g;
  jsg_link *links;
  uint32_t n, cap;
  bool oom;
} jsg_ctx;

/* Object states (K_OBJ st). */
enum { O_START, O_OPEN, O_KEY, O_XKEY, O_COLON, O_VAL, O_AFTER, O_NEXT };
/* Array states. */
enum { A_START, A_OPEN, A_AFTER, A_NEXT };
/* String states. */
enum { S_START, S_IN };
/* Number states. */
enum { N_START, N_INT, N_FRAC, N_E, N_ESIGN, N_EXP };
/* Wrapper states. */
enum { W_PRE, W_VAL, W_SUF, W_DONE };

/* Initial branch of a grammar (the wrapper frame). */
void jsg_initial(const df_jsg *g, jsg_br *out);
/* Feed byte c (0..255) to branch *in; the surviving branches are added to out (deduplicated,
 * at most JSG_BRANCH_MAX). New links go to x (x->oom set when they cannot). */
void jsg_feed(jsg_ctx *x, const jsg_br *in, int c, jsg_set *out);
/* Whether the branch's output is a complete document now. */
bool jsg_can_end(const df_jsg *g, const jsg_link *links, const jsg_br *br);
/* Fewest bytes completing the branch. */
uint64_t jsg_rem(const df_jsg *g, const jsg_link *links, const jsg_br *br);
/* Fewest bytes of a number node's complete value. */
uint64_t jsg_num_min_len(const jsg_node *n);
/* Length of the whole UTF-8 character at s [n] when it is valid string text (not '"', '\\',
 * nor a control character), else 0. */
size_t jsg_text_char(const uint8_t *s, size_t n);
/* Add a branch to a set unless an equal one is there. */
void jsg_set_add(jsg_set *s, const jsg_br *b);

/* For the mask's fast path: true when every branch is inside a string (or a free extra key)
 * at a character boundary, so that any byte string of whole UTF-8 text without '"', '\\' or
 * control characters, of at most *room code points, is taken by some branch (*room: the most
 * any branch has left; UINT32_MAX unbounded). */
bool jsg_text_state(const df_jsg *g, const jsg_set *s, uint32_t *room);

#endif
