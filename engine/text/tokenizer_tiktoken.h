/* engine/text/tokenizer_tiktoken.h — loading the Kimi TikTokenTokenizer format (tiktoken.model
 * + tokenizer_config.json), for the loader. Private to engine/text/tokenizer*.c.
 *
 * Owns: the declarations of engine/text/tokenizer_tiktoken.c. Does not own: choosing between
 * this format and tokenizer.json, or the steps of loading shared by both
 * (engine/text/tokenizer_load.c).
 */
#ifndef DF_ENGINE_TOKENIZER_TIKTOKEN_H
#define DF_ENGINE_TOKENIZER_TIKTOKEN_H

#include "engine/text/tokenizer_internal.h"

/* Read model_path (tiktoken.model) and cfg_path (its tokenizer_config.json, which must say
 * "tokenizer_class": "TikTokenTokenizer") into L->t, which is freshly zeroed apart from its
 * path, ids and cache lock: the id table (the ranks, then 256 specials), the byte-level
 * pieces and vocab table, the merge table, the added tokens (t->added; not yet their matching
 * sets), the Kimi pre-split step, ignore_merges and the input guards. Returns 0, or -1 with
 * one line in L->err naming the file, the line or field, and what was expected. */
int df_tok__load_tiktoken(load_ctx *L, const char *model_path, const char *cfg_path);

/* The Kimi K2/K3 pre-split pattern as compiled (before the \s rewrite), for tests. */
const char *df_tok__kimi_pattern(void);

#endif
