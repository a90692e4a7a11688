/* engine/text/tool_calls_internal.h — between the tool-call parser (tool_calls.c) and the
 * families' formats (tool_calls_fmt.c): the markers each template writes around an assistant's
 * calls, a family's header reader, and the text helpers both use.
 */
#ifndef DF_ENGINE_TOOL_CALLS_INTERNAL_H
#define DF_ENGINE_TOOL_CALLS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/text/tool_calls.h"


enum { NEED = 0, OK = 1, FAIL = -1 };

typedef struct hdr {
  size_t len;   /* bytes of header after the call-begin marker */
  char *name;   /* malloc'd */
  char *id;     /* malloc'd, the model's own; NULL = generate one */
  bool no_args; /* Kimi K3: the call closed without a json element: arguments {} */
} hdr;

typedef int (*header_fn)(const char *s, size_t n, hdr *h);

typedef struct fam {
  const char *pre;        /* text before the markers that belongs to the call, optional */
  const char *sec_begin;  /* section markers (NULL: none) */
  const char *sec_end;
  const char *call_begin; /* starts one call */
  header_fn header;
  const char *args_end;   /* ends the arguments */
  const char *args_tail;  /* structure between the arguments and args_end (whitespace around) */
  const char *post;       /* must follow args_end (whitespace before it) */
} fam;

#define FW "\xef\xbd\x9c" /* ｜ */
#define SP "\xe2\x96\x81" /* ▁ */
#define DS_CALLS_BEGIN "<" FW "tool" SP "calls" SP "begin" FW ">"
#define DS_CALLS_END "<" FW "tool" SP "calls" SP "end" FW ">"
#define DS_CALL_BEGIN "<" FW "tool" SP "call" SP "begin" FW ">"
#define DS_CALL_END "<" FW "tool" SP "call" SP "end" FW ">"
#define DS_SEP "<" FW "tool" SP "sep" FW ">"
#define K2_CALLS_BEGIN "<|tool_calls_section_begin|>"
#define K2_CALLS_END "<|tool_calls_section_end|>"
#define K2_CALL_BEGIN "<|tool_call_begin|>"
#define K2_CALL_ARGS "<|tool_call_argument_begin|>"
#define K2_CALL_END "<|tool_call_end|>"

#define WS_CAP 256      /* whitespace run between markers */
#define HOLD_CAP 4096   /* trailing whitespace of arguments held back */
#define HDR_CAP 1024    /* a call header (name, id, attributes) still incomplete: not a call */


static inline bool ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* tool_calls_fmt.c. Text s[0..n) throughout; none of them allocates but df_tc_dupn. */
/* lit at s[j..n): OK when all of it is there, NEED when s[j..n) is a proper prefix of it
 * (possibly empty), FAIL otherwise. */
int df_tc_lit_at(const char *s, size_t n, size_t j, const char *lit);
/* A malloc'd NUL-terminated copy of s[0..n), NULL when out of memory. */
char *df_tc_dupn(const char *s, size_t n);
/* The first index >= i that is not JSON whitespace (n when none). */
size_t df_tc_skip_ws(const char *s, size_t n, size_t i);
/* True when s[0..n), whitespace around it allowed, is the JSON text of one object (RFC 8259). */
bool df_tc_json_object_text(const char *s, size_t n);
/* The format of a chat family, NULL for one without tool calls. */
const fam *df_tc_fam_of(df_chat_family f);

#endif
