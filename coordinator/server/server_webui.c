/* coordinator/server/server_webui.c — GET / : the web UI's files (chat and cluster dashboard),
 * served from the copies compiled into the binary (webui_assets.h). HEAD gets the same answer
 * without its body (libmicrohttpd leaves the body out and keeps Content-Length).
 *
 * Owns: which URLs name a file ("/" is index.html), their headers — Content-Type by extension,
 * a strong ETag (the file's SHA-256), Cache-Control: no-cache (a browser revalidates and gets
 * 304 while the binary is the same, and never runs an old script against a new server), and a
 * Content-Security-Policy that allows only this origin (no CDN, no inline code) — and the 304
 * answer. The files are served without the API key: they hold no data; the page asks for the
 * key and sends it on the /v1 requests it makes. Does not own: the files themselves
 * (coordinator/server/webui/), routing and counting (server.c, server_conn.c).
 */
#define _GNU_SOURCE
#include <microhttpd.h>
#include <string.h>

#include "coordinator/server/server_internal.h"
#include "coordinator/server/webui_assets.h"

#define CSP "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " \
            "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static const df_webui_asset *find(const char *url) {
  if (!strcmp(url, "/")) url = "/index.html";
  for (size_t i = 0; i < df_webui_n_assets; i++)
    if (!strcmp(df_webui_assets[i].path, url)) return &df_webui_assets[i];
  return NULL;
}

bool df_srv_webui_has(const char *url) { return find(url) != NULL; }

/* Whether an If-None-Match header value names etag (a list of quoted tags, weak ones
 * included, or "*"). */
static bool etag_matches(const char *inm, const char *etag) {
  if (!inm) return false;
  size_t n = strlen(etag);
  for (const char *p = inm; *p;) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    if (*p == '*') return true;
    if (!strncmp(p, "W/", 2)) p += 2;
    if (!strncmp(p, etag, n) && (p[n] == 0 || p[n] == ',' || p[n] == ' ' || p[n] == '\t'))
      return true;
    while (*p && *p != ',') p++;
  }
  return false;
}

enum MHD_Result df_srv_handle_webui(conn *c, struct MHD_Connection *mc, const char *url) {
  const df_webui_asset *a = find(url);
  if (!a) return MHD_NO; /* routed here only for a known file */
  bool fresh = etag_matches(MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "If-None-Match"),
                            a->etag);
  int status = fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK;
  struct MHD_Response *r = MHD_create_response_from_buffer(fresh ? 0 : a->len, (void *)a->data,
                                                           MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  if (!fresh) MHD_add_response_header(r, "Content-Type", a->ctype);
  MHD_add_response_header(r, "ETag", a->etag);
  MHD_add_response_header(r, "Cache-Control", "no-cache");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
  if (strstr(a->ctype, "text/html")) {
    MHD_add_response_header(r, "Content-Security-Policy", CSP);
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
  }
  enum MHD_Result ret = MHD_queue_response(mc, (unsigned)status, r);
  MHD_destroy_response(r);
  df_srv_count(c->srv, c->route, status);
  c->status = status;
  return ret;
}
