/* coordinator/hub/pull_http.c — libcurl GETs with ranges, retries and hub headers; see
 * pull_http.h. */
#define _GNU_SOURCE
#include "coordinator/hub/pull_http.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "coordinator/hub/pull_util.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

void df_pull_net_defaults(df_pull_net *n) {
  memset(n, 0, sizeof *n);
  snprintf(n->endpoint, sizeof n->endpoint, "%s", df_pull_endpoint());
  const char *t = df_pull_token();
  if (t) snprintf(n->token, sizeof n->token, "%s", t);
  n->connect_timeout_s = 15;
  n->stall_timeout_s = 60;
  n->retries = 5;
  n->backoff_ms = 1000;
  const char *b = getenv("DELTAFIN_PULL_BACKOFF_MS");
  if (b && *b) {
    char *end;
    long v = strtol(b, &end, 10);
    if (!*end && v >= 0 && v <= 600000) n->backoff_ms = v;
  }
}

void *df_pull_http_handle_new(void) {
  pthread_once(&g_once, global_init);
  return curl_easy_init();
}

void df_pull_http_handle_destroy(void **h) {
  if (h && *h) {
    curl_easy_cleanup((CURL *)*h);
    *h = NULL;
  }
}

typedef struct xfer {
  CURL *h;
  df_pull_resp *resp;
  df_pull_sink sink;
  void *ud;
  uint64_t want_start;
  bool ranged;
  bool status_checked;
  bool ok_status;
  bool sink_failed;
  uint64_t at;          /* next file offset for the sink */
  char errbody[1024];   /* first bytes of a non-2xx body */
  size_t errbody_len;
} xfer;

static void copy_header_value(char *dst, size_t cap, const char *v, size_t n) {
  while (n && isspace((unsigned char)*v)) v++, n--;
  while (n && isspace((unsigned char)v[n - 1])) n--;
  if (n >= 2 && v[0] == 'W' && v[1] == '/') v += 2, n -= 2;
  if (n >= 2 && v[0] == '"' && v[n - 1] == '"') v++, n -= 2;
  if (n >= cap) n = cap - 1;
  memcpy(dst, v, n);
  dst[n] = 0;
}

static bool header_is(const char *line, size_t n, const char *name, const char **val,
                      size_t *vlen) {
  size_t k = strlen(name);
  if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':') return false;
  *val = line + k + 1;
  *vlen = n - k - 1;
  return true;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
  xfer *x = ud;
  size_t n = size * nitems;
  const char *v;
  size_t vl;
  char tmp[256];
  df_pull_resp *r = x->resp;
  if (n >= 5 && !strncmp(buf, "HTTP/", 5)) {
    /* a new response (after a redirect): reset what describes the body */
    r->total_size = 0;
    r->retry_after_s = 0;
    return n;
  }
  if (header_is(buf, n, "X-Repo-Commit", &v, &vl)) {
    copy_header_value(r->commit, sizeof r->commit, v, vl);
  } else if (header_is(buf, n, "X-Linked-Etag", &v, &vl)) {
    copy_header_value(r->etag, sizeof r->etag, v, vl);
  } else if (header_is(buf, n, "ETag", &v, &vl)) {
    if (!r->etag[0]) copy_header_value(r->etag, sizeof r->etag, v, vl);
  } else if (header_is(buf, n, "X-Linked-Size", &v, &vl)) {
    copy_header_value(tmp, sizeof tmp, v, vl);
    r->linked_size = strtoull(tmp, NULL, 10);
  } else if (header_is(buf, n, "X-Error-Code", &v, &vl)) {
    copy_header_value(r->error_code, sizeof r->error_code, v, vl);
  } else if (header_is(buf, n, "X-Error-Message", &v, &vl)) {
    copy_header_value(r->error_msg, sizeof r->error_msg, v, vl);
  } else if (header_is(buf, n, "Content-Type", &v, &vl)) {
    copy_header_value(r->content_type, sizeof r->content_type, v, vl);
    for (char *q = r->content_type; *q; q++) /* peer text in messages: printable ASCII */
      if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e) *q = '?';
  } else if (header_is(buf, n, "Retry-After", &v, &vl)) {
    copy_header_value(tmp, sizeof tmp, v, vl);
    r->retry_after_s = strtol(tmp, NULL, 10);
  } else if (header_is(buf, n, "Content-Range", &v, &vl)) {
    copy_header_value(tmp, sizeof tmp, v, vl);
    unsigned long long a, b, t;
    if (sscanf(tmp, "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
      r->body_start = a;
      r->total_size = t;
    }
  }
  return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
  xfer *x = ud;
  size_t n = size * nmemb;
  if (!x->status_checked) {
    long st = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &st);
    x->status_checked = true;
    x->ok_status = st >= 200 && st < 300;
    if (x->ok_status) {
      if (st == 206) {
        x->at = x->resp->body_start;
      } else {
        x->at = 0;
        x->resp->body_start = 0;
        curl_off_t cl = -1;
        curl_easy_getinfo(x->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        if (cl >= 0) x->resp->total_size = (uint64_t)cl;
      }
    }
  }
  if (!x->ok_status) {
    size_t room = sizeof x->errbody - 1 - x->errbody_len;
    size_t k = n < room ? n : room;
    memcpy(x->errbody + x->errbody_len, data, k);
    x->errbody_len += k;
    x->errbody[x->errbody_len] = 0;
    return n;
  }
  if (x->sink && x->sink(x->ud, x->at, data, n) != 0) {
    x->sink_failed = true;
    return 0; /* CURLE_WRITE_ERROR */
  }
  x->at += n;
  x->resp->body_bytes += n;
  return n;
}

static const char *status_text(long st) {
  switch (st) {
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 408: return "Request Timeout";
  case 416: return "Range Not Satisfiable";
  case 429: return "Too Many Requests";
  case 500: return "Internal Server Error";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  default: return "";
  }
}

int df_pull_http_get(const df_pull_net *net, void *hv, const char *url, uint64_t start,
                     uint64_t end, df_pull_sink sink, void *ud, df_pull_resp *resp, char *err,
                     size_t errlen) {
  CURL *h = hv;
  memset(resp, 0, sizeof *resp);
  if (errlen) err[0] = 0;
  xfer x = {.h = h, .resp = resp, .sink = sink, .ud = ud, .want_start = start};
  char range[64] = "";
  struct curl_slist *hdrs = NULL;
  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "deltafin/0.1.0");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, net->connect_timeout_s);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, net->stall_timeout_s);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
  if (net->token[0]) {
    /* libcurl sends bearer auth only to the original host, never after a cross-host
     * redirect (CURLOPT_UNRESTRICTED_AUTH stays off) */
    curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
    curl_easy_setopt(h, CURLOPT_XOAUTH2_BEARER, net->token);
  }
  if (start > 0 || end > 0) {
    if (end > 0)
      snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)start,
               (unsigned long long)(end - 1));
    else
      snprintf(range, sizeof range, "%llu-", (unsigned long long)start);
    curl_easy_setopt(h, CURLOPT_RANGE, range);
    x.ranged = true;
  }
  hdrs = curl_slist_append(hdrs, "Accept-Encoding: identity");
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  CURLcode cc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
  curl_slist_free_all(hdrs);
  if (x.sink_failed) {
    resp->retryable = false;
    if (!err[0]) snprintf(err, errlen, "%s: transfer aborted", url);
    return -1;
  }
  if (cc != CURLE_OK) {
    switch (cc) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_TOO_MANY_REDIRECTS:
      resp->retryable = false;
      break;
    default:
      resp->retryable = true;
    }
    if (cc == CURLE_OPERATION_TIMEDOUT)
      snprintf(err, errlen, "%s: connection stalled (no data for %ld s)", url,
               net->stall_timeout_s);
    else if (cc == CURLE_PARTIAL_FILE || cc == CURLE_RECV_ERROR || cc == CURLE_GOT_NOTHING)
      snprintf(err, errlen, "%s: connection closed after %llu bytes (%s)", url,
               (unsigned long long)resp->body_bytes, curl_easy_strerror(cc));
    else
      snprintf(err, errlen, "%s: %s", url, curl_easy_strerror(cc));
    return -1;
  }
  long st = resp->status;
  if (st >= 200 && st < 300) {
    if (x.ranged && st == 206 && resp->body_start != start) {
      snprintf(err, errlen, "%s: asked for bytes from %llu, the server sent from %llu", url,
               (unsigned long long)start, (unsigned long long)resp->body_start);
      resp->retryable = false;
      return -1;
    }
    if (!x.status_checked && st != 206) resp->body_start = 0; /* empty body */
    if (!x.status_checked && st == 206) resp->body_start = start;
    return 0;
  }
  if (!resp->error_msg[0] && x.errbody_len) {
    json_t *j = json_loadb(x.errbody, x.errbody_len, 0, NULL);
    json_t *e = j ? json_object_get(j, "error") : NULL;
    if (json_is_string(e)) snprintf(resp->error_msg, sizeof resp->error_msg, "%s", json_string_value(e));
    json_decref(j);
  }
  resp->retryable = st == 408 || st == 429 || st >= 500;
  snprintf(err, errlen, "%s: HTTP %ld %s%s%s%s", url, st, status_text(st),
           resp->error_code[0] ? " [" : "", resp->error_code, resp->error_code[0] ? "]" : "");
  if (resp->error_msg[0]) {
    size_t n = strlen(err);
    snprintf(err + n, errlen > n ? errlen - n : 0, ": %s", resp->error_msg);
  }
  return -1;
}

void df_pull_http_backoff(const df_pull_net *net, int attempt, long retry_after_s) {
  double ms = (double)net->backoff_ms;
  for (int i = 0; i < attempt && ms < 30000; i++) ms *= 2;
  if (ms > 30000) ms = 30000;
  if (retry_after_s > 0) {
    double ra = (double)(retry_after_s > 60 ? 60 : retry_after_s) * 1000.0;
    if (ra > ms) ms = ra;
  }
  struct timespec ts = {(time_t)(ms / 1000), (long)((long long)ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

typedef struct membuf {
  char *p;
  size_t len, cap, max;
  char *err;
  size_t errlen;
} membuf;

static int mem_sink(void *ud, uint64_t at, const void *data, size_t n) {
  membuf *m = ud;
  if (at == 0) m->len = 0;
  if (m->len + n > m->max) {
    snprintf(m->err, m->errlen, "response larger than %zu bytes", m->max);
    return -1;
  }
  if (m->len + n + 1 > m->cap) {
    size_t nc = m->cap ? m->cap * 2 : 65536;
    while (nc < m->len + n + 1) nc *= 2;
    char *q = realloc(m->p, nc);
    if (!q) {
      snprintf(m->err, m->errlen, "out of memory");
      return -1;
    }
    m->p = q;
    m->cap = nc;
  }
  memcpy(m->p + m->len, data, n);
  m->len += n;
  m->p[m->len] = 0;
  return 0;
}

int df_pull_http_get_small(const df_pull_net *net, const char *url, size_t max, char **body,
                           size_t *len, df_pull_resp *resp_out, char *err, size_t errlen) {
  *body = NULL;
  void *h = df_pull_http_handle_new();
  df_pull_resp resp;
  membuf m = {.max = max, .err = err, .errlen = errlen};
  int rc = -1;
  if (!h) {
    snprintf(err, errlen, "cannot create an HTTP handle");
    return -1;
  }
  for (int attempt = 0;; attempt++) {
    err[0] = 0;
    m.len = 0;
    if (df_pull_http_get(net, h, url, 0, 0, mem_sink, &m, &resp, err, errlen) == 0) {
      rc = 0;
      break;
    }
    if (!resp.retryable || attempt >= net->retries) break;
    df_pull_http_backoff(net, attempt, resp.retry_after_s);
  }
  if (resp_out) *resp_out = resp;
  df_pull_http_handle_destroy(&h);
  if (rc == 0) {
    if (!m.p) m.p = calloc(1, 1);
    if (!m.p) {
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    *body = m.p;
    if (len) *len = m.len;
  } else {
    free(m.p);
  }
  return rc;
}

typedef struct rangebuf {
  uint8_t *buf;
  uint64_t start, len, got;
  char *err;
  size_t errlen;
} rangebuf;

static int range_sink(void *ud, uint64_t at, const void *data, size_t n) {
  rangebuf *r = ud;
  if (at != r->start + r->got) {
    snprintf(r->err, r->errlen, "server sent bytes from offset %llu, expected %llu",
             (unsigned long long)at, (unsigned long long)(r->start + r->got));
    return -1;
  }
  if (r->got + n > r->len) {
    snprintf(r->err, r->errlen, "server sent more than the %llu bytes asked for",
             (unsigned long long)r->len);
    return -1;
  }
  memcpy(r->buf + r->got, data, n);
  r->got += n;
  return 0;
}

int df_pull_http_get_range(const df_pull_net *net, void *h, const char *url, uint64_t start,
                           uint64_t len, void *buf, char *err, size_t errlen) {
  rangebuf r = {.buf = buf, .start = start, .len = len, .err = err, .errlen = errlen};
  df_pull_resp resp;
  if (len == 0) return 0;
  for (int attempt = 0;; attempt++) {
    err[0] = 0;
    uint64_t from = start + r.got;
    int rc = df_pull_http_get(net, h, url, from, start + len, range_sink, &r, &resp, err, errlen);
    if (rc == 0 && r.got == len) return 0;
    if (rc == 0) {
      snprintf(err, errlen, "%s: short response: %llu of %llu bytes", url,
               (unsigned long long)r.got, (unsigned long long)len);
      resp.retryable = true;
    }
    if (!resp.retryable || attempt >= net->retries) return -1;
    df_pull_http_backoff(net, attempt, resp.retry_after_s);
  }
}

int df_pull_resolve_url(const char *endpoint, const char *repo, const char *revision,
                        const char *path, char *out, size_t cap) {
  char rev[800], p[3200];
  if (df_pull_urlenc(revision, false, rev, sizeof rev) != 0 ||
      df_pull_urlenc(path, true, p, sizeof p) != 0)
    return -1;
  int n = snprintf(out, cap, "%s/%s/resolve/%s/%s", endpoint, repo, rev, p);
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}
