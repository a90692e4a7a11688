/* tests/test_device.c — the torch compute path (torch_shim.h df_tm_*) and device placement
 * (engine/model.c + engine/device/admission.c), exercised on the CPU through the test-only device
 * "torch-cpu": the same at:: operator code that runs on a CUDA device, with at::kCPU.
 *
 * Fixtures: tests/fixtures/tiny-NAME (golden logits of tests/reference/qwen3_ref.py in fp32
 * mode). Tolerance: 1e-3 absolute on the logits, as test_engine's golden test (fp32
 * activations over the same stored weights; the torch path differs from the reference only
 * by fp32 summation order), and identical greedy ids.
 * DF_TEST_DEVICE=cuda[:N] runs the same checks on a GPU (tools/gpu/check.sh does); the
 * default is torch-cpu.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/golden.h"

#include "engine/device/admission.h"
#include "engine/device/cuda_rt.h"
#include "engine/model.h"
#include "engine/tensor/torch_shim.h"

#define LOGIT_TOL 1e-3f

/* The device under test: $DF_TEST_DEVICE, default torch-cpu. */
static const char *test_device(void) {
  const char *d = getenv("DF_TEST_DEVICE");
  return d && *d ? d : "torch-cpu";
}

static df_t_device_kind test_kind(void) {
  df_t_device d;
  char err[256];
  if (df_t_device_parse(test_device(), &d, err, sizeof err) != 0) fail_msg("%s", err);
  return d.kind;
}

static const char *k_fixtures[] = {"tiny-moe-tied", "tiny-moe-sparse", "tiny-dense",
                                   "tiny-moe-sharded", "tiny-ds-bf16", "tiny-ds-fp8"};

static df_model *load_on(const char *name, const df_model_opts *extra, const char *device) {
  char dir[1024], err[1024];
  snprintf(dir, sizeof dir, "%s/%s", DF_FIXTURES, name);
  df_model_opts o = extra ? *extra : (df_model_opts){0};
  o.max_ctx = 256;
  o.max_rows = o.max_rows ? o.max_rows : 64;
  if (df_t_device_parse(device, &o.device, err, sizeof err) != 0) fail_msg("%s", err);
  df_model *m = NULL;
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  return m;
}

static void greedy(df_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n_new,
                   int32_t *out) {
  char err[1024];
  int64_t V = df_model_cfg(m)->vocab_size;
  float *lg = malloc((size_t)V * sizeof(float));
  df_kv_cache *kv = df_model_kv_new(m, 0, err, sizeof err);
  if (!kv) fail_msg("kv: %s", err);
  if (df_model_forward(m, kv, prompt, n_prompt, DF_LOGITS_LAST, lg, err, sizeof err))
    fail_msg("prefill: %s", err);
  for (int64_t i = 0; i < n_new; i++) {
    out[i] = argmax(lg, V);
    if (df_model_forward(m, kv, &out[i], 1, DF_LOGITS_LAST, lg, err, sizeof err))
      fail_msg("decode: %s", err);
  }
  df_kv_destroy(&kv);
  free(lg);
}

static float max_abs_diff(const float *a, const float *b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; i++) {
    float d = a[i] - b[i];
    d = d < 0 ? -d : d;
    if (d > m) m = d;
  }
  return m;
}

/* Logits of both chunkings within tolerance of the reference, and its greedy ids. */
static void check_golden(df_model *m, const char *name, const golden *g) {
  float *lg = prompt_logits(m, g->prompt, g->n_prompt, 64);
  float d = max_abs_diff(lg, g->logits, g->n_prompt * g->vocab);
  float *lg1 = prompt_logits(m, g->prompt, g->n_prompt, 1);
  float d1 = max_abs_diff(lg1, g->logits, g->n_prompt * g->vocab);
  printf("# %s on %s (%lld experts on the device): max |logit - reference| = %.3g "
         "(prefill), %.3g (one token per forward)\n", name,
         df_t_device_name(&(df_t_device){df_model_device(m).kind, df_model_device(m).index},
                          (char[32]){0}, 32),
         (long long)df_model_experts_on_device(m), d, d1);
  if (d > LOGIT_TOL || d1 > LOGIT_TOL)
    fail_msg("%s: torch path logits differ from the reference by %g / %g > %g", name, d, d1,
             LOGIT_TOL);
  int32_t out[256];
  greedy(m, g->prompt, g->n_prompt, g->n_greedy, out);
  for (int64_t i = 0; i < g->n_greedy; i++)
    if (out[i] != g->greedy[i])
      fail_msg("%s: greedy token %lld is %d, reference %d", name, (long long)i, out[i],
               g->greedy[i]);
  free(lg);
  free(lg1);
}

static void test_device_parse(void **state) {
  (void)state;
  char err[256], nm[32];
  df_t_device d;
  struct { const char *s; df_t_device_kind k; int idx; } good[] = {
      {"cpu", DF_T_DEV_CPU, 0},       {"cuda", DF_T_DEV_CUDA, 0},
      {"cuda:3", DF_T_DEV_CUDA, 3},   {"auto", DF_T_DEV_AUTO, 0},
      {"torch-cpu", DF_T_DEV_TORCH_CPU, 0}, {"cuda:63", DF_T_DEV_CUDA, 63}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    assert_int_equal(df_t_device_parse(good[i].s, &d, err, sizeof err), 0);
    assert_int_equal(d.kind, good[i].k);
    assert_int_equal(d.index, good[i].idx);
    assert_string_equal(df_t_device_name(&d, nm, sizeof nm),
                        strcmp(good[i].s, "cuda") ? good[i].s : "cuda:0");
  }
  const char *bad[] = {"", "gpu", "cuda:", "cuda:-1", "cuda:64", "cuda:1x", "CPU", "cuda0"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(df_t_device_parse(bad[i], &d, err, sizeof err), -1);
    assert_non_null(strstr(err, "expected cpu, cuda, cuda:N with N from 0 to 63, auto or torch-cpu"));
  }
}

/* Without a usable CUDA (this CPU-only libtorch, or no device) cuda falls back to the CPU
 * with one line; auto picks the CPU silently; the model then is the own-kernel path. */
static void test_cuda_fallback(void **state) {
  (void)state;
  if (df_t_cuda_available()) skip(); /* a GPU machine: tools/gpu/check.sh covers it */
  df_t_device want = {DF_T_DEV_CUDA, 1}, got;
  char note[320];
  df_t_device_resolve(&want, &got, note, sizeof note);
  assert_int_equal(got.kind, DF_T_DEV_CPU);
  assert_non_null(strstr(note, "running on the CPU"));
  assert_null(strchr(note, '\n'));
  want.kind = DF_T_DEV_AUTO;
  df_t_device_resolve(&want, &got, note, sizeof note);
  assert_int_equal(got.kind, DF_T_DEV_CPU);
  assert_string_equal(note, "");
  golden g;
  golden_load("tiny-moe-sparse", &g);
  df_model *m = load_on("tiny-moe-sparse", NULL, "cuda:0");
  assert_int_equal(df_model_device(m).kind, DF_T_DEV_CPU);
  assert_non_null(strstr(df_model_device_note(m), "running on the CPU"));
  df_model *c = load_on("tiny-moe-sparse", NULL, "cpu");
  assert_string_equal(df_model_device_note(c), "");
  float *a = prompt_logits(m, g.prompt, g.n_prompt, 64), *b = prompt_logits(c, g.prompt, g.n_prompt, 64);
  assert_memory_equal(a, b, (size_t)(g.n_prompt * g.vocab) * sizeof(float)); /* same path */
  free(a);
  free(b);
  golden_free(&g);
  df_model_destroy(&m);
  df_model_destroy(&c);
  /* the CUDA runtime stubs of a DF_CUDA=OFF build say so */
  if (!df_cuda_compiled()) {
    uint64_t f, t;
    char err[256];
    assert_int_equal(df_cuda_mem_info(0, &f, &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "no CUDA runtime in this build"));
    assert_null(df_cuda_uploader_new(0, 0, err, sizeof err));
  } else {
    /* a DF_CUDA=ON build on a machine without a usable device (no driver, or no GPU): the
     * real runtime answers with an error that names the call or the missing device, and
     * nothing is allocated */
    uint64_t f = 1, t = 1;
    char err[256];
    strcpy(err, "unset");
    assert_int_equal(df_cuda_device_count(err, sizeof err), 0);
    strcpy(err, "unset");
    assert_int_equal(df_cuda_mem_info(0, &f, &t, err, sizeof err), -1);
    if (!strstr(err, "cudaGetDeviceCount") && !strstr(err, "CUDA device 0 does not exist (0 found)"))
      fail_msg("df_cuda_mem_info without a device: '%s'", err);
    assert_int_equal(f, 1);
    assert_int_equal(t, 1);
    strcpy(err, "unset");
    assert_null(df_cuda_uploader_new(0, 0, err, sizeof err));
    assert_non_null(strstr(err, "cuda"));
  }
}

/* Every fixture with every expert on the "device". */
static void test_golden_torch_cpu(void **state) {
  (void)state;
  for (size_t f = 0; f < sizeof k_fixtures / sizeof k_fixtures[0]; f++) {
    golden g;
    golden_load(k_fixtures[f], &g);
    df_model *m = load_on(k_fixtures[f], NULL, test_device());
    if (df_model_device(m).kind != test_kind())
      fail_msg("%s: asked for %s, got: %s", k_fixtures[f], test_device(), df_model_device_note(m));
    const df_model_config *c = df_model_cfg(m);
    int64_t n_moe = 0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) n_moe += c->is_moe_layer[l] ? c->num_experts : 0;
    assert_int_equal(df_model_experts_on_device(m), n_moe);
    check_golden(m, k_fixtures[f], &g);
    /* heat: every MoE layer routed top_k pairs per token computed */
    const uint64_t *rc = df_model_route_counts(m);
    if (c->num_experts > 0) {
      int64_t tokens = 2 * g.n_prompt + g.n_prompt + g.n_greedy; /* two prefills + greedy */
      for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        uint64_t sum = 0;
        for (int64_t e = 0; e < c->num_experts; e++) sum += rc[l * c->num_experts + e];
        assert_int_equal(sum, c->is_moe_layer[l] ? (uint64_t)(tokens * c->num_experts_per_tok) : 0);
      }
    }
    golden_free(&g);
    df_model_destroy(&m);
  }
}

/* Admission with room for about half the experts: the hottest (by the heat of an earlier
 * run) go on the device, the rest run through the host expert backend, and the result is
 * still the reference's. A budget below the resident part falls back to the CPU path. */
static void test_mixed_placement(void **state) {
  (void)state;
  const char *fx[] = {"tiny-moe-sparse", "tiny-moe-tied", "tiny-ds-fp8"};
  for (size_t f = 0; f < 3; f++) {
    golden g;
    golden_load(fx[f], &g);
    df_model *all = load_on(fx[f], NULL, test_device());
    float *tmp = prompt_logits(all, g.prompt, g.n_prompt, 64); /* gather heat */
    free(tmp);
    const df_model_config *c = df_model_cfg(all);
    int64_t n = c->num_hidden_layers * c->num_experts, n_moe = 0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) n_moe += c->is_moe_layer[l] ? c->num_experts : 0;
    uint64_t *heat = malloc((size_t)n * sizeof *heat);
    memcpy(heat, df_model_route_counts(all), (size_t)n * sizeof *heat);
    df_admit_plan p = df_model_device_plan(all);
    assert_true(p.ok);
    assert_int_equal(p.experts_on_device, n_moe);
    /* expert bytes: all models here have equal-size experts */
    uint64_t per = p.expert_bytes / (uint64_t)p.experts_on_device;
    uint64_t total = (uint64_t)1 << 30; /* reserve 2 GiB */
    df_model_opts o = {.device_total = total,
                       .device_free = df_admit_reserve(total) + p.charged + per * (uint64_t)(n_moe / 2),
                       .expert_heat = heat, .expert_heat_n = n};
    df_model *half = load_on(fx[f], &o, test_device());
    assert_int_equal(df_model_device(half).kind, test_kind());
    assert_int_equal(df_model_experts_on_device(half), n_moe / 2);
    /* the placed ones are the hottest: min heat on the device >= max heat off it */
    const uint8_t *on = df_model_expert_placement(half);
    uint64_t min_on = UINT64_MAX, max_off = 0;
    for (int64_t i = 0; i < n; i++) {
      if (!c->is_moe_layer[i / c->num_experts]) {
        assert_int_equal(on[i], 0);
        continue;
      }
      if (on[i] && heat[i] < min_on) min_on = heat[i];
      if (!on[i] && heat[i] > max_off) max_off = heat[i];
    }
    assert_true(min_on >= max_off);
    assert_non_null(strstr(df_model_device_note(half), "experts on the device"));
    check_golden(half, fx[f], &g);
    df_model_destroy(&half);
    /* one byte short of the charged part: CPU path, one line, output the CPU's */
    o.device_free = df_admit_reserve(total) + p.charged - 1;
    df_model *cpu = load_on(fx[f], &o, test_device());
    assert_int_equal(df_model_device(cpu).kind, DF_T_DEV_CPU);
    assert_non_null(strstr(df_model_device_note(cpu), "running on the CPU"));
    check_golden(cpu, fx[f], &g);
    df_model_destroy(&cpu);
    free(heat);
    golden_free(&g);
    df_model_destroy(&all);
  }
}

/* Two sequences in one batch on the torch path each get their own logits (within tolerance
 * of computing them alone), and a KV rollback continues as if never computed. */
static void batch_and_rollback(const char *fixture) {
  golden g;
  golden_load(fixture, &g);
  df_model *m = load_on(fixture, NULL, test_device());
  assert_int_equal(df_model_device(m).kind, test_kind());
  int64_t V = g.vocab, n = g.n_prompt;
  char err[512];
  float *alone = prompt_logits(m, g.prompt, n, 64);
  df_kv_cache *a = df_model_kv_new(m, 0, err, sizeof err), *b = df_model_kv_new(m, 0, err, sizeof err);
  float *la = malloc((size_t)(n * V) * sizeof(float)), *lb = malloc((size_t)(10 * V) * sizeof(float));
  df_batch_seq seqs[2] = {{.kv = a, .ids = g.prompt, .n = n, .mode = DF_LOGITS_ALL, .logits = la},
                          {.kv = b, .ids = g.prompt, .n = 10, .mode = DF_LOGITS_ALL, .logits = lb}};
  assert_int_equal(df_model_forward_batch(m, seqs, 2, err, sizeof err), 0);
  assert_true(max_abs_diff(la, alone, n * V) < 1e-4f);
  assert_true(max_abs_diff(lb, alone, 10 * V) < 1e-4f);
  /* roll a back to 10 and feed the rest again */
  df_kv_truncate(a, 10);
  assert_int_equal(df_model_forward(m, a, g.prompt + 10, n - 10, DF_LOGITS_ALL, la + 10 * V, err,
                                    sizeof err), 0);
  assert_true(max_abs_diff(la, alone, n * V) < 1e-4f);
  df_kv_destroy(&a);
  df_kv_destroy(&b);
  free(la);
  free(lb);
  free(alone);
  golden_free(&g);
  df_model_destroy(&m);
}

/* MHA (qwen3_moe) and MLA (kimi_k2 FP8: the latent cache on the device) */
static void test_batch_and_rollback(void **state) {
  (void)state;
  batch_and_rollback("tiny-moe-sparse");
  batch_and_rollback("tiny-ds-fp8");
}

/* df-node's device expert cache: results within 1e-5 of the CPU kernel's, an expert past
 * the byte budget (or after df_tx_clear, a fresh budget) handled as documented. */
static void test_node_experts(void **state) {
  (void)state;
  df_model *m = load_on("tiny-moe-sparse", NULL, "cpu");
  const df_model_config *c = df_model_cfg(m);
  int64_t H = c->hidden_size, I = c->moe_intermediate_size, R = 5, l = 0;
  while (!c->is_moe_layer[l]) l++;
  const df_t_tensor *g0, *u0, *d0, *g1, *u1, *d1;
  assert_int_equal(df_model_expert_weights(m, (int)l, 0, &g0, &u0, &d0), 0);
  assert_int_equal(df_model_expert_weights(m, (int)l, 1, &g1, &u1, &d1), 0);
  uint64_t one = (uint64_t)(df_t_numel(g0) + df_t_numel(u0) + df_t_numel(d0)) *
                 df_dtype_size(df_t_dtype(g0));
  char err[256];
  int64_t sx[2] = {R + 2, H}, si[2] = {R, I};
  df_t_tensor *x = df_t_new_f32(2, sx, err, sizeof err), *y = df_t_new_f32(2, sx, err, sizeof err),
              *ref = df_t_new_f32(2, sx, err, sizeof err), *gs = df_t_new_f32(2, si, err, sizeof err),
              *us = df_t_new_f32(2, si, err, sizeof err);
  float *xp = df_t_f32(x);
  for (int64_t i = 0; i < (R + 2) * H; i++) xp[i] = (float)((i * 37) % 101 - 50) / 50.0f;
  df_t_device dev;
  assert_int_equal(df_t_device_parse(test_device(), &dev, err, sizeof err), 0);
  df_tx *tx = df_tx_new(&dev, one, err, sizeof err); /* room for one expert */
  assert_non_null(tx);
  /* expert 0 goes to the device (rows 1..5), expert 1 does not fit and runs on the host */
  assert_int_equal(df_tx_swiglu_ffn(tx, x, 1, R, g0, u0, d0, gs, us, y, err, sizeof err), 1);
  df_t_swiglu_ffn(x, 1, R, g0, u0, d0, gs, us, ref);
  float d = max_abs_diff(df_t_f32(y) + H, df_t_f32(ref) + H, R * H);
  printf("# expert on %s: max |y - CPU kernel| = %.3g\n", test_device(), d);
  assert_true(d < 1e-5f);
  assert_int_equal(df_tx_swiglu_ffn(tx, x, 1, R, g1, u1, d1, gs, us, y, err, sizeof err), 0);
  df_t_swiglu_ffn(x, 1, R, g1, u1, d1, gs, us, ref);
  assert_memory_equal(df_t_f32(y) + H, df_t_f32(ref) + H, (size_t)(R * H) * sizeof(float));
  assert_int_equal(df_tx_experts(tx), 1);
  assert_int_equal(df_tx_bytes(tx), one);
  /* a new assignment: the budget is whole again and expert 1 now fits */
  df_tx_clear(tx);
  assert_int_equal(df_tx_experts(tx), 0);
  assert_int_equal(df_tx_swiglu_ffn(tx, x, 1, R, g1, u1, d1, gs, us, y, err, sizeof err), 1);
  df_tx_destroy(&tx);
  assert_null(tx);
  df_t_device cpu = {DF_T_DEV_CPU, 0};
  assert_null(df_tx_new(&cpu, one, err, sizeof err));
  df_t_destroy(&x);
  df_t_destroy(&y);
  df_t_destroy(&ref);
  df_t_destroy(&gs);
  df_t_destroy(&us);
  df_model_destroy(&m);
}

/* FP8 experts (tiny-ds-fp8: E4M3 bytes with 32x32 block scales, moe_intermediate 40, so the
 * last block row and column are partial) are kept on the device as stored, charged at one
 * byte per weight plus their scales, and give the CPU kernel's result within fp32 rounding
 * (both use e4m3 * scale rounded once as the weight; only the summation order differs). */
static void test_node_experts_fp8(void **state) {
  (void)state;
  df_model *m = load_on("tiny-ds-fp8", NULL, "cpu");
  const df_model_config *c = df_model_cfg(m);
  int64_t H = c->hidden_size, I = c->moe_intermediate_size, R = 4, l = 0;
  while (!c->is_moe_layer[l]) l++;
  char err[256];
  df_t_device dev;
  assert_int_equal(df_t_device_parse(test_device(), &dev, err, sizeof err), 0);
  int64_t sx[2] = {R, H}, si[2] = {R, I};
  df_t_tensor *x = df_t_new_f32(2, sx, err, sizeof err), *y = df_t_new_f32(2, sx, err, sizeof err),
              *ref = df_t_new_f32(2, sx, err, sizeof err), *gs = df_t_new_f32(2, si, err, sizeof err),
              *us = df_t_new_f32(2, si, err, sizeof err);
  float *xp = df_t_f32(x);
  for (int64_t i = 0; i < R * H; i++) xp[i] = (float)((i * 29) % 97 - 48) / 24.0f;
  uint64_t all = 0;
  for (int e = 0; e < c->num_experts; e++) {
    const df_t_tensor *g, *u, *d;
    assert_int_equal(df_model_expert_weights(m, (int)l, e, &g, &u, &d), 0);
    assert_int_equal(df_t_dtype(g), DF_DT_F8_E4M3);
    int64_t bn, bk;
    const df_t_tensor *ws[3] = {g, u, d};
    for (int w = 0; w < 3; w++) {
      const df_t_tensor *sc = df_t_block_scale(ws[w], &bn, &bk);
      assert_non_null(sc);
      all += (uint64_t)df_t_numel(ws[w]) + (uint64_t)df_t_numel(sc) * sizeof(float);
    }
  }
  df_tx *tx = df_tx_new(&dev, all, err, sizeof err); /* room for exactly every expert */
  assert_non_null(tx);
  float worst = 0, scale = 0;
  for (int e = 0; e < c->num_experts; e++) {
    const df_t_tensor *g, *u, *d;
    assert_int_equal(df_model_expert_weights(m, (int)l, e, &g, &u, &d), 0);
    if (df_tx_swiglu_ffn(tx, x, 0, R, g, u, d, gs, us, y, err, sizeof err) != 1)
      fail_msg("FP8 expert %d not run on %s: %s", e, test_device(), err);
    df_t_swiglu_ffn(x, 0, R, g, u, d, gs, us, ref);
    float dd = max_abs_diff(df_t_f32(y), df_t_f32(ref), R * H);
    if (dd > worst) worst = dd;
    for (int64_t i = 0; i < R * H; i++)
      if (fabsf(df_t_f32(ref)[i]) > scale) scale = fabsf(df_t_f32(ref)[i]);
  }
  printf("# FP8 experts on %s: max |y - CPU kernel| = %.3g (max |y| %.3g)\n", test_device(),
         worst, scale);
  assert_true(scale > 0.01f);
  assert_true(worst <= 1e-5f * scale);
  assert_int_equal(df_tx_experts(tx), c->num_experts);
  assert_int_equal(df_tx_bytes(tx), all);
  df_tx_destroy(&tx);
  df_t_destroy(&x);
  df_t_destroy(&y);
  df_t_destroy(&ref);
  df_t_destroy(&gs);
  df_t_destroy(&us);
  df_model_destroy(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_parse),     cmocka_unit_test(test_cuda_fallback),
      cmocka_unit_test(test_golden_torch_cpu), cmocka_unit_test(test_mixed_placement),
      cmocka_unit_test(test_batch_and_rollback), cmocka_unit_test(test_node_experts),
      cmocka_unit_test(test_node_experts_fp8),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
