/* coordinator/server/api_internal.h — what api.c (the request and its sampling fields) calls in
 * api_tools.c (tools, tool_choice, response_format, tool calls in messages). Every one returns
 * 0, or -1 with *e set to a 400 naming `param` (500 when out of memory).
 */
#ifndef DF_COORD_API_INTERNAL_H
#define DF_COORD_API_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

#include "coordinator/server/api.h"
#include "coordinator/server/api_request.h"

/* api_tools.c: `tools` (the array of function tools), `tool_choice`, `response_format`, and an
 * assistant message's `tool_calls` (messages[i].tool_calls as param). */
int df_api_parse_tools(const json_t *v, df_api_request *r, df_api_error *e);
int df_api_parse_tool_choice(const json_t *v, df_api_request *r, df_api_error *e);
int df_api_parse_response_format(const json_t *v, df_api_request *r, df_api_error *e);
int df_api_parse_tool_calls(const json_t *v, const char *param, df_api_msg *m, df_api_error *e);
/* Checks that need the whole request (tool_choice names a tool that exists, a tool message's
 * tool_call_id...). */
int df_api_check_tools(df_api_request *r, df_api_error *e);
/* Free what the functions above allocated in r (called by df_api_request_free). */
void df_api_free_tools(df_api_request *r);

#endif
