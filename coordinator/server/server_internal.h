/* coordinator/server/server_internal.h — between the HTTP server (server.c: listening,
 * connections, routing, auth, the other endpoints), the generation endpoints (generate.c:
 * /v1/chat/completions and /v1/completions, tokenizing, submitting, streaming) and what both
 * do with a connection (server_conn.c: answers, counts, logs, timeouts).
 */
#ifndef DF_COORD_SERVER_INTERNAL_H
#define DF_COORD_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "coordinator/generate/json_grammar.h"
#include "coordinator/generate/sched.h"
#include "coordinator/server/api.h"
#include "coordinator/server/hosts.h"
#include "coordinator/server/server.h"
#include "engine/text/reasoning.h"
#include "engine/text/tool_calls.h"

enum route { R_CHAT, R_COMPL, R_MODELS, R_MODEL_ONE, R_HEALTH, R_METRICS, R_CLUSTER, R_UI, R_OTHER,
             R_N };
extern const char *const df_srv_route_name[R_N];


#define MAX_CODES 16
typedef struct code_count {
  int code;
  int64_t n;
} code_count;

struct df_srv {
  df_srv_opts o;
  df_jsg_vocab *gvocab; /* the tokenizer's byte trie for constrained decoding, built on first
                           use (under mu) */
  char *model_id, *api_key;
  df_sched *sched;
  const df_model *m;
  const df_tok *tok;
  size_t max_piece; /* bytes of the tokenizer's longest token (text lower bound, tokenize) */
  const df_chat_template *tmpl;
  struct MHD_Daemon *d;
  int port;
  int64_t created;
  pthread_mutex_t mu; /* guards the counters and the id generator */
  code_count counts[R_N][MAX_CODES];
  int64_t streams_open, disconnects;
  uint64_t rng;
  df_srv_hosts *hosts; /* open connections, per client address, and their request deadlines */
  int listen_fd;       /* the listening socket (accept thread) */
  int wake_fd;         /* eventfd: wakes the accept thread (a slot freed, or stop) */
  pthread_t gate;      /* the accept thread (gate_main) */
  bool gate_running;
  atomic_bool stopping;
};

/* One HTTP request's state (MHD's con_cls). */
typedef struct conn {
  df_srv *srv;
  enum route route;
  bool post;
  char *body;
  size_t len, cap;
  bool too_big;
  bool have_err;
  df_api_error err; /* decided before the body was read (auth, route, size) */
  int fd;           /* client socket */
  /* generation */
  df_sched_job *job;
  df_api_meta meta;
  char id[64];
  int64_t prompt_tokens;
  df_sched_news news;
  char *text;       /* taken text not yet sent (stream) or the whole text (non-stream) */
  size_t text_len, text_off;
  df_reasoning_parser *rp; /* chat of a family with reasoning: the output split into
                              reasoning and content (the content goes on to tp) */
  df_tool_parser *tp; /* chat with tools: the model's output parsed into content + calls */
  bool tp_done;     /* the parsers (rp, tp) have seen the end */
  char *forced;     /* a forced call's frame text appended to the prompt, not yet parsed */
  bool one_call;    /* parallel_tool_calls false: only the first call is reported */
  char **evq;       /* stream: events made ahead (tool-call chunks), sent in order */
  size_t evq_n, evq_head, evq_cap;
  bool logprobs;    /* the request asked for logprobs */
  df_sched_logprob *lp; /* taken entries not yet sent */
  size_t lp_n;
  int64_t lp_offset; /* completions: text_offset of the next entry (code points) */
  int stage;        /* stream: 0 role, 1 content, 2 usage, 3 [DONE], 4 end */
  char *ev;         /* the event being written */
  size_t ev_len, ev_off;
  int status;       /* HTTP status answered (0 = none yet) */
  bool streaming;   /* the answer is a stream (its reader manages the timeout) */
  struct MHD_Connection *mc; /* valid while the request and its response are in flight */
  struct timespec t0; /* when the request arrived */
  atomic_int refs;  /* MHD's request (until on_completed) + a streaming response (until its
                       free callback, which libmicrohttpd may call after on_completed) */
} conn;


/* The server's state as the generation endpoints and server_conn.c see it (the struct above;
 * df_srv is the public name, server.h). */
typedef struct df_srv srv_ctx;

/* A random 64-bit value from the server's splitmix64 stream (ids, default seeds). */
uint64_t df_srv_rand(srv_ctx *s);
/* Count one answer of `code` on route r (/metrics). */
void df_srv_count(srv_ctx *s, enum route r, int code);
/* One log line on stderr ("deltafin serve: ..."); dropped under --quiet unless `always`. */
void df_srv_log(srv_ctx *s, bool always, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Queue a response of `len` bytes (body is taken: freed by libmicrohttpd) and count it. */
enum MHD_Result df_srv_send_body(conn *c, struct MHD_Connection *mc, int status,
                                 const char *ctype, char *body, size_t len);
/* The OpenAI error body of e, with e->status. */
enum MHD_Result df_srv_send_error(conn *c, struct MHD_Connection *mc, const df_api_error *e);
/* A JSON body (taken; NULL = answer 500 out of memory). */
enum MHD_Result df_srv_send_json(conn *c, struct MHD_Connection *mc, int status, char *json);
/* Drop one reference to c (frees it at the last). */
void df_srv_conn_unref(conn *c);
/* The connection's inactivity timeout: 0 while generating, else --idle-timeout (server.c). */
void df_srv_conn_timeout(conn *c, bool generating);
/* CLOCK_MONOTONIC in milliseconds. */
int64_t df_srv_now_ms(void);
/* POST /v1/chat/completions and /v1/completions once the body is in (generate.c). */
enum MHD_Result df_srv_handle_generate(conn *c, struct MHD_Connection *mc);
/* Whether url names one of the web UI's files ("/" is its page; server_webui.c). */
bool df_srv_webui_has(const char *url);
/* GET or HEAD of a web UI file: the embedded bytes with their Content-Type, ETag and
 * Cache-Control: no-cache, or 304 when If-None-Match holds the ETag (server_webui.c). */
enum MHD_Result df_srv_handle_webui(conn *c, struct MHD_Connection *mc, const char *url);
/* GET /v1/cluster: the cluster document (docs/API.md; server_cluster.c). */
enum MHD_Result df_srv_handle_cluster(conn *c, struct MHD_Connection *mc);

#endif
