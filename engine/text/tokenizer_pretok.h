/* engine/text/tokenizer_pretok.h — the pre-tokenizer stage's interface, for the loader and the
 * encode pipeline. Private to engine/text/tokenizer*.c.
 *
 * Owns: the declarations of engine/text/tokenizer_pretok.c. Does not own: the order of the
 * steps over a section (engine/text/tokenizer_encode.c).
 */
#ifndef DF_ENGINE_TOKENIZER_PRETOK_H
#define DF_ENGINE_TOKENIZER_PRETOK_H

#include "engine/text/tokenizer_internal.h"

/* Parse the pre-tokenizer p (Split, Digits, ByteLevel, or a Sequence of those) and append its
 * steps to t->steps, compiling the regexes; `where` is its JSON path for messages. Returns 0,
 * or -1 with the error in L. */
int df_tok__load_pretok(load_ctx *L, json_t *p, const char *where);

/* Append a Split step with the Oniguruma-style regex `pat` (rewritten as for tokenizer.json:
 * \s / \S become White_Space properties), the given behaviour (BEH_*) and invert; `where`
 * names it in a compile error. Returns 0, or -1 with the error in L. */
int df_tok__add_regex_step(load_ctx *L, const char *pat, int behavior, bool invert,
                           const char *where);

/* The stand-in of cp for a kimi_unicode step (engine/text/unicode_kimi.h): a code point that
 * the system PCRE2 puts in the same Kimi pattern classes as the reference's Unicode puts cp,
 * with the same UTF-8 length; 0 when PCRE2's own answer for cp is the reference's. */
uint32_t df_tok__kimi_stand_in(uint32_t cp);

/* Apply the pre-tokenizer step st to the nin pieces e->pa[0..nin) (ranges of e->wb) and write
 * the pieces it makes, empty ones dropped, to e->pb (grown as needed), *nout of them;
 * ByteLevel's add_prefix_space appends the prefixed copies to e->wb. Returns 0, -1 when out of
 * memory, or -2 when the regex engine fails (message in e->err). */
int df_tok__split_pieces(enc *e, const pt_step *st, size_t nin, size_t *nout);

#endif
