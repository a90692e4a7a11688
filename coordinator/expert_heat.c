/* coordinator/expert_heat.c — the heat file of expert_heat.h. */
#define _GNU_SOURCE
#include "coordinator/expert_heat.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/fsutil.h"
#include "transport/keys.h"

static const char k_magic[8] = {'D', 'F', 'H', 'E', 'A', 'T', '1', 0};

/* STATE/heat/KEY.u64 into out; -1 when the state directory is unknown. */
static int heat_path(const char *state, const char *model_dir, char *out, size_t cap) {
  char st[PATH_MAX], real[PATH_MAX], err[256];
  if (state) snprintf(st, sizeof st, "%s", state);
  else if (df_proto_state_default("deltafin", st, sizeof st, err, sizeof err) != 0) return -1;
  const char *p = realpath(model_dir, real) ? real : model_dir;
  uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
  for (; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  int w = snprintf(out, cap, "%s/heat/%016llx.u64", st, (unsigned long long)h);
  return w > 0 && (size_t)w < cap ? 0 : -1;
}

static uint64_t get_le64(const unsigned char *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

static void put_le64(unsigned char *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

uint64_t *df_heat_load(const char *state, const char *model_dir, int64_t *n) {
  char path[PATH_MAX + 64];
  *n = 0;
  if (heat_path(state, model_dir, path, sizeof path) != 0) return NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char hdr[16];
  uint64_t *v = NULL;
  if (fread(hdr, 1, 16, f) != 16 || memcmp(hdr, k_magic, 8) != 0) goto done;
  uint64_t cnt = get_le64(hdr + 8);
  if (cnt == 0 || cnt > (1u << 24)) goto done; /* far more pairs than any model has */
  unsigned char *raw = malloc(cnt * 8);
  v = raw ? malloc(cnt * sizeof *v) : NULL;
  if (!v || fread(raw, 8, cnt, f) != cnt || fgetc(f) != EOF) {
    free(v);
    v = NULL;
  } else {
    for (uint64_t i = 0; i < cnt; i++) v[i] = get_le64(raw + 8 * i);
    *n = (int64_t)cnt;
  }
  free(raw);
done:
  fclose(f);
  return v;
}

int df_heat_save(const char *state, const char *model_dir, const df_model *m, char *err,
                 size_t errlen) {
  const df_model_config *c = df_model_cfg(m);
  const uint64_t *rc = df_model_route_counts(m);
  int64_t n = c->num_hidden_layers * c->num_experts;
  char path[PATH_MAX + 64];
  if (!rc || n <= 0) {
    snprintf(err, errlen, "no routing counts (the model has no routed experts)");
    return -1;
  }
  if (heat_path(state, model_dir, path, sizeof path) != 0) {
    snprintf(err, errlen, "no state directory for the heat file (set --state-dir or HOME)");
    return -1;
  }
  int64_t old_n = 0;
  uint64_t *old = df_heat_load(state, model_dir, &old_n);
  unsigned char *buf = malloc(16 + (size_t)n * 8);
  if (!buf) {
    free(old);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  memcpy(buf, k_magic, 8);
  put_le64(buf + 8, (uint64_t)n);
  for (int64_t i = 0; i < n; i++) {
    uint64_t a = old_n == n ? old[i] : 0, b = rc[i];
    put_le64(buf + 16 + 8 * i, a > UINT64_MAX - b ? UINT64_MAX : a + b);
  }
  free(old);
  char dir[PATH_MAX + 64];
  snprintf(dir, sizeof dir, "%s", path);
  *strrchr(dir, '/') = 0;
  int r = df_fs_mkdirs(dir, err, errlen);
  if (r == 0) r = df_fs_write_atomic(path, buf, 16 + (size_t)n * 8, 0600, err, errlen);
  free(buf);
  return r;
}
