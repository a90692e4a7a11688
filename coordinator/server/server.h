/* coordinator/server/server.h — the OpenAI-compatible HTTP server of `deltafin serve`.
 *
 * Owns: the listen socket and its accept thread (connection limits and the request deadline,
 * with coordinator/server/hosts.h), the libmicrohttpd daemon (one thread per connection,
 * poll()), routing, API-key checks,
 * body limits, turning requests into prompt ids (chat template / tokenizer), handing them to
 * the scheduler, streaming its text back as server-sent events or one JSON body, noticing
 * clients that go away (their generation is cancelled before the next step), and /health,
 * /v1/models, /metrics, /v1/cluster (server_cluster.c) and the web UI's static files, compiled
 * into the binary (server_webui.c, coordinator/server/webui/).
 * Does not own: request parsing (coordinator/server/api.h), generation
 * (coordinator/generate/sched.h), the model, tokenizer, chat template and scheduler
 * (borrowed; they must outlive the server).
 *
 * Endpoints:
 *   POST /v1/chat/completions, POST /v1/completions   (API key when configured)
 *   GET  /v1/models, GET /v1/models/{id}                (API key when configured)
 *   GET  /v1/cluster -> nodes, placement, heat, tok/s   (API key when configured)
 *   GET  /  (and /app.js, /app.css) -> the web UI       (no key: it holds no data)
 *   GET  /health  -> 200 {"status":"ok"}                (no key)
 *   GET  /metrics -> Prometheus text format 0.0.4       (no key)
 * Errors are OpenAI-shaped JSON bodies (coordinator/server/api.h) with 400 (validation, limits,
 * context overflow), 401 (key), 404 (path, model), 405 (method), 413 (body size), 429
 * (queue full; Retry-After: 1), 500 (engine), 503 (shutting down).
 */
#ifndef DF_COORD_SERVER_H
#define DF_COORD_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "coordinator/generate/sched.h"
#include "engine/text/chat_template.h"
#include "engine/model.h"
#include "engine/text/tokenizer.h"

typedef struct df_srv df_srv;

/* Connection limits. Every connection has its own thread; sockets are polled with poll(), so
 * descriptor numbers are not limited by FD_SETSIZE (other sockets of the process, e.g. the
 * cluster port's, may hold any number of them). The connections must fit the open-file limit
 * (RLIMIT_NOFILE) with 128 descriptors to spare for everything else (see max_conns). */
#define DF_SRV_DEFAULT_CONNS 768
#define DF_SRV_MAX_CONNS 16384
/* Connections one client address may hold by default (--max-connections-per-host): a host
 * that opens and holds connections (slow or idle clients) cannot take every slot. */
#define DF_SRV_DEFAULT_PER_HOST 128
/* Seconds a connection has to deliver a complete request by default (--request-timeout), and
 * the most that may be asked. */
#define DF_SRV_DEFAULT_REQUEST_TIMEOUT 30
#define DF_SRV_MAX_REQUEST_TIMEOUT 86400

typedef struct df_srv_opts {
  const char *host;      /* address to bind (numeric or a name); NULL = "127.0.0.1" */
  int port;              /* TCP port; 0 = any free port (see df_srv_port) */
  const char *api_key;   /* required "Authorization: Bearer KEY" on /v1; NULL/"" = none */
  const char *model_id;  /* the id clients name in "model" and /v1/models lists */
  size_t max_body;       /* bytes of a request body; 0 = 4 MiB */
  int64_t max_prompt;    /* prompt tokens; 0 = the context size - 1 */
  unsigned max_conns;    /* simultaneous connections; 0 = DF_SRV_DEFAULT_CONNS; at most
                            DF_SRV_MAX_CONNS. Lowered (one log line) to what the open-file limit
                            allows after raising its soft value toward the hard one. Clients
                            past it wait in the listen backlog until a connection closes (the
                            server does not accept them meanwhile). */
  unsigned idle_timeout_s; /* seconds a connection may stay silent before it is closed: while it
                            has not sent a complete request, between keep-alive requests, and
                            while it does not read a response being sent; not counted while a
                            generation is producing that response. 0 = 10 */
  unsigned request_timeout_s; /* seconds a connection has to deliver a complete request
                            (header and body), counted from its accept or from the end of its
                            previous response (keep-alive); past it the connection is closed
                            (counted in /metrics: deltafin_request_timeouts_total). Not counted
                            while a response is generated or sent.
                            0 = DF_SRV_DEFAULT_REQUEST_TIMEOUT */
  int max_per_host;      /* simultaneous connections from one client address (IPv4 or IPv6,
                            loopback included); a connection past it is closed at once (counted
                            in /metrics). 0 = no limit */
  int quiet;             /* no per-request log lines on stderr (errors are still logged) */
  int cluster;           /* routed experts run on df-node agents (reported in /metrics) */
  struct df_cluster *cluster_mgr; /* the cluster manager GET /v1/cluster reports on
                            (coordinator/cluster/cluster_status.h), borrowed: it must outlive the
                            server; NULL = local mode (no nodes) */
  int reasoning_raw;     /* chat answers keep the model's reasoning in content, as written
                            (--reasoning-format none); 0 = split into reasoning_content
                            (engine/text/reasoning.h) */
} df_srv_opts;

/* Start serving: bind and listen on o->host:o->port, start the libmicrohttpd daemon (one
 * thread per connection, poll()) and the accept thread (which also enforces the request
 * deadline). `tmpl` may be NULL (then /v1/chat/completions answers 400: the model has no chat
 * template). `sched`, `m`, `tok` and `tmpl` are borrowed and must outlive the server; `o` is
 * copied (its strings too). May raise the process's RLIMIT_NOFILE soft limit (see max_conns).
 * On success returns 0 and *out owns the running server (stop with df_srv_stop). Errors (-1,
 * *out NULL, one line in err[errlen]): the host does not resolve, the port cannot be bound,
 * libmicrohttpd lacks poll() support or refuses to start, out of memory or threads. */
int df_srv_start(const df_srv_opts *o, df_sched *sched, const df_model *m, const df_tok *tok,
                 const df_chat_template *tmpl, df_srv **out, char *err, size_t errlen);

/* The TCP port actually bound (useful with o->port 0). */
int df_srv_port(const df_srv *s);

/* Stop accepting connections (the accept thread is joined, the listen socket closed), then
 * close the connections and wait for their threads (call df_sched_shutdown first so that
 * requests in flight finish at once), and free the server. NULLs *s; NULL-safe. */
void df_srv_stop(df_srv **s);

/* The /metrics text (Prometheus text format 0.0.4): malloc'd and NUL-terminated, owned by the
 * caller (free); its length in bytes in *len when len is not NULL. NULL when out of memory. */
char *df_srv_metrics(df_srv *s, size_t *len);

#endif
