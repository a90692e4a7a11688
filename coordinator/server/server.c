/* coordinator/server/server.c — the /v1 HTTP server on libmicrohttpd; see server.h.
 *
 * Threads: an accept thread owns the listen socket: it accepts only while fewer than
 * --max-connections connections are open (so further clients wait in the listen backlog
 * rather than being accepted and reset), applies --max-connections-per-host, and hands each
 * socket to libmicrohttpd (MHD_add_connection), which runs one thread per connection and polls
 * with poll(): descriptor numbers past FD_SETSIZE work, however many other descriptors the
 * process holds. A generation request is parsed, tokenized and submitted in its connection
 * thread, which then waits on the job's file descriptor and on the client socket (POLLRDHUP)
 * at once: news from the scheduler wakes it, and a client that closes its connection is seen
 * at once and its job cancelled. Streaming responses are written from the content-reader
 * callback (same thread), one server-sent event per HTTP chunk.
 *
 * Timeouts: a connection that stays silent for --idle-timeout seconds is closed — before it
 * has sent a complete request, between keep-alive requests, and while it does not read a
 * response being sent — so idle sockets cannot hold connection threads. While a generation is
 * producing the response (the access handler or the stream reader waiting on the scheduler)
 * the connection has no timeout: libmicrohttpd measures silence from its last socket I/O, and
 * a long prefill or queue wait must not cut a stream. Setting the timeout back after each
 * produced piece restarts the silence clock (libmicrohttpd restarts it when a zero timeout is
 * replaced).
 * A connection that is never silent that long but delivers its request slowly (a byte of
 * header every few seconds, a body dripped) is bounded by --request-timeout: the complete
 * request must arrive within that many seconds of the accept or of the end of the previous
 * response; the accept thread wakes at least every GATE_TICK_MS and shuts down the sockets
 * of overdue connections (coordinator/server/hosts.h). libmicrohttpd offers no such total
 * deadline itself (its timeout is an inactivity timeout). The deadline is off from the
 * access handler's final call (the whole body is in) until the response is over, so
 * generating and streaming are never cut by it.
 */
#define _GNU_SOURCE
#include "coordinator/server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/server/api.h"
#include "coordinator/server/hosts.h"
#include "coordinator/server/server_internal.h"



/* Constant-time comparison of the Authorization header with "Bearer KEY" (the scheme is
 * case-insensitive and followed by one or more spaces: RFC 7235 §2.1, RFC 6750 §2.1). */
static bool key_ok(const df_srv *s, const char *hdr) {
  if (!hdr || strncasecmp(hdr, "Bearer ", 7)) return false;
  const char *k = hdr + 7;
  while (*k == ' ') k++;
  size_t a = strlen(k), b = strlen(s->api_key);
  unsigned char diff = (unsigned char)(a != b);
  for (size_t i = 0; i < b; i++) diff |= (unsigned char)(k[i < a ? i : 0] ^ s->api_key[i]);
  return diff == 0;
}

/* ---- other endpoints ----------------------------------------------------------------- */

static char *model_json(const df_srv *s) {
  /* the id as a JSON string (it came from the command line: escape quotes and controls) */
  size_t n = strlen(s->model_id);
  char *id = malloc(n * 6 + 3);
  if (!id) return NULL;
  char *w = id;
  *w++ = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s->model_id[i];
    if (ch == '"' || ch == '\\') {
      *w++ = '\\';
      *w++ = (char)ch;
    } else if (ch < 0x20) {
      w += sprintf(w, "\\u%04x", ch);
    } else {
      *w++ = (char)ch;
    }
  }
  *w++ = '"';
  *w = 0;
  char *out = NULL;
  if (asprintf(&out, "{\"id\":%s,\"object\":\"model\",\"created\":%lld,\"owned_by\":\"deltafin\","
               "\"max_model_len\":%lld}", id, (long long)s->created,
               (long long)df_sched_ctx(s->sched)) < 0)
    out = NULL;
  free(id);
  return out;
}

static void appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
  if (!*buf && *cap) return; /* an earlier allocation failed */
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*buf ? *buf + *len : NULL, *buf ? *cap - *len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (*buf && *len + (size_t)n < *cap) {
      *len += (size_t)n;
      return;
    }
    size_t nc = *cap ? *cap * 2 : 4096;
    while (nc < *len + (size_t)n + 1) nc *= 2;
    char *b = realloc(*buf, nc);
    if (!b) {
      free(*buf);
      *buf = NULL;
      *cap = 1;
      return;
    }
    *buf = b;
    *cap = nc;
  }
}

char *df_srv_metrics(df_srv *s, size_t *len) {
  char *b = NULL;
  size_t n = 0, cap = 0;
  df_sched_stats st = df_sched_get_stats(s->sched);
#define HDR(name, type, help) appendf(&b, &n, &cap, "# HELP " name " " help "\n# TYPE " name " " type "\n")
  HDR("deltafin_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
  pthread_mutex_lock(&s->mu);
  for (int r = 0; r < R_N; r++)
    for (int i = 0; i < MAX_CODES && s->counts[r][i].code; i++)
      appendf(&b, &n, &cap, "deltafin_requests_total{endpoint=\"%s\",code=\"%d\"} %lld\n",
              df_srv_route_name[r], s->counts[r][i].code, (long long)s->counts[r][i].n);
  int64_t disconnects = s->disconnects;
  pthread_mutex_unlock(&s->mu);
  HDR("deltafin_client_disconnects_total", "counter", "Generations cancelled because the client went away.");
  appendf(&b, &n, &cap, "deltafin_client_disconnects_total %lld\n", (long long)disconnects);
  long long refused = (long long)df_srv_hosts_refusals(s->hosts);
  HDR("deltafin_connections_refused_total", "counter",
      "Connections closed at once: their client address held --max-connections-per-host.");
  appendf(&b, &n, &cap, "deltafin_connections_refused_total{reason=\"per_host\"} %lld\n", refused);
  HDR("deltafin_request_timeouts_total", "counter",
      "Connections closed because they did not deliver a complete request within --request-timeout.");
  appendf(&b, &n, &cap, "deltafin_request_timeouts_total %lld\n",
          (long long)df_srv_hosts_timeouts(s->hosts));
  HDR("deltafin_prompt_tokens_total", "counter", "Prompt tokens fed to the model.");
  appendf(&b, &n, &cap, "deltafin_prompt_tokens_total %lld\n", (long long)st.prompt_tokens);
  HDR("deltafin_prompt_cached_tokens_total", "counter",
      "Prompt tokens taken from the prefix cache instead of being fed.");
  appendf(&b, &n, &cap, "deltafin_prompt_cached_tokens_total %lld\n", (long long)st.cached_tokens);
  HDR("deltafin_completion_tokens_total", "counter", "Tokens generated.");
  appendf(&b, &n, &cap, "deltafin_completion_tokens_total %lld\n", (long long)st.completion_tokens);
  HDR("deltafin_generation_tokens_per_second", "gauge", "Tokens generated per second over the last few seconds of work.");
  appendf(&b, &n, &cap, "deltafin_generation_tokens_per_second %.3f\n", st.gen_tok_s);
  HDR("deltafin_queue_depth", "gauge", "Requests waiting for a sequence slot.");
  appendf(&b, &n, &cap, "deltafin_queue_depth %lld\n", (long long)st.queued);
  HDR("deltafin_queue_limit", "gauge", "Requests that may wait (--max-queue).");
  appendf(&b, &n, &cap, "deltafin_queue_limit %lld\n", (long long)st.max_queue);
  HDR("deltafin_running_sequences", "gauge", "Sequences decoding together.");
  appendf(&b, &n, &cap, "deltafin_running_sequences %lld\n", (long long)st.running);
  HDR("deltafin_sequence_slots", "gauge", "Sequences that may decode together (--parallel).");
  appendf(&b, &n, &cap, "deltafin_sequence_slots %lld\n", (long long)st.max_seqs);
  HDR("deltafin_batch_steps_total", "counter", "Batched target forwards.");
  appendf(&b, &n, &cap, "deltafin_batch_steps_total %lld\n", (long long)st.steps);
  HDR("deltafin_batch_rows_total", "counter", "Token rows over all batched forwards.");
  appendf(&b, &n, &cap, "deltafin_batch_rows_total %lld\n", (long long)st.step_rows);
  HDR("deltafin_step_seconds_total", "counter", "Seconds spent in batched forwards.");
  appendf(&b, &n, &cap, "deltafin_step_seconds_total %.6f\n", st.busy_s);
  HDR("deltafin_generations_total", "counter", "Generations finished, by reason.");
  static const char *const why[5] = {"running", "stop", "length", "error", "cancelled"};
  for (int i = 1; i < 5; i++)
    appendf(&b, &n, &cap, "deltafin_generations_total{reason=\"%s\"} %lld\n", why[i],
            (long long)st.finished[i]);
  HDR("deltafin_draft_enabled", "gauge", "1 when a draft model or a block drafter is used for speculative decoding.");
  appendf(&b, &n, &cap, "deltafin_draft_enabled %d\n", st.drafting ? 1 : 0);
  HDR("deltafin_draft_tokens_total", "counter", "Draft tokens proposed and accepted.");
  appendf(&b, &n, &cap, "deltafin_draft_tokens_total{result=\"proposed\"} %lld\n", (long long)st.drafted);
  appendf(&b, &n, &cap, "deltafin_draft_tokens_total{result=\"accepted\"} %lld\n", (long long)st.accepted);
  HDR("deltafin_draft_block_tokens_total", "counter", "Of the draft tokens, those the block drafter proposed and that were accepted.");
  appendf(&b, &n, &cap, "deltafin_draft_block_tokens_total{result=\"proposed\"} %lld\n", (long long)st.block_drafted);
  appendf(&b, &n, &cap, "deltafin_draft_block_tokens_total{result=\"accepted\"} %lld\n", (long long)st.block_accepted);
  HDR("deltafin_draft_acceptance_ratio", "gauge", "Draft tokens accepted / proposed so far (0 before any draft).");
  appendf(&b, &n, &cap, "deltafin_draft_acceptance_ratio %.4f\n",
          st.drafted ? (double)st.accepted / (double)st.drafted : 0.0);
  HDR("deltafin_expert_backend_info", "gauge", "Where routed experts run: local (the mapped checkpoint) or cluster (df-node agents, the coordinator covering what no node holds).");
  appendf(&b, &n, &cap, "deltafin_expert_backend_info{backend=\"%s\"} 1\n",
          s->o.cluster ? "cluster" : "local");
#undef HDR
  if (b && len) *len = n;
  return b;
}

/* ---- the access handler -------------------------------------------------------------- */

static enum route route_of(const char *url) {
  if (!strcmp(url, "/v1/chat/completions")) return R_CHAT;
  if (!strcmp(url, "/v1/completions")) return R_COMPL;
  if (!strcmp(url, "/v1/models")) return R_MODELS;
  if (!strncmp(url, "/v1/models/", 11) && url[11]) return R_MODEL_ONE;
  if (!strcmp(url, "/health")) return R_HEALTH;
  if (!strcmp(url, "/metrics")) return R_METRICS;
  if (!strcmp(url, "/v1/cluster")) return R_CLUSTER;
  if (df_srv_webui_has(url)) return R_UI;
  return R_OTHER;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls) {
  df_srv *s = cls;
  (void)version;
  conn *c = *con_cls;
  if (!c) {
    if (!(c = calloc(1, sizeof *c))) return MHD_NO;
    c->srv = s;
    c->fd = -1;
    atomic_init(&c->refs, 1);
    clock_gettime(CLOCK_MONOTONIC, &c->t0);
    *con_cls = c;
    c->mc = mc;
    c->route = route_of(url);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) c->fd = ci->connect_fd;
    bool is_post = !strcmp(method, MHD_HTTP_METHOD_POST), is_get = !strcmp(method, MHD_HTTP_METHOD_GET);
    c->post = is_post;
    bool v1 = c->route == R_CHAT || c->route == R_COMPL || c->route == R_MODELS ||
              c->route == R_MODEL_ONE || c->route == R_CLUSTER;
    bool is_head = !strcmp(method, MHD_HTTP_METHOD_HEAD);
    if (c->route == R_OTHER) {
      df_api_error_set(&c->err, 404, NULL, NULL, "unknown_url", "Unknown request URL: %s %s. "
                       "Endpoints: POST /v1/chat/completions, POST /v1/completions, GET "
                       "/v1/models, GET /v1/cluster, GET /health, GET /metrics, GET / (web UI).",
                       method, url);
      c->have_err = true;
    } else if ((c->route == R_CHAT || c->route == R_COMPL) ? !is_post : !is_get && !is_head) {
      /* HEAD is GET without the body (RFC 9110 §9.3.2; libmicrohttpd leaves the body out) */
      df_api_error_set(&c->err, 405, NULL, NULL, "method_not_allowed",
                       "Method %s is not allowed on %s (use %s).", method, url,
                       c->route == R_CHAT || c->route == R_COMPL ? "POST" : "GET or HEAD");
      c->have_err = true;
    } else if (v1 && s->api_key && !key_ok(s, MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization"))) {
      const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
      if (!h)
        df_api_error_set(&c->err, 401, NULL, NULL, NULL,
                         "You didn't provide an API key. You need to provide your API key in an "
                         "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).");
      else
        df_api_error_set(&c->err, 401, NULL, NULL, "invalid_api_key", "Incorrect API key provided.");
      c->have_err = true;
    } else if (is_post) {
      const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
      if (cl) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (errno || *end || v > s->o.max_body) {
          df_api_error_set(&c->err, 413, NULL, NULL, "request_too_large",
                           "The request body of %s bytes is larger than the limit of %zu bytes.",
                           cl, s->o.max_body);
          c->have_err = true;
        }
      }
    }
    /* no or a wrong API key: answered now, before any body byte is read, so a client
     * without the key cannot hold the connection by dripping a body (libmicrohttpd closes the
     * connection after the answer since the body was not read). Other refusals wait for the
     * body, so that ordinary clients that send it whole can read their answer — except for a
     * client that waits for "100 Continue" before sending it: it gets its refusal now instead
     * of an invitation to upload a body that will be refused. */
    const char *expect = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Expect");
    bool waits = expect && !strcasecmp(expect, "100-continue");
    if (c->have_err && (c->err.status == 401 || waits)) {
      df_srv_hosts_request_received(s->hosts, mc); /* answered: the rest is the idle timeout's */
      return df_srv_send_error(c, mc, &c->err);
    }
    return MHD_YES;
  }
  if (*upload_size) {
    if (!c->have_err && !c->too_big) {
      if (c->len + *upload_size > s->o.max_body) {
        c->too_big = true;
        free(c->body);
        c->body = NULL;
        c->len = c->cap = 0;
      } else {
        if (c->len + *upload_size + 1 > c->cap) {
          size_t nc = c->cap ? c->cap : 4096;
          while (nc < c->len + *upload_size + 1) nc *= 2;
          char *b = realloc(c->body, nc);
          if (!b) return MHD_NO;
          c->body = b;
          c->cap = nc;
        }
        memcpy(c->body + c->len, upload_data, *upload_size);
        c->len += *upload_size;
        c->body[c->len] = 0;
      }
    }
    *upload_size = 0;
    return MHD_YES;
  }
  /* the final call: header and body are in, so the request deadline is off until the response
   * is over (generating it may take minutes) */
  df_srv_hosts_request_received(s->hosts, mc);
  if (c->have_err) return df_srv_send_error(c, mc, &c->err);
  if (c->too_big) {
    df_api_error e;
    df_api_error_set(&e, 413, NULL, NULL, "request_too_large",
                     "The request body is larger than the limit of %zu bytes.", s->o.max_body);
    return df_srv_send_error(c, mc, &e);
  }
  switch (c->route) {
  case R_CHAT:
  case R_COMPL: {
    df_srv_conn_timeout(c, true); /* tokenizing, queueing and generating are our time, not silence */
    enum MHD_Result r = df_srv_handle_generate(c, mc);
    if (!c->streaming) df_srv_conn_timeout(c, false); /* the answer is queued: the client must read it */
    return r;
  }
  case R_MODELS: {
    char *m = model_json(s), *out = NULL;
    if (m && asprintf(&out, "{\"object\":\"list\",\"data\":[%s]}", m) < 0) out = NULL;
    free(m);
    return df_srv_send_json(c, mc, 200, out);
  }
  case R_MODEL_ONE:
    if (strcmp(url + 11, s->model_id)) {
      df_api_error e;
      df_api_error_set(&e, 404, NULL, "model", "model_not_found",
                       "The model `%s` does not exist or you do not have access to it.", url + 11);
      return df_srv_send_error(c, mc, &e);
    }
    return df_srv_send_json(c, mc, 200, model_json(s));
  case R_HEALTH:
    return df_srv_send_json(c, mc, 200, strdup("{\"status\":\"ok\"}"));
  case R_CLUSTER:
    return df_srv_handle_cluster(c, mc);
  case R_UI:
    return df_srv_handle_webui(c, mc, url);
  case R_METRICS: {
    size_t n = 0;
    char *b = df_srv_metrics(s, &n);
    if (!b) return MHD_NO;
    return df_srv_send_body(c, mc, 200, "text/plain; version=0.0.4; charset=utf-8", b, n);
  }
  default:
    return MHD_NO;
  }
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  df_srv *s = cls;
  /* the response is over: a next request on this keep-alive connection has
   * --request-timeout seconds from now */
  df_srv_hosts_request_rearm(s->hosts, mc);
  conn *c = *con_cls;
  if (!c) return;
  if (c->job) df_sched_job_cancel(c->job); /* the request is over: nothing more to generate */
  /* not logged: probes, and what the web UI fetches (its dashboard polls every second) */
  if (!c->srv->o.quiet && c->route != R_HEALTH && c->route != R_METRICS &&
      c->route != R_CLUSTER && c->route != R_UI) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - c->t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - c->t0.tv_nsec);
    if (c->meta.id)
      df_srv_log(c->srv, false, "%s %d %s, %lld prompt (%lld cached) + %lld completion tokens, "
                 "%.3f s", df_srv_route_name[c->route], c->status, c->meta.id,
                 (long long)c->news.prompt_tokens, (long long)c->news.cached_tokens,
                 (long long)c->news.completion_tokens, dt);
    else
      df_srv_log(c->srv, false, "%s %d, %.3f s", df_srv_route_name[c->route], c->status, dt);
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && c->job)
      df_srv_log(c->srv, false, "%s %s: the client went away", df_srv_route_name[c->route], c->meta.id);
  }
  *con_cls = NULL;
  df_srv_conn_unref(c);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char line[512];
  vsnprintf(line, sizeof line, fmt, ap);
  size_t n = strlen(line);
  while (n && line[n - 1] == '\n') line[--n] = 0;
  fprintf(stderr, "deltafin serve: http: %s\n", line);
}

/* ---- lifecycle ----------------------------------------------------------------------- */

#define FD_RESERVE 128 /* descriptors kept for everything but HTTP connections */
#define GATE_TICK_MS 500 /* the accept thread checks the request deadlines at least this often */
#define ACCEPT_BATCH 64  /* connections accepted per wake-up of the accept thread */
#define ACCEPT_STALL_MS 100 /* pause of accepting when the process is out of descriptors */

/* Fit the connection limit to the open-file limit: raise the soft RLIMIT_NOFILE toward the
 * hard one when the connections need it, and lower the limit when even that is too few. */
static void fit_conn_limit(df_srv *s) {
  unsigned want = s->o.max_conns;
  if (want > DF_SRV_MAX_CONNS) want = DF_SRV_MAX_CONNS;
  rlim_t need = (rlim_t)want + FD_RESERVE;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need) {
    struct rlimit nl = rl;
    nl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &nl) == 0) rl = nl;
    if (rl.rlim_cur < need)
      want = rl.rlim_cur > FD_RESERVE + 16 ? (unsigned)(rl.rlim_cur - FD_RESERVE) : 16;
  }
  if (want != s->o.max_conns)
    df_srv_log(s, true, "at most %u connections (asked for %u): the open-file limit (ulimit -n) "
          "allows no more", want, s->o.max_conns);
  s->o.max_conns = want;
}

/* A listening TCP socket on addr: non-blocking (the accept thread polls it), SO_REUSEADDR
 * (a restarted server binds at once; not SO_REUSEPORT: a second server on the port fails),
 * IPv6-only for an IPv6 address. -1 with errno set on failure. */
static int listen_on(const struct sockaddr *addr, socklen_t len) {
  int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (addr->sa_family == AF_INET6)
    (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (bind(fd, addr, len) != 0 || listen(fd, SOMAXCONN) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* Accept waiting clients while there is room (at most ACCEPT_BATCH) and hand each to
 * libmicrohttpd. Returns the milliseconds to stop accepting for (the process is out of
 * descriptors or memory: the clients wait in the backlog meanwhile), else 0. */
static int accept_some(df_srv *s, int64_t *last_log) {
  for (int i = 0; i < ACCEPT_BATCH && !df_srv_hosts_full(s->hosts); i++) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK) return 0;
      /* the client's own failure (accept(2) passes pending network errors on): next one */
      if (e == EINTR || e == ECONNABORTED || e == EPROTO || e == ENETDOWN || e == ENOPROTOOPT ||
          e == EHOSTDOWN || e == ENONET || e == EHOSTUNREACH || e == EOPNOTSUPP || e == ENETUNREACH)
        continue;
      int64_t now = df_srv_now_ms();
      if (now - *last_log >= 10000) {
        *last_log = now;
        df_srv_log(s, true, "cannot accept connections: %s%s; clients wait meanwhile", strerror(e),
              e == EMFILE || e == ENFILE ? " (raise the open-file limit, ulimit -n)" : "");
      }
      return ACCEPT_STALL_MS;
    }
    int adm = df_srv_hosts_admit(s->hosts, fd, (struct sockaddr *)&ss, sl);
    if (adm != 0) {
      close(fd); /* past --max-connections-per-host (counted), or out of memory */
      continue;
    }
    /* libmicrohttpd owns fd from here (it closes it, also when it refuses it) */
    if (MHD_add_connection(s->d, fd, (struct sockaddr *)&ss, sl) != MHD_YES)
      df_srv_hosts_unadmit(s->hosts, fd);
  }
  return 0;
}

/* The accept thread: waits (poll, at most GATE_TICK_MS) on the listen socket — only while a
 * connection slot is free — and on wake_fd; shuts down the connections past the request
 * deadline each round. Ends when s->stopping is set (and wake_fd signalled). */
static void *gate_main(void *arg) {
  df_srv *s = arg;
  int64_t stall_until = 0, last_log = -10000;
  while (!atomic_load(&s->stopping)) {
    int64_t next = df_srv_hosts_cut_overdue(s->hosts), now = df_srv_now_ms();
    int timeout = next > 0 && next < GATE_TICK_MS ? (int)next : GATE_TICK_MS;
    bool listening = now >= stall_until && !df_srv_hosts_full(s->hosts);
    if (now < stall_until && stall_until - now < timeout) timeout = (int)(stall_until - now);
    struct pollfd p[2] = {{.fd = s->wake_fd, .events = POLLIN},
                          {.fd = listening ? s->listen_fd : -1, .events = POLLIN}};
    if (poll(p, 2, timeout) <= 0) continue;
    if (p[0].revents & POLLIN) {
      uint64_t v;
      if (read(s->wake_fd, &v, sizeof v) < 0) { /* EAGAIN: another round drained it */
      }
    }
    if (p[1].revents & POLLIN) {
      int stall = accept_some(s, &last_log);
      if (stall) stall_until = df_srv_now_ms() + stall;
    }
  }
  return NULL;
}

/* Free s and what it holds; the accept thread and the daemon must be stopped. */
static void srv_free(df_srv *s) {
  if (s->listen_fd >= 0) close(s->listen_fd);
  df_srv_hosts_free(&s->hosts);
  if (s->wake_fd >= 0) close(s->wake_fd);
  pthread_mutex_destroy(&s->mu);
  df_jsg_vocab_destroy(&s->gvocab);
  free(s->model_id);
  free(s->api_key);
  free(s);
}

int df_srv_start(const df_srv_opts *o, df_sched *sched, const df_model *m, const df_tok *tok,
                 const df_chat_template *tmpl, df_srv **out, char *err, size_t errlen) {
  *out = NULL;
  df_srv *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  s->listen_fd = s->wake_fd = -1;
  atomic_init(&s->stopping, false);
  pthread_mutex_init(&s->mu, NULL);
  s->o = *o;
  s->o.host = NULL;
  if (!s->o.max_body) s->o.max_body = 4u << 20;
  if (!s->o.max_conns) s->o.max_conns = DF_SRV_DEFAULT_CONNS;
  if (!s->o.idle_timeout_s) s->o.idle_timeout_s = 10;
  if (!s->o.request_timeout_s) s->o.request_timeout_s = DF_SRV_DEFAULT_REQUEST_TIMEOUT;
  if (s->o.max_per_host < 0) s->o.max_per_host = 0;
  s->model_id = strdup(o->model_id ? o->model_id : "deltafin");
  s->api_key = o->api_key && o->api_key[0] ? strdup(o->api_key) : NULL;
  s->sched = sched;
  s->m = m;
  s->tok = tok;
  for (size_t id = 0, nv = df_tok_vocab_size(tok); id < nv; id++) {
    size_t lb = 0, lp = 0;
    if (df_tok_id_to_bytes(tok, (int32_t)id, &lb) && lb > s->max_piece) s->max_piece = lb;
    if (df_tok_id_to_piece(tok, (int32_t)id, &lp) && lp > s->max_piece) s->max_piece = lp;
  }
  s->tmpl = tmpl;
  s->created = (int64_t)time(NULL);
  {
    uint64_t seed = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (read(fd, &seed, sizeof seed) != (ssize_t)sizeof seed) seed = 0;
      close(fd);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->rng = seed ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)getpid();
  }
  if (!s->model_id || (o->api_key && o->api_key[0] && !s->api_key)) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  /* select() would refuse every socket numbered FD_SETSIZE (1024) or more, which the process
   * reaches as soon as it holds that many descriptors (connections to the cluster port, say) */
  if (MHD_is_feature_supported(MHD_FEATURE_POLL) != MHD_YES) {
    snprintf(err, errlen, "this libmicrohttpd (%s) was built without poll() support, which the "
             "server needs (select() cannot take descriptors past %d); install one with poll()",
             MHD_get_version(), FD_SETSIZE);
    goto fail;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                  *ai = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", o->port);
  const char *host = o->host ? o->host : "127.0.0.1";
  int gai = getaddrinfo(host, port, &hints, &ai);
  if (gai != 0 || !ai) {
    snprintf(err, errlen, "--host %s: cannot resolve: %s", host, gai_strerror(gai));
    goto fail;
  }
  s->listen_fd = listen_on(ai->ai_addr, ai->ai_addrlen);
  int lerr = errno;
  freeaddrinfo(ai);
  if (s->listen_fd < 0) {
    snprintf(err, errlen, "cannot listen on %s port %d: %s (in use, or not an address of this "
             "machine?)", host, o->port, strerror(lerr));
    goto fail;
  }
  fit_conn_limit(s);
  s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  s->hosts = s->wake_fd >= 0 ? df_srv_hosts_new(s->o.max_per_host, s->o.max_conns,
                                                s->o.request_timeout_s, s->wake_fd)
                             : NULL;
  if (!s->hosts) {
    snprintf(err, errlen, "out of memory or descriptors");
    goto fail;
  }
  /* No listen socket of libmicrohttpd's own: the accept thread accepts (so clients past the
   * limit wait in the backlog) and hands the sockets over with MHD_add_connection (MHD_USE_ITC
   * wakes the daemon thread for them). poll(), not select(): thread-per-connection cannot use
   * epoll. Its own limit is a safety net above ours (ours counts a connection until its CLOSED
   * notification, before libmicrohttpd's own count drops). */
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                   MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG | MHD_USE_ITC;
  s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                          MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                          MHD_OPTION_NOTIFY_CONNECTION, df_srv_hosts_on_connection, s->hosts,
                          MHD_OPTION_CONNECTION_LIMIT, s->o.max_conns + 64,
                          MHD_OPTION_CONNECTION_TIMEOUT, s->o.idle_timeout_s,
                          MHD_OPTION_END);
  if (!s->d) {
    snprintf(err, errlen, "libmicrohttpd %s could not start its daemon (one thread per "
             "connection with poll()): out of memory or threads?", MHD_get_version());
    goto fail;
  }
  struct sockaddr_storage bound;
  socklen_t bl = sizeof bound;
  s->port = o->port;
  if (getsockname(s->listen_fd, (struct sockaddr *)&bound, &bl) == 0)
    s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                 : ((struct sockaddr_in *)&bound)->sin_port);
  int pe = pthread_create(&s->gate, NULL, gate_main, s);
  if (pe != 0) {
    snprintf(err, errlen, "cannot start the accept thread: %s", strerror(pe));
    goto fail;
  }
  s->gate_running = true;
  *out = s;
  return 0;
fail:
  if (s->d) MHD_stop_daemon(s->d);
  srv_free(s);
  return -1;
}

int df_srv_port(const df_srv *s) { return s->port; }

void df_srv_stop(df_srv **sp) {
  if (!sp || !*sp) return;
  df_srv *s = *sp;
  if (s->gate_running) {
    atomic_store(&s->stopping, true);
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) { /* the counter is full: a wake is pending */
    }
    pthread_join(s->gate, NULL);
  }
  close(s->listen_fd); /* clients now get refused */
  s->listen_fd = -1;
  if (s->d) MHD_stop_daemon(s->d); /* closes the connections (CLOSED notifications) */
  srv_free(s);
  *sp = NULL;
}
