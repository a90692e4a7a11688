/* coordinator/hub/stream.c — the streaming expert backend; see stream.h.
 *
 * One slot per (MoE layer, expert): where its tensors live in the remote shards (gate, up,
 * down weights, and for FP8 experts their F32 `weight_scale_inv` block scales, for MXFP4
 * experts (Kimi K3) their U8 `weight_packed` E2M1 pairs and U8 `weight_scale` E8M0 scales,
 * all of which pull --stream leaves as holes), how they are laid out in its cache blob (file
 * order, so adjacent tensors come in one request: a K3 expert's six tensors are contiguous,
 * one request), and tensor views over the blob while it is mapped, FP8 and MXFP4 views
 * carrying their scales so df_t_glu_ffn de-quantises inside its kernels.
 * Experts of shards that were downloaded in full are computed from the local mapping, like
 * the local backend.
 */
#define _GNU_SOURCE
#include "coordinator/hub/stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "coordinator/hub/pull_http.h"
#include "coordinator/hub/pull_manifest.h"
#include "coordinator/hub/pull_util.h"
#include "coordinator/hub/stream_cache.h"
#include "engine/experts/expert_local.h"
#include "engine/tensor/torch_shim.h"

typedef struct piece {
  int file;            /* index into the backend's remote file table */
  uint64_t off, len;   /* bytes in that file */
  uint64_t blob_off;   /* where the bytes sit in the expert's blob */
  int which;           /* 0 gate, 1 up, 2 down; 3..5 their FP8 / MXFP4 scales */
} piece;

#define MAX_PIECES 6

typedef struct slot {
  bool remote;               /* false: the shard is complete locally */
  char key[72];              /* cache key: SHA-256 of where the bytes come from */
  int n_pc;                  /* 3, or 6 for FP8 and MXFP4 experts */
  bool mx;                   /* MXFP4: views 0..2 are F4 with E8M0 scales 3..5 */
  piece pc[MAX_PIECES];      /* in file order */
  uint64_t bytes;            /* blob size */
  df_dtype dt[MAX_PIECES];   /* by `which` */
  int ndim[MAX_PIECES];
  int64_t shape[MAX_PIECES][2];
  int64_t bn, bk;            /* FP8 block size (n_pc == 6, !mx) */
  const void *base;          /* blob mapping the views below were made for */
  df_t_tensor *view[MAX_PIECES]; /* gate, up, down (+ scales) over `base` */
} slot;

typedef struct rfile {
  char url[4400];
} rfile;

typedef struct stream_be {
  df_expert_backend base;
  df_model *m;
  int n_layers, n_experts;
  slot *slots;                /* [n_layers * n_experts] */
  rfile *files;
  int n_files;
  df_stream_cache *cache;
  df_pull_net net;
  void *http;
  uint8_t *buf;               /* [max_bytes] fetch buffer */
  uint64_t max_bytes;
  bool offline, stats;
  df_t_tensor *g, *u;         /* [max_rows, moe_intermediate] fp32 scratch */
  uint64_t fetches, fetched_bytes, requests;
} stream_be;

static void stream_destroy(df_expert_backend *be) {
  stream_be *s = (stream_be *)be;
  if (s->stats && s->cache) {
    df_stream_cache_stats st = df_stream_cache_get_stats(s->cache);
    char a[32], b[32];
    fprintf(stderr, "stream: %llu expert fetches (%llu requests, %s), %llu cache hits, %llu "
            "evictions, cache %s\n", (unsigned long long)s->fetches,
            (unsigned long long)s->requests, df_pull_fmt_bytes(s->fetched_bytes, a, sizeof a),
            (unsigned long long)st.hits, (unsigned long long)st.evictions,
            df_pull_fmt_bytes(df_stream_cache_bytes(s->cache), b, sizeof b));
  }
  if (s->slots)
    for (int i = 0; i < s->n_layers * s->n_experts; i++)
      for (int k = 0; k < MAX_PIECES; k++) df_t_destroy(&s->slots[i].view[k]);
  free(s->slots);
  free(s->files);
  df_stream_cache_close(&s->cache);
  df_pull_http_handle_destroy(&s->http);
  free(s->buf);
  df_t_destroy(&s->g);
  df_t_destroy(&s->u);
  free(s);
}

/* Make sure slot `sl` has views over its cached bytes; fetch them on a miss. */
static int ensure(stream_be *s, slot *sl, int layer, int expert, char *err, size_t errlen) {
  const void *data = NULL;
  uint64_t len = 0;
  char e2[1024];
  int r = df_stream_cache_get(s->cache, sl->key, &data, &len, e2, sizeof e2);
  if (r < 0) {
    snprintf(err, errlen, "stream: layer %d expert %d: %s", layer, expert, e2);
    return -1;
  }
  if (r == 0) {
    if (s->offline) {
      snprintf(err, errlen, "stream: layer %d expert %d is not in the expert cache and offline "
               "mode is on (HF_HUB_OFFLINE/DELTAFIN_OFFLINE); run once online to fetch it",
               layer, expert);
      return -1;
    }
    /* one request per run of adjacent pieces */
    for (int k = 0; k < sl->n_pc;) {
      int j = k + 1;
      uint64_t run = sl->pc[k].len;
      while (j < sl->n_pc && sl->pc[j].file == sl->pc[k].file &&
             sl->pc[j].off == sl->pc[j - 1].off + sl->pc[j - 1].len) {
        run += sl->pc[j].len;
        j++;
      }
      const rfile *f = &s->files[sl->pc[k].file];
      s->requests++;
      if (df_pull_http_get_range(&s->net, s->http, f->url, sl->pc[k].off, run,
                                 s->buf + sl->pc[k].blob_off, e2, sizeof e2) != 0) {
        snprintf(err, errlen, "stream: layer %d expert %d: fetching %llu bytes: %s", layer,
                 expert, (unsigned long long)run, e2);
        return -1;
      }
      k = j;
    }
    if (df_stream_cache_put(s->cache, sl->key, s->buf, sl->bytes, &data, e2, sizeof e2) != 0) {
      snprintf(err, errlen, "stream: layer %d expert %d: %s", layer, expert, e2);
      return -1;
    }
    s->fetches++;
    s->fetched_bytes += sl->bytes;
  }
  if (data != sl->base || !sl->view[0]) {
    for (int k = 0; k < MAX_PIECES; k++) df_t_destroy(&sl->view[k]);
    sl->base = NULL;
    for (int k = 0; k < sl->n_pc; k++) {
      const piece *p = &sl->pc[k];
      int w = p->which;
      sl->view[w] = df_t_wrap((const uint8_t *)data + p->blob_off, sl->dt[w], sl->ndim[w],
                              sl->shape[w], e2, sizeof e2);
      if (!sl->view[w]) {
        snprintf(err, errlen, "stream: layer %d expert %d: %s", layer, expert, e2);
        return -1;
      }
    }
    for (int k = 0; k < 3 && sl->n_pc == MAX_PIECES; k++)
      if ((sl->mx ? df_t_set_mx_scale(sl->view[k], sl->view[3 + k], e2, sizeof e2)
                  : df_t_set_block_scale(sl->view[k], sl->view[3 + k], sl->bn, sl->bk, e2,
                                         sizeof e2)) != 0) {
        snprintf(err, errlen, "stream: layer %d expert %d: %s", layer, expert, e2);
        return -1;
      }
    sl->base = data;
  }
  return 0;
}

static int stream_run(df_expert_backend *be, const df_expert_request *req, char *err,
                      size_t errlen) {
  stream_be *s = (stream_be *)be;
  for (int gi = 0; gi < req->n_groups; gi++) {
    int l = req->layer, e = req->experts[gi];
    const df_t_tensor *gate, *up, *down;
    if (l < 0 || l >= s->n_layers || e < 0 || e >= s->n_experts ||
        df_model_expert_weights(s->m, l, e, &gate, &up, &down) != 0) {
      snprintf(err, errlen, "stream: layer %d expert %d does not exist", l, e);
      return -1;
    }
    slot *sl = &s->slots[l * s->n_experts + e];
    if (sl->remote) {
      if (ensure(s, sl, l, e, err, errlen) != 0) return -1;
      gate = sl->view[0];
      up = sl->view[1];
      down = sl->view[2];
    }
    if (df_expert_check_scales(req->layer, (int)e, gate, up, down, err, errlen) != 0) return -1;
    int64_t r0 = req->offsets[gi], rows = req->offsets[gi + 1] - r0;
    if (rows > df_t_size(s->g, 0)) {
      snprintf(err, errlen, "stream: group of %lld rows exceeds the planned %lld",
               (long long)rows, (long long)df_t_size(s->g, 0));
      return -1;
    }
    df_t_glu_ffn(req->x, r0, rows, gate, up, down, req->act, s->g, s->u, req->y);
  }
  return 0;
}

static const df_expert_backend_ops stream_ops = {"stream", stream_run, stream_destroy};

static bool env_on(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") && strcasecmp(v, "false") && strcasecmp(v, "no");
}

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

int df_stream_attach(df_model *m, const char *dir, const df_stream_opts *opts, char *err,
                     size_t errlen) {
  df_stream_opts o = opts ? *opts : (df_stream_opts){0};
  df_pull_manifest man;
  int mr = df_pull_manifest_read(dir, &man, err, errlen);
  if (mr != 0 || !man.stream) {
    df_pull_manifest_free(&man);
    return mr < 0 ? -1 : 0;
  }
  int rc = -1;
  stream_be *s = calloc(1, sizeof *s);
  const df_model_config *cfg = df_model_cfg(m);
  const df_st_model *st = df_model_tensors(m);
  if (!s) goto oom;
  s->base.ops = &stream_ops;
  s->base.impl = s;
  s->m = m;
  s->n_layers = (int)cfg->num_hidden_layers;
  s->n_experts = (int)cfg->num_experts;
  s->offline = o.offline == 1 || env_on("HF_HUB_OFFLINE") || env_on("DELTAFIN_OFFLINE");
  s->stats = o.stats || env_on("DELTAFIN_STREAM_STATS");
  df_pull_net_defaults(&s->net);
  const char *ep = getenv("HF_ENDPOINT");
  if (!ep || !*ep) snprintf(s->net.endpoint, sizeof s->net.endpoint, "%s", man.endpoint);
  /* remote file table: the shards of this model, by file index */
  s->n_files = df_st_file_count(st);
  s->files = calloc((size_t)(s->n_files ? s->n_files : 1), sizeof *s->files);
  s->slots = calloc((size_t)(s->n_layers * s->n_experts > 0 ? s->n_layers * s->n_experts : 1),
                    sizeof *s->slots);
  if (!s->files || !s->slots) goto oom;
  const df_pull_mfile **mf = calloc((size_t)(s->n_files ? s->n_files : 1), sizeof *mf);
  if (!mf) goto oom;
  for (int i = 0; i < s->n_files; i++) {
    const char *bn = base_name(df_st_file_path(st, i));
    mf[i] = df_pull_manifest_find(&man, bn);
    if (mf[i] && mf[i]->sparse &&
        df_pull_resolve_url(s->net.endpoint, man.repo, man.commit, bn, s->files[i].url,
                            sizeof s->files[i].url) != 0) {
      snprintf(err, errlen, "stream: URL too long for %s", bn);
      free(mf);
      goto done;
    }
  }
  int n_remote = 0;
  for (int l = 0; l < s->n_layers; l++) {
    for (int e = 0; e < s->n_experts; e++) {
      const df_t_tensor *w3[3];
      if (df_model_expert_weights(m, l, e, &w3[0], &w3[1], &w3[2]) != 0) continue;
      slot *sl = &s->slots[l * s->n_experts + e];
      const df_st_tensor *t[MAX_PIECES];
      const df_t_tensor *sc[3] = {NULL, NULL, NULL};
      bool any_sparse = false;
      /* FP8: `<w>.weight` + `<w>.weight_scale_inv`; MXFP4 (compressed-tensors, Kimi K3):
       * `<w>.weight_packed` + `<w>.weight_scale`, no `<w>.weight` in the checkpoint */
      sl->mx = df_t_dtype(w3[0]) == DF_DT_F4;
      sl->n_pc = df_t_dtype(w3[0]) == DF_DT_F8_E4M3 || sl->mx ? MAX_PIECES : 3;
      for (int k = 0; k < sl->n_pc; k++) {
        char nm[256];
        const void *bound = NULL;
        if (k < 3) {
          bound = df_t_data(w3[k]);
          df_model_expert_tensor_name(m, l, e, k, nm, sizeof nm);
          if (sl->mx) strncat(nm, "_packed", sizeof nm - strlen(nm) - 1);
        } else if (sl->mx) {
          sc[k - 3] = df_t_block_scale(w3[k - 3], NULL, NULL);
          if (sc[k - 3]) bound = df_t_data(sc[k - 3]);
          df_model_expert_tensor_name(m, l, e, k - 3, nm, sizeof nm);
          strncat(nm, "_scale", sizeof nm - strlen(nm) - 1);
        } else {
          int64_t bn = 0, bk = 0;
          sc[k - 3] = df_t_block_scale(w3[k - 3], &bn, &bk);
          if (sc[k - 3]) bound = df_t_data(sc[k - 3]);
          if (k > 3 && (bn != sl->bn || bk != sl->bk)) bound = NULL;
          sl->bn = bn, sl->bk = bk;
          char wn[224];
          df_model_expert_tensor_name(m, l, e, k - 3, wn, sizeof wn);
          snprintf(nm, sizeof nm, "%s_scale_inv", wn);
        }
        t[k] = df_st_find(st, nm);
        if (!t[k] || !bound || t[k]->data != bound || t[k]->ndim != 2) {
          snprintf(err, errlen, "stream: %s: not found as the engine bound it", nm);
          free(mf);
          goto done;
        }
        any_sparse |= mf[t[k]->file_index] && mf[t[k]->file_index]->sparse;
      }
      if (!any_sparse) continue; /* complete locally: computed from the mapping */
      for (int k = 0; k < sl->n_pc; k++) {
        const df_pull_mfile *f = mf[t[k]->file_index];
        if (!f || !f->sparse) {
          snprintf(err, errlen, "stream: layer %d expert %d spans a complete and a stream-mode "
                   "shard; pull the folder again", l, e);
          free(mf);
          goto done;
        }
        sl->pc[k] = (piece){.file = t[k]->file_index, .off = t[k]->file_offset,
                            .len = t[k]->nbytes, .which = k};
        sl->dt[k] = t[k]->dtype;
        sl->ndim[k] = 2;
        sl->shape[k][0] = t[k]->shape[0];
        sl->shape[k][1] = t[k]->shape[1];
        if (sl->mx && k < 3) { /* the packed pairs viewed as the F4 weight they hold */
          sl->dt[k] = DF_DT_F4;
          sl->shape[k][0] = df_t_size(w3[k], 0);
          sl->shape[k][1] = df_t_size(w3[k], 1);
        }
      }
      /* blob layout in file order */
      for (int a = 1; a < sl->n_pc; a++)
        for (int b = a; b > 0 && (sl->pc[b].file < sl->pc[b - 1].file ||
                                  (sl->pc[b].file == sl->pc[b - 1].file &&
                                   sl->pc[b].off < sl->pc[b - 1].off)); b--) {
          piece tmp = sl->pc[b];
          sl->pc[b] = sl->pc[b - 1];
          sl->pc[b - 1] = tmp;
        }
      char desc[1024];
      size_t dn = 0;
      for (int k = 0; k < sl->n_pc; k++) {
        /* FP8 slots: a piece that does not continue the previous one's file bytes starts at a
         * blob offset congruent to its file offset mod 16, so the F32 scales keep the
         * alignment they have in the checkpoint's mapping (3-piece slots and MXFP4 slots,
         * all U8 bytes, keep their packed layout, and their cache keys) */
        bool cont = k > 0 && sl->pc[k].file == sl->pc[k - 1].file &&
                    sl->pc[k].off == sl->pc[k - 1].off + sl->pc[k - 1].len;
        if (sl->n_pc == MAX_PIECES && !sl->mx && !cont)
          sl->bytes += (sl->pc[k].off - sl->bytes) & 15;
        sl->pc[k].blob_off = sl->bytes;
        sl->bytes += sl->pc[k].len;
        dn += (size_t)snprintf(desc + dn, sizeof desc - dn, "%s:%llu:%llu;",
                               mf[sl->pc[k].file]->lfs_sha256[0] ? mf[sl->pc[k].file]->lfs_sha256
                                                                 : man.commit,
                               (unsigned long long)sl->pc[k].off,
                               (unsigned long long)sl->pc[k].len);
      }
      df_pull_sha256_buf(desc, strlen(desc), sl->key);
      sl->remote = true;
      if (sl->bytes > s->max_bytes) s->max_bytes = sl->bytes;
      n_remote++;
    }
  }
  free(mf);
  if (n_remote == 0) { /* nothing streamed: the local backend is right */
    stream_destroy(&s->base);
    df_pull_manifest_free(&man);
    return 0;
  }
  uint64_t budget = o.budget;
  const char *eb = getenv("DELTAFIN_STREAM_BUDGET");
  if (!budget && eb && *eb && df_pull_parse_bytes(eb, &budget) != 0) {
    snprintf(err, errlen, "DELTAFIN_STREAM_BUDGET='%s': expected a size like 8G", eb);
    goto done;
  }
  if (!budget) budget = man.cache_budget;
  if (budget < s->max_bytes) {
    char a[32], b[32];
    snprintf(err, errlen, "stream: the expert cache budget of %s is smaller than one expert "
             "(%s); raise it (DELTAFIN_STREAM_BUDGET or pull --cache-budget)",
             df_pull_fmt_bytes(budget, a, sizeof a), df_pull_fmt_bytes(s->max_bytes, b, sizeof b));
    goto done;
  }
  char cdir[4200];
  snprintf(cdir, sizeof cdir, "%s/.deltafin/experts", dir);
  if (df_stream_cache_open(cdir, budget, &s->cache, err, errlen) != 0) goto done;
  if (!(s->buf = calloc(1, s->max_bytes ? s->max_bytes : 1))) goto oom;
  if (!s->offline && !(s->http = df_pull_http_handle_new())) goto oom;
  int64_t I = cfg->moe_intermediate_size > 0 ? cfg->moe_intermediate_size : 1;
  int64_t shape[2] = {df_model_max_rows(m), I};
  if (!(s->g = df_t_new_f32(2, shape, err, errlen)) ||
      !(s->u = df_t_new_f32(2, shape, err, errlen)))
    goto done;
  df_model_set_expert_backend(m, &s->base);
  s = NULL;
  rc = 0;
  goto done;
oom:
  snprintf(err, errlen, "stream: out of memory");
done:
  if (s) stream_destroy(&s->base);
  df_pull_manifest_free(&man);
  return rc;
}
