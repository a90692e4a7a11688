/* coordinator/server/api_request.c — the request-parsing helpers of api_request.h. */
#include "coordinator/server/api_request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int df_api_error_set(df_api_error *e, int status, const char *type, const char *param,
                     const char *code, const char *fmt, ...) {
  e->status = status;
  e->type = type ? type : "invalid_request_error";
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  e->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  return -1;
}

int df_api_bad(df_api_error *e, const char *param, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return df_api_error_set(e, 400, NULL, param, NULL, "%s", msg);
}

const char *df_api_type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL: return "null";
  }
  return "a value";
}

/* A copy of a JSON string without NUL bytes (jansson guarantees valid UTF-8). */
int df_api_get_str(const json_t *v, const char *param, bool allow_empty, char **out,
                   df_api_error *e) {
  if (!json_is_string(v)) return df_api_bad(e, param, "'%s' must be a string, got %s", param, df_api_type_name(v));
  size_t n = json_string_length(v);
  const char *s = json_string_value(v);
  if (memchr(s, 0, n)) return df_api_bad(e, param, "'%s' must not contain NUL characters", param);
  if (!n && !allow_empty) return df_api_bad(e, param, "'%s' must not be empty", param);
  char *c = malloc(n + 1);
  if (!c) return df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
  memcpy(c, s, n + 1);
  free(*out);
  *out = c;
  return 0;
}

int df_api_get_bool(const json_t *v, const char *param, bool *out, df_api_error *e) {
  if (!json_is_boolean(v)) return df_api_bad(e, param, "'%s' must be a boolean, got %s", param, df_api_type_name(v));
  *out = json_is_true(v);
  return 0;
}

