/* engine/layers/workspace.c — named, shared scratch buffers; see workspace.h. */
#include "engine/layers/workspace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ws_buf {
  char name[48];
  int64_t rows, cols; /* tensor: its shape; array: cols = 0, rows = bytes */
  df_t_tensor *t;
  void *a;
} ws_buf;

struct df_ws {
  ws_buf *b;
  size_t n, cap;
  uint64_t bytes;
};

df_ws *df_ws_new(void) { return calloc(1, sizeof(df_ws)); }

void df_ws_destroy(df_ws **wsp) {
  if (!wsp || !*wsp) return;
  df_ws *ws = *wsp;
  for (size_t i = 0; i < ws->n; i++) {
    df_t_destroy(&ws->b[i].t);
    free(ws->b[i].a);
  }
  free(ws->b);
  free(ws);
  *wsp = NULL;
}

static ws_buf *find(df_ws *ws, const char *name, int64_t rows, int64_t cols) {
  for (size_t i = 0; i < ws->n; i++)
    if (ws->b[i].rows == rows && ws->b[i].cols == cols && strcmp(ws->b[i].name, name) == 0)
      return &ws->b[i];
  return NULL;
}

static ws_buf *add(df_ws *ws, const char *name, int64_t rows, int64_t cols) {
  if (ws->n == ws->cap) {
    size_t nc = ws->cap ? ws->cap * 2 : 32;
    ws_buf *nb = realloc(ws->b, nc * sizeof *nb);
    if (!nb) return NULL;
    ws->b = nb;
    ws->cap = nc;
  }
  ws_buf *b = &ws->b[ws->n++];
  memset(b, 0, sizeof *b);
  snprintf(b->name, sizeof b->name, "%s", name);
  b->rows = rows;
  b->cols = cols;
  return b;
}

df_t_tensor *df_ws_f32(df_ws *ws, const char *name, int64_t rows, int64_t cols, char *err,
                       size_t errlen) {
  ws_buf *b = find(ws, name, rows, cols);
  if (b) return b->t;
  int64_t shape[2] = {rows, cols};
  df_t_tensor *t = df_t_new_f32(2, shape, err, errlen);
  if (!t) return NULL;
  if (!(b = add(ws, name, rows, cols))) {
    df_t_destroy(&t);
    snprintf(err, errlen, "out of memory planning buffers");
    return NULL;
  }
  b->t = t;
  ws->bytes += (uint64_t)rows * (uint64_t)cols * sizeof(float);
  return t;
}

void *df_ws_array(df_ws *ws, const char *name, int64_t n, size_t elem_size, char *err,
                  size_t errlen) {
  int64_t bytes = (n > 0 ? n : 1) * (int64_t)elem_size;
  ws_buf *b = find(ws, name, bytes, 0);
  if (b) return b->a;
  void *a = calloc((size_t)bytes, 1);
  if (!a || !(b = add(ws, name, bytes, 0))) {
    free(a);
    snprintf(err, errlen, "out of memory planning buffers (%s, %lld bytes)", name,
             (long long)bytes);
    return NULL;
  }
  b->a = a;
  ws->bytes += (uint64_t)bytes;
  return a;
}

uint64_t df_ws_bytes(const df_ws *ws) { return ws->bytes; }
