/* coordinator/cli/cli.c — option parsing helpers; see cli.h. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/hub/pull_manifest.h"
#include "engine/draft/dspark.h"
#include "engine/model.h"

int df_cli_int(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (!v || !*v || *end || errno || x < lo || x > hi) {
    fprintf(stderr, "deltafin: --%s: expected an integer in [%lld, %lld], got '%s'\n", name,
            (long long)lo, (long long)hi, v ? v : "(missing)");
    return -1;
  }
  *out = x;
  return 0;
}

int df_cli_double(const char *name, const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double x = v ? strtod(v, &end) : 0;
  if (!v || !*v || *end || errno || !isfinite(x) || x < lo || x > hi) {
    fprintf(stderr, "deltafin: --%s: expected a number in [%g, %g], got '%s'\n", name, lo, hi,
            v ? v : "(missing)");
    return -1;
  }
  *out = x;
  return 0;
}

int df_cli_size(const char *s, size_t n, uint64_t *out) {
  char buf[32];
  if (n == 0 || n >= sizeof buf) return -1;
  memcpy(buf, s, n);
  buf[n] = 0;
  char *end;
  double v = strtod(buf, &end);
  if (end == buf || !(v >= 0)) return -1;
  double mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
  else if (*end == 'M' || *end == 'm') mul = 1048576.0, end++;
  else if (*end == 'G' || *end == 'g') mul = 1073741824.0, end++;
  else if (*end == 'T' || *end == 't') mul = 1099511627776.0, end++;
  if (*end == 'i' && end[1] == 'B') end += 2;
  else if (*end == 'B') end++;
  if (*end || v * mul >= 1.8e19) return -1;
  *out = (uint64_t)(v * mul);
  return 0;
}

const char *df_cli_shell_word(const char *s, char *buf, size_t cap) {
  if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:@,%")
                == strlen(s))
    return s;
  size_t o = 0;
  if (o + 1 < cap) buf[o++] = '\'';
  for (; *s && o + 6 < cap; s++) {
    if (*s == '\'') {
      memcpy(buf + o, "'\\''", 4);
      o += 4;
    } else {
      buf[o++] = *s;
    }
  }
  if (o + 1 < cap) buf[o++] = '\'';
  buf[o] = 0;
  return buf;
}

int df_cli_dir(const char *name, const char *v) {
  if (v && !v[0]) {
    fprintf(stderr, "deltafin: --%s: expected a folder path, got ''\n", name);
    return -1;
  }
  return 0;
}

int64_t df_cli_ids(const char *name, const char *v, int32_t **out) {
  *out = NULL;
  if (!v || !*v) {
    fprintf(stderr, "deltafin: --%s: expected comma-separated token ids, got ''\n", name);
    return -1;
  }
  int64_t cap = 1;
  for (const char *p = v; *p; p++) cap += *p == ',';
  int32_t *ids = malloc((size_t)cap * sizeof *ids);
  if (!ids) return -1;
  int64_t n = 0;
  const char *p = v;
  while (*p) {
    char *end;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
      fprintf(stderr, "deltafin: --%s: element %lld is not a token id (non-negative integer): '%s'\n",
              name, (long long)n, p);
      free(ids);
      return -1;
    }
    ids[n++] = (int32_t)x;
    p = *end ? end + 1 : end;
    if (*end == ',' && !*p) {
      fprintf(stderr, "deltafin: --%s: trailing comma\n", name);
      free(ids);
      return -1;
    }
  }
  *out = ids;
  return n;
}

double df_cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int df_cli_device(const char *v, const char *model_dir, struct df_model_opts *mo) {
  char err[256];
  if (df_t_device_parse(v, &mo->device, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: --device: %s\n", err);
    return -1;
  }
  df_pull_manifest man;
  if (model_dir && df_pull_manifest_read(model_dir, &man, err, sizeof err) == 0 && man.stream)
    mo->device_host_experts = true;
  if (model_dir) df_pull_manifest_free(&man);
  return 0;
}

#ifndef DF_DEFAULT_MODEL
#define DF_DEFAULT_MODEL "models/demo-moe"
#endif
#ifndef DF_DEFAULT_DRAFT
#define DF_DEFAULT_DRAFT "models/demo-draft"
#endif

/* PREFIX/share/deltafin/models/NAME (PREFIX: the folder above this executable's folder, /usr
 * for /usr/bin/deltafin) when it holds a config.json, else FALLBACK. */
static const char *demo_dir(const char *name, const char *fallback, char *buf, size_t cap) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return fallback;
  exe[n] = 0;
  for (int up = 0; up < 2; up++) { /* drop the file name, then its folder */
    char *sl = strrchr(exe, '/');
    if (!sl) return fallback;
    *sl = 0;
  }
  char cfg[4200];
  int k = snprintf(buf, cap, "%s/share/deltafin/models/%s", exe, name);
  if (k <= 0 || (size_t)k >= cap) return fallback;
  snprintf(cfg, sizeof cfg, "%s/config.json", buf);
  return access(cfg, R_OK) == 0 ? buf : fallback;
}

const char *df_cli_default_model(void) {
  static char buf[4200];
  return demo_dir("demo-moe", DF_DEFAULT_MODEL, buf, sizeof buf);
}

const char *df_cli_default_draft(void) {
  static char buf[4200];
  return demo_dir("demo-draft", DF_DEFAULT_DRAFT, buf, sizeof buf);
}

const char *df_cli_default_block(void) {
  static char buf[4200];
  return demo_dir("demo-dspark", DF_DEFAULT_BLOCK, buf, sizeof buf);
}

/* The drafter model_dir's record names (df_cli_drafters_sort), into out->recorded_dir. */
static bool recorded_drafter(const char *model_dir, df_cli_drafters *out) {
  char path[4400], line[4096];
  snprintf(path, sizeof path, "%s/" DF_CLI_DRAFTER_RECORD, model_dir);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  if (!ok) return false;
  line[strcspn(line, "\r\n")] = 0;
  if (!line[0]) return false;
  if (line[0] == '/')
    snprintf(out->recorded_dir, sizeof out->recorded_dir, "%s", line);
  else
    snprintf(out->recorded_dir, sizeof out->recorded_dir, "%.2040s/%.2040s", model_dir, line);
  return df_dspark_is_folder(out->recorded_dir);
}

int df_cli_drafters_sort(const char *cmd, const char *const *dirs, int n, bool use_bundled,
                         const char *model_dir, bool use_recorded, df_cli_drafters *out) {
  *out = (df_cli_drafters){0};
  char cfg[4300];
  if (n == 0 && model_dir && use_recorded && recorded_drafter(model_dir, out)) {
    out->block = out->recorded_dir;
    out->recorded = true;
    return 0;
  }
  if (n == 0 && use_bundled) {
    const char *d[2] = {df_cli_default_draft(), df_cli_default_block()};
    for (int i = 0; i < 2; i++) {
      snprintf(cfg, sizeof cfg, "%s/config.json", d[i]);
      if (access(cfg, R_OK) == 0) *(i ? &out->block : &out->text) = d[i];
    }
    return 0;
  }
  for (int i = 0; i < n; i++) {
    bool block = df_dspark_is_folder(dirs[i]);
    const char **slot = block ? &out->block : &out->text;
    if (*slot) {
      fprintf(stderr, "deltafin %s: --draft %s and --draft %s are both %s; give at most one "
              "draft model and one block drafter\n", cmd, *slot, dirs[i],
              block ? "block drafters" : "draft models");
      return -1;
    }
    *slot = dirs[i];
  }
  return 0;
}
