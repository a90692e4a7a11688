/* engine/text/tokenizer.h — byte-level BPE tokenizers loaded from Hugging Face tokenizer.json,
 * or from a Kimi tiktoken.model (docs/TOKENIZER.md "tiktoken.model").
 *
 * Owns: loading tokenizer.json (+ the special-token ids of tokenizer_config.json), encoding
 * UTF-8 text to token ids with the exact semantics of the Hugging Face `tokenizers` library
 * (added tokens, normalizer, pre-tokenizer, byte-level BPE, post-processor), one-shot decoding
 * and a streaming decoder that only ever emits complete UTF-8. Does not own: chat templates
 * (engine/text/chat_template.h), sampling, or anything about the model weights.
 *
 * Supported tokenizer.json components (anything else is a load error naming the field):
 *   model          BPE (vocab; merges as "a b" strings or ["a","b"] pairs; ignore_merges;
 *                  unk_token). continuing_subword_prefix / end_of_word_suffix must be empty.
 *   normalizer     null, NFC, NFD, NFKC, NFKD, Sequence of those.
 *   pre_tokenizer  Split (Regex or String pattern; behavior Isolated, Removed,
 *                  MergedWithPrevious, MergedWithNext, Contiguous; invert), Digits,
 *                  ByteLevel (add_prefix_space, use_regex), Sequence of those. Exactly one
 *                  ByteLevel, and it must come last: this is a byte-level BPE tokenizer.
 *   post_processor null, ByteLevel (no effect on ids), TemplateProcessing (its "single"
 *                  template), Sequence of those.
 *   decoder        ByteLevel (or null, decoded the same way).
 *
 * Regexes are compiled with PCRE2 (UTF, UCP, JIT). They were written for Oniguruma, which the
 * reference library uses; `\s` / `\S` are rewritten to `\p{White_Space}` / `\P{White_Space}`,
 * which is exactly Oniguruma's Unicode `\s` (PCRE2's own `\s` lacks U+0085).
 *
 * Input text that is not valid UTF-8 is not rejected: every maximal ill-formed subpart (Unicode
 * §3.9, the same rule as Python's errors='replace', Rust's from_utf8_lossy and the WHATWG
 * decoder) is replaced by U+FFFD before anything else happens. The reference library cannot be
 * given such input at all (it takes Rust/Python strings), so this is the behaviour of decoding
 * the bytes leniently first and encoding the result.
 *
 * Thread safety: a loaded df_tok is read-only except for an internal word cache guarded by a
 * mutex (a thread that finds it busy encodes without it); encode, decode and streams may be
 * used from several threads on one df_tok. One df_tok_stream belongs to one thread at a time.
 */
#ifndef DF_ENGINE_TOKENIZER_H
#define DF_ENGINE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct df_tok df_tok;
typedef struct df_tok_stream df_tok_stream;

/* Encode flags. */
enum {
  /* Apply the post-processor (TemplateProcessing's "single" template) and, as the
   * `transformers` classes do, tokenizer_config.json's add_bos_token / add_eos_token. */
  DF_TOK_ADD_SPECIAL = 1u << 0,
  /* Match no added tokens at all (special or not): the text is plain text, so a user who
   * types "<|im_end|>" gets the ids of those characters, never the control token. */
  DF_TOK_PLAIN = 1u << 1,
  /* With DF_TOK_ADD_SPECIAL: when the text itself begins with the BOS token (a raw prompt
   * that already carries "<s>" / "<｜begin▁of▁sentence｜>"), do not add another one in front
   * of it, so the ids start with exactly one BOS. */
  DF_TOK_BOS_ONCE = 1u << 2,
};

/* Decode flags. */
enum {
  /* Leave out added tokens marked "special": true (like skip_special_tokens=True). */
  DF_TOK_SKIP_SPECIAL = 1u << 0,
};

/* A byte range [off, off+len) of an encode input in which added tokens are not matched. */
typedef struct df_tok_span {
  size_t off; /* bytes from the start of the text */
  size_t len; /* bytes */
} df_tok_span;

/* Load a tokenizer. `path` is a model folder (reads DIR/tokenizer.json and, when present,
 * DIR/tokenizer_config.json; without tokenizer.json, DIR/tiktoken.model and the
 * DIR/tokenizer_config.json it needs, "tokenizer_class": "TikTokenTokenizer") or the path of a
 * tokenizer.json or tiktoken.model file (tokenizer_config.json is then looked for beside it).
 * A tiktoken.model tokenizer is the Kimi K2/K3 one: its ranks are the ids, the 256 ids after
 * them are its specials (tokenizer_config.json added_tokens_decoder; unnamed ones spelt
 * <|reserved_token_N|>), its pieces take the byte-level spelling of tokenizer.json, and encode
 * applies tokenization_kimi.py's pre-split pattern, input guards and tiktoken's rank BPE. On success *out owns a new tokenizer (free with
 * df_tok_destroy) and 0 is returned. On failure returns -1, *out is NULL, and err (if
 * non-NULL, errlen > 0) holds one line naming the file, the JSON field and what was expected,
 * e.g. "x/tokenizer.json: model.merges[12]: "a b": token "b" is not in model.vocab". */
int df_tok_load(const char *path, df_tok **out, char *err, size_t errlen);

/* Free a tokenizer and set *tok to NULL. Accepts NULL and *tok == NULL. Every stream made
 * from it must be destroyed first. */
void df_tok_destroy(df_tok **tok);

/* Encode `len` bytes of `text` (UTF-8; need not be NUL-terminated; invalid UTF-8 is handled as
 * described above) to token ids. flags: DF_TOK_ADD_SPECIAL | DF_TOK_PLAIN | DF_TOK_BOS_ONCE.
 * On success *ids is a new malloc'd array of *n ids (caller frees with free(); *ids may be
 * NULL when *n == 0) and 0 is returned. On failure (out of memory, a regex engine error)
 * returns -1 with *ids = NULL, *n = 0 and a message in err. */
int df_tok_encode(const df_tok *tok, const char *text, size_t len, unsigned flags,
                  int32_t **ids, size_t *n, char *err, size_t errlen);

/* As df_tok_encode, but added tokens are not matched inside the given spans (any order,
 * may overlap; each must lie within [0, len] or -1 is returned). A match that would overlap a
 * span is not taken. Used to encode a rendered chat where message contents are plain text.
 * Spans are byte offsets and lengths into text, borrowed for the call. They cost a sort
 * (O(n_plain log n_plain)) and O(log n_plain) per added-token candidate and per section
 * between added tokens: a chat of many short messages encodes in about linear time.
 * Errors (-1, *ids NULL, *n 0, err set): those of df_tok_encode, a span outside the text,
 * text that is not valid UTF-8 while spans are given. */
int df_tok_encode_spans(const df_tok *tok, const char *text, size_t len, unsigned flags,
                        const df_tok_span *plain, size_t n_plain, int32_t **ids, size_t *n,
                        char *err, size_t errlen);

/* As df_tok_encode (flags: DF_TOK_PLAIN only), and *stable = how many of the leading ids
 * stay the same whatever text is appended after `text`, as far as the pipeline's splitting
 * goes: the ids of every piece but the last, where a piece is what the pre-tokenizer split
 * off (a regex match, a digit run, ...; one BPE word) or an added token. The last piece may
 * grow into its successor ("Ġinter" + "national"), so its ids are not stable; a normalizer or
 * a lookahead in a split regex may in rare cases still change an earlier piece, so callers
 * use this as a proposal (the speculative verify of coordinator/generate/text_draft.h), never
 * as a guarantee. Ownership and errors as df_tok_encode; DF_TOK_ADD_SPECIAL is an error. */
int df_tok_encode_stable(const df_tok *tok, const char *text, size_t len, unsigned flags,
                         int32_t **ids, size_t *n, size_t *stable, char *err, size_t errlen);

/* Decode ids to text, like the reference decode(): each token's bytes (byte-level pieces
 * mapped back to bytes; added tokens as their content), joined, then every ill-formed UTF-8
 * subpart replaced by U+FFFD. flags: DF_TOK_SKIP_SPECIAL. On success *text is a new malloc'd
 * NUL-terminated string of *len bytes (caller frees) and 0 is returned. An id >= 0 that no
 * token has (a model's padding rows past the tokenizer's vocabulary) decodes to nothing, as
 * the reference decode skips it; a negative id returns -1 with *text = NULL and err set. */
int df_tok_decode(const df_tok *tok, const int32_t *ids, size_t n, unsigned flags, char **text,
                  size_t *len, char *err, size_t errlen);

/* Number of ids: 1 + the highest id of the vocabulary or the added tokens. */
size_t df_tok_vocab_size(const df_tok *tok);

/* Id of a token given by its piece as stored in tokenizer.json (byte-level form for vocab
 * entries, e.g. "Ġthe"; the content for added tokens, e.g. "<|im_end|>"). Added tokens take
 * precedence. Returns -1 when there is no such token. */
int32_t df_tok_token_to_id(const df_tok *tok, const char *piece, size_t len);

/* The piece of an id in the form df_tok_token_to_id takes. Returns a NUL-terminated string
 * owned by the tokenizer (valid until df_tok_destroy) and sets *len (may be NULL); NULL when
 * the id is out of range or unassigned. */
const char *df_tok_id_to_piece(const df_tok *tok, int32_t id, size_t *len);

/* The raw bytes an id decodes to (may be part of a UTF-8 character), *len of them. Owned by
 * the tokenizer; NULL when the id is out of range or unassigned. */
const uint8_t *df_tok_id_to_bytes(const df_tok *tok, int32_t id, size_t *len);

/* True when id is an added token (added_tokens in tokenizer.json). */
bool df_tok_is_added(const df_tok *tok, int32_t id);
/* True when id is an added token marked "special": true. */
bool df_tok_is_special(const df_tok *tok, int32_t id);

/* The ids of those spellings[] (NULL-terminated; added tokens' content, e.g. "<think>") that
 * are special tokens of `tok`, in order, into ids[0..max); spellings that are not tokens or not
 * special are skipped. Returns how many were written (at most max). */
size_t df_tok_special_ids(const df_tok *tok, const char *const *spellings, int32_t *ids,
                          size_t max);

/* Ids of tokenizer_config.json's bos_token / eos_token / pad_token; -1 when not given (or no
 * tokenizer_config.json was found, or the token is not in the vocabulary). */
int32_t df_tok_bos_id(const df_tok *tok);
int32_t df_tok_eos_id(const df_tok *tok);
int32_t df_tok_pad_id(const df_tok *tok);

/* ---- streaming decoder ----------------------------------------------------------------
 * Fed one id at a time, it returns only complete UTF-8 characters: bytes of a character
 * split across tokens are held back until the character is complete. Bytes that can no longer
 * start or continue a well-formed character are emitted as U+FFFD, exactly where the one-shot
 * decode puts them, so the concatenation of every feed output and the final flush equals
 * df_tok_decode of the same ids, byte for byte. */

/* Create a stream for `tok` (flags: DF_TOK_SKIP_SPECIAL). Returns 0, or -1 on allocation
 * failure (err set, *out NULL). Free with df_tok_stream_destroy. */
int df_tok_stream_new(const df_tok *tok, unsigned flags, df_tok_stream **out, char *err,
                      size_t errlen);

/* Feed one id. On success returns 0 and sets *text / *len to the newly completed text
 * (possibly empty; NUL-terminated; owned by the stream, valid until the next call on it).
 * An id >= 0 that no token has adds nothing (as df_tok_decode); a negative id returns -1 with
 * err set and the stream unchanged; out of memory returns -1 and leaves the stream's pending
 * bytes unchanged too. */
int df_tok_stream_feed(df_tok_stream *s, int32_t id, const char **text, size_t *len, char *err,
                       size_t errlen);

/* End of input: returns whatever is held back, each incomplete sequence as one U+FFFD, and
 * empties the stream (it can be fed again as if new). Same ownership as feed. Returns 0, or -1
 * when out of memory. */
int df_tok_stream_flush(df_tok_stream *s, const char **text, size_t *len, char *err,
                        size_t errlen);

/* Bytes held back, waiting for the rest of a character (0..3). */
size_t df_tok_stream_pending(const df_tok_stream *s);

/* Most ids one stream keeps with df_tok_stream_keep. */
#define DF_TOK_STREAM_KEEP_MAX 16

/* Decode ids[0..n) (special added tokens, e.g. a chat format's markup that a parser reads
 * back) with their text even though the stream skips special tokens; adds to the ids kept
 * so far. Ids that are not special are decoded anyway. Returns 0, or -1 (nothing added) when
 * the stream would keep more than DF_TOK_STREAM_KEEP_MAX ids. */
int df_tok_stream_keep(df_tok_stream *s, const int32_t *ids, size_t n);

/* Free a stream and set *s to NULL. Accepts NULL. */
void df_tok_stream_destroy(df_tok_stream **s);

/* ---- UTF-8 helpers shared with the chat template and the tools ----------------------- */

/* Copy `len` bytes of `s` to a new malloc'd NUL-terminated buffer with each maximal ill-formed
 * subpart replaced by U+FFFD (EF BF BD). Returns NULL when out of memory. *outlen gets the
 * length. */
char *df_tok_utf8_sanitize(const char *s, size_t len, size_t *outlen);

/* Byte offset of the first byte of `s` [len] that does not start a well-formed UTF-8
 * character (an ill-formed or truncated sequence), or len when all of it is valid UTF-8. */
size_t df_tok_utf8_invalid_at(const char *s, size_t len);

/* NFC of valid UTF-8 `s` (as the NFC normalizer does), new malloc'd NUL-terminated buffer;
 * NULL when out of memory or the input is not valid UTF-8. */
char *df_tok_utf8_nfc(const char *s, size_t len, size_t *outlen);

#endif
