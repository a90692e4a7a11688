/* engine/text/tool_calls_fmt.c — the tool-call formats of the chat families (the markers
 * and each family's call-header reader) and the text helpers of the parser; see
 * tool_calls_internal.h and, for the formats, tool_calls.h.
 */
#include "engine/text/tool_calls_internal.h"
#include "engine/text/chat_json.h"
#include "engine/text/tokenizer_utf8.h"
#include "engine/text/tokenizer_util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>


/* lit at s[j..n): OK (all there), NEED (s[j..n) is a proper prefix, possibly empty), FAIL */
int df_tc_lit_at(const char *s, size_t n, size_t j, const char *lit) {
  size_t l = strlen(lit), have = n - j;
  if (have >= l) return memcmp(s + j, lit, l) == 0 ? OK : FAIL;
  return memcmp(s + j, lit, have) == 0 ? NEED : FAIL;
}

static const char *find(const char *s, size_t n, const char *needle) {
  size_t k = strlen(needle);
  if (n < k) return NULL;
  for (const char *p = s, *end = s + n - k; p <= end; p++) {
    p = memchr(p, needle[0], (size_t)(end - p) + 1);
    if (!p) return NULL;
    if (memcmp(p, needle, k) == 0) return p;
  }
  return NULL;
}

char *df_tc_dupn(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = 0;
  }
  return d;
}

size_t df_tc_skip_ws(const char *s, size_t n, size_t i) {
  while (i < n && ws(s[i])) i++;
  return i;
}

/* A JSON string at s[i] ('"'), decoded into *out (malloc'd) when out != NULL. OK with *end
 * after the closing quote, NEED (cut off), FAIL (not a string, a bad escape, a control
 * character, \u0000 or a lone surrogate). */
static int json_string_at(const char *s, size_t n, size_t i, size_t *end, char **out) {
  if (i >= n) return NEED;
  if (s[i] != '"') return FAIL;
  df_tok_buf b = {0};
  int rc = NEED;
  size_t k = i + 1;
  while (k < n) {
    unsigned char c = (unsigned char)s[k];
    if (c == '"') {
      *end = k + 1;
      rc = OK;
      break;
    }
    if (c < 0x20) {
      rc = FAIL;
      break;
    }
    if (c != '\\') {
      if (out && df_tok__buf_put(&b, s + k, 1) != 0) goto oom;
      k++;
      continue;
    }
    if (k + 1 >= n) break; /* NEED */
    char e = s[k + 1];
    static const char k_esc[] = "\"\\/bfnrt", k_map[] = "\"\\/\b\f\n\r\t";
    const char *simple = e ? strchr(k_esc, e) : NULL;
    if (simple) {
      if (out && df_tok__buf_put(&b, &k_map[simple - k_esc], 1) != 0) goto oom;
      k += 2;
      continue;
    }
    if (e != 'u') {
      rc = FAIL;
      break;
    }
    uint32_t cp = 0;
    size_t need = 6, got = 0;
    for (size_t q = 0; q < 4; q++) {
      if (k + 2 + q >= n) break;
      char h = s[k + 2 + q];
      int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (v < 0) {
        rc = FAIL;
        goto done;
      }
      cp = cp * 16 + (uint32_t)v;
      got++;
    }
    if (got < 4) break; /* NEED */
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
      rc = FAIL;
      break;
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate: \uDC00-\uDFFF must follow */
      need = 12;
      uint32_t lo = 0;
      const char *t = s + k + 6;
      size_t have = n - (k + 6);
      if (have < 2) break;
      if (t[0] != '\\' || t[1] != 'u') {
        rc = FAIL;
        break;
      }
      got = 0;
      for (size_t q = 0; q < 4 && q + 2 < have; q++) {
        char h = t[2 + q];
        int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (v < 0) {
          rc = FAIL;
          goto done;
        }
        lo = lo * 16 + (uint32_t)v;
        got++;
      }
      if (got < 4) break; /* NEED */
      if (lo < 0xDC00 || lo > 0xDFFF) {
        rc = FAIL;
        break;
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp == 0) {
      rc = FAIL;
      break;
    }
    char u[4];
    size_t ul = df_tok__cp_to_utf8(cp, u);
    if (out && df_tok__buf_put(&b, u, ul) != 0) goto oom;
    k += need;
  }
done:
  if (rc == OK && out) {
    if (!b.p && df_tok__buf_put(&b, "", 0) != 0) goto oom;
    *out = b.p;
    return OK;
  }
  df_tok__buf_free(&b);
  return rc;
oom:
  df_tok__buf_free(&b);
  return FAIL;
}

/* RFC 8259 JSON text whose value is an object (whitespace around allowed). */
bool df_tc_json_object_text(const char *s, size_t n) {
  size_t i = df_tc_skip_ws(s, n, 0);
  if (i >= n || s[i] != '{') return false;
  char *stack = NULL;
  size_t depth = 0, cap = 0;
  bool ok = false;
  for (;;) {
    /* a value at s[i] */
    i = df_tc_skip_ws(s, n, i);
    if (i >= n) goto out;
    char c = s[i];
    if (c == '{' || c == '[') {
      if (df_tok__grow((void **)&stack, &cap, depth + 1, 1) != 0) goto out;
      stack[depth++] = c;
      i = df_tc_skip_ws(s, n, i + 1);
      if (i < n && s[i] == (c == '{' ? '}' : ']')) {
        depth--;
        i++;
        goto after;
      }
      if (c == '{') goto key;
      continue;
    } else if (c == '"') {
      size_t e;
      if (json_string_at(s, n, i, &e, NULL) != OK) goto out;
      i = e;
    } else if (c == 't' || c == 'f' || c == 'n') {
      const char *w = c == 't' ? "true" : c == 'f' ? "false" : "null";
      if (df_tc_lit_at(s, n, i, w) != OK) goto out;
      i += strlen(w);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if (s[i] == '-') i++;
      if (i >= n) goto out;
      if (s[i] == '0') i++;
      else if (s[i] >= '1' && s[i] <= '9') while (i < n && s[i] >= '0' && s[i] <= '9') i++;
      else goto out;
      if (i < n && s[i] == '.') {
        i++;
        if (i >= n || s[i] < '0' || s[i] > '9') goto out;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
      }
      if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || s[i] < '0' || s[i] > '9') goto out;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
      }
    } else {
      goto out;
    }
  after:
    for (;;) {
      i = df_tc_skip_ws(s, n, i);
      if (depth == 0) {
        ok = i == n;
        goto out;
      }
      if (i >= n) goto out;
      char top = stack[depth - 1];
      if (s[i] == (top == '{' ? '}' : ']')) {
        depth--;
        i++;
        continue;
      }
      if (s[i] != ',') goto out;
      i++;
      if (top == '{') goto key;
      break; /* the next array element */
    }
    continue;
  key: {
    size_t e;
    i = df_tc_skip_ws(s, n, i);
    if (json_string_at(s, n, i, &e, NULL) != OK) goto out;
    i = df_tc_skip_ws(s, n, e);
    if (i >= n || s[i] != ':') goto out;
    i++;
  }
  }
out:
  free(stack);
  return ok;
}

/* Qwen3: ws { ws "name" ws : ws STRING ws , ws "arguments" ws : */
static int header_qwen3(const char *s, size_t n, hdr *h) {
  static const char *const k_seq[] = {"{", "\"name\"", ":", NULL, ",", "\"arguments\"", ":"};
  size_t i = 0;
  char *name = NULL;
  int rc = NEED;
  for (size_t q = 0; q < sizeof k_seq / sizeof k_seq[0]; q++) {
    i = df_tc_skip_ws(s, n, i);
    if (i >= n) goto need;
    if (!k_seq[q]) {
      size_t e;
      int r = json_string_at(s, n, i, &e, &name);
      if (r != OK) {
        rc = r;
        goto need;
      }
      i = e;
      continue;
    }
    int r = df_tc_lit_at(s, n, i, k_seq[q]);
    if (r != OK) {
      rc = r;
      goto need;
    }
    i += strlen(k_seq[q]);
  }
  if (!*name) {
    free(name);
    return FAIL;
  }
  h->len = i;
  h->name = name;
  return OK;
need:
  free(name);
  if (rc == NEED && n > HDR_CAP) rc = FAIL;
  return rc;
}

/* DeepSeek-V3: function<｜tool▁sep｜>NAME\n```json\n */
static int header_deepseek(const char *s, size_t n, hdr *h) {
  static const char head[] = "function" DS_SEP;
  int r = df_tc_lit_at(s, n, 0, head);
  if (r != OK) return r;
  size_t a = sizeof head - 1;
  const char *nl = memchr(s + a, '\n', n - a);
  size_t end = nl ? (size_t)(nl - s) : n;
  if (find(s + a, end - a, "<" FW) || memchr(s + a, 0, end - a)) return FAIL; /* NUL: no name */
  if (!nl) return end - a > HDR_CAP ? FAIL : NEED;
  if (end == a) return FAIL;
  r = df_tc_lit_at(s, n, end, "\n```json\n");
  if (r != OK) return r;
  if (!(h->name = df_tc_dupn(s + a, end - a))) return FAIL;
  h->len = end + 9;
  return OK;
}

/* Kimi K2: ID<|tool_call_argument_begin|>, ID = functions.NAME:IDX */
static int header_kimi(const char *s, size_t n, hdr *h) {
  const char *e = find(s, n, K2_CALL_ARGS);
  size_t end = e ? (size_t)(e - s) : n;
  /* another marker inside the id (a "<|" that is not the start of the argument marker) */
  for (const char *p = s; (p = find(p, (size_t)(s + end - p), "<|")); p++)
    if (e || df_tc_lit_at(s, n, (size_t)(p - s), K2_CALL_ARGS) != NEED) return FAIL;
  if (!e) return n > 512 + sizeof K2_CALL_ARGS ? FAIL : NEED;
  size_t a = df_tc_skip_ws(s, end, 0), b = end;
  while (b > a && ws(s[b - 1])) b--;
  const char *id = s + a;
  size_t idl = b - a, na = 0, nb = idl;
  if (idl >= 10 && memcmp(id, "functions.", 10) == 0) na = 10;
  size_t k = nb;
  while (k > na && id[k - 1] >= '0' && id[k - 1] <= '9') k--;
  if (k < nb && k > na && id[k - 1] == ':') nb = k - 1;
  if (nb == na || idl > 512 || memchr(id, 0, idl)) return FAIL;
  h->name = df_tc_dupn(id + na, nb - na);
  h->id = df_tc_dupn(id, idl);
  if (!h->name || !h->id) {
    free(h->name);
    free(h->id);
    h->name = h->id = NULL;
    return FAIL;
  }
  h->len = end + sizeof K2_CALL_ARGS - 1;
  return OK;
}

/* XTML attributes at s[i]: ( ' ' KEY '="' VALUE '"' )* '<|sep|>'; the "tool" value (escaped)
 * in *tool_at / *tool_len. */
static int xtml_attrs(const char *s, size_t n, size_t *i, const char **tool_at, size_t *tool_len) {
  size_t k = *i;
  for (;;) {
    if (k >= n) return NEED;
    int r = df_tc_lit_at(s, n, k, "<|sep|>");
    if (r == OK) {
      *i = k + 7;
      return OK;
    }
    if (r == NEED) return NEED;
    if (s[k] != ' ') return FAIL;
    size_t key = ++k;
    while (k < n && ((s[k] >= 'a' && s[k] <= 'z') || (s[k] >= 'A' && s[k] <= 'Z') || s[k] == '_' ||
                     s[k] == '-'))
      k++;
    if (k >= n) return NEED;
    if (k == key || s[k] != '=') return FAIL;
    if (++k >= n) return NEED;
    if (s[k] != '"') return FAIL;
    const char *q = memchr(s + k + 1, '"', n - k - 1);
    if (!q) return NEED;
    if (tool_at && k - 1 - key == 4 && memcmp(s + key, "tool", 4) == 0) {
      *tool_at = s + k + 1;
      *tool_len = (size_t)(q - (s + k + 1));
    }
    k = (size_t)(q - s) + 1;
  }
}

/* Kimi K3:  ATTRS<|sep|> ws (<|open|>json ATTRS<|sep|> | <|close|>call<|sep|>) */
static int header_k3_(const char *s, size_t n, hdr *h) {
  size_t i = 0, tl = 0;
  const char *t = NULL;
  int r = xtml_attrs(s, n, &i, &t, &tl);
  if (r != OK) return r;
  size_t j = df_tc_skip_ws(s, n, i);
  if (j >= n) return j - i > WS_CAP ? FAIL : NEED;
  r = df_tc_lit_at(s, n, j, "<|close|>call<|sep|>");
  if (r == OK) {
    h->no_args = true;
    h->len = j + 20;
  } else {
    if (r == NEED) return NEED;
    r = df_tc_lit_at(s, n, j, "<|open|>json");
    if (r != OK) return r;
    j += 12;
    if (j < n && s[j] != ' ' && s[j] != '<') return FAIL;
    r = xtml_attrs(s, n, &j, NULL, NULL);
    if (r != OK) return r;
    h->len = j;
  }
  if (!t || tl == 0 || memchr(t, 0, tl)) return FAIL;
  df_tok_buf b = {0}; /* undo escape_attr: &quot; then &amp; */
  for (size_t k = 0; k < tl;) {
    bool quot = tl - k >= 6 && memcmp(t + k, "&quot;", 6) == 0;
    bool amp = !quot && tl - k >= 5 && memcmp(t + k, "&amp;", 5) == 0;
    int rc = df_tok__buf_put(&b, quot ? "\"" : amp ? "&" : t + k, 1);
    k += quot ? 6 : amp ? 5 : 1;
    if (rc != 0) {
      df_tok__buf_free(&b);
      return FAIL;
    }
  }
  h->name = b.p;
  return OK;
}

static int header_k3(const char *s, size_t n, hdr *h) {
  int r = header_k3_(s, n, h);
  return r == NEED && n > HDR_CAP ? FAIL : r;
}

static const fam k_qwen3 = {"\n", NULL, NULL, "<tool_call>", header_qwen3, "</tool_call>", "}",
                            NULL};
static const fam k_deepseek = {NULL, DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, header_deepseek,
                               DS_CALL_END, "```", NULL};
static const fam k_kimi = {NULL, K2_CALLS_BEGIN, K2_CALLS_END, K2_CALL_BEGIN, header_kimi,
                           K2_CALL_END, NULL, NULL};
static const fam k_k3 = {NULL, "<|open|>tools<|sep|>", "<|close|>tools<|sep|>", "<|open|>call",
                         header_k3, "<|close|>json<|sep|>", NULL, "<|close|>call<|sep|>"};

const fam *df_tc_fam_of(df_chat_family f) {
  switch (f) {
  case DF_CHAT_QWEN3: return &k_qwen3;
  case DF_CHAT_DEEPSEEK_V3: return &k_deepseek;
  case DF_CHAT_KIMI_K2:
  case DF_CHAT_KIMI_K2_THINKING: return &k_kimi;
  case DF_CHAT_KIMI_K3: return &k_k3;
  }
  return NULL;
}


const char *const *df_tool_call_markers(df_chat_family f) {
  static const char *const qwen3[] = {"<tool_call>", "</tool_call>", NULL};
  static const char *const deepseek[] = {DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN,
                                         DS_CALL_END, DS_SEP, NULL};
  static const char *const kimi[] = {K2_CALLS_BEGIN, K2_CALLS_END, K2_CALL_BEGIN, K2_CALL_ARGS,
                                     K2_CALL_END, NULL};
  static const char *const xtml[] = {"<|open|>", "<|close|>", "<|sep|>", NULL};
  static const char *const none[] = {NULL};
  switch (f) {
  case DF_CHAT_QWEN3: return qwen3;
  case DF_CHAT_DEEPSEEK_V3: return deepseek;
  case DF_CHAT_KIMI_K2:
  case DF_CHAT_KIMI_K2_THINKING: return kimi;
  case DF_CHAT_KIMI_K3: return xtml;
  }
  return none;
}
