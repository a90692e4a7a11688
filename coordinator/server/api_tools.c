#define _GNU_SOURCE
/* coordinator/server/api_tools.c — the tool-calling and structured-output fields of a chat
 * request: `tools`, `tool_choice`, `parallel_tool_calls` (api.c), `response_format`, and the
 * `tool_calls` / `tool_call_id` / `name` of messages. Shapes as OpenAI's chat completions API
 * documents them (platform.openai.com/docs/api-reference/chat/create).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/server/api_internal.h"

/* OpenAI: a function name is a-z, A-Z, 0-9, underscores and dashes, at most 64 characters. */
static bool fn_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n > 64) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '-'))
      return false;
  }
  return true;
}

static char *dump(const json_t *v) {
  return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

static int oom(df_api_error *e) {
  return df_api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* Only the keys listed (NULL-terminated) may appear in object v (named param). */
static int only_keys(const json_t *v, const char *param, const char *const *keys,
                     df_api_error *e) {
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)v, k, x) {
    bool ok = false;
    for (int i = 0; keys[i] && !ok; i++) ok = !strcmp(k, keys[i]);
    if (!ok) {
      char q[200];
      snprintf(q, sizeof q, "%s.%s", param, k);
      return df_api_bad(e, q, "Unrecognized field: '%s'", q);
    }
  }
  return 0;
}

int df_api_parse_tools(const json_t *v, df_api_request *r, df_api_error *e) {
  if (!json_is_array(v))
    return df_api_bad(e, "tools", "'tools' must be an array of tools, got %s", df_api_type_name(v));
  size_t n = json_array_size(v);
  if (n > 128) return df_api_bad(e, "tools", "'tools' has %zu tools; at most 128 are accepted", n);
  if (!n) return 0;
  if (!(r->tool_names = calloc(n, sizeof *r->tool_names)) ||
      !(r->tool_params = calloc(n, sizeof *r->tool_params)))
    return oom(e);
  r->n_tools = n;
  static const char *const tool_keys[] = {"type", "function", NULL};
  static const char *const fn_keys[] = {"name", "description", "parameters", "strict", NULL};
  for (size_t i = 0; i < n; i++) {
    const json_t *t = json_array_get(v, i);
    char p[64], q[96];
    snprintf(p, sizeof p, "tools[%zu]", i);
    if (!json_is_object(t)) return df_api_bad(e, p, "'%s' must be an object, got %s", p, df_api_type_name(t));
    if (only_keys(t, p, tool_keys, e)) return -1;
    const json_t *ty = json_object_get(t, "type");
    snprintf(q, sizeof q, "%s.type", p);
    if (!json_is_string(ty) || strcmp(json_string_value(ty), "function"))
      return df_api_bad(e, q, "'%s' must be \"function\" (the only tool type)", q);
    const json_t *f = json_object_get(t, "function");
    snprintf(q, sizeof q, "%s.function", p);
    if (!json_is_object(f)) return df_api_bad(e, q, "'%s' must be an object", q);
    if (only_keys(f, q, fn_keys, e)) return -1;
    const json_t *nm = json_object_get(f, "name");
    snprintf(q, sizeof q, "%s.function.name", p);
    if (!nm) return df_api_bad(e, q, "'%s' is required", q);
    if (df_api_get_str(nm, q, false, &r->tool_names[i], e)) return -1;
    if (!fn_name_ok(r->tool_names[i]))
      return df_api_bad(e, q, "'%s' must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'", q);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(r->tool_names[j], r->tool_names[i]))
        return df_api_bad(e, q, "'%s': two tools are named '%s'", q, r->tool_names[i]);
    const json_t *d = json_object_get(f, "description");
    snprintf(q, sizeof q, "%s.function.description", p);
    if (d && !json_is_string(d) && !json_is_null(d)) return df_api_bad(e, q, "'%s' must be a string", q);
    const json_t *pa = json_object_get(f, "parameters");
    snprintf(q, sizeof q, "%s.function.parameters", p);
    if (pa && !json_is_object(pa) && !json_is_null(pa))
      return df_api_bad(e, q, "'%s' must be a JSON Schema object, got %s", q, df_api_type_name(pa));
    if (pa && json_is_object(pa) && !(r->tool_params[i] = dump(pa))) return oom(e);
    const json_t *st = json_object_get(f, "strict");
    snprintf(q, sizeof q, "%s.function.strict", p);
    if (st && !json_is_boolean(st) && !json_is_null(st)) return df_api_bad(e, q, "'%s' must be a boolean", q);
  }
  if (!(r->tools_json = dump(v))) return oom(e);
  return 0;
}

int df_api_parse_tool_choice(const json_t *v, df_api_request *r, df_api_error *e) {
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    if (!strcmp(s, "none")) r->tool_choice = DF_API_TOOLS_NONE;
    else if (!strcmp(s, "auto")) r->tool_choice = DF_API_TOOLS_AUTO;
    else if (!strcmp(s, "required")) r->tool_choice = DF_API_TOOLS_REQUIRED;
    else return df_api_bad(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" "
                           "or {\"type\": \"function\", \"function\": {\"name\": ...}}, got \"%s\"", s);
    return 0;
  }
  if (!json_is_object(v))
    return df_api_bad(e, "tool_choice", "'tool_choice' must be a string or an object, got %s",
                      df_api_type_name(v));
  static const char *const keys[] = {"type", "function", NULL};
  if (only_keys(v, "tool_choice", keys, e)) return -1;
  const json_t *ty = json_object_get(v, "type"), *f = json_object_get(v, "function");
  if (!json_is_string(ty) || strcmp(json_string_value(ty), "function"))
    return df_api_bad(e, "tool_choice.type", "'tool_choice.type' must be \"function\"");
  if (!json_is_object(f) || json_object_size(f) != 1 || !json_object_get(f, "name"))
    return df_api_bad(e, "tool_choice.function", "'tool_choice.function' must be {\"name\": ...}");
  if (df_api_get_str(json_object_get(f, "name"), "tool_choice.function.name", false,
                     &r->tool_choice_name, e))
    return -1;
  r->tool_choice = DF_API_TOOLS_NAMED;
  return 0;
}

int df_api_parse_response_format(const json_t *v, df_api_request *r, df_api_error *e) {
  if (!json_is_object(v))
    return df_api_bad(e, "response_format", "'response_format' must be an object, got %s",
                      df_api_type_name(v));
  const json_t *ty = json_object_get(v, "type");
  if (!json_is_string(ty))
    return df_api_bad(e, "response_format.type", "'response_format.type' is required: \"text\", "
                      "\"json_object\" or \"json_schema\"");
  const char *t = json_string_value(ty);
  if (!strcmp(t, "text") || !strcmp(t, "json_object")) {
    static const char *const keys[] = {"type", NULL};
    if (only_keys(v, "response_format", keys, e)) return -1;
    r->format = strcmp(t, "text") ? DF_API_FORMAT_JSON_OBJECT : DF_API_FORMAT_TEXT;
  } else if (!strcmp(t, "json_schema")) {
    static const char *const keys[] = {"type", "json_schema", NULL};
    static const char *const js_keys[] = {"name", "description", "schema", "strict", NULL};
    if (only_keys(v, "response_format", keys, e)) return -1;
    const json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js))
      return df_api_bad(e, "response_format.json_schema", "'response_format.json_schema' must be "
                        "an object {name, schema, strict?, description?}");
    if (only_keys(js, "response_format.json_schema", js_keys, e)) return -1;
    const json_t *nm = json_object_get(js, "name"), *sc = json_object_get(js, "schema");
    if (!json_is_string(nm) || !fn_name_ok(json_string_value(nm)))
      return df_api_bad(e, "response_format.json_schema.name", "'response_format.json_schema.name' "
                        "is required: 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'");
    if (sc && !json_is_object(sc) && !json_is_boolean(sc))
      return df_api_bad(e, "response_format.json_schema.schema", "'response_format.json_schema"
                        ".schema' must be a JSON Schema (an object), got %s", df_api_type_name(sc));
    r->format = DF_API_FORMAT_JSON_SCHEMA;
    free(r->schema_json);
    if (!(r->schema_json = sc ? dump(sc) : strdup("{}"))) return oom(e);
  } else {
    return df_api_bad(e, "response_format.type", "'response_format.type' must be \"text\", "
                      "\"json_object\" or \"json_schema\", got \"%s\"", t);
  }
  free(r->format_json);
  r->format_json = NULL;
  if (r->format != DF_API_FORMAT_TEXT && !(r->format_json = dump(v))) return oom(e);
  return 0;
}

int df_api_parse_tool_calls(const json_t *v, const char *param, df_api_msg *m, df_api_error *e) {
  if (json_is_null(v)) return 0;
  if (!json_is_array(v))
    return df_api_bad(e, param, "'%s' must be an array of tool calls, got %s", param, df_api_type_name(v));
  size_t n = json_array_size(v);
  if (!n) return 0;
  if (n > 128) return df_api_bad(e, param, "'%s' has %zu calls; at most 128 are accepted", param, n);
  if (!(m->tool_calls = calloc(n, sizeof *m->tool_calls))) return oom(e);
  m->n_tool_calls = n;
  static const char *const keys[] = {"id", "type", "function", "index", NULL};
  static const char *const fn_keys[] = {"name", "arguments", NULL};
  for (size_t i = 0; i < n; i++) {
    const json_t *c = json_array_get(v, i);
    df_api_tool_call *d = &m->tool_calls[i];
    char p[160], q[200];
    snprintf(p, sizeof p, "%s[%zu]", param, i);
    if (!json_is_object(c)) return df_api_bad(e, p, "'%s' must be an object, got %s", p, df_api_type_name(c));
    if (only_keys(c, p, keys, e)) return -1;
    const json_t *id = json_object_get(c, "id"), *ty = json_object_get(c, "type"),
                 *f = json_object_get(c, "function");
    snprintf(q, sizeof q, "%s.id", p);
    if (id && !json_is_null(id) && df_api_get_str(id, q, false, &d->id, e)) return -1;
    snprintf(q, sizeof q, "%s.type", p);
    if (ty && !json_is_null(ty) && (!json_is_string(ty) || strcmp(json_string_value(ty), "function")))
      return df_api_bad(e, q, "'%s' must be \"function\"", q);
    snprintf(q, sizeof q, "%s.function", p);
    if (!json_is_object(f)) return df_api_bad(e, q, "'%s' must be an object {name, arguments}", q);
    if (only_keys(f, q, fn_keys, e)) return -1;
    snprintf(q, sizeof q, "%s.function.name", p);
    const json_t *nm = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
    if (!nm) return df_api_bad(e, q, "'%s' is required", q);
    if (df_api_get_str(nm, q, false, &d->name, e)) return -1;
    snprintf(q, sizeof q, "%s.function.arguments", p);
    if (json_is_string(args)) {
      /* OpenAI's form: the arguments object as JSON text; it must be one */
      json_error_t je;
      json_t *o = json_loadb(json_string_value(args), json_string_length(args),
                             JSON_REJECT_DUPLICATES, &je);
      bool obj = o && json_is_object(o);
      json_decref(o);
      if (!obj) return df_api_bad(e, q, "'%s' must be a JSON object as text (%s)", q,
                                  o ? "it is JSON but not an object" : je.text);
      if (df_api_get_str(args, q, true, &d->arguments, e)) return -1;
    } else if (json_is_object(args)) {
      if (!(d->arguments = dump(args))) return oom(e);
    } else {
      return df_api_bad(e, q, "'%s' is required: the arguments as a JSON string", q);
    }
  }
  return 0;
}

int df_api_check_tools(df_api_request *r, df_api_error *e) {
  if (r->tool_choice == DF_API_TOOLS_NAMED) {
    bool found = false;
    for (size_t i = 0; i < r->n_tools && !found; i++)
      found = !strcmp(r->tool_names[i], r->tool_choice_name);
    if (!found)
      return df_api_bad(e, "tool_choice.function.name", "'tool_choice' names the function '%s', "
                        "which is not in 'tools'", r->tool_choice_name);
  }
  if (r->tool_choice == DF_API_TOOLS_REQUIRED && !r->n_tools)
    return df_api_bad(e, "tool_choice", "'tool_choice' is \"required\" but no tools are given");
  if (r->n_tools && r->tool_choice != DF_API_TOOLS_NONE && r->format != DF_API_FORMAT_TEXT &&
      r->tool_choice != DF_API_TOOLS_AUTO)
    return df_api_bad(e, "response_format", "'response_format' %s cannot be combined with a "
                      "forced tool call ('tool_choice')",
                      r->format == DF_API_FORMAT_JSON_OBJECT ? "json_object" : "json_schema");
  return 0;
}

void df_api_free_tools(df_api_request *r) {
  for (size_t i = 0; i < r->n_msgs; i++) {
    df_api_msg *m = &r->msgs[i];
    for (size_t k = 0; k < m->n_tool_calls; k++) {
      free(m->tool_calls[k].id);
      free(m->tool_calls[k].name);
      free(m->tool_calls[k].arguments);
    }
    free(m->tool_calls);
    free(m->name);
    free(m->tool_call_id);
  }
  for (size_t i = 0; i < r->n_tools; i++) {
    if (r->tool_names) free(r->tool_names[i]);
    if (r->tool_params) free(r->tool_params[i]);
  }
  free(r->tool_names);
  free(r->tool_params);
  free(r->tools_json);
  free(r->tool_choice_name);
  free(r->format_json);
  free(r->schema_json);
}
