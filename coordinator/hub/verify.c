/* coordinator/hub/verify.c — offline folder check against the pull manifest; see verify.h. */
#define _GNU_SOURCE
#include "coordinator/hub/verify.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/model_config.h"
#include "engine/models/family.h"
#include "coordinator/hub/pull_manifest.h"
#include "coordinator/hub/pull_util.h"
#include "engine/model.h"
#include "engine/safetensors.h"
#include "engine/text/tokenizer.h"

typedef struct vctx {
  const char *dir;
  const df_verify_opts *o;
  df_verify_result *res;
  const df_pull_manifest *man;
} vctx;

static void report(vctx *v, df_verify_level lvl, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void report(vctx *v, df_verify_level lvl, const char *path, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (lvl == DF_VERIFY_PROBLEM) v->res->problems++;
  if (lvl == DF_VERIFY_NOTE) v->res->notes++;
  if (v->o->report) v->o->report(v->o->ud, lvl, path, msg);
}

static void check_file(vctx *v, const df_pull_mfile *f) {
  char path[4400], err[1024];
  snprintf(path, sizeof path, "%s/%s", v->dir, f->path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  v->res->files_checked++;
  if (fd < 0) {
    report(v, DF_VERIFY_PROBLEM, f->path, "missing (%s)", strerror(errno));
    return;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    report(v, DF_VERIFY_PROBLEM, f->path, "not a regular file");
    close(fd);
    return;
  }
  if ((uint64_t)st.st_size != f->size) {
    report(v, DF_VERIFY_PROBLEM, f->path, "size %llu bytes, the manifest says %llu",
           (unsigned long long)st.st_size, (unsigned long long)f->size);
    close(fd);
    return;
  }
  if (v->o->skip_hashes) {
    report(v, DF_VERIFY_OK, f->path, "size ok (hash not checked)");
    close(fd);
    return;
  }
  char hex[DF_PULL_SHA256_HEX];
  if (!f->sparse) {
    if (df_pull_hash_fd(fd, 0, f->size, f->path, hex, NULL, err, sizeof err) != 0) {
      report(v, DF_VERIFY_PROBLEM, f->path, "%s", err);
    } else if (strcmp(hex, f->sha256) != 0) {
      report(v, DF_VERIFY_PROBLEM, f->path, "SHA-256 %s, the manifest says %s (file changed or "
             "corrupt)", hex, f->sha256);
    } else {
      v->res->bytes_hashed += f->size;
      report(v, DF_VERIFY_OK, f->path, "size and SHA-256 ok");
    }
    close(fd);
    return;
  }
  int bad = 0;
  for (int i = 0; i < f->n_ranges; i++) {
    const df_pull_range *r = &f->ranges[i];
    if (df_pull_hash_fd(fd, r->off, r->len, f->path, hex, NULL, err, sizeof err) != 0) {
      report(v, DF_VERIFY_PROBLEM, f->path, "%s", err);
      bad++;
      break;
    }
    v->res->bytes_hashed += r->len;
    if (strcmp(hex, r->sha256) != 0) {
      report(v, DF_VERIFY_PROBLEM, f->path, "bytes %llu..%llu: SHA-256 %s, the manifest says %s",
             (unsigned long long)r->off, (unsigned long long)(r->off + r->len), hex, r->sha256);
      bad++;
    }
  }
  if (!bad && f->unused)
    report(v, DF_VERIFY_OK, f->path, "stream-mode shard: size and %d written ranges ok, "
           "%llu bytes of routed experts fetched on use, %llu bytes never read (not the text "
           "model)", f->n_ranges, (unsigned long long)f->omitted, (unsigned long long)f->unused);
  else if (!bad)
    report(v, DF_VERIFY_OK, f->path, "stream-mode shard: size and %d written ranges ok, "
           "%llu bytes of routed experts fetched on use", f->n_ranges,
           (unsigned long long)f->omitted);
  close(fd);
}

/* Files in the folder (recursively) that the manifest does not list. */
static void list_extra(vctx *v, const char *rel) {
  char path[4400];
  snprintf(path, sizeof path, "%s%s%s", v->dir, *rel ? "/" : "", rel);
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (!*rel && (!strcmp(de->d_name, ".deltafin") || !strcmp(de->d_name, DF_PULL_MANIFEST_NAME)))
      continue;
    char r[4400], full[8800];
    snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
    snprintf(full, sizeof full, "%s/%s", v->dir, r);
    struct stat st;
    if (stat(full, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      list_extra(v, r);
    } else if (!df_pull_manifest_find(v->man, r)) {
      report(v, DF_VERIFY_NOTE, r, "not in the manifest (not checked)");
    }
  }
  closedir(d);
}

/* Non-finite values of a floating-point tensor (IEEE layouts; F8_E4M3 has NaN only,
 * S.1111.111); *first the index of the first. Other dtypes: 0. */
static uint64_t count_nonfinite(const df_st_tensor *t, uint64_t *first) {
  const uint8_t *p = t->data;
  size_t es = df_dtype_size(t->dtype);
  uint64_t n = es ? t->nbytes / es : 0, bad = 0;
  for (uint64_t i = 0; i < n; i++) {
    bool nf;
    switch (t->dtype) {
    case DF_DT_BF16: {
      uint16_t v;
      memcpy(&v, p + 2 * i, 2);
      nf = (v & 0x7F80) == 0x7F80;
      break;
    }
    case DF_DT_F16: {
      uint16_t v;
      memcpy(&v, p + 2 * i, 2);
      nf = (v & 0x7C00) == 0x7C00;
      break;
    }
    case DF_DT_F32: {
      uint32_t v;
      memcpy(&v, p + 4 * i, 4);
      nf = (v & 0x7F800000u) == 0x7F800000u;
      break;
    }
    case DF_DT_F64: {
      uint64_t v;
      memcpy(&v, p + 8 * i, 8);
      nf = (v & 0x7FF0000000000000ull) == 0x7FF0000000000000ull;
      break;
    }
    case DF_DT_F8_E4M3: nf = (p[i] & 0x7F) == 0x7F; break;
    case DF_DT_F8_E5M2: nf = (p[i] & 0x7C) == 0x7C; break;
    default: return 0;
    }
    if (nf && bad++ == 0) *first = i;
  }
  return bad;
}

/* An MXFP4 scale tensor (compressed-tensors' U8 `<base>.weight_scale` next to its
 * `<base>.weight_packed`): the number of E8M0 NaN bytes (255), *first the first's index. */
static uint64_t count_nan_scales(const df_st_model *stm, const df_st_tensor *t, uint64_t *first) {
  size_t n = strlen(t->name);
  if (t->dtype != DF_DT_U8 || n < 13 || n > 400 || strcmp(t->name + n - 13, ".weight_scale"))
    return 0;
  char packed[420];
  snprintf(packed, sizeof packed, "%.*s.weight_packed", (int)(n - 13), t->name);
  if (!df_st_find(stm, packed)) return 0;
  const uint8_t *p = (const uint8_t *)t->data;
  uint64_t bad = 0;
  for (uint64_t i = 0; i < t->nbytes; i++)
    if (p[i] == 255 && bad++ == 0) *first = i;
  return bad;
}

/* --deep: every floating-point tensor's values, and every MXFP4 scale byte. */
static void check_values(vctx *v, const df_st_model *stm) {
  size_t nt = df_st_count(stm), bad_tensors = 0, scanned = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < nt; i++) {
    const df_st_tensor *t = df_st_at(stm, i);
    uint64_t first = 0, bad = count_nonfinite(t, &first);
    uint64_t nan_scales = count_nan_scales(stm, t, &first);
    if (nan_scales) {
      scanned++;
      bytes += t->nbytes;
      bad_tensors++;
      const char *fp = df_st_file_path(stm, t->file_index), *slash = strrchr(fp, '/');
      report(v, DF_VERIFY_PROBLEM, slash ? slash + 1 : fp,
             "tensor %s (MXFP4 E8M0 scales): %llu of its bytes are 255, the NaN scale (the first "
             "at flat index %llu)", t->name, (unsigned long long)nan_scales,
             (unsigned long long)first);
      continue;
    }
    if (t->dtype == DF_DT_BF16 || t->dtype == DF_DT_F16 || t->dtype == DF_DT_F32 ||
        t->dtype == DF_DT_F64 || t->dtype == DF_DT_F8_E4M3 || t->dtype == DF_DT_F8_E5M2) {
      scanned++;
      bytes += t->nbytes;
    }
    if (!bad) continue;
    bad_tensors++;
    const char *fp = df_st_file_path(stm, t->file_index), *slash = strrchr(fp, '/');
    report(v, DF_VERIFY_PROBLEM, slash ? slash + 1 : fp, /* the folder's own file */
           "tensor %s (%s): %llu of its values are NaN or Inf (the first at flat index %llu)",
           t->name, df_dtype_name(t->dtype), (unsigned long long)bad, (unsigned long long)first);
  }
  if (!bad_tensors)
    report(v, DF_VERIFY_OK, "", "%zu floating-point tensors (%.1f MiB): every value finite",
           scanned, (double)bytes / 1048576.0);
}

static bool exists(const char *dir, const char *name) {
  char p[4400];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

static bool has_safetensors(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return false;
  struct dirent *de;
  bool found = false;
  while (!found && (de = readdir(d))) {
    size_t n = strlen(de->d_name);
    found = n > 12 && !strcmp(de->d_name + n - 12, ".safetensors");
  }
  closedir(d);
  return found;
}

int df_verify_dir(const char *dir, const df_verify_opts *o, df_verify_result *res, char *err,
                  size_t errlen) {
  df_verify_opts dflt = {0};
  if (!o) o = &dflt;
  memset(res, 0, sizeof *res);
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s: not a folder", dir);
    return -1;
  }
  df_pull_manifest man = {0};
  vctx v = {.dir = dir, .o = o, .res = res, .man = &man};
  char merr[1024];
  int mr = df_pull_manifest_read(dir, &man, merr, sizeof merr);
  if (mr < 0) {
    report(&v, DF_VERIFY_PROBLEM, DF_PULL_MANIFEST_NAME, "%s", merr);
  } else if (mr == 1) {
    report(&v, DF_VERIFY_NOTE, "", "no %s (not pulled by deltafin): file hashes not checked",
           DF_PULL_MANIFEST_NAME);
  } else {
    res->has_manifest = true;
    for (int i = 0; i < man.n_files; i++) check_file(&v, &man.files[i]);
    if (!man.complete || man.n_pending)
      for (int i = 0; i < man.n_pending; i++)
        report(&v, DF_VERIFY_PROBLEM, man.pending[i], "listed by %s@%.12s but not downloaded "
               "(the pull did not finish; run deltafin pull again)", man.repo, man.commit);
    list_extra(&v, "");
  }

  /* structure: config, safetensors headers vs config, tokenizer */
  char e2[1024];
  bool have_st = exists(dir, "model.safetensors.index.json") || has_safetensors(dir);
  if (!exists(dir, "config.json")) {
    report(&v, DF_VERIFY_PROBLEM, "config.json", "missing");
  } else {
    df_model_config cfg;
    if (df_cfg_load(dir, &cfg, e2, sizeof e2) != 0) {
      report(&v, DF_VERIFY_PROBLEM, "config.json", "%s", e2);
    } else {
      report(&v, DF_VERIFY_OK, "config.json", "parses");
      if (!have_st) {
        report(&v, DF_VERIFY_PROBLEM, "", "no *.safetensors weights");
      } else {
        df_st_model *stm = NULL;
        if (df_st_open(dir, &stm, e2, sizeof e2) != 0) {
          report(&v, DF_VERIFY_PROBLEM, "", "safetensors: %s", e2);
        } else {
          size_t nt = df_st_count(stm);
          int nf = df_st_file_count(stm);
          if (v.o->deep) check_values(&v, stm);
          df_st_close(&stm);
          df_model *m = NULL;
          df_model_opts mo = {.max_ctx = 8, .max_rows = 1, .threads = 1};
          if (df_model_load(dir, &mo, &m, e2, sizeof e2) != 0)
            report(&v, DF_VERIFY_PROBLEM, "", "weights do not match config.json: %s", e2);
          else
            report(&v, DF_VERIFY_OK, "", "%zu tensors in %d safetensors files match config.json "
                   "(names, dtypes, shapes)", nt, nf);
          df_model_destroy(&m);
        }
      }
    }
  }
  if (exists(dir, "tokenizer.json") || exists(dir, "tiktoken.model")) {
    const char *tf = exists(dir, "tokenizer.json") ? "tokenizer.json" : "tiktoken.model";
    df_tok *tok = NULL;
    if (df_tok_load(dir, &tok, e2, sizeof e2) != 0)
      report(&v, DF_VERIFY_PROBLEM, tf, "%s", e2);
    else
      report(&v, DF_VERIFY_OK, tf, "loads (%zu ids)", df_tok_vocab_size(tok));
    df_tok_destroy(&tok);
  }
  df_pull_manifest_free(&man);
  return 0;
}
