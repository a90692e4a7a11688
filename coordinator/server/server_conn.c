/* coordinator/server/server_conn.c — what the server (server.c) and the generation endpoints
 * (generate.c) both do with a connection: answer it (bodies, errors, JSON), count and log the
 * answers, its timeouts, and the server's id generator. See server_internal.h.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/server/server_internal.h"

const char *const df_srv_route_name[R_N] = {"/v1/chat/completions", "/v1/completions",
                                            "/v1/models", "/v1/models/{id}", "/health",
                                            "/metrics", "/v1/cluster", "/ (web UI)", "other"};

void df_srv_conn_unref(conn *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  df_sched_job_release(&c->job); /* cancels a generation still running */
  free(c->body);
  free(c->text);
  free(c->lp);
  df_tool_parser_destroy(&c->tp);
  df_reasoning_parser_destroy(&c->rp);
  free(c->forced);
  for (size_t i = c->evq_head; i < c->evq_n; i++) free(c->evq[i]);
  free(c->evq);
  free(c->ev);
  free(c);
}

/* ---- small helpers ------------------------------------------------------------------- */

uint64_t df_srv_rand(srv_ctx *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);
  pthread_mutex_unlock(&s->mu);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void df_srv_count(srv_ctx *s, enum route r, int code) {
  pthread_mutex_lock(&s->mu);
  code_count *c = s->counts[r];
  for (int i = 0; i < MAX_CODES; i++) {
    if (c[i].code == code || c[i].code == 0) {
      c[i].code = code;
      c[i].n++;
      break;
    }
  }
  pthread_mutex_unlock(&s->mu);
}

void df_srv_log(srv_ctx *s, bool always, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void df_srv_log(srv_ctx *s, bool always, const char *fmt, ...) {
  if (s->o.quiet && !always) return;
  char line[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "deltafin serve: %s\n", line);
}

enum MHD_Result df_srv_send_body(conn *c, struct MHD_Connection *mc, int status,
                                 const char *ctype, char *body, size_t len) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, body, body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", ctype);
  if (status == 429) MHD_add_response_header(r, "Retry-After", "1");
  if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
  if (status == 405)
    MHD_add_response_header(r, "Allow", c->route == R_CHAT || c->route == R_COMPL ? "POST"
                                                                                  : "GET, HEAD");
  enum MHD_Result ret = MHD_queue_response(mc, (unsigned)status, r);
  MHD_destroy_response(r);
  df_srv_count(c->srv, c->route, status);
  c->status = status;
  return ret;
}

enum MHD_Result df_srv_send_error(conn *c, struct MHD_Connection *mc, const df_api_error *e) {
  size_t n = 0;
  char *b = df_api_error_body(e, &n);
  if (e->status >= 500) df_srv_log(c->srv, true, "%s: %d %s", df_srv_route_name[c->route], e->status, e->message);
  return df_srv_send_body(c, mc, e->status, "application/json", b, n);
}

enum MHD_Result df_srv_send_json(conn *c, struct MHD_Connection *mc, int status, char *json) {
  if (!json) {
    df_api_error e;
    df_api_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
    return df_srv_send_error(c, mc, &e);
  }
  return df_srv_send_body(c, mc, status, "application/json", json, strlen(json));
}

/* The connection's inactivity timeout: 0 while this thread waits on the scheduler, the idle
 * timeout otherwise (replacing 0 restarts the silence clock). libmicrohttpd 1.0 ignores this
 * for thread-per-connection daemons (the timeout stays the daemon's), so a stream waiting for
 * the model also sends keep-alive comments (stream_keepalive_ms). */
void df_srv_conn_timeout(conn *c, bool generating) {
  MHD_set_connection_option(c->mc, MHD_CONNECTION_OPTION_TIMEOUT,
                            generating ? 0u : c->srv->o.idle_timeout_s);
}

int64_t df_srv_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

