/* engine/text/chat_template.h — chat templates of the supported model families, rendered in C.
 *
 * Owns: reading a model's chat template (tokenizer_config.json "chat_template", or
 * chat_template.jinja beside it), recognising it by the exact template text, and rendering a
 * conversation to the prompt text byte-for-byte as Hugging Face transformers renders it with
 * jinja2 (apply_chat_template, tokenize=False). Every byte that comes from a message (content,
 * reasoning) is reported as a span, so the tokenizer can encode those bytes as plain text:
 * only the template's own structure ever becomes a control token.
 * Does not own: parsing tool calls back out of generated text (engine/text/tool_calls.h).
 * Jinja in general. A template that is not one of the known texts is refused
 * with an error naming the model folder; supporting a new one means adding its renderer here,
 * checked against jinja2 goldens (tests/tokenizer/gen_chat_goldens.py).
 *
 * Known templates:
 *   DF_CHAT_QWEN3  the Qwen3 hybrid-thinking template (Qwen3 dense and Qwen3-MoE releases):
 *                  system, user, assistant, tool messages; <think> reasoning kept only for
 *                  assistant turns after the last user query; enable_thinking;
 *                  add_generation_prompt; `tools` (a system turn "# Tools ... <tools>" with each
 *                  tool as json.dumps(tool, ensure_ascii=False) on its own line, the first system
 *                  message's content before it); assistant tool calls as <tool_call> JSON; tool
 *                  results as <tool_response> in user turns.
 *                  Tool-call arguments: df_chat_tool_call.arguments is the JSON text OpenAI sends
 *                  (a string). The template prints a string verbatim and anything else by tojson;
 *                  Hugging Face callers (and vLLM) pass the dict json.loads gives, and that is
 *                  what Qwen3 was trained on and generates itself, so the arguments are rendered
 *                  as the template renders json.loads(arguments): an object (any non-string JSON
 *                  value) re-serialised as json.dumps(ensure_ascii=False) (", " and ": ", key
 *                  order kept, a repeated key's last value at its first place), a JSON string as
 *                  its decoded text, and text that is not JSON (for jansson: also integers beyond
 *                  64 bits, reals that overflow) verbatim. So '{"a":1}' renders {"a": 1}, exactly
 *                  as apply_chat_template with arguments={"a": 1}.
 *   DF_CHAT_DEEPSEEK_V3  the DeepSeek-V3 template (tokenizer_config.json of the V3 release,
 *                  also used by checkpoints derived from it): bos_token, every system message
 *                  joined by blank lines at the top, <｜User｜> / <｜Assistant｜> turns, an
 *                  assistant message whose content is NULL (JSON null) rendering its tool calls
 *                  (type "function"), tool outputs, add_generation_prompt; reasoning_content is
 *                  ignored, as the template does. The template's quirks are kept byte for byte
 *                  (tests/tokenizer/gen_chat_goldens.py lists them). The template never reads
 *                  `tools`: a tools list is accepted and, as in jinja2, not shown to the model
 *                  (df_chat_template_has_tools is false); tool calls print their arguments
 *                  verbatim (the template concatenates them as a string) and only for an
 *                  assistant message whose content is NULL (with content, jinja2 drops them).
 *   DF_CHAT_KIMI_K2  the Kimi K2 template (moonshotai/Kimi-K2-Instruct; tiktoken.model
 *                  folders): <|im_system|>system / <|im_user|>user / <|im_assistant|>assistant /
 *                  <|im_system|>tool headers closed by <|im_middle|>, each message ended by
 *                  <|im_end|>, the default system turn "You are a helpful assistant" when the
 *                  first message is not a system one, add_generation_prompt, `tools` (a
 *                  tool_declare turn: the list as Python's json.dumps). Assistant tool calls are
 *                  refused (the template drops them: df_chat_template_has_tool_calls is false);
 *                  tool results render.
 *   DF_CHAT_KIMI_K2_THINKING  the Kimi K2 Thinking template (moonshotai/Kimi-K2-Thinking):
 *                  K2's headers with a message's name in place of its role, `tools` printed as
 *                  Python's json.dumps, <think></think> on history turns and <think>reasoning
 *                  </think> after the last assistant turn without tool calls, tool calls
 *                  (<|tool_calls_section_begin|>, id, arguments), tool results ("## Return of
 *                  ID\n" + content), the default system turn "You are Kimi, ...". Arguments
 *                  print verbatim (the template's `is string` branch).
 *   DF_CHAT_KIMI_K3  Kimi K3's XTML, built in: a folder with no chat template whose
 *                  tokenizer_config.json is TikTokenTokenizer naming <|open|>, <|close|>, <|sep|>
 *                  and <|end_of_msg|>. Follows ggml-org/llama.cpp's
 *                  models/templates/Kimi-K3.jinja @181a4a8f (a transcription
 *                  of encoding_k3.py) and docs/K3.md §5.3-5.4 (engine/text/chat_xtml.{h,c}):
 *                  tool-declare (tools_json), thinking-effort, system/user/assistant messages
 *                  with `name`, think blocks (enable_thinking = `thinking`, default on),
 *                  tool calls, tool results named by tool_call_id / name / call order,
 *                  tool_choice and response_format messages, the generation prompt.
 *                  df_chat_encode encodes it per segment (merges never cross a segment
 *                  boundary, so it is not df_tok_encode_spans of the rendered text).
 *                  Refused: keys whose case-insensitive order differs
 *                  from their code-point order in tools / response_format, a tool_choice other
 *                  than auto/required/none, unresolvable tool names. Not expressible here:
 *                  media, a system message carrying `tools`, arguments as a mapping.
 */
#ifndef DF_ENGINE_CHAT_TEMPLATE_H
#define DF_ENGINE_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/text/chat_types.h"
#include "engine/text/tokenizer.h"

typedef enum df_chat_family {
  DF_CHAT_QWEN3 = 1,
  DF_CHAT_DEEPSEEK_V3 = 2,
  DF_CHAT_KIMI_K2 = 3,          /* Kimi K2 (Instruct), plain chats */
  DF_CHAT_KIMI_K2_THINKING = 4, /* Kimi K2 Thinking: tools, tool calls, <think> */
  DF_CHAT_KIMI_K3 = 5,          /* Kimi K3 XTML, built in (K3 folders carry no template) */
} df_chat_family;

typedef struct df_chat_template df_chat_template;


/* Load the chat template of model folder `dir` (tokenizer_config.json "chat_template", a string
 * or a list whose "default" entry is used; else DIR/chat_template.jinja). Templates that use
 * `bos_token` take it from tokenizer_config.json ("bos_token": a string or an AddedToken
 * object's "content", at most 255 bytes of UTF-8), else the family's published one.
 * Returns 0 with *out owning the template (free with df_chat_template_destroy), or -1 with
 * *out NULL and err naming the folder, e.g. "models/x: chat template not recognised (...)",
 * a missing-file message, or a bos_token that is not such a string. */
int df_chat_template_load(const char *dir, df_chat_template **out, char *err, size_t errlen);

/* Same from the template text itself; `origin` names it in messages (e.g. the folder).
 * bos_token is the family's published one (DeepSeek-V3: "<｜begin▁of▁sentence｜>"). */
int df_chat_template_from_text(const char *text, size_t len, const char *origin,
                               df_chat_template **out, char *err, size_t errlen);

/* Free a template and set *t to NULL. Accepts NULL. */
void df_chat_template_destroy(df_chat_template **t);

/* Which family the template was recognised as. */
df_chat_family df_chat_template_family(const df_chat_template *t);

/* True when the template reads a thinking switch (df_chat_opts.enable_thinking): Qwen3's
 * enable_thinking, Kimi K3's thinking. The others (DeepSeek-V3, Kimi K2, K2 Thinking) render
 * the same prompt either way, so callers refuse the switch rather than ignore it. */
bool df_chat_template_has_thinking(const df_chat_template *t);

/* True when the template shows a request's `tools` to the model: Qwen3, Kimi K2, K2 Thinking,
 * K3. False for DeepSeek-V3, whose template never reads `tools` (df_chat_render accepts them
 * and renders what jinja2 renders: the same prompt as without them), so a caller that wants
 * the model to know its tools must refuse them or say so. */
bool df_chat_template_has_tools(const df_chat_template *t);

/* True when the template renders assistant tool calls of the history (all but Kimi K2, whose
 * template drops them; df_chat_render refuses them there). */
bool df_chat_template_has_tool_calls(const df_chat_template *t);

/* Render messages[0..n) with opts (NULL = add_generation_prompt false, enable_thinking not
 * given). On success returns 0 and fills *out (free with df_chat_text_free). Errors (-1, *out
 * zeroed, err set): no messages, a NULL role, a NULL content other than an assistant's in a
 * template that has null content, text that is not valid UTF-8, tool calls in a template
 * that does not render them (Kimi K2), tools_json that is not a JSON array (or has duplicate
 * keys), out of memory. A non-empty tools list is accepted by every template (DeepSeek-V3
 * ignores it, as jinja2 does: see df_chat_template_has_tools).
 * Kimi K3: NULL content is JSON null (renders nothing) for every role; the refusals of
 * the DF_CHAT_KIMI_K3 entry above; every text piece that came from the request (content,
 * reasoning, names, arguments, the tools and schema JSON) is a span. */
int df_chat_render(const df_chat_template *t, const df_chat_msg *msgs, size_t n,
                   const df_chat_opts *opts, df_chat_text *out, char *err, size_t errlen);

/* Free the buffers of a rendered prompt and zero it. Accepts a zeroed struct. */
void df_chat_text_free(df_chat_text *out);

/* Render and encode in one call: the template's structure is matched against added tokens,
 * message bytes are plain text (df_tok_encode_spans). *ids is malloc'd (caller frees).
 * DF_CHAT_KIMI_K3: each XTML segment is encoded alone (a structural special is its id, a text
 * piece df_tok_encode(DF_TOK_PLAIN) of its bytes) and the ids concatenated; an error when tok
 * lacks one of the four structural tokens. */
int df_chat_encode(const df_chat_template *t, const df_tok *tok, const df_chat_msg *msgs,
                   size_t n, const df_chat_opts *opts, int32_t **ids, size_t *n_ids, char *err,
                   size_t errlen);

/* Encode text[0..len) that the chat format itself writes — markup, not message text (the frame
 * of a forced tool call, engine/text/tool_calls.h df_tool_call_frame) — as the format's own
 * encoder would within a rendering: Kimi K3 per XTML segment (chat_xtml.h
 * df_xtml_encode_markup), the others with df_tok_encode (added tokens matched). *ids malloc'd
 * (caller frees). Returns 0, or -1 + err (out of memory; K3: tok lacks an XTML special). */
int df_chat_encode_markup(const df_chat_template *t, const df_tok *tok, const char *text,
                          size_t len, int32_t **ids, size_t *n_ids, char *err, size_t errlen);

/* A lower bound on the number of ids df_chat_encode(t, tok, msgs, n, any opts) gives, in O(n)
 * without rendering or allocating: what the template's own structure is certain to add per
 * message, counted only when those control strings are added tokens of `tok` (one id each).
 *   DF_CHAT_QWEN3        3 per system, user and assistant message: <|im_start|>, at least one
 *                        id for the role line, <|im_end|>.
 *   DF_CHAT_DEEPSEEK_V3  1 per user message (<｜User｜>) and per assistant message with
 *                        content (<｜end▁of▁sentence｜>).
 *   DF_CHAT_KIMI_K2      4 per system, user, assistant and tool message (<|im_...|>, at least
 *                        one id for the role word, <|im_middle|>, <|im_end|>), 1 per other.
 *   DF_CHAT_KIMI_K3      11 per system, user and tool message (<|open|> message role="R"
 *                        <|sep|>: 2 specials + 5 text pieces; <|close|> message <|sep|>;
 *                        <|end_of_msg|>), 17 per assistant message (open/close(response) too).
 * Messages are not validated (df_chat_encode does that); a NULL role counts 0. Never fails:
 * 0 when `tok` lacks those added tokens. Borrows every argument. Lets a caller refuse a
 * conversation that cannot fit a context before paying for its encoding. */
/* Ids that end an assistant turn in the chat format `tok` belongs to, beyond the eos ids of
 * config.json / generation_config.json: a Kimi K3 tokenizer (the XTML structural tokens
 * <|open|>, <|close|>, <|sep|>, <|end_of_msg|> are added tokens) stops on <|end_of_msg|> and
 * [EOS] (docs/K3.md §5.1: both are configured as stop ids). Writes up to 4 ids to out and returns
 * their number (0 for other tokenizers or tok NULL). Borrows tok. */
int df_chat_stop_ids(const df_tok *tok, int32_t out[4]);

size_t df_chat_min_tokens(const df_chat_template *t, const df_tok *tok, const df_chat_msg *msgs,
                          size_t n);

#endif
