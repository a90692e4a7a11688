/* tools/bench/bench_engine.c — engine figures measured side by side in one run:
 * this machine's memory read bandwidth, decode ms/token with its per-part breakdown, the
 * bandwidth-utilisation ratio (weight bytes read per token / time per token / bandwidth),
 * prefill tok/s and, as its compute reference, the GFLOP/s of the engine's own bf16 linear
 * kernel on a 64-row product measured in the same run. Prints a markdown table and writes
 * JSON (--json FILE).
 *
 * usage: df-bench-engine --model DIR [--decode N] [--prefill N] [--repeat R] [--json FILE]
 *                        [--bw-mib MIB]
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/kernels/kernels.h"
#include "engine/model.h"
#include "engine/safetensors.h"
#include "engine/sampler.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A buffer of n bytes for weights (or the bandwidth probe), laid out as the engine's weight
 * mappings are: 2 MiB-aligned and advised for 2 MiB pages (df_st_advise_weights), so the
 * figures below measure the kernels over the pages a model's mapping gets. free() it. */
static void *weights_alloc(size_t n) {
  const size_t huge = (size_t)2 << 20;
  size_t sz = (n + huge - 1) / huge * huge;
  void *p = aligned_alloc(huge, sz ? sz : huge);
  if (p) df_st_advise_weights(p, sz);
  return p;
}

/* Read bandwidth: all threads sum a `mib` MiB buffer (default 1 GiB, far beyond the caches)
 * with 32-byte loads; best of `reps`. */
__attribute__((target("avx2"))) static double mem_read_gbs(int reps, int mib) {
  size_t n = (size_t)mib << 20;
  char *a = weights_alloc(n);
  if (!a) return 0;
  memset(a, 1, n);
  double best = 0;
  volatile int sink = 0;
  for (int it = 0; it < reps; it++) {
    double t = now_s();
    int total = 0;
#pragma omp parallel reduction(+ : total)
    {
      __m256i s0 = _mm256_setzero_si256(), s1 = s0;
#pragma omp for schedule(static)
      for (size_t i = 0; i < n; i += 128) {
        s0 = _mm256_add_epi32(s0, _mm256_load_si256((const __m256i *)(a + i)));
        s1 = _mm256_add_epi32(s1, _mm256_load_si256((const __m256i *)(a + i + 32)));
        s0 = _mm256_add_epi32(s0, _mm256_load_si256((const __m256i *)(a + i + 64)));
        s1 = _mm256_add_epi32(s1, _mm256_load_si256((const __m256i *)(a + i + 96)));
      }
      total += _mm256_extract_epi32(_mm256_add_epi32(s0, s1), 0);
    }
    double dt = now_s() - t;
    sink += total;
    if (n / dt / 1e9 > best) best = n / dt / 1e9;
  }
  free(a);
  return best;
}

/* The machine's fp32 fused multiply-add peak: every thread runs 12 independent chains of FMAs
 * (enough to cover the latency of two pipes) on the widest registers the kernels use (512-bit
 * under AVX-512, else 256-bit), `iters` rounds; best of `reps` in GFLOP/s (2 per lane per FMA).
 * 0 without AVX2 (the scalar kernels have no peak to compare with). */
#define PEAK_BODY(VT, SET1, FMA, LANES)                                                         \
  VT a[12];                                                                                     \
  for (int i = 0; i < 12; i++) a[i] = SET1(0.001f * (float)(i + omp_get_thread_num()));       \
  VT b = SET1(0.99999f), c = SET1(1e-7f);                                                       \
  for (long r = 0; r < iters; r++) {                                                            \
    _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = FMA(a[i], b, c);               \
  }                                                                                             \
  float o[LANES];                                                                               \
  for (int i = 1; i < 12; i++) a[0] = FMA(a[0], b, a[i]);                                       \
  memcpy(o, &a[0], sizeof o);                                                                   \
  return o[0];
__attribute__((target("avx2,fma"))) static float peak256(long iters) {
  PEAK_BODY(__m256, _mm256_set1_ps, _mm256_fmadd_ps, 8)
}
__attribute__((target("avx2,fma,avx512f"))) static float peak512(long iters) {
  PEAK_BODY(__m512, _mm512_set1_ps, _mm512_fmadd_ps, 16)
}
static double fma_peak_gflops(int reps) {
  df_isa isa = df_k_isa();
  if (isa < DF_ISA_AVX2) return 0;
  const long iters = 20000000;
  int lanes = isa >= DF_ISA_AVX512 ? 16 : 8;
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < reps; r++) {
    int nt = 1;
    double t = now_s();
#pragma omp parallel num_threads(df_k_max_threads())
    {
      float v = isa >= DF_ISA_AVX512 ? peak512(iters) : peak256(iters);
#pragma omp atomic
      sink += v;
#pragma omp single
      nt = omp_get_num_threads();
    }
    double g = (double)nt * (double)iters * 12.0 * lanes * 2.0 / (now_s() - t) / 1e9;
    if (g > best) best = g;
  }
  (void)sink;
  return best;
}
#undef PEAK_BODY

/* Compute reference for prefill: y[64, N] = x[64, K] w[N, K]^T with bf16 weights through
 * df_k_linear (the kernel every prefill product goes through), N = 8192 (a weight matrix well
 * beyond the caches, as a layer's experts are); best of `reps` GFLOP/s. */
static double gemm_gflops(int64_t K, int reps) {
  const int64_t M = 64, N = 8192;
  float *x = malloc((size_t)(M * K) * sizeof(float));
  float *y = malloc((size_t)(M * N) * sizeof(float));
  uint16_t *w = weights_alloc((size_t)(N * K) * sizeof(uint16_t));
  double best = 0;
  if (!x || !y || !w) goto done;
  for (int64_t i = 0; i < M * K; i++) x[i] = (float)((i % 17) - 8) * 0.0625f;
  for (int64_t i = 0; i < N * K; i++) w[i] = (uint16_t)(0x3c00 + (i % 251)); /* small normals */
  df_k_linear(x, M, K, K, w, DF_DT_BF16, N, NULL, y, N); /* warm-up: pages, threads */
  for (int r = 0; r < reps; r++) {
    double t = now_s();
    df_k_linear(x, M, K, K, w, DF_DT_BF16, N, NULL, y, N);
    double g = 2.0 * (double)M * (double)N * (double)K / (now_s() - t) / 1e9;
    if (g > best) best = g;
  }
done:
  free(x);
  free(y);
  free(w);
  return best;
}

/* Kimi K3's decode-time expert products: n_exp routed experts (w1, w3 [3072, 3584], w2 [3584,
 * 3072] in MXFP4: 17,547,264 packed + scale bytes each, the real sizes) with one row each
 * through df_t_glu_ffn_groups (SiTU), as one MoE layer of one decoded token runs them; random
 * codes, scales near 2^-7. Each pass is one layer and uses the next of MX_SETS sets of
 * experts (1.1 GB in all for 16 experts), so a pass's bytes were last touched 840 MB earlier:
 * they come from memory, not from a last-level cache of a few hundred MB, as a real model's
 * 60 layers' experts do. Returns the best GB/s of packed + scale bytes over `reps` passes
 * after one warm-up round (0 on allocation failure). *ms gets the best time per layer. */
enum { MX_SETS = 4 };
static double mxfp4_expert_gbs(int n_exp, int reps, double *ms) {
  enum { I = 3072, Z = 3584 };
  int64_t sh_gu[2] = {I, Z}, sh_d[2] = {Z, I}, sc_gu[2] = {I, Z / 32}, sc_d[2] = {Z, I / 32};
  int64_t per = (int64_t)I * Z / 2 * 3 + (int64_t)I * (Z / 32) * 2 + (int64_t)Z * (I / 32);
  int n_all = n_exp * MX_SETS;
  uint8_t *bytes = weights_alloc((size_t)(per * n_all));
  df_t_tensor *w[16 * MX_SETS][6] = {{0}}, *x = NULL, *g = NULL, *u = NULL, *y = NULL;
  char err[256];
  double best = 0;
  if (!bytes || n_exp > 16) goto done;
  for (int64_t i = 0; i < per * n_all; i++) bytes[i] = (uint8_t)(i * 2654435761u >> 13);
  int64_t rows[2] = {n_exp, Z}, rows_i[2] = {n_exp, I};
  if (!(x = df_t_new_f32(2, rows, err, sizeof err)) || !(y = df_t_new_f32(2, rows, err, sizeof err)) ||
      !(g = df_t_new_f32(2, rows_i, err, sizeof err)) || !(u = df_t_new_f32(2, rows_i, err, sizeof err)))
    goto done;
  for (int64_t i = 0; i < n_exp * Z; i++) df_t_f32(x)[i] = (float)((i % 13) - 6) * 0.125f;
  const df_t_tensor *gate[16 * MX_SETS], *up[16 * MX_SETS], *down[16 * MX_SETS];
  int64_t off[17];
  for (int e = 0; e < n_all; e++) {
    uint8_t *p = bytes + per * e;
    for (int m = 0; m < 3; m++) { /* packed: w1, w3 [I, Z/2], w2 [Z, I/2]; then the scales */
      const int64_t *sh = m < 2 ? sh_gu : sh_d, *sc = m < 2 ? sc_gu : sc_d;
      uint8_t *s = p + sh[0] * sh[1] / 2;
      for (int64_t i = 0; i < sc[0] * sc[1]; i++) s[i] = (uint8_t)(120 + i % 4);
      if (!(w[e][m] = df_t_wrap(p, DF_DT_F4, 2, sh, err, sizeof err)) ||
          !(w[e][3 + m] = df_t_wrap(s, DF_DT_U8, 2, sc, err, sizeof err)) ||
          df_t_set_mx_scale(w[e][m], w[e][3 + m], err, sizeof err) != 0)
        goto done;
      p = s + sc[0] * sc[1];
    }
    gate[e] = w[e][0];
    up[e] = w[e][1];
    down[e] = w[e][2];
  }
  for (int e = 0; e <= n_exp; e++) off[e] = e;
  df_k_act act = {.kind = DF_K_ACT_SITU, .beta = 4.0f, .beta_lin = 25.0f};
  for (int r = 0; r < MX_SETS + reps; r++) { /* the first round warms pages and threads */
    int set = r % MX_SETS;
    double t = now_s();
    df_t_glu_ffn_groups(x, n_exp, off, gate + set * n_exp, up + set * n_exp, down + set * n_exp,
                        &act, g, u, y);
    double dt = now_s() - t;
    if (r >= MX_SETS && (double)(per * n_exp) / dt / 1e9 > best) {
      best = (double)(per * n_exp) / dt / 1e9;
      *ms = dt * 1e3;
    }
  }
done:
  for (int e = 0; e < 16 * MX_SETS; e++)
    for (int m = 0; m < 6; m++) df_t_destroy(&w[e][m]);
  df_t_destroy(&x);
  df_t_destroy(&y);
  df_t_destroy(&g);
  df_t_destroy(&u);
  free(bytes);
  return best;
}

int main(int argc, char **argv) {
  const char *model_dir = NULL, *json_path = NULL;
  int n_decode = 32, n_prefill = 128, repeat = 3, bw_mib = 1024;
  static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                       {"decode", required_argument, 0, 'd'},
                                       {"prefill", required_argument, 0, 'p'},
                                       {"repeat", required_argument, 0, 'r'},
                                       {"json", required_argument, 0, 'j'},
                                       {"bw-mib", required_argument, 0, 'b'},
                                       {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'm': model_dir = optarg; break;
    case 'd': n_decode = atoi(optarg); break;
    case 'p': n_prefill = atoi(optarg); break;
    case 'r': repeat = atoi(optarg); break;
    case 'j': json_path = optarg; break;
    case 'b': bw_mib = atoi(optarg); break;
    default: fprintf(stderr, "usage: df-bench-engine --model DIR [--decode N] [--prefill N] "
                     "[--repeat R] [--json FILE] [--bw-mib MIB]\n"); return 2;
    }
  }
  if (!model_dir || n_decode < 2 || n_prefill < 1 || repeat < 1 || bw_mib < 16 || bw_mib > 65536) {
    fprintf(stderr, "df-bench-engine: --model DIR is required; counts must be positive\n");
    return 2;
  }
  char err[1024];
  df_model *m = NULL;
  df_model_opts mo = {.max_ctx = (n_prefill > 8 ? n_prefill : 8) + n_decode + 16,
                      .max_rows = n_prefill > 8 ? n_prefill : 8};
  fprintf(stderr, "bench: loading %s\n", model_dir);
  if (df_model_load(model_dir, &mo, &m, err, sizeof err) != 0) {
    fprintf(stderr, "df-bench-engine: %s\n", err);
    return 1;
  }
  const df_model_config *cfg = df_model_cfg(m);
  df_model_bytes mb = df_model_memory(m);
  int64_t V = cfg->vocab_size;
  float *logits = malloc((size_t)V * sizeof(float));
  int n_ids = n_prefill > 8 ? n_prefill : 8; /* the decode runs start from an 8-token prompt */
  int32_t *ids = malloc((size_t)n_ids * sizeof *ids);
  for (int i = 0; i < n_ids; i++) ids[i] = (int32_t)((i * 7919 + 13) % V);

  fprintf(stderr, "bench: memory read bandwidth\n");
  double bw = mem_read_gbs(5, bw_mib);

  /* the KV cache of the timed runs (decode, then prefill) */
  df_kv_cache *kv = df_model_kv_new(m, 0, err, sizeof err);
  if (!kv) {
    fprintf(stderr, "df-bench-engine: %s\n", err);
    return 1;
  }
  /* warm-up: one untimed decode pass, so that the timed ones find the weight pages a decode
   * step reads already mapped into this process (a first pass pays a minor page fault per 4 KB
   * of weights it touches first: ~100k for bench2g) */
  df_kv_truncate(kv, 0);
  if (df_model_forward(m, kv, ids, 8, DF_LOGITS_LAST, logits, err, sizeof err) != 0) goto fail;
  for (int i = 0; i < n_decode; i++) {
    int32_t tok = df_argmax_f32(logits, V);
    if (df_model_forward(m, kv, &tok, 1, DF_LOGITS_LAST, logits, err, sizeof err) != 0) goto fail;
  }
  fprintf(stderr, "bench: decode (%d tokens x %d)\n", n_decode, repeat);
  double best_decode = 1e9;
  df_model_profile best_prof = {0};
  for (int r = 0; r < repeat; r++) {
    df_kv_truncate(kv, 0);
    df_model_profile_enable(m, false);
    if (df_model_forward(m, kv, ids, 8, DF_LOGITS_LAST, logits, err, sizeof err) != 0) goto fail;
    df_model_profile_enable(m, true);
    double t = now_s();
    for (int i = 0; i < n_decode; i++) {
      int32_t tok = df_argmax_f32(logits, V);
      if (df_model_forward(m, kv, &tok, 1, DF_LOGITS_LAST, logits, err, sizeof err) != 0) goto fail;
    }
    double dt = (now_s() - t) / n_decode;
    if (dt < best_decode) {
      best_decode = dt;
      best_prof = df_model_profile_get(m);
    }
  }
  df_model_profile_enable(m, false);
  fprintf(stderr, "bench: prefill (%d tokens x %d)\n", n_prefill, repeat);
  double best_prefill = 1e9;
  df_model_profile pre_prof = {0};
  for (int r = 0; r < repeat; r++) {
    df_kv_truncate(kv, 0);
    df_model_profile_enable(m, true); /* resets the counters */
    double t = now_s();
    if (df_model_forward(m, kv, ids, n_prefill, DF_LOGITS_LAST, logits, err, sizeof err) != 0)
      goto fail;
    double dt = now_s() - t;
    if (dt < best_prefill) {
      best_prefill = dt;
      pre_prof = df_model_profile_get(m);
    }
  }
  df_model_profile_enable(m, false);
  fprintf(stderr, "bench: bf16 linear kernel, 64 rows\n");
  double gemm = gemm_gflops(cfg->hidden_size, 2 + repeat);
  fprintf(stderr, "bench: fp32 FMA peak\n");
  double peak = fma_peak_gflops(3);
  double mx_ms = 0, mx_gbs = 0; /* MXFP4 models: K3's real expert products */
  if (cfg->quant == DF_QUANT_MXFP4) {
    fprintf(stderr, "bench: MXFP4 expert FFN at Kimi K3's size\n");
    mx_gbs = mxfp4_expert_gbs(16, 2 * MX_SETS * repeat, &mx_ms);
  }
  double gbs = (double)mb.active_per_token / best_decode / 1e9;
  double ratio = gbs / bw;
  /* FLOPs: 2 per weight a token reads; lm_head runs for the last prompt position only */
  double flop_tok = 2.0 * (double)mb.active_per_token / (double)df_dtype_size(DF_DT_BF16);
  double lm_flop = 2.0 * (double)V * (double)cfg->hidden_size;
  double prefill_tps = n_prefill / best_prefill;
  double prefill_gf = ((flop_tok - lm_flop) * n_prefill + lm_flop) / best_prefill / 1e9;
  double tot = best_prof.attention + best_prof.router + best_prof.experts + best_prof.combine +
               best_prof.dense_mlp + best_prof.lm_head + best_prof.embed + best_prof.residual;
#define PCT(x) (tot > 0 ? 100.0 * (x) / tot : 0.0)
  printf("| figure | value |\n|---|---|\n");
  printf("| model | %s (%s, %lld layers, hidden %lld, %lld experts top-%lld) |\n", model_dir,
         cfg->model_type, (long long)cfg->num_hidden_layers, (long long)cfg->hidden_size,
         (long long)cfg->num_experts, (long long)cfg->num_experts_per_tok);
  printf("| kernels | %s, %d threads |\n", df_k_isa_name(df_k_isa()), omp_get_max_threads());
  printf("| memory read bandwidth | %.2f GB/s |\n", bw);
  printf("| weight bytes read per decoded token | %.1f MB |\n", mb.active_per_token / 1e6);
  printf("| decode | %.2f ms/token (%.2f tok/s) |\n", best_decode * 1e3, 1.0 / best_decode);
  printf("| decode weight streaming | %.2f GB/s = %.2f of bandwidth |\n", gbs, ratio);
  printf("| prefill (%d tokens) | %.1f tok/s, %.1f GFLOP/s |\n", n_prefill, prefill_tps,
         prefill_gf);
  printf("| bf16 linear kernel, 64 rows | %.1f GFLOP/s (prefill reaches %.2f of it) |\n", gemm,
         gemm > 0 ? prefill_gf / gemm : 0.0);
  printf("| fp32 FMA peak (%s registers, %d threads) | %.1f GFLOP/s; prefill reaches %.2f of it, "
         "the 64-row bf16 linear %.2f |\n", df_k_isa() >= DF_ISA_AVX512 ? "512-bit" : "256-bit",
         df_k_max_threads(), peak, peak > 0 ? prefill_gf / peak : 0.0, peak > 0 ? gemm / peak : 0.0);
  if (cfg->quant == DF_QUANT_MXFP4)
    printf("| MXFP4 expert FFN, Kimi K3 size (16 experts x 3 matrices, 1 row each, SiTU) | "
           "%.2f ms per layer, %.2f GB/s of packed + scale bytes = %.2f of bandwidth |\n", mx_ms,
           mx_gbs, bw > 0 ? mx_gbs / bw : 0.0);
  printf("| decode breakdown | attention %.0f%%, router %.0f%%, experts %.0f%%, combine %.0f%%, "
         "dense MLP %.0f%%, lm_head %.0f%%, embed %.0f%%, residual (norms%s) %.0f%% |\n",
         PCT(best_prof.attention), PCT(best_prof.router), PCT(best_prof.experts),
         PCT(best_prof.combine), PCT(best_prof.dense_mlp), PCT(best_prof.lm_head),
         PCT(best_prof.embed), cfg->attn_res_block > 0 ? ", Attention Residuals' mixes" : "",
         PCT(best_prof.residual));
  double ptot = pre_prof.attention + pre_prof.router + pre_prof.experts + pre_prof.combine +
                pre_prof.dense_mlp + pre_prof.lm_head + pre_prof.embed + pre_prof.residual;
#define PPCT(x) (ptot > 0 ? 100.0 * (x) / ptot : 0.0)
  printf("| prefill breakdown (%d tokens) | attention %.0f%%, router %.0f%%, experts %.0f%%, "
         "combine %.0f%%, dense MLP %.0f%%, lm_head %.0f%%, embed %.0f%%, residual %.0f%% |\n",
         n_prefill, PPCT(pre_prof.attention), PPCT(pre_prof.router), PPCT(pre_prof.experts),
         PPCT(pre_prof.combine), PPCT(pre_prof.dense_mlp), PPCT(pre_prof.lm_head),
         PPCT(pre_prof.embed), PPCT(pre_prof.residual));
#undef PPCT
  if (json_path) {
    FILE *f = fopen(json_path, "w");
    if (!f) {
      fprintf(stderr, "df-bench-engine: cannot write %s\n", json_path);
      goto fail_quiet;
    }
    fprintf(f,
            "{\n  \"model\": \"%s\",\n  \"isa\": \"%s\",\n  \"threads\": %d,\n"
            "  \"mem_read_gbs\": %.4f,\n  \"mem_read_mib\": %d,\n  \"active_bytes_per_token\": %llu,\n"
            "  \"decode_ms_per_token\": %.4f,\n  \"decode_weight_gbs\": %.4f,\n"
            "  \"bandwidth_utilisation\": %.4f,\n  \"prefill_tokens\": %d,\n"
            "  \"prefill_tok_s\": %.3f,\n  \"prefill_gflops\": %.3f,\n"
            "  \"gemm64_gflops\": %.3f,\n  \"fma_peak_gflops\": %.3f,\n"
            "  \"prefill_fraction_of_peak\": %.4f,\n  \"decode_tokens\": %d,\n  \"repeat\": %d,\n"
            "  \"total_bytes\": %llu,\n  \"layers\": %lld,\n  \"hidden\": %lld,\n"
            "  \"experts\": %lld,\n  \"top_k\": %lld,\n  \"moe_intermediate\": %lld,\n"
            "  \"vocab\": %lld,\n  \"mxfp4_expert_gbs\": %.4f,\n"
            "  \"decode_breakdown_s_per_token\": {\"attention\": %.6f, \"router\": %.6f, "
            "\"experts\": %.6f, \"combine\": %.6f, \"dense_mlp\": %.6f, \"lm_head\": %.6f, "
            "\"embed\": %.6f, \"residual\": %.6f},\n"
            "  \"prefill_breakdown_s\": {\"attention\": %.6f, \"router\": %.6f, "
            "\"experts\": %.6f, \"combine\": %.6f, \"dense_mlp\": %.6f, \"lm_head\": %.6f, "
            "\"embed\": %.6f, \"residual\": %.6f}\n}\n",
            model_dir, df_k_isa_name(df_k_isa()), omp_get_max_threads(), bw, bw_mib,
            (unsigned long long)mb.active_per_token, best_decode * 1e3, gbs, ratio, n_prefill,
            prefill_tps, prefill_gf, gemm, peak, peak > 0 ? prefill_gf / peak : 0.0, n_decode,
            repeat,
            (unsigned long long)mb.total, (long long)cfg->num_hidden_layers,
            (long long)cfg->hidden_size, (long long)cfg->num_experts,
            (long long)cfg->num_experts_per_tok, (long long)cfg->moe_intermediate_size,
            (long long)cfg->vocab_size, mx_gbs, best_prof.attention / n_decode,
            best_prof.router / n_decode, best_prof.experts / n_decode,
            best_prof.combine / n_decode, best_prof.dense_mlp / n_decode,
            best_prof.lm_head / n_decode, best_prof.embed / n_decode,
            best_prof.residual / n_decode, pre_prof.attention, pre_prof.router,
            pre_prof.experts, pre_prof.combine, pre_prof.dense_mlp, pre_prof.lm_head,
            pre_prof.embed, pre_prof.residual);
    fclose(f);
  }
  df_kv_destroy(&kv);
  df_model_destroy(&m);
  free(logits);
  free(ids);
  return 0;
fail:
  fprintf(stderr, "df-bench-engine: %s\n", err);
fail_quiet:
  df_kv_destroy(&kv);
  df_model_destroy(&m);
  return 1;
}
