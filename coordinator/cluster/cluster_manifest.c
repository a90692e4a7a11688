/* coordinator/cluster/cluster_manifest.c — expert manifest and its SHA-256 cache; see
 * cluster_manifest.h. */
#define _GNU_SOURCE
#include "coordinator/cluster/cluster_manifest.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/safetensors.h"
#include "engine/tensor/torch_shim.h"
#include "transport/keys.h"

/* Fill *t from the checkpoint's tensor `name` (2-D); its bytes go to *data. */
static int manifest_tensor(const df_st_model *st, const char *name, df_proto_tensor *t,
                           const uint8_t **data, char *err, size_t errlen) {
  snprintf(t->name, sizeof t->name, "%s", name);
  const df_st_tensor *s = df_st_find(st, t->name);
  if (!s || s->ndim != 2) {
    snprintf(err, errlen, "cluster manifest: tensor %s missing or not 2-D", t->name);
    return -1;
  }
  snprintf(t->dtype, sizeof t->dtype, "%s", df_dtype_name(s->dtype));
  t->shape[0] = s->shape[0];
  t->shape[1] = s->shape[1];
  t->nbytes = s->nbytes;
  *data = s->data;
  return 0;
}

/* How a routed weight is stored: plain (BF16/F16/F32), FP8 with F32 block scales, or MXFP4
 * with E8M0 scales. The first MoE layer's gate decides for the model; every weight must agree. */
enum { W_PLAIN = 0, W_FP8, W_MX };
static int weight_kind(const df_t_tensor *w) {
  df_dtype dt = df_t_dtype(w);
  return dt == DF_DT_F8_E4M3 ? W_FP8 : dt == DF_DT_F4 ? W_MX : W_PLAIN;
}

int df_cluster_manifest_build(const df_model *m, df_cluster_manifest *mf, char *err, size_t errlen) {
  memset(mf, 0, sizeof *mf);
  const df_model_config *c = df_model_cfg(m);
  const df_st_model *st = df_model_tensors(m);
  int64_t L = c->num_hidden_layers, E = c->num_experts > 0 ? c->num_experts : 0, n_moe = 0;
  /* the width the routed experts run in: a latent MoE's latent (engine/layers/moe.c) */
  mf->hidden = c->latent_dim > 0 ? c->latent_dim : c->hidden_size;
  mf->inter = c->moe_intermediate_size;
  mf->n_experts = E;
  mf->tpp = 3;
  if (c->hidden_act == DF_ACT_SITU) { /* as engine/models/mla_moe.c hands it to the experts */
    mf->act_kind = DF_PROTO_ACT_SITU;
    mf->act_beta = (float)c->situ_beta;
    mf->act_beta_lin = (float)c->situ_linear_beta;
    if (!df_proto_act_valid(mf->act_kind, mf->act_beta, mf->act_beta_lin)) {
      snprintf(err, errlen, "cluster manifest: SiTU betas %g, %g cannot be sent to a node",
               c->situ_beta, c->situ_linear_beta);
      goto fail;
    }
    mf->needs |= DF_PROTO_FEAT_ACT;
  }
  int kind = W_PLAIN;
  mf->pair_of_layer = malloc((size_t)(L > 0 ? L : 1) * sizeof *mf->pair_of_layer);
  if (!mf->pair_of_layer) goto oom;
  for (int64_t l = 0; l < L; l++) {
    const df_t_tensor *g, *u, *d;
    bool moe = E > 0 && df_model_expert_weights(m, (int)l, 0, &g, &u, &d) == 0;
    mf->pair_of_layer[l] = moe ? (int32_t)(n_moe * E) : -1;
    if (moe && n_moe == 0 && (kind = weight_kind(g)) != W_PLAIN) { /* ship the scales */
      int64_t bn = 0, bk = 0;
      if (!df_t_block_scale(g, &bn, &bk)) {
        snprintf(err, errlen, "cluster manifest: layer %lld experts are %s without scales",
                 (long long)l, kind == W_FP8 ? "FP8" : "MXFP4");
        goto fail;
      }
      if (kind == W_FP8) {
        mf->block_n = bn, mf->block_k = bk;
      } else {
        if (bn != 1 || bk != DF_PROTO_MX_BLOCK) {
          snprintf(err, errlen, "cluster manifest: layer %lld MXFP4 experts have scale blocks "
                   "%lldx%lld, not 1x32", (long long)l, (long long)bn, (long long)bk);
          goto fail;
        }
        mf->mx = DF_PROTO_MX_BLOCK;
        mf->needs |= DF_PROTO_FEAT_MX;
      }
      mf->tpp = 6;
    }
    n_moe += moe;
  }
  mf->n_pairs = n_moe * E;
  size_t np = (size_t)(mf->n_pairs ? mf->n_pairs : 1), tpp = (size_t)mf->tpp;
  mf->pairs = malloc(np * 2 * sizeof *mf->pairs);
  mf->t = calloc(np * tpp, sizeof *mf->t);
  mf->data = calloc(np * tpp, sizeof *mf->data);
  if (!mf->pairs || !mf->t || !mf->data) goto oom;
  for (int64_t l = 0; l < L; l++) {
    if (mf->pair_of_layer[l] < 0) continue;
    for (int64_t e = 0; e < E; e++) {
      int64_t p = mf->pair_of_layer[l] + e;
      mf->pairs[2 * p] = (int32_t)l;
      mf->pairs[2 * p + 1] = (int32_t)e;
      const df_t_tensor *w[3];
      df_model_expert_weights(m, (int)l, (int)e, &w[0], &w[1], &w[2]);
      uint64_t pb = 0;
      for (int k = 0; k < 3; k++) {
        /* the weight's name as the family binds it ("....w1.weight"); MXFP4 stores it as
         * "<name>_packed" + "<name>_scale" (engine/layers/bind.h), FP8 as "<name>" +
         * "<name>_scale_inv" */
        char name[DF_PROTO_MAX_TNAME + 1], wname[DF_PROTO_MAX_TNAME + 1];
        df_model_expert_tensor_name(m, (int)l, (int)e, k, wname, sizeof wname);
        if (kind == W_MX) snprintf(name, sizeof name, "%.*s_packed", DF_PROTO_MAX_TNAME - 7, wname);
        else snprintf(name, sizeof name, "%s", wname);
        df_proto_tensor *t = &mf->t[mf->tpp * p + k];
        if (manifest_tensor(st, name, t, &mf->data[mf->tpp * p + k], err, errlen) != 0) goto fail;
        if (weight_kind(w[k]) != kind || mf->data[mf->tpp * p + k] != df_t_data(w[k])) {
          snprintf(err, errlen, "cluster manifest: %s is %s, unlike the model's other experts",
                   name, t->dtype);
          goto fail;
        }
        pb += t->nbytes;
        if (mf->tpp == 3) continue;
        int64_t bn, bk;
        const df_t_tensor *sc = df_t_block_scale(w[k], &bn, &bk);
        df_proto_tensor *ts = &mf->t[mf->tpp * p + 3 + k];
        const uint8_t **sd = &mf->data[mf->tpp * p + 3 + k];
        int64_t want_n = kind == W_MX ? 1 : mf->block_n, want_k = kind == W_MX ? mf->mx : mf->block_k;
        snprintf(name, sizeof name, "%.*s%s", DF_PROTO_MAX_TNAME - 10, wname,
                 kind == W_MX ? "_scale" : "_scale_inv");
        if (manifest_tensor(st, name, ts, sd, err, errlen) != 0) goto fail;
        if (!sc || bn != want_n || bk != want_k || *sd != df_t_data(sc)) {
          snprintf(err, errlen, "cluster manifest: %s is not the %s scale the engine bound "
                   "(block %lldx%lld expected)", name, kind == W_MX ? "E8M0" : "block",
                   (long long)want_n, (long long)want_k);
          goto fail;
        }
        pb += ts->nbytes;
      }
      if (pb > mf->pair_bytes) mf->pair_bytes = pb;
      mf->total_bytes += pb;
    }
  }
  return 0;
oom:
  snprintf(err, errlen, "cluster manifest: out of memory");
fail:
  df_cluster_manifest_free(mf);
  return -1;
}

/* STATE/manifests/<hex of SHA-256(paths, sizes, mtimes, tensor count)> */
static void cache_path(const df_cluster_manifest *mf, const df_model *m, const char *state_dir,
                       char *out, size_t cap) {
  const df_st_model *st = df_model_tensors(m);
  df_proto_sha256_ctx c;
  df_proto_sha256_init(&c);
  for (int i = 0; i < df_st_file_count(st); i++) {
    char rp[PATH_MAX], line[PATH_MAX + 128];
    const char *p = df_st_file_path(st, i);
    struct stat s;
    if (!realpath(p, rp)) snprintf(rp, sizeof rp, "%s", p);
    memset(&s, 0, sizeof s);
    stat(p, &s);
    int n = snprintf(line, sizeof line, "%s|%lld|%lld.%09ld|", rp, (long long)s.st_size,
                     (long long)s.st_mtim.tv_sec, (long)s.st_mtim.tv_nsec);
    df_proto_sha256_update(&c, line, (size_t)n);
  }
  char tail[64];
  int n = snprintf(tail, sizeof tail, "pairs=%lld tpp=%d", (long long)mf->n_pairs, mf->tpp);
  df_proto_sha256_update(&c, tail, (size_t)n);
  uint8_t h[32];
  char hex[65];
  df_proto_sha256_final(&c, h);
  df_proto_hex(h, 32, hex);
  snprintf(out, cap, "%s/manifests/%s.sha256", state_dir, hex);
}

int df_cluster_manifest_hash(df_cluster_manifest *mf, const df_model *m, const char *state_dir,
                             char *err, size_t errlen) {
  if (mf->hashed) return 0;
  int64_t nt = mf->tpp * mf->n_pairs;
  char path[4400] = "";
  if (state_dir) {
    cache_path(mf, m, state_dir, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (f) {
      uint8_t *buf = malloc((size_t)(nt ? nt : 1) * 32);
      bool ok = buf && fread(buf, 32, (size_t)nt, f) == (size_t)nt && fgetc(f) == EOF;
      fclose(f);
      if (ok) {
        for (int64_t i = 0; i < nt; i++) memcpy(mf->t[i].sha256, buf + 32 * i, 32);
        free(buf);
        mf->hashed = true;
        return 0;
      }
      free(buf);
    }
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < nt; i++) df_proto_sha256(mf->data[i], mf->t[i].nbytes, mf->t[i].sha256);
  mf->hashed = true;
  if (state_dir) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/manifests", state_dir);
    uint8_t *buf = malloc((size_t)(nt ? nt : 1) * 32);
    if (buf && df_proto_state_mkdir(dir, err, errlen) == 0) {
      for (int64_t i = 0; i < nt; i++) memcpy(buf + 32 * i, mf->t[i].sha256, 32);
      df_proto_write_atomic(path, buf, (size_t)nt * 32, 0600, err, errlen); /* a cache: best effort */
    }
    free(buf);
  }
  return 0;
}

void df_cluster_manifest_free(df_cluster_manifest *mf) {
  free(mf->pairs);
  free(mf->pair_of_layer);
  free(mf->t);
  free(mf->data);
  memset(mf, 0, sizeof *mf);
}

bool df_cluster_manifest_act_ok(const df_cluster_manifest *mf, const df_k_act *a) {
  if (!a) return mf->act_kind == DF_PROTO_ACT_SILU;
  return (uint32_t)a->kind == mf->act_kind &&
         (a->kind == DF_K_ACT_SILU || (a->beta == mf->act_beta && a->beta_lin == mf->act_beta_lin));
}

const char *df_cluster_manifest_missing(const df_cluster_manifest *mf, uint32_t features) {
  uint32_t miss = mf->needs & ~features;
  if ((miss & DF_PROTO_FEAT_ACT) && (miss & DF_PROTO_FEAT_MX))
    return "SiTU experts (`act`) or MXFP4 experts (`mx32`)";
  return (miss & DF_PROTO_FEAT_ACT) ? "SiTU experts (`act`)"
         : (miss & DF_PROTO_FEAT_MX) ? "MXFP4 experts (`mx32`)" : "";
}

void df_cluster_manifest_pairs_text(const df_cluster_manifest *mf, const int64_t *idx, int64_t n,
                                    FILE *f) {
  int32_t cur_layer = -1, run_start = -1, run_end = -1;
  for (int64_t i = 0; i <= n; i++) {
    int32_t l = i < n ? mf->pairs[2 * idx[i]] : -2;
    int32_t e = i < n ? mf->pairs[2 * idx[i] + 1] : -2;
    if (l == cur_layer && e == run_end + 1) {
      run_end = e;
      continue;
    }
    if (run_start >= 0) {
      if (run_end > run_start) fprintf(f, "%d-%d", run_start, run_end);
      else fprintf(f, "%d", run_start);
    }
    if (l == -2) break;
    if (l != cur_layer) fprintf(f, "%sL%d:", cur_layer >= 0 ? " " : "", l);
    else fputc(',', f);
    cur_layer = l;
    run_start = run_end = e;
  }
}
