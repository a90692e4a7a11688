/* engine/text/chat_json.c — Python json.dumps output from jansson values (see chat_json.h). */
#include "engine/text/chat_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *df_pyjson_parse(const char *text, const char *what, char *err, size_t errlen) {
  json_error_t je;
  json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
  if (!v) df_tok__seterr(err, errlen, "%s: %s at line %d column %d", what, je.text, je.line,
                         je.column);
  return v;
}

static int put_string(df_tok_buf *b, const char *s, size_t n) {
  if (df_tok__buf_put(b, "\"", 1) != 0) return -1;
  size_t run = 0; /* bytes copied verbatim since the last escape */
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = NULL;
    char u[8];
    switch (c) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\n': esc = "\\n"; break;
    case '\r': esc = "\\r"; break;
    case '\t': esc = "\\t"; break;
    case '\b': esc = "\\b"; break;
    case '\f': esc = "\\f"; break;
    default:
      if (c < 0x20) {
        snprintf(u, sizeof u, "\\u%04x", c);
        esc = u;
      }
    }
    if (!esc) {
      run++;
      continue;
    }
    if (df_tok__buf_put(b, s + i - run, run) != 0 || df_tok__buf_puts(b, esc) != 0) return -1;
    run = 0;
  }
  if (df_tok__buf_put(b, s + n - run, run) != 0) return -1;
  return df_tok__buf_put(b, "\"", 1);
}

/* repr(float): the fewest significant digits that read back as the same double, laid out as
 * CPython's float_repr_style "short" does (Python/pystrtod.c, mode 'r'). */
static int put_real(df_tok_buf *b, double x) {
  if (!isfinite(x)) return df_tok__buf_puts(b, isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
  char e[40];
  int prec = 1;
  for (; prec <= 17; prec++) {
    snprintf(e, sizeof e, "%.*e", prec - 1, x);
    if (strtod(e, NULL) == x) break;
  }
  /* e = [-]d[.ddd]e(+|-)XX */
  const char *p = e;
  bool neg = *p == '-';
  if (neg) p++;
  char digits[24];
  size_t nd = 0;
  for (; *p && *p != 'e'; p++)
    if (*p != '.') digits[nd++] = *p;
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  int exp10 = atoi(p + 1);
  int decpt = exp10 + 1; /* value = 0.DIGITS x 10^decpt */
  char out[64];
  size_t k = 0;
  if (neg) out[k++] = '-';
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out[k++] = '0';
      out[k++] = '.';
      for (int z = 0; z < -decpt; z++) out[k++] = '0';
      for (size_t i = 0; i < nd; i++) out[k++] = digits[i];
    } else {
      for (int i = 0; i < decpt; i++) out[k++] = (size_t)i < nd ? digits[i] : '0';
      out[k++] = '.';
      if ((size_t)decpt < nd)
        for (size_t i = (size_t)decpt; i < nd; i++) out[k++] = digits[i];
      else
        out[k++] = '0';
    }
    out[k] = 0;
  } else {
    out[k++] = digits[0];
    if (nd > 1) {
      out[k++] = '.';
      for (size_t i = 1; i < nd; i++) out[k++] = digits[i];
    }
    snprintf(out + k, sizeof out - k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
  }
  return df_tok__buf_puts(b, out);
}

static int cmp_keys(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b); /* UTF-8 order = code points */
}

int df_pyjson_dump(df_tok_buf *b, const json_t *v, df_pyjson_style st) {
  const char *item_sep = st.compact ? "," : ", ", *key_sep = st.compact ? ":" : ": ";
  char num[32];
  switch (json_typeof(v)) {
  case JSON_NULL: return df_tok__buf_puts(b, "null");
  case JSON_TRUE: return df_tok__buf_puts(b, "true");
  case JSON_FALSE: return df_tok__buf_puts(b, "false");
  case JSON_INTEGER:
    snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    return df_tok__buf_puts(b, num);
  case JSON_REAL: return put_real(b, json_real_value(v));
  case JSON_STRING: return put_string(b, json_string_value(v), json_string_length(v));
  case JSON_ARRAY: {
    if (df_tok__buf_puts(b, "[") != 0) return -1;
    for (size_t i = 0; i < json_array_size(v); i++)
      if ((i && df_tok__buf_puts(b, item_sep) != 0) ||
          df_pyjson_dump(b, json_array_get(v, i), st) != 0)
        return -1;
    return df_tok__buf_puts(b, "]");
  }
  case JSON_OBJECT: {
    size_t n = json_object_size(v), i = 0;
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return -1;
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) keys[i++] = k;
    if (st.sort_keys) qsort(keys, n, sizeof *keys, cmp_keys);
    int rc = df_tok__buf_puts(b, "{");
    for (i = 0; rc == 0 && i < n; i++) {
      if (i) rc = df_tok__buf_puts(b, item_sep);
      if (rc == 0) rc = put_string(b, keys[i], strlen(keys[i]));
      if (rc == 0) rc = df_tok__buf_puts(b, key_sep);
      if (rc == 0) rc = df_pyjson_dump(b, json_object_get(v, keys[i]), st);
    }
    free(keys);
    return rc == 0 ? df_tok__buf_puts(b, "}") : -1;
  }
  }
  return -1;
}
