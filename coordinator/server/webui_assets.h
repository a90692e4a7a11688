/* coordinator/server/webui_assets.h — the web UI's files as compiled into the binary.
 *
 * The table is generated at build time by tools/cmake/embed_files.cmake from the files of
 * coordinator/server/webui/ (one entry per file, sorted by name; see coordinator/CMakeLists.txt),
 * so `deltafin serve` reads nothing from disk to serve its page. Served by server_webui.c.
 */
#ifndef DF_COORD_WEBUI_ASSETS_H
#define DF_COORD_WEBUI_ASSETS_H

#include <stddef.h>

typedef struct df_webui_asset {
  const char *path;          /* URL path: "/" + the file's name, e.g. "/index.html" */
  const char *ctype;         /* Content-Type, from the name's extension (text ones: UTF-8) */
  const unsigned char *data; /* [len] the file's bytes (static storage; a NUL follows them) */
  size_t len;
  const char *etag;          /* strong ETag, quoted: "\"" + the first 16 hex digits of the
                                file's SHA-256 + "\"" */
} df_webui_asset;

extern const df_webui_asset df_webui_assets[]; /* [df_webui_n_assets] */
extern const size_t df_webui_n_assets;

#endif
