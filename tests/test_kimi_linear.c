/* tests/test_kimi_linear.c — the kimi_linear family (KDA + NoPE MLA + DeepSeek-V3-style MoE,
 * and the kimi_k3 wrapper of it) against the PyTorch reference (tests/reference/
 * kimi_linear_ref.py) and its own invariants.
 *
 * Fixtures: tests/fixtures/tiny-kl-48b (Kimi-Linear-48B layout: softplus decay gate, low-rank
 * output gate, A_log (1,1,H,1), BF16 conv / o_norm, q_proj), tiny-kl-sharded (the same bytes
 * over two files), tiny-kl-k3gate (kimi_k3 wrapper, language_model. prefix, lower-bound
 * decay gate, full-rank gate, padded F32 A_log, q_lora, MLA output gate) and tiny-kl-mixed
 * (lower-bound gate with the low-rank gate, A_log [3], expert groups, no renormalisation).
 * Goldens: 64-token prompts + 32 greedy steps. Further reference runs for prompts of 1, 5 and
 * 80 tokens (20 greedy ids, prompt logits) are made by ctest setup tests into
 * DF_BINARY_DIR/kl-ref (tests/kimi_linear.cmake).
 * Tolerance: both sides are fp32 over the same widened weights and differ by summation order
 * only (the reference's MLA is the expanded form, the engine's the absorbed one); measured
 * max |dlogit| is printed (~2e-5 on logits of magnitude ~20), 1e-3 is allowed, greedy ids
 * must be identical (golden min_top2_gap_greedy ~0.1).
 * Invariants, all bitwise: prefill == chunked prefill == token-by-token decode (also over more
 * rows than the rollback log holds), alone == batched next to another sequence, scalar ==
 * AVX2, rollback of the recurrent state to every position of a verify-sized forward, across
 * many single-row forwards and to 0. Also: config errors, the torch path refused, state bytes,
 * and the measured cost of a rollback (state restore, replay per row).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/golden.h"
#include "tests/seq_invariants.h"

#include "engine/kernels/kernels.h"
#include "engine/layers/kda.h"
#include "engine/model.h"
#include "engine/models/family.h"
#include "engine/tensor/torch_shim.h"

#define LOGIT_TOL 1e-3f

static const char *k_fixtures[] = {"tiny-kl-48b", "tiny-kl-sharded", "tiny-kl-k3gate",
                                   "tiny-kl-mixed"};
#define N_FIX (sizeof k_fixtures / sizeof k_fixtures[0])

static df_model *load_model(const char *name, int64_t max_rows, int64_t max_ctx) {
  char dir[1024], err[1024];
  snprintf(dir, sizeof dir, "%s/%s", DF_FIXTURES, name);
  df_model *m = NULL;
  df_model_opts o = {.max_ctx = max_ctx, .max_rows = max_rows};
  if (df_model_load(dir, &o, &m, err, sizeof err) != 0) fail_msg("load %s: %s", dir, err);
  return m;
}

static float max_diff(const float *a, const float *b, int64_t n) {
  float md = 0;
  for (int64_t i = 0; i < n; i++) {
    float d = fabsf(a[i] - b[i]);
    if (d > md || d != d) md = d;
  }
  return md;
}

/* Prompt logits within LOGIT_TOL of the goldens; greedy decode (one token per forward)
 * reproduces greedy_ids and the logits each id was chosen from. */
static void test_golden_fixtures(void **state) {
  (void)state;
  for (size_t f = 0; f < N_FIX; f++) {
    golden g;
    golden_load(k_fixtures[f], &g);
    df_model *m = load_model(k_fixtures[f], 64, 256);
    int64_t V = g.vocab;
    assert_int_equal(df_model_cfg(m)->vocab_size, V);
    float *lg = prompt_logits(m, g.prompt, g.n_prompt, 64);
    float d = max_diff(lg, g.logits, g.n_prompt * V);
    df_kv_cache *kv = kv_new(m);
    float *row = malloc((size_t)V * sizeof(float));
    fwd(m, kv, g.prompt, g.n_prompt, DF_LOGITS_LAST, row);
    float ds = 0;
    for (int64_t i = 0; i < g.n_greedy; i++) {
      float di = max_diff(row, g.steps + i * V, V);
      ds = di > ds ? di : ds;
      int32_t t = argmax(row, V);
      if (t != g.greedy[i])
        fail_msg("%s: greedy token %lld is %d, reference %d", k_fixtures[f], (long long)i, t,
                 g.greedy[i]);
      fwd(m, kv, &t, 1, DF_LOGITS_LAST, row);
    }
    printf("# %s: prompt max |logit - reference| = %.3g, decode steps %.3g\n", k_fixtures[f], d,
           ds);
    if (d > LOGIT_TOL || ds > LOGIT_TOL)
      fail_msg("%s: logits differ from the reference by %g / %g > %g", k_fixtures[f], d, ds,
               LOGIT_TOL);
    free(row);
    df_kv_destroy(&kv);
    free(lg);
    golden_free(&g);
    df_model_destroy(&m);
  }
}

/* Prompts of 1, 5 and 80 tokens (80 > the conv window, > a 64-row chunk, fed in chunks of
 * 16) against the reference's prompt logits and 20 greedy ids. */
static void test_reference_prompts(void **state) {
  (void)state;
  static const char *presets[] = {"tiny-kl-48b", "tiny-kl-k3gate", "tiny-kl-mixed"};
  static const int lens[] = {1, 5, 80};
  for (size_t p = 0; p < 3; p++)
    for (size_t li = 0; li < 3; li++) {
      char path[1024];
      int n = lens[li];
      snprintf(path, sizeof path, "%s/kl-ref/%s-%d.json", DF_BINARY_DIR, presets[p], n);
      json_error_t je;
      json_t *root = json_load_file(path, 0, &je);
      if (!root) fail_msg("%s: %s (made by the kl_ref_runs setup test)", path, je.text);
      json_t *gi = json_object_get(root, "greedy_ids");
      df_model *m = load_model(presets[p], 16, 256);
      int64_t V = df_model_cfg(m)->vocab_size;
      int32_t ids[128];
      make_prompt(ids, n, V);
      json_t *pi = json_object_get(root, "prompt_ids");
      assert_int_equal(json_array_size(pi), n);
      for (int i = 0; i < n; i++) assert_int_equal(json_integer_value(json_array_get(pi, i)), ids[i]);
      snprintf(path, sizeof path, "%s/kl-ref/%s-%d.f32", DF_BINARY_DIR, presets[p], n);
      float *ref = malloc((size_t)(n * V) * sizeof(float));
      FILE *fp = fopen(path, "rb");
      if (!fp) fail_msg("cannot open %s", path);
      assert_int_equal(fread(ref, sizeof(float), (size_t)(n * V), fp), (size_t)(n * V));
      fclose(fp);
      float *lg = prompt_logits(m, ids, n, 16);
      float d = max_diff(lg, ref, n * V);
      df_kv_cache *kv = kv_new(m);
      float *row = malloc((size_t)V * sizeof(float));
      fwd(m, kv, ids, n, DF_LOGITS_LAST, row);
      size_t ng = json_array_size(gi);
      assert_true(ng >= 16);
      for (size_t i = 0; i < ng; i++) {
        int32_t t = argmax(row, V);
        int32_t want = (int32_t)json_integer_value(json_array_get(gi, i));
        if (t != want)
          fail_msg("%s, %d-token prompt: greedy token %zu is %d, reference %d", presets[p], n, i,
                   t, want);
        fwd(m, kv, &t, 1, DF_LOGITS_LAST, row);
      }
      printf("# %s, %d-token prompt: max |logit - reference| = %.3g, %zu greedy ids equal\n",
             presets[p], n, d, ng);
      if (d > LOGIT_TOL) fail_msg("%s: logits differ by %g > %g", presets[p], d, LOGIT_TOL);
      free(row);
      free(lg);
      free(ref);
      df_kv_destroy(&kv);
      json_decref(root);
      df_model_destroy(&m);
    }
}

/* Prefill in one forward == chunks of 7 == one row per forward, and a 5-row plan; over 150
 * rows too (more than the 64-row rollback log, so folds into the base happen mid-prefill). */
static void test_prefill_equals_decode(void **state) {
  (void)state;
  for (size_t f = 0; f < N_FIX; f++) {
    df_model *m = load_model(k_fixtures[f], 64, 256);
    int64_t V = df_model_cfg(m)->vocab_size, n = 150;
    int32_t ids[150];
    make_prompt(ids, n, V);
    size_t bytes = (size_t)(n * V) * sizeof(float);
    float *a = prompt_logits(m, ids, n, 64);
    float *b = prompt_logits(m, ids, n, 7);
    float *c = prompt_logits(m, ids, n, 1);
    assert_memory_equal(a, b, bytes);
    assert_memory_equal(a, c, bytes);
    df_model_destroy(&m);
    m = load_model(k_fixtures[f], 5, 256);
    float *d = prompt_logits(m, ids, n, 150);
    assert_memory_equal(a, d, bytes);
    df_model_destroy(&m);
    free(a);
    free(b);
    free(c);
    free(d);
  }
}

static void test_isa_agreement(void **state) {
  (void)state;
  if (df_k_isa_hw() < DF_ISA_AVX2) skip();
  for (size_t f = 0; f < N_FIX; f++) {
    df_model *m = load_model(k_fixtures[f], 64, 256);
    inv_isa_agreement(m, k_fixtures[f]);
    df_model_destroy(&m);
  }
}

/* inv_alone_equals_batched on every fixture. */
static void test_alone_equals_batched(void **state) {
  (void)state;
  for (size_t f = 0; f < N_FIX; f++) {
    df_model *m = load_model(k_fixtures[f], 7, 256);
    inv_alone_equals_batched(m, k_fixtures[f]);
    df_model_destroy(&m);
  }
}

/* Run k+1 rows in one forward (a speculative verify), truncate to every position j inside
 * it, continue with 3 rows: bitwise the run that only ever fed j rows. Then rollback across
 * 30 single-row forwards, to 0, after a 150-row prefill (the log reaches back 64 rows), and
 * the refusal beyond the log. */
static void test_rollback(void **state) {
  (void)state;
  for (size_t f = 0; f < N_FIX; f++) {
    df_model *m = load_model(k_fixtures[f], 64, 256);
    int64_t V = df_model_cfg(m)->vocab_size;
    int32_t ids[200];
    make_prompt(ids, 200, V);
    float *la = malloc((size_t)(3 * V) * 4), *lb = malloc((size_t)(3 * V) * 4);
    const int64_t P = 10, K1 = 9; /* prompt, verify rows */
    for (int64_t j = P; j <= P + K1; j++) {
      df_kv_cache *kv = kv_new(m), *ref = kv_new(m);
      fwd(m, kv, ids, P, DF_LOGITS_NONE, NULL);
      fwd(m, kv, ids + P, K1, DF_LOGITS_NONE, NULL);
      assert_true(df_kv_can_truncate(kv, j));
      df_kv_truncate(kv, j);
      fwd(m, kv, ids + 100, 3, DF_LOGITS_ALL, la);
      fwd(m, ref, ids, j, DF_LOGITS_NONE, NULL);
      fwd(m, ref, ids + 100, 3, DF_LOGITS_ALL, lb);
      if (memcmp(la, lb, (size_t)(3 * V) * 4))
        fail_msg("%s: rollback to %lld of %lld differs from feeding %lld rows", k_fixtures[f],
                 (long long)j, (long long)(P + K1), (long long)j);
      df_kv_destroy(&kv);
      df_kv_destroy(&ref);
    }
    /* 40 rows, then 30 single-row forwards, back to 45 */
    df_kv_cache *kv = kv_new(m), *ref = kv_new(m);
    fwd(m, kv, ids, 40, DF_LOGITS_NONE, NULL);
    for (int i = 0; i < 30; i++) fwd(m, kv, ids + 40 + i, 1, DF_LOGITS_NONE, NULL);
    df_kv_truncate(kv, 45);
    fwd(m, kv, ids + 100, 3, DF_LOGITS_ALL, la);
    fwd(m, ref, ids, 45, DF_LOGITS_NONE, NULL);
    fwd(m, ref, ids + 100, 3, DF_LOGITS_ALL, lb);
    assert_memory_equal(la, lb, (size_t)(3 * V) * 4);
    /* to 0: a fresh sequence */
    df_kv_truncate(kv, 0);
    fwd(m, kv, ids + 100, 3, DF_LOGITS_ALL, la);
    df_kv_truncate(ref, 0);
    fwd(m, ref, ids + 100, 3, DF_LOGITS_ALL, lb);
    assert_memory_equal(la, lb, (size_t)(3 * V) * 4);
    /* a long prefill: back 60 rows works, back 70 is refused (and reset is the fallback) */
    df_kv_truncate(kv, 0);
    fwd(m, kv, ids, 150, DF_LOGITS_NONE, NULL);
    assert_true(df_kv_can_truncate(kv, 90));
    assert_false(df_kv_can_truncate(kv, 80));
    assert_int_equal(df_kv_truncate_or_reset(kv, 80), 0);
    assert_int_equal(kv->len, 0);
    fwd(m, kv, ids, 150, DF_LOGITS_NONE, NULL);
    df_kv_truncate(kv, 90);
    fwd(m, kv, ids + 100, 3, DF_LOGITS_ALL, la);
    df_kv_truncate(ref, 0);
    fwd(m, ref, ids, 90, DF_LOGITS_NONE, NULL);
    fwd(m, ref, ids + 100, 3, DF_LOGITS_ALL, lb);
    assert_memory_equal(la, lb, (size_t)(3 * V) * 4);
    df_kv_destroy(&kv);
    df_kv_destroy(&ref);
    free(la);
    free(lb);
    df_model_destroy(&m);
  }
}

static int parse_cfg(const char *json, char *err, size_t errlen) {
  df_model_config c;
  return df_cfg_parse(json, strlen(json), "config.json", &c, err, errlen);
}

/* The fixture's config.json with `from` replaced by `to` (once). */
static char *edited(const char *fixture, const char *from, const char *to) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/config.json", DF_FIXTURES, fixture);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strstr(buf, from);
  if (!p) fail_msg("%s: '%s' not in config.json", fixture, from);
  char *out = malloc(n + strlen(to) + 1);
  size_t pre = (size_t)(p - buf);
  memcpy(out, buf, pre);
  strcpy(out + pre, to);
  strcat(out, p + strlen(from));
  return out;
}

static void expect_cfg_error(const char *fixture, const char *from, const char *to,
                             const char *want) {
  char err[1024] = "";
  char *j = edited(fixture, from, to);
  int rc = parse_cfg(j, err, sizeof err);
  free(j);
  if (rc == 0) fail_msg("%s: '%s' -> '%s' parsed", fixture, from, to);
  if (!strstr(err, want)) fail_msg("message '%s' lacks '%s'", err, want);
}

static void test_config(void **state) {
  (void)state;
  char err[1024];
  df_model_config c;
  char *j = edited("tiny-kl-k3gate", "\"model_type\": \"kimi_k3\"", "\"model_type\": \"kimi_k3\"");
  assert_int_equal(df_cfg_parse(j, strlen(j), "config.json", &c, err, sizeof err), 0);
  free(j);
  assert_string_equal(c.tensor_prefix, "language_model.");
  assert_true(c.kda_lower_bound && c.kda_gate_lb == -5.0 && c.kda_full_rank_gate);
  assert_true(c.is_kda_layer[0] && c.is_kda_layer[2] && !c.is_kda_layer[3] && !c.is_kda_layer[4]);
  assert_string_equal(df_cfg_arch_name(c.arch), "kimi_linear");
  expect_cfg_error("tiny-kl-48b", "\"full_attn_layers\": [\n      3,", "\"full_attn_layers\": [\n      2, 3,",
                   "config.json: key 'linear_attn_config': layer 2 (1-based) is in both");
  expect_cfg_error("tiny-kl-48b", "\"full_attn_layers\": [\n      3,", "\"full_attn_layers\": [\n",
                   "layer 3 (1-based) is in neither");
  expect_cfg_error("tiny-kl-48b", "\"kda_layers\": [\n      1,", "\"kda_layers\": [\n      0,",
                   "key 'linear_attn_config.kda_layers[0]': layer 0 is out of range (1-based");
  expect_cfg_error("tiny-kl-48b", "\"num_heads\": 2", "\"num_heads\": \"2\"",
                   "key 'linear_attn_config.num_heads': expected an integer");
  expect_cfg_error("tiny-kl-48b", "\"linear_attn_config\"", "\"linear_attn_config_x\"",
                   "missing required key 'linear_attn_config'");
  expect_cfg_error("tiny-kl-48b", "\"mla_use_nope\": true", "\"mla_use_nope\": false",
                   "key 'mla_use_nope': only true is supported");
  /* Kimi K3's switches: accepted, their values checked */
  expect_cfg_error("tiny-kl-k3gate", "\"mla_use_nope\": true",
                   "\"mla_use_nope\": true, \"attn_res_block_size\": 0",
                   "key 'text_config.attn_res_block_size': 0 is out of range");
  expect_cfg_error("tiny-kl-k3gate", "\"mla_use_nope\": true",
                   "\"mla_use_nope\": true, \"routed_expert_hidden_size\": 100000",
                   "key 'text_config.routed_expert_hidden_size': 100000 is out of range");
  expect_cfg_error("tiny-kl-k3gate", "\"mla_use_nope\": true",
                   "\"mla_use_nope\": true, \"latent_moe_use_norm\": true",
                   "key 'text_config.latent_moe_use_norm': true needs routed_expert_hidden_size");
  expect_cfg_error("tiny-kl-k3gate", "\"mla_use_nope\": true",
                   "\"mla_use_nope\": true, \"quantization_config\": {\"quant_method\": "
                   "\"compressed-tensors\"}",
                   "key 'text_config.quantization_config.format': unsupported format '(absent)'");
  expect_cfg_error("tiny-kl-k3gate", "\"mla_use_nope\": true",
                   "\"mla_use_nope\": true, \"quantization_config\": {\"quant_method\": "
                   "\"fp8\"}",
                   "key 'text_config.quantization_config.quant_method': unsupported method 'fp8'");
  expect_cfg_error("tiny-kl-k3gate", "\"mla_use_nope\": true",
                   "\"mla_use_nope\": true, \"quantization_config\": {\"quant_method\": "
                   "\"compressed-tensors\", \"format\": \"mxfp4-pack-quantized\", "
                   "\"config_groups\": {\"group_0\": {\"weights\": {\"num_bits\": 8, "
                   "\"group_size\": 32, \"type\": \"float\"}}}}",
                   "key 'text_config.quantization_config.config_groups.group_0.weights': "
                   "expected num_bits 4");
  expect_cfg_error("tiny-kl-k3gate", "\"mla_use_nope\": true",
                   "\"mla_use_nope\": true, \"activation_situ_beta\": 4.0",
                   "key 'text_config.activation_situ_beta': SiTU parameters given but hidden_act "
                   "is not \"situ\"");
  expect_cfg_error("tiny-kl-k3gate", "\"hidden_act\": \"silu\"",
                   "\"hidden_act\": \"situ\", \"activation_situ_beta\": 1e39",
                   "key 'text_config.activation_situ_beta': 1e+39 is not a positive finite fp32");
  expect_cfg_error("tiny-kl-k3gate", "\"mla_use_nope\": true",
                   "\"mla_use_nope\": true, \"quantization_config\": {\"quant_method\": "
                   "\"compressed-tensors\", \"format\": \"mxfp4-pack-quantized\"}",
                   "key 'text_config.quantization_config.config_groups': expected an object of at "
                   "least one group");
  expect_cfg_error("tiny-kl-k3gate", "\"mla_use_nope\": true",
                   "\"mla_use_nope\": true, \"quantization_config\": {\"quant_method\": "
                   "\"compressed-tensors\", \"format\": \"mxfp4-pack-quantized\", "
                   "\"config_groups\": {\"g\": {\"weights\": {\"num_bits\": 4, "
                   "\"group_size\": 32, \"type\": \"float\", \"symmetric\": false}}}}",
                   "key 'text_config.quantization_config.config_groups.g': expected format "
                   "mxfp4-pack-quantized with symmetric true");
  expect_cfg_error("tiny-kl-k3gate", "\"mla_use_nope\": true",
                   "\"mla_use_nope\": true, \"activation_situ_linear_beta\": -1",
                   "key 'text_config.activation_situ_linear_beta': -1 is out of range");
  expect_cfg_error("tiny-kl-k3gate", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"",
                   "key 'text_config.hidden_act': unsupported activation 'gelu' (supported: "
                   "silu, situ)");
  expect_cfg_error("tiny-kl-k3gate", "\"model_type\": \"kimi_linear\"",
                   "\"model_type\": \"qwen3\"", "key 'text_config.model_type'");
}

/* --device torch-cpu is refused by name; state bytes as kda.h states them. */
static void test_device_and_bytes(void **state) {
  (void)state;
  char dir[1024], err[1024];
  snprintf(dir, sizeof dir, "%s/tiny-kl-48b", DF_FIXTURES);
  df_model *m = NULL;
  df_model_opts o = {.max_ctx = 64, .max_rows = 16};
  assert_int_equal(df_t_device_parse("torch-cpu", &o.device, err, sizeof err), 0);
  assert_int_equal(df_model_load(dir, &o, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, "does not run model type kimi_linear"));
  m = load_model("tiny-kl-48b", 16, 64);
  const df_model_config *c = df_model_cfg(m);
  /* MLA layers 2, 4: (kv_lora 32 + qk_rope 8) * 4 B per token; KDA layers 0, 1, 3 */
  assert_int_equal(df_model_kv_bytes_per_token(m), 2 * (32 + 8) * 4);
  int64_t H = c->kda_heads, D = c->kda_head_dim, C = H * D, cap = df_kda_log_rows(16);
  uint64_t per = (uint64_t)(2 * (H * D * D + 3 * C * 3) + cap * (4 * C + H)) * 4;
  uint64_t got = df_model_kv_bytes_per_seq(m);
  assert_true(got >= 3 * per && got < 3 * per + 3 * 256);
  df_kv_cache *kv = kv_new(m);
  assert_int_equal(kv->bytes_per_seq, got);
  df_kv_destroy(&kv);
  df_model_destroy(&m);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* The rollback's cost on the tiny shape and on Kimi-Linear-48B's KDA shape (32 heads x 128):
 * restoring the base (copy) plus replaying r rows, per layer and sequence. Printed, not
 * asserted (timings); the replayed state must equal the first run bitwise. */
static void test_rollback_cost(void **state) {
  (void)state;
  static const int64_t shapes[][2] = {{2, 24}, {32, 128}};
  char err[256];
  for (int s = 0; s < 2; s++) {
    int64_t H = shapes[s][0], D = shapes[s][1], C = H * D, Hd = 64, W = 4, R = 16;
    df_model_config cfg = {.hidden_size = Hd};
    df_layer_env env = {.cfg = &cfg, .max_rows = R, .max_ctx = 512};
    df_ws *ws = df_ws_new();
    uint32_t seed = 5;
    float *pool = malloc((size_t)(8 * C * Hd + 8 * C) * sizeof(float));
    for (int64_t i = 0; i < 8 * C * Hd + 8 * C; i++) {
      seed = seed * 1664525u + 1013904223u;
      pool[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
    }
    int64_t sq[2] = {C, Hd}, sd[2] = {D, Hd}, sb[2] = {H, Hd}, sf[2] = {C, D}, so[2] = {Hd, C},
            sc[3] = {C, 1, W}, sh[1] = {H}, sC[1] = {C}, sD[1] = {D};
    df_t_tensor *t[12];
    float *p = pool;
#define W_(i, nd, shp, n) (t[i] = df_t_wrap(p, DF_DT_F32, nd, shp, err, sizeof err), p += (n))
    W_(0, 2, sq, C * Hd); W_(1, 2, sq, C * Hd); W_(2, 2, sq, C * Hd);
    W_(3, 3, sc, C * W); W_(4, 1, sh, H); W_(5, 1, sC, C); W_(6, 2, sd, D * Hd);
    W_(7, 2, sf, C * D); W_(8, 2, sb, H * Hd); W_(9, 2, sq, C * Hd); W_(10, 1, sD, D);
    W_(11, 2, so, C * Hd);
#undef W_
    df_kda_weights w = {.q = t[0], .k = t[1], .v = t[2], .q_conv = t[3], .k_conv = t[3],
                        .v_conv = t[3], .a_log = t[4], .dt_bias = t[5], .f_a = t[6],
                        .f_b = t[7], .b = t[8], .g = t[9], .o_norm = t[10], .o = t[11]};
    df_kda_dims d = {.n_head = H, .head_dim = D, .conv_width = W, .norm_eps = 1e-5f};
    df_token_mixer *tm = df_kda_new(&env, ws, 0, &w, &d, err, sizeof err);
    assert_non_null(tm);
    df_kv_cache *kv = df_kv_new_layers(1, 512, 0, tm->ops->state_bytes_per_seq(tm), err, sizeof err);
    assert_int_equal(tm->ops->state_new(tm, kv, NULL, err, sizeof err), 0);
    int64_t xs[2] = {R, Hd};
    df_t_tensor *x = df_t_new_f32(2, xs, err, sizeof err), *out = df_t_new_f32(2, xs, err, sizeof err);
    memcpy(df_t_f32(x), pool, (size_t)(R * Hd) * sizeof(float));
    int64_t pos[16];
    int32_t seq[16] = {0};
    df_kv_cache *kvs[1] = {kv};
    /* 4 forwards of 16 rows: 64 logged rows */
    double tf0 = now_us();
    for (int it = 0; it < 4; it++) {
      for (int64_t r = 0; r < R; r++) pos[r] = it * R + r;
      df_rows rows = {.R = R, .pos = pos, .seq = seq, .kvs = kvs};
      tm->ops->forward(tm, &rows, x, out);
      kv->len += R;
    }
    double tf1 = now_us();
    /* the same rows once the log is full: each also folds the oldest row into the base */
    df_kv_cache *k3 = df_kv_new_layers(1, 512, 0, tm->ops->state_bytes_per_seq(tm), err, sizeof err);
    assert_int_equal(tm->ops->state_new(tm, k3, NULL, err, sizeof err), 0);
    kvs[0] = k3;
    double tf2 = 0, tf3 = 0;
    for (int it = 0; it < 6; it++) {
      for (int64_t r = 0; r < R; r++) pos[r] = it * R + r;
      df_rows rows = {.R = R, .pos = pos, .seq = seq, .kvs = kvs};
      if (it == 4) tf2 = now_us();
      tm->ops->forward(tm, &rows, x, out);
      k3->len += R;
    }
    tf3 = now_us();
    df_kv_destroy(&k3);
    kvs[0] = kv;
    printf("# KDA forward, %lld heads x %lld, hidden %lld: %.1f us/row while the log fills, %.1f "
           "us/row with a fold per row\n", (long long)H, (long long)D, (long long)Hd,
           (tf1 - tf0) / 64, (tf3 - tf2) / 32);
    /* the state after 48 rows, from a run that only fed 48 */
    df_kv_cache *k2 = df_kv_new_layers(1, 512, 0, tm->ops->state_bytes_per_seq(tm), err, sizeof err);
    assert_int_equal(tm->ops->state_new(tm, k2, NULL, err, sizeof err), 0);
    kvs[0] = k2;
    for (int it = 0; it < 3; it++) {
      for (int64_t r = 0; r < R; r++) pos[r] = it * R + r;
      df_rows rows = {.R = R, .pos = pos, .seq = seq, .kvs = kvs};
      tm->ops->forward(tm, &rows, x, out);
      k2->len += R;
    }
    double t0 = now_us();
    df_kv_truncate(kv, 48); /* base at 0: restore + 48 rows replayed */
    double t1 = now_us();
    /* both continue with the same 16 rows: bitwise the same outputs */
    size_t ob = (size_t)(R * Hd) * sizeof(float);
    float *o1 = malloc(ob), *o2 = malloc(ob);
    for (int64_t r = 0; r < R; r++) pos[r] = 48 + r;
    df_rows rows = {.R = R, .pos = pos, .seq = seq, .kvs = kvs};
    tm->ops->forward(tm, &rows, x, out);
    memcpy(o2, df_t_f32(out), ob);
    kvs[0] = kv;
    tm->ops->forward(tm, &rows, x, out);
    memcpy(o1, df_t_f32(out), ob);
    assert_memory_equal(o1, o2, ob);
    kv->len = 64;
    double t2 = now_us();
    df_kv_truncate(kv, 0);
    double t3 = now_us();
    /* restore + 1 row replayed, after 2 single-row forwards */
    pos[0] = 0;
    df_rows one = {.R = 1, .pos = pos, .seq = seq, .kvs = kvs};
    tm->ops->forward(tm, &one, x, out);
    kv->len = 1;
    pos[0] = 1;
    tm->ops->forward(tm, &one, x, out);
    kv->len = 2;
    double t4 = now_us();
    df_kv_truncate(kv, 1);
    double t5 = now_us();
    printf("# KDA rollback, %lld heads x %lld (state %.2f MiB/layer/seq): restore + 48 rows "
           "replayed %.1f us (%.2f us/row), restore + 1 row %.1f us, reset %.1f us\n",
           (long long)H, (long long)D, tm->ops->state_bytes_per_seq(tm) / 1048576.0, t1 - t0,
           (t1 - t0) / 48, t5 - t4, t3 - t2);
    free(o1);
    free(o2);
    df_t_destroy(&x);
    df_t_destroy(&out);
    df_kv_destroy(&kv);
    df_kv_destroy(&k2);
    tm->ops->destroy(tm);
    for (int i = 0; i < 12; i++) df_t_destroy(&t[i]);
    df_ws_destroy(&ws);
    free(pool);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_golden_fixtures),      cmocka_unit_test(test_reference_prompts),
      cmocka_unit_test(test_prefill_equals_decode), cmocka_unit_test(test_isa_agreement),
      cmocka_unit_test(test_alone_equals_batched),  cmocka_unit_test(test_rollback),
      cmocka_unit_test(test_config),               cmocka_unit_test(test_device_and_bytes),
      cmocka_unit_test(test_rollback_cost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
