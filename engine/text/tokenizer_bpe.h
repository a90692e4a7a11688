/* engine/text/tokenizer_bpe.h — the BPE model's interface, for the loader and the encode
 * pipeline. Private to engine/text/tokenizer*.c.
 *
 * Owns: the declarations of engine/text/tokenizer_bpe.c. Does not own: how text is cut into
 * words (engine/text/tokenizer_pretok.h).
 */
#ifndef DF_ENGINE_TOKENIZER_BPE_H
#define DF_ENGINE_TOKENIZER_BPE_H

#include "engine/text/tokenizer_internal.h"

/* Parse model.merges of `model` into t->merges (model.vocab already loaded: both tokens and
 * the merged token of each merge must be in it). Returns 0, or -1 with the error in L. */
int df_tok__load_merges(load_ctx *L, json_t *model);

/* Allocate an empty merge table for about n merges (t->merges, t->mcap). 0, or -1 when out
 * of memory. */
int df_tok__merges_alloc(df_tok *t, size_t n);

/* Enter the merge (a, b) -> id with the given rank into the table df_tok__merges_alloc made
 * (a later entry for the same pair replaces an earlier one). */
void df_tok__merge_add(df_tok *t, int32_t a, int32_t b, uint32_t rank, int32_t id);

/* Append id to e->ids. Returns 0, or -1 when out of memory. */
int df_tok__emit(enc *e, int32_t id);

/* Append the ids of one pre-token w[0..n) (raw bytes) to e->ids: from the word cache when this
 * call holds it and the word is there, else by BPE (then cached). Returns 0, or -1 when out of
 * memory. */
int df_tok__encode_word(enc *e, const uint8_t *w, size_t n);

#endif
