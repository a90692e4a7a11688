/* coordinator/hub/pull_http.h — the HTTP client of `deltafin pull` and stream mode (libcurl).
 *
 * Owns: one GET attempt with an optional byte range (HTTP Range), following the hub's
 * redirects to its storage hosts, classifying the outcome (done / retry / refuse) and the
 * hub's headers (X-Repo-Commit, X-Linked-Etag / ETag, X-Linked-Size, X-Error-Code,
 * X-Error-Message); retrying wrappers with exponential backoff for JSON API calls and exact
 * byte ranges. The bearer token is sent only to the endpoint's host (libcurl drops it on a
 * redirect to another host, as the hub's signed storage URLs expect). Proxies come from the
 * usual environment variables, which libcurl reads itself (http_proxy, https_proxy,
 * no_proxy).
 * Does not own: what is fetched (pull.c, stream.c) or where bytes go (the caller's sink).
 */
#ifndef DF_COORD_PULL_HTTP_H
#define DF_COORD_PULL_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct df_pull_net {
  char endpoint[1024];    /* "https://huggingface.co", no trailing '/' */
  char token[1024];       /* bearer token; "" = anonymous */
  long connect_timeout_s; /* TCP + TLS connect limit, seconds (default 15) */
  long stall_timeout_s;   /* abort a transfer that moves < 1 byte/s for this long (default 60) */
  int retries;            /* further attempts after a retryable failure (default 5) */
  long backoff_ms;        /* first wait before a retry, doubling up to 30 s (default 1000) */
} df_pull_net;

/* Defaults, with endpoint from $HF_ENDPOINT, token from $HF_TOKEN / the token file
 * (pull_util.h df_pull_token) and backoff from $DELTAFIN_PULL_BACKOFF_MS when set. */
void df_pull_net_defaults(df_pull_net *n);

/* What one response said. Strings are "" when the header was absent. */
typedef struct df_pull_resp {
  long status;            /* final HTTP status; 0 when no response arrived */
  bool retryable;         /* a failure that may go away: connection, stall, 408/429/5xx */
  char commit[96];        /* X-Repo-Commit (of the hub's response, before any redirect) */
  char etag[160];         /* X-Linked-Etag, else ETag, without quotes and W/ */
  char error_code[64];    /* X-Error-Code ("RepoNotFound", "GatedRepo", ...) */
  char error_msg[256];    /* X-Error-Message, else the "error" field of a JSON body */
  uint64_t linked_size;   /* X-Linked-Size; 0 when absent */
  uint64_t total_size;    /* file size from Content-Range's "/total" or a 200's length; 0 unknown */
  uint64_t body_start;    /* file offset of the first body byte: the Range start on 206, 0 on 200 */
  uint64_t body_bytes;    /* body bytes handed to the sink */
  long retry_after_s;     /* Retry-After seconds; 0 when absent */
  char content_type[64];  /* Content-Type, for messages; "" when absent */
} df_pull_resp;

/* Receives body bytes of a 2xx response; `at` is the file offset of data[0] (so a server
 * that ignores Range and answers 200 shows up as at == 0). Return 0 to continue, -1 to
 * abort the transfer (the attempt then fails, not retryable, with the sink's own message). */
typedef int (*df_pull_sink)(void *ud, uint64_t at, const void *data, size_t n);

/* A reusable connection handle (keeps connections alive between requests of one thread).
 * NULL on allocation failure. */
void *df_pull_http_handle_new(void);
void df_pull_http_handle_destroy(void **h);

/* One GET attempt of `url` for bytes [start, end) (end == 0: to the end of the file;
 * start == 0 && end == 0: no Range header). 0 when a 2xx body arrived completely;
 * -1 with a one-line message (status, hub error code/message) and resp->retryable.
 * `h` from df_pull_http_handle_new, used by one thread at a time. */
int df_pull_http_get(const df_pull_net *net, void *h, const char *url, uint64_t start,
                     uint64_t end, df_pull_sink sink, void *ud, df_pull_resp *resp, char *err,
                     size_t errlen);

/* Wait before retry number `attempt` (0 = first retry): backoff_ms * 2^attempt, at most 30 s,
 * at least Retry-After when the server gave one (capped at 60 s). */
void df_pull_http_backoff(const df_pull_net *net, int attempt, long retry_after_s);

/* GET a small document (hub API JSON) with retries: on success *body is a new malloc'd
 * NUL-terminated buffer (caller frees) of *len bytes, at most `max` bytes, and *resp (when
 * not NULL) the last response. -1 + message after a refusal or the last failed attempt. */
int df_pull_http_get_small(const df_pull_net *net, const char *url, size_t max, char **body,
                           size_t *len, df_pull_resp *resp, char *err, size_t errlen);

/* Fetch exactly bytes [start, start+len) of `url` into buf (len bytes), with retries that
 * resume after the bytes already received. -1 + message after a refusal, a server that
 * returns other bytes than asked, or the last failed attempt. */
int df_pull_http_get_range(const df_pull_net *net, void *h, const char *url, uint64_t start,
                           uint64_t len, void *buf, char *err, size_t errlen);

/* "{endpoint}/{repo}/resolve/{revision}/{path}" with the revision and path percent-encoded
 * ('/' kept in the path). 0 or -1 when cap is too small. */
int df_pull_resolve_url(const char *endpoint, const char *repo, const char *revision,
                        const char *path, char *out, size_t cap);

#endif
