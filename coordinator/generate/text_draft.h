/* coordinator/generate/text_draft.h — a draft model with its own tokenizer proposing target
 * tokens through text (cross-tokenizer speculative decoding).
 *
 * Owns: the draft's KV cache and token sequence for one generation, the committed text (the
 * bytes of the target's committed ids), the bookkeeping that ties draft tokens to byte offsets
 * of that text, and the conversion of the draft's continuation into target ids. Does not own:
 * the models or tokenizers (borrowed), verification and acceptance (coordinator/generate/
 * spec.c), sampling.
 *
 * Per round (docs/SPEC.md "Cross-tokenizer drafts"):
 *  1. catch up: the draft keeps the longest prefix of its tokens whose bytes equal the committed
 *     text (its own earlier proposals included, when the target accepted their text), backs
 *     off to a word boundary, rolls its cache back to it and encodes the rest of the committed
 *     text with its tokenizer (up to the last complete UTF-8 character); token healing: when
 *     the draft's best token at its last token's position, among those that agree with that
 *     token's bytes, is a longer one (the target's tokens ended inside what the draft reads as
 *     one piece: Qwen's lone " " before digits), the draft drops its last token and re-writes
 *     those bytes first, its choices held to tokens that agree with them;
 *  2. the draft continues greedily until its text holds k complete target pieces (at most
 *     3k/2 + 2 of its tokens), or until it emits a special token;
 *  3. its continuation's bytes (from the committed text's end) are encoded with the target's
 *     tokenizer (df_tok_encode_stable) and only the ids of complete pieces are proposed: the
 *     last piece could still grow into the next bytes the draft would write ("Ġinter" +
 *     "national"), unless the draft ended with a special token.
 * The proposals are a deterministic function of the committed ids, kept where they are the
 * target's own choice (spec.h), so the output is the target alone's at any temperature.
 *
 * Thread safety: one df_text_draft belongs to one thread at a time; the draft model must not
 * be used by another thread during a call (its buffers are shared).
 */
#ifndef DF_COORD_TEXT_DRAFT_H
#define DF_COORD_TEXT_DRAFT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"
#include "engine/text/tokenizer.h"

typedef struct df_text_draft df_text_draft;

/* The shortest draft context (draft tokens) a text draft works with: a window of recent text
 * plus a round's continuation. */
#define DF_TEXT_DRAFT_MIN_CTX 96

/* Counters of one generation (cumulative). */
typedef struct df_text_draft_stats {
  int64_t draft_tokens;   /* draft tokens generated as proposals */
  int64_t reused_tokens;  /* of them, kept for a later round because the target wrote their text */
  int64_t encoded_tokens; /* draft tokens made by encoding committed text (catch-up) */
  int64_t empty_rounds;   /* proposals with no complete target piece (no target id proposed) */
  int64_t windows;        /* times the draft's context filled and it re-read recent text */
  int64_t healed;         /* rounds whose draft re-wrote the committed text's last token */
} df_text_draft_stats;

/* A text draft for one sequence: `draft` (its vocabulary is dtok's), `dtok` the draft's
 * tokenizer, `ttok` the target's (both borrowed; they must outlive the result), target_vocab
 * the target model's rows (proposals stop before an id the model has none for). Its KV cache
 * holds df_model_max_ctx(draft) draft tokens (at least DF_TEXT_DRAFT_MIN_CTX): a window over
 * the committed text, the draft re-reads the latest half of it when it fills. Returns 0 with
 * *out set, or -1 with why (a context too short, allocation of the KV cache, out of memory)
 * and *out NULL. */
int df_text_draft_new(df_model *draft, const df_tok *dtok, const df_tok *ttok,
                      int64_t target_vocab, df_text_draft **out, char *why, size_t whylen);
void df_text_draft_destroy(df_text_draft **x);

/* Append the target's committed ids[0..n) (each >= 0) to the committed text: their bytes as
 * the target's tokenizer decodes them one by one (df_tok_id_to_bytes; added tokens as their
 * content). Call with the prompt, then with every id the generation emits, in order.
 * Returns 0, or -1 (out of memory, a negative id) with a message. */
int df_text_draft_commit(df_text_draft *x, const int32_t *ids, int64_t n, char *err,
                         size_t errlen);

/* Up to k (1..DF_TEXT_DRAFT_K_MAX) target ids (each < target_vocab) that the draft expects
 * after the committed text, into out[0..k). Returns how many (0: the draft's text ended in the middle of a piece,
 * a character the target split, or a continuation the target's tokenizer does not start at
 * the committed end), or -1 with a message (a draft forward failed, no window of the text
 * fits the draft's context, out of memory): the caller stops drafting. */
int df_text_draft_propose(df_text_draft *x, int k, int32_t *out, char *err, size_t errlen);

#define DF_TEXT_DRAFT_K_MAX 16

/* Bytes of committed text so far (the decoded bytes of every committed id). */
size_t df_text_draft_text_len(const df_text_draft *x);

/* Draft tokens in its KV cache (TESTS: positions the draft's cache holds). */
int64_t df_text_draft_cached(const df_text_draft *x);

df_text_draft_stats df_text_draft_get_stats(const df_text_draft *x);

#endif
