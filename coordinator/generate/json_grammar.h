/* coordinator/generate/json_grammar.h — structured output by constrained decoding: an
 * incremental JSON / JSON Schema recogniser over bytes and a token mask built from it, so that
 * generation under the mask always produces JSON that parses (RFC 8259) and validates against
 * the schema (JSON Schema 2020-12, the subset below).
 *
 * Owns: compiling a schema into an immutable grammar (df_jsg), a byte trie over a tokenizer's
 * vocabulary (df_jsg_vocab), and one sequence's position in the grammar (df_jsg_run): the mask
 * of allowed next ids and advancing by the chosen id. Does not own: sampling, the scheduler,
 * request parsing (the caller passes the schema text and the end ids), the tokenizer.
 *
 * The recogniser is a pushdown automaton over bytes with an explicit stack (one frame per open
 * value: object, array, string, number, literal; links shared between alternatives). anyOf /
 * type arrays are followed by running every alternative that still fits in parallel (at most
 * 32 at once; with more, the later ones are dropped, which narrows the output but never makes
 * it invalid). A token is allowed iff every one of its bytes can be consumed from the current
 * position (it may end inside a value). No reachable position is dead: every position has a
 * continuation to a complete document that single-byte tokens can spell (byte-level BPE
 * vocabularies have a token for every byte), so the mask is never empty before the document is
 * complete.
 *
 * Output policy (what generation may produce; everything produced validates):
 *   - Objects: properties in the schema's order; required ones always, optional ones may be
 *     skipped; keys spelt exactly as the property names (JSON-escaped where needed). Extra keys
 *     only when additionalProperties is given as true or a schema (absent = false for
 *     generation), after all declared ones, never equal to a declared name, and without
 *     escapes. Generic objects (json_object, `true`, `{}`) may repeat a key (RFC 8259 allows
 *     it; parsers keep the last).
 *   - Whitespace: none before or after the top-level value; in each gap between JSON tokens
 *     inside it (after `{` `[` `,` `:` and before `,` `:` `}` `]`) at most one run, either a
 *     single space or one "\n" followed by at most 20 spaces/tabs (llama.cpp's json-schema
 *     grammars use the same rule). "\r" is never produced.
 *   - Strings: valid UTF-8 (checked across token boundaries), no raw control characters,
 *     escapes \" \\ \/ \b \f \n \r \t \uXXXX with surrogates properly paired (a pair counts as
 *     one code point for minLength / maxLength).
 *   - Numbers: RFC 8259 grammar, at most 16 integer digits, 16 fraction digits (6 when the
 *     schema bounds the number), 2 exponent digits (no exponent when bounded). "integer" never
 *     has a fraction or exponent. Bounds are enforced exactly on the decimal text.
 *   - enum / const members are produced in their compact serialization.
 *   - Nesting: at most 64 frames on the stack (the top-level document counts as one), which
 *     also bounds generic json_object nesting and recursive $refs.
 *
 * Supported keywords (JSON Schema 2020-12 / the OpenAI structured-outputs subset):
 *   type (a name or an array of names), properties, required, additionalProperties (bool or
 *   schema), items (schema or false), prefixItems, minItems, maxItems, enum, const,
 *   minLength, maxLength (code points), minimum, maximum, exclusiveMinimum, exclusiveMaximum
 *   (any value for "integer"; integer values for "number"), anyOf, oneOf (only when the
 *   alternatives have pairwise disjoint JSON types, so exactly one can match), allOf with one
 *   subschema, $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed when the
 *   schema has a finite instance), $defs / definitions. Ignored annotations: title,
 *   description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly.
 *   The schema `true` / `{}` is any JSON value. Without "type", the types whose keywords appear
 *   are generated (e.g. {"properties": ...} gives objects), or any value when none do.
 *   Anything else (pattern, format, patternProperties, not, if/then/else, dependentRequired,
 *   uniqueItems, multipleOf, minProperties, contains, ...) is a compile error naming it.
 *
 * Limits (compile errors beyond them): schema nesting 64, anyOf / oneOf of at most 32
 * alternatives and unions nested directly in unions (through $ref) at most 64 deep, 20000
 * compiled nodes, 4096 enum members or properties per schema, 256 KiB of enum and key text per
 * grammar, 64 KiB of prefix / suffix. $ref targets are not percent-decoded.
 *
 * Termination: whitespace runs, numbers and nesting are bounded; a string without maxLength
 * (and an array without maxItems) can go on as long as the model keeps choosing to, so the
 * caller bounds the tokens (df_jsg_min_bytes_left tells how far the end is).
 *
 * Threads: a df_jsg and a df_jsg_vocab are immutable once built and may be shared by any
 * number of runs on any threads; one df_jsg_run belongs to one thread at a time.
 */
#ifndef DF_COORD_JSON_GRAMMAR_H
#define DF_COORD_JSON_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/text/tokenizer.h"

typedef struct df_jsg df_jsg;             /* compiled grammar, immutable, shareable */
typedef struct df_jsg_vocab df_jsg_vocab; /* per tokenizer: byte trie of the vocabulary */
typedef struct df_jsg_run df_jsg_run;     /* one sequence's position in a grammar */

/* Compile a grammar. `schema` [len] is the JSON text of a JSON Schema (an object, or true /
 * false), or NULL for "any JSON object" (OpenAI's {"type": "json_object"}). `prefix` and
 * `suffix` (NUL-terminated UTF-8, NULL or "" = none) are literal text the output must start
 * and end with around the JSON value, e.g. prefix "<tool_call>\n{\"name\": \"get_weather\",
 * \"arguments\": " and suffix "}\n</tool_call>" to force a tool call.
 * On success *out owns the grammar (free with df_jsg_destroy) and 0 is returned. On failure
 * returns -1 with *out NULL; err (if non-NULL, errlen > 0) gets one line naming the offending
 * keyword and its JSON Pointer (RFC 6901) in the schema, e.g. "unsupported JSON Schema keyword
 * 'patternProperties' at /properties/a" ("(root)" for the top), and param_out (if non-NULL,
 * param_cap > 0) gets the keyword alone ("" when the error is not about one keyword, e.g.
 * invalid JSON text). Other errors: a keyword with a value of the wrong JSON type, empty ranges
 * (minLength > maxLength, no number within the bounds), enum values that match no listed
 * type, a schema with no finite instance (false, or a recursion that never ends), $ref cycles,
 * unsupported $ref targets, oneOf alternatives that can match the same value, limits. */
int df_jsg_compile(const char *schema, size_t len, const char *prefix, const char *suffix,
                   df_jsg **out, char *param_out, size_t param_cap, char *err, size_t errlen);

/* Free a grammar and set *g to NULL. NULL-safe. Every run made from it must be gone first. */
void df_jsg_destroy(df_jsg **g);

/* Build the byte trie of `tok`'s vocabulary (borrowed; must outlive the vocab): every id's
 * bytes (df_tok_id_to_bytes), ordinary tokens in the trie, added tokens (df_tok_is_added) in a
 * side list, ids without bytes never allowed. Cost: a sort of the vocabulary and about 20 bytes
 * per trie node (Qwen3's 151k ids: ~0.1 s, ~12 MB). Returns NULL with err set when out of
 * memory or the tokenizer has no ids. */
df_jsg_vocab *df_jsg_vocab_new(const df_tok *tok, char *err, size_t errlen);

/* Free a vocab and set *v to NULL. NULL-safe. Every run using it must be gone first. */
void df_jsg_vocab_destroy(df_jsg_vocab **v);

/* Number of ids the vocab covers (df_tok_vocab_size of its tokenizer). */
int64_t df_jsg_vocab_size(const df_jsg_vocab *v);

/* Start a run at the beginning of `g`'s output. `g` and `v` are borrowed and must outlive
 * the run; v may be NULL for a byte-level run (df_jsg_accept_bytes; df_jsg_mask then returns
 * -1 and df_jsg_accept takes only end ids). `end_ids` [n_end] (copied) are the ids that end generation
 * (eos, end of turn): they are allowed exactly when the output so far is a complete document,
 * whatever their bytes (also when past the tokenizer's ids). Returns NULL with err set when out
 * of memory or an end id is negative. */
df_jsg_run *df_jsg_run_new(const df_jsg *g, const df_jsg_vocab *v, const int32_t *end_ids,
                           int n_end, char *err, size_t errlen);

/* An independent copy of `r` at the same position (same grammar, vocab, end ids), e.g. to try
 * draft tokens and roll back. NULL with err set when out of memory. */
df_jsg_run *df_jsg_run_clone(const df_jsg_run *r, char *err, size_t errlen);

/* Free a run and set *r to NULL. NULL-safe. */
void df_jsg_run_destroy(df_jsg_run **r);

/* Set logits[id] = -INFINITY for every id in [0, V) not allowed next; allowed ids keep their
 * value. logits [V] fp32, V = the model's vocabulary, which may exceed the tokenizer's: ids
 * past the tokenizer are never allowed (end ids excepted). Allowed: ordinary tokens whose bytes all continue the
 * output; added tokens only while their whole text matches the literal prefix / suffix at this
 * point (never inside the JSON value); end ids exactly when df_jsg_complete. Returns the number
 * of allowed ids in [0, V): >= 1 until an end id is accepted, except that a complete output
 * after which no byte can follow gives 0 when the run has no end ids (the caller stops there).
 * After an end id was accepted, everything is masked and 0 is returned. -1 (logits untouched)
 * when the run has no vocab or memory ran out. Cost: a walk of the vocab trie from the current
 * position, pruned at the first rejected byte, with whole all-text subtrees taken at once
 * inside strings: on Qwen3's 151k ids about 0.1 ms at structural positions and 0.6-0.8 ms
 * inside a string on one core (tests/test_json_grammar.c prints them); no allocation after the
 * first calls (buffers grow to the deepest position seen). */
int64_t df_jsg_mask(df_jsg_run *r, float *logits, int64_t V);

/* Advance by the chosen id. Returns 0, or -1 when the id is not allowed now (the same rule as
 * df_jsg_mask), is out of range, or memory ran out; the run is then unchanged. Accepting an
 * end id finishes the run: nothing is allowed after it. */
int df_jsg_accept(df_jsg_run *r, int32_t id);

/* Advance by raw output bytes (e.g. text the caller inserts itself, or tests). All or nothing:
 * returns len when every byte was consumed, otherwise the offset of the first byte that cannot
 * follow (the run is then unchanged). Returns -1 when out of memory or the run is finished. */
int64_t df_jsg_accept_bytes(df_jsg_run *r, const void *bytes, size_t len);

/* True when the output so far is a whole valid document followed by the whole suffix: end ids
 * are allowed now. (A top-level number may still continue, e.g. "12" -> "123".) */
bool df_jsg_complete(const df_jsg_run *r);

/* Fewest further bytes that complete the document from here (0 when complete or finished):
 * e.g. to steer towards completion when the token budget runs out. Exact for the output
 * policy above, ignoring the nesting limit. */
uint64_t df_jsg_min_bytes_left(const df_jsg_run *r);

#endif
