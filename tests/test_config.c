/* tests/test_config.c — config/model_config.{h,c}: config.json of qwen3_moe and qwen3 as
 * published (Qwen3-30B-A3B, Qwen3-0.6B, DeepSeek-V3, Kimi-K2-Instruct), defaults and derived values (head_dim, kv heads,
 * the MoE layer map from decoder_sparse_step and mlp_only_layers), rope_scaling variants,
 * every error path with its message, and generation_config.json.
 *
 * Error cases patch a small valid base config (jansson json_object_update) so that each
 * row changes exactly one thing.
 */
#define _XOPEN_SOURCE 700

#include <ftw.h>
#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/model_config.h"
#include "engine/models/family.h"

/* ---- helpers -------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static char *make_tmpdir(void) {
  char *d = strdup("/tmp/df_cfg_test_XXXXXX");
  assert_non_null(d);
  assert_non_null(mkdtemp(d));
  return d;
}

static void rm_tmpdir(char *dir) {
  nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  free(dir);
}

static void write_text(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
  assert_int_equal(fclose(f), 0);
}

static int parse(const char *json, df_model_config *c, char *err, size_t errlen) {
  return df_cfg_parse(json, strlen(json), "config.json", c, err, errlen);
}

static void assert_zeroed(const df_model_config *c) {
  static const df_model_config zero;
  assert_memory_equal(c, &zero, sizeof zero);
}

/* Qwen/Qwen3-30B-A3B config.json as published. */
static const char *qwen3_30b_a3b =
    "{\n"
    "  \"architectures\": [\"Qwen3MoeForCausalLM\"],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 151643,\n"
    "  \"decoder_sparse_step\": 1,\n"
    "  \"eos_token_id\": 151645,\n"
    "  \"head_dim\": 128,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 2048,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 6144,\n"
    "  \"max_position_embeddings\": 40960,\n"
    "  \"max_window_layers\": 48,\n"
    "  \"mlp_only_layers\": [],\n"
    "  \"model_type\": \"qwen3_moe\",\n"
    "  \"moe_intermediate_size\": 768,\n"
    "  \"norm_topk_prob\": true,\n"
    "  \"num_attention_heads\": 32,\n"
    "  \"num_experts\": 128,\n"
    "  \"num_experts_per_tok\": 8,\n"
    "  \"num_hidden_layers\": 48,\n"
    "  \"num_key_value_heads\": 4,\n"
    "  \"output_router_logits\": false,\n"
    "  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_scaling\": null,\n"
    "  \"rope_theta\": 1000000.0,\n"
    "  \"router_aux_loss_coef\": 0.001,\n"
    "  \"sliding_window\": null,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.51.0\",\n"
    "  \"use_cache\": true,\n"
    "  \"use_sliding_window\": false,\n"
    "  \"vocab_size\": 151936\n"
    "}\n";

/* Qwen/Qwen3-0.6B config.json as published (head_dim 128 != hidden/heads = 64). */
static const char *qwen3_0_6b =
    "{\n"
    "  \"architectures\": [\"Qwen3ForCausalLM\"],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 151643,\n"
    "  \"eos_token_id\": 151645,\n"
    "  \"head_dim\": 128,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 1024,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 3072,\n"
    "  \"max_position_embeddings\": 40960,\n"
    "  \"max_window_layers\": 28,\n"
    "  \"model_type\": \"qwen3\",\n"
    "  \"num_attention_heads\": 16,\n"
    "  \"num_hidden_layers\": 28,\n"
    "  \"num_key_value_heads\": 8,\n"
    "  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_scaling\": null,\n"
    "  \"rope_theta\": 1000000,\n"
    "  \"sliding_window\": null,\n"
    "  \"tie_word_embeddings\": true,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.51.0\",\n"
    "  \"use_cache\": true,\n"
    "  \"use_sliding_window\": false,\n"
    "  \"vocab_size\": 151936\n"
    "}\n";

/* The smallest valid qwen3_moe config: everything else defaulted. */
static const char *tiny_moe =
    "{\"model_type\":\"qwen3_moe\",\"vocab_size\":1000,\"hidden_size\":64,"
    "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_experts\":8,"
    "\"num_experts_per_tok\":2,\"moe_intermediate_size\":32}";

/* tiny_moe with `patch` (a JSON object) merged in, `del` (a key or NULL) removed. */
static char *patched(const char *base, const char *patch, const char *del) {
  json_error_t e;
  json_t *b = json_loads(base, 0, &e);
  assert_non_null(b);
  if (patch) {
    json_t *p = json_loads(patch, 0, &e);
    if (!p) print_error("bad patch %s: %s\n", patch, e.text);
    assert_non_null(p);
    assert_int_equal(json_object_update(b, p), 0);
    json_decref(p);
  }
  if (del) assert_int_equal(json_object_del(b, del), 0);
  char *s = json_dumps(b, JSON_COMPACT);
  assert_non_null(s);
  json_decref(b);
  return s;
}

/* ---- published configs ---------------------------------------------------------------- */

static void test_qwen3_30b_a3b(void **state) {
  (void)state;
  char *dir = make_tmpdir();
  write_text(dir, "config.json", qwen3_30b_a3b);
  df_model_config c;
  char err[256] = "";
  assert_int_equal(df_cfg_load(dir, &c, err, sizeof err), 0);
  assert_string_equal(err, "");
  assert_int_equal(c.arch, DF_ARCH_QWEN3_MOE);
  assert_string_equal(c.model_type, "qwen3_moe");
  assert_string_equal(df_cfg_arch_name(c.arch), "qwen3_moe");
  assert_int_equal(c.vocab_size, 151936);
  assert_int_equal(c.hidden_size, 2048);
  assert_int_equal(c.num_hidden_layers, 48);
  assert_int_equal(c.num_attention_heads, 32);
  assert_int_equal(c.num_key_value_heads, 4);
  assert_int_equal(c.head_dim, 128);
  assert_int_equal(c.intermediate_size, 6144);
  assert_int_equal(c.moe_intermediate_size, 768);
  assert_int_equal(c.num_experts, 128);
  assert_int_equal(c.num_experts_per_tok, 8);
  assert_true(c.norm_topk_prob);
  assert_int_equal(c.decoder_sparse_step, 1);
  for (int i = 0; i < DF_CFG_MAX_LAYERS; i++) assert_int_equal(c.is_moe_layer[i], i < 48);
  assert_true(c.rms_norm_eps == 1e-6);
  assert_true(c.rope_theta == 1e6);
  assert_int_equal(c.rope_scaling.type, DF_ROPE_DEFAULT);
  assert_true(c.rope_scaling.factor == 1.0);
  assert_int_equal(c.max_position_embeddings, 40960);
  assert_false(c.tie_word_embeddings);
  assert_false(c.attention_bias);
  assert_string_equal(c.torch_dtype, "bfloat16");
  assert_int_equal(c.bos_token_id, 151643);
  assert_int_equal(c.n_eos, 1);
  assert_int_equal(c.eos_token_ids[0], 151645);

  /* The same text in memory gives the same struct. */
  df_model_config m;
  assert_int_equal(parse(qwen3_30b_a3b, &m, err, sizeof err), 0);
  assert_memory_equal(&m, &c, sizeof c);
  rm_tmpdir(dir);
}

static void test_qwen3_dense(void **state) {
  (void)state;
  df_model_config c;
  char err[256] = "";
  assert_int_equal(parse(qwen3_0_6b, &c, err, sizeof err), 0);
  assert_int_equal(c.arch, DF_ARCH_QWEN3);
  assert_string_equal(c.model_type, "qwen3");
  assert_string_equal(df_cfg_arch_name(c.arch), "qwen3");
  assert_int_equal(c.vocab_size, 151936);
  assert_int_equal(c.hidden_size, 1024);
  assert_int_equal(c.num_hidden_layers, 28);
  assert_int_equal(c.num_attention_heads, 16);
  assert_int_equal(c.num_key_value_heads, 8);
  assert_int_equal(c.head_dim, 128); /* from the file, not 1024 / 16 */
  assert_int_equal(c.intermediate_size, 3072);
  assert_int_equal(c.moe_intermediate_size, 0);
  assert_int_equal(c.num_experts, 0);
  assert_int_equal(c.num_experts_per_tok, 0);
  assert_false(c.norm_topk_prob);
  assert_int_equal(c.decoder_sparse_step, 1);
  for (int i = 0; i < DF_CFG_MAX_LAYERS; i++) assert_false(c.is_moe_layer[i]);
  assert_true(c.rope_theta == 1e6); /* an integer in the file */
  assert_true(c.tie_word_embeddings);
  assert_int_equal(c.max_position_embeddings, 40960);
  assert_int_equal(c.bos_token_id, 151643);
  assert_int_equal(c.n_eos, 1);
  assert_int_equal(c.eos_token_ids[0], 151645);
  assert_string_equal(df_cfg_arch_name((df_arch)0), "unknown");

  /* MoE keys in a dense config are ignored. */
  char *s = patched(qwen3_0_6b, "{\"num_experts\":8,\"num_experts_per_tok\":2}", NULL);
  assert_int_equal(parse(s, &c, err, sizeof err), 0);
  assert_int_equal(c.num_experts, 0);
  free(s);
}

/* ---- defaults and derived values ------------------------------------------------------ */

static void test_defaults(void **state) {
  (void)state;
  df_model_config c;
  char err[256] = "";
  assert_int_equal(parse(tiny_moe, &c, err, sizeof err), 0);
  assert_int_equal(c.num_key_value_heads, 4); /* = num_attention_heads */
  assert_int_equal(c.head_dim, 16);           /* = 64 / 4 */
  assert_int_equal(c.decoder_sparse_step, 1);
  for (int i = 0; i < 4; i++) assert_true(c.is_moe_layer[i]);
  assert_false(c.is_moe_layer[4]);
  assert_int_equal(c.intermediate_size, 0); /* no dense layer, absent */
  assert_false(c.norm_topk_prob);
  assert_true(c.rms_norm_eps == 1e-6);
  assert_true(c.rope_theta == 10000.0);
  assert_int_equal(c.rope_scaling.type, DF_ROPE_DEFAULT);
  assert_true(c.rope_scaling.factor == 1.0);
  assert_int_equal(c.max_position_embeddings, 32768);
  assert_false(c.tie_word_embeddings);
  assert_false(c.attention_bias);
  assert_string_equal(c.torch_dtype, "");
  assert_int_equal(c.bos_token_id, -1);
  assert_int_equal(c.n_eos, 0);

  /* null counts as absent, as transformers reads it as None. */
  char *s = patched(tiny_moe,
                    "{\"head_dim\":null,\"num_key_value_heads\":null,\"bos_token_id\":null,"
                    "\"eos_token_id\":null,\"rope_scaling\":null,\"sliding_window\":null,"
                    "\"mlp_only_layers\":null,\"use_sliding_window\":null}",
                    NULL);
  df_model_config n;
  assert_int_equal(parse(s, &n, err, sizeof err), 0);
  assert_memory_equal(&n, &c, sizeof c);
  free(s);

  /* head_dim default uses integer division, as transformers' hidden_size // heads. */
  s = patched(tiny_moe, "{\"hidden_size\":100,\"num_attention_heads\":3,"
                        "\"num_key_value_heads\":1}", NULL);
  assert_int_equal(parse(s, &c, err, sizeof err), 0);
  assert_int_equal(c.head_dim, 33);
  free(s);

  /* Newer spellings: dtype for torch_dtype, num_local_experts for num_experts,
   * rope_parameters for rope_theta / rope_scaling. */
  s = patched(tiny_moe,
              "{\"dtype\":\"float16\",\"num_local_experts\":16,"
              "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":500000.0}}",
              "num_experts");
  assert_int_equal(parse(s, &c, err, sizeof err), 0);
  assert_string_equal(c.torch_dtype, "float16");
  assert_int_equal(c.num_experts, 16);
  assert_true(c.rope_theta == 500000.0);
  assert_int_equal(c.rope_scaling.type, DF_ROPE_DEFAULT);
  free(s);
  s = patched(tiny_moe,
              "{\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":2.0,"
              "\"rope_theta\":1000.0}}",
              NULL);
  assert_int_equal(parse(s, &c, err, sizeof err), 0);
  assert_true(c.rope_theta == 1000.0);
  assert_int_equal(c.rope_scaling.type, DF_ROPE_YARN);
  assert_true(c.rope_scaling.factor == 2.0);
  free(s);
  s = patched(tiny_moe, "{\"rope_parameters\":{\"rope_theta\":1000.0}}", NULL);
  assert_int_equal(parse(s, &c, err, sizeof err), 0);
  assert_int_equal(c.rope_scaling.type, DF_ROPE_DEFAULT);
  free(s);
}

static void test_moe_layer_map(void **state) {
  (void)state;
  static const struct {
    const char *patch;
    const char *want; /* '1' = MoE layer, '0' = dense, one char per layer */
  } cases[] = {
      /* (i+1) % 2 == 0 → odd layers; 3 is mlp-only */
      {"{\"num_hidden_layers\":8,\"decoder_sparse_step\":2,\"mlp_only_layers\":[3,4],"
       "\"intermediate_size\":128}",
       "01000101"},
      {"{\"num_hidden_layers\":6,\"decoder_sparse_step\":3,\"intermediate_size\":128}", "001001"},
      {"{\"num_hidden_layers\":5,\"mlp_only_layers\":[0,4,0],\"intermediate_size\":128}",
       "01110"},
      {"{\"num_hidden_layers\":3,\"mlp_only_layers\":[0,1,2],\"intermediate_size\":128}", "000"},
      {"{\"num_hidden_layers\":3,\"num_experts\":0,\"intermediate_size\":128}", "000"},
      {"{\"num_hidden_layers\":4,\"decoder_sparse_step\":5,\"intermediate_size\":128}", "0000"},
      {"{\"num_hidden_layers\":2,\"decoder_sparse_step\":1,\"mlp_only_layers\":[]}", "11"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    char *s = patched(tiny_moe, cases[k].patch, NULL);
    df_model_config c;
    char err[256] = "";
    if (parse(s, &c, err, sizeof err) != 0) {
      print_error("case %zu: %s\n", k, err);
      fail();
    }
    size_t n = strlen(cases[k].want);
    assert_int_equal(c.num_hidden_layers, (int64_t)n);
    for (size_t i = 0; i < DF_CFG_MAX_LAYERS; i++) {
      bool want = i < n && cases[k].want[i] == '1';
      if (c.is_moe_layer[i] != want) {
        print_error("case %zu layer %zu: got %d\n", k, i, c.is_moe_layer[i]);
        fail();
      }
    }
    free(s);
  }
  /* num_experts 0: the MoE sizes are neither required nor kept. */
  char *s = patched(tiny_moe, "{\"num_experts\":0,\"intermediate_size\":96}",
                    "num_experts_per_tok");
  df_model_config c;
  char err[256];
  assert_int_equal(parse(s, &c, err, sizeof err), 0);
  assert_int_equal(c.num_experts, 0);
  assert_int_equal(c.num_experts_per_tok, 0);
  assert_int_equal(c.moe_intermediate_size, 0);
  assert_int_equal(c.intermediate_size, 96);
  free(s);
}

static void test_tokens_and_rope(void **state) {
  (void)state;
  df_model_config c;
  char err[256] = "";
  char *s = patched(tiny_moe, "{\"eos_token_id\":[7,3,999],\"bos_token_id\":0}", NULL);
  assert_int_equal(parse(s, &c, err, sizeof err), 0);
  assert_int_equal(c.n_eos, 3);
  assert_int_equal(c.eos_token_ids[0], 7);
  assert_int_equal(c.eos_token_ids[1], 3);
  assert_int_equal(c.eos_token_ids[2], 999);
  assert_int_equal(c.bos_token_id, 0);
  free(s);
  s = patched(tiny_moe, "{\"eos_token_id\":[]}", NULL);
  assert_int_equal(parse(s, &c, err, sizeof err), 0);
  assert_int_equal(c.n_eos, 0);
  free(s);

  static const struct {
    const char *rope;
    df_rope_type type;
    double factor;
    int64_t orig;
    double beta_fast, beta_slow, attn;
  } ropes[] = {
      {"{\"rope_type\":\"default\"}", DF_ROPE_DEFAULT, 1.0, 0, 0, 0, 0},
      {"{\"type\":\"default\"}", DF_ROPE_DEFAULT, 1.0, 0, 0, 0, 0},
      {"{\"rope_type\":\"linear\",\"factor\":2.0}", DF_ROPE_LINEAR, 2.0, 0, 0, 0, 0},
      {"{\"type\":\"linear\",\"factor\":4}", DF_ROPE_LINEAR, 4.0, 0, 0, 0, 0},
      /* the legacy "type" overrides "rope_type" (Qwen3Config.__init__) */
      {"{\"type\":\"linear\",\"rope_type\":\"default\",\"factor\":3.0}", DF_ROPE_LINEAR, 3.0, 0, 0,
       0, 0},
      /* Qwen3's published YaRN recipe */
      {"{\"rope_type\":\"yarn\",\"factor\":4.0,\"original_max_position_embeddings\":32768}",
       DF_ROPE_YARN, 4.0, 32768, 32.0, 1.0, 0.0},
      {"{\"type\":\"yarn\",\"factor\":8.0,\"beta_fast\":16,\"beta_slow\":2.0,"
       "\"attention_factor\":1.5}",
       DF_ROPE_YARN, 8.0, 0, 16.0, 2.0, 1.5},
      /* 0 betas mean the defaults (transformers' `or 32` / `or 1`) */
      {"{\"rope_type\":\"yarn\",\"factor\":2.0,\"beta_fast\":0,\"beta_slow\":0,"
       "\"truncate\":true}",
       DF_ROPE_YARN, 2.0, 0, 32.0, 1.0, 0.0},
  };
  for (size_t k = 0; k < sizeof ropes / sizeof *ropes; k++) {
    char patch[512];
    snprintf(patch, sizeof patch, "{\"rope_scaling\":%s}", ropes[k].rope);
    s = patched(tiny_moe, patch, NULL);
    if (parse(s, &c, err, sizeof err) != 0) {
      print_error("rope case %zu: %s\n", k, err);
      fail();
    }
    assert_int_equal(c.rope_scaling.type, ropes[k].type);
    assert_true(c.rope_scaling.factor == ropes[k].factor);
    assert_int_equal(c.rope_scaling.original_max_position_embeddings, ropes[k].orig);
    assert_true(c.rope_scaling.beta_fast == ropes[k].beta_fast);
    assert_true(c.rope_scaling.beta_slow == ropes[k].beta_slow);
    assert_true(c.rope_scaling.attention_factor == ropes[k].attn);
    free(s);
  }
}

/* ---- errors --------------------------------------------------------------------------- */

typedef struct {
  const char *what;
  const char *raw;   /* the whole text, or NULL to patch tiny_moe */
  const char *patch; /* merged into tiny_moe */
  const char *del;   /* removed from tiny_moe */
  const char *expect;
} err_case;

static const err_case err_cases[] = {
    {"syntax error", "{\n  \"model_type\": \"qwen3\",\n  \"hidden_size\": ,\n}", NULL, NULL,
     "config.json:3:18: JSON syntax error: "},
    {"empty text", "", NULL, NULL, "config.json:1:0: JSON syntax error"},
    {"trailing comma", "{\"model_type\": \"qwen3\",}", NULL, NULL,
     "config.json:1:24: JSON syntax error"},
    {"top level array", "[1]", NULL, NULL,
     "config.json: expected a JSON object at the top level, got an array"},
    {"duplicate key", "{\"model_type\":\"qwen3\",\"model_type\":\"qwen3\"}", NULL, NULL,
     "config.json:1:"},
    {"missing model_type", NULL, NULL, "model_type",
     "config.json: missing required key 'model_type' (supported: qwen3_moe, qwen3, deepseek_v3, kimi_k2, kimi_linear, kimi_k3)"},
    {"unknown model_type", NULL, "{\"model_type\":\"llama\"}", NULL,
     "config.json: key 'model_type': unsupported model type 'llama' (supported: qwen3_moe, "
     "qwen3, deepseek_v3, kimi_k2, kimi_linear, kimi_k3)"},
    {"model_type not a string", NULL, "{\"model_type\":3}", NULL,
     "config.json: key 'model_type': expected a string, got an integer"},
    {"missing vocab_size", NULL, NULL, "vocab_size",
     "config.json: missing required key 'vocab_size'"},
    {"missing hidden_size", NULL, NULL, "hidden_size",
     "config.json: missing required key 'hidden_size'"},
    {"missing num_hidden_layers", NULL, NULL, "num_hidden_layers",
     "missing required key 'num_hidden_layers'"},
    {"missing num_attention_heads", NULL, NULL, "num_attention_heads",
     "missing required key 'num_attention_heads'"},
    {"missing num_experts", NULL, NULL, "num_experts",
     "config.json: missing required key 'num_experts'"},
    {"missing num_experts_per_tok", NULL, NULL, "num_experts_per_tok",
     "missing required key 'num_experts_per_tok'"},
    {"missing moe_intermediate_size", NULL, NULL, "moe_intermediate_size",
     "missing required key 'moe_intermediate_size'"},
    {"dense layer without intermediate_size", NULL, "{\"mlp_only_layers\":[1]}", NULL,
     "config.json: missing required key 'intermediate_size'"},
    {"qwen3 without intermediate_size", NULL, "{\"model_type\":\"qwen3\"}", NULL,
     "config.json: missing required key 'intermediate_size'"},
    {"hidden_size a string", NULL, "{\"hidden_size\":\"64\"}", NULL,
     "config.json: key 'hidden_size': expected an integer, got a string"},
    {"hidden_size a real", NULL, "{\"hidden_size\":64.0}", NULL,
     "key 'hidden_size': expected an integer, got a real number"},
    {"hidden_size a boolean", NULL, "{\"hidden_size\":true}", NULL,
     "key 'hidden_size': expected an integer, got a boolean"},
    {"zero vocab", NULL, "{\"vocab_size\":0}", NULL,
     "config.json: key 'vocab_size': 0 is out of range (expected 1..2147483647)"},
    {"negative hidden", NULL, "{\"hidden_size\":-64}", NULL,
     "key 'hidden_size': -64 is out of range"},
    {"size over 2^31", NULL, "{\"moe_intermediate_size\":2147483648}", NULL,
     "key 'moe_intermediate_size': 2147483648 is out of range"},
    {"too many layers", NULL, "{\"num_hidden_layers\":513}", NULL,
     "config.json: key 'num_hidden_layers': 513 layers, more than the 512 supported"},
    {"zero layers", NULL, "{\"num_hidden_layers\":0}", NULL,
     "key 'num_hidden_layers': 0 is out of range (expected 1..9223372036854775807)"},
    {"heads not divisible by kv heads", NULL,
     "{\"num_attention_heads\":32,\"num_key_value_heads\":5}", NULL,
     "config.json: key 'num_key_value_heads': 32 query heads are not divisible by 5 kv heads"},
    {"zero kv heads", NULL, "{\"num_key_value_heads\":0}", NULL,
     "key 'num_key_value_heads': 0 is out of range"},
    {"zero head_dim", NULL, "{\"head_dim\":0}", NULL, "key 'head_dim': 0 is out of range"},
    {"derived head_dim 0", NULL,
     "{\"hidden_size\":2,\"num_attention_heads\":4,\"num_key_value_heads\":4}", NULL,
     "config.json: key 'head_dim' absent and hidden_size 2 / num_attention_heads 4 is 0"},
    {"top-k above num_experts", NULL, "{\"num_experts\":8,\"num_experts_per_tok\":9}", NULL,
     "config.json: key 'num_experts_per_tok': top-k 9 exceeds num_experts 8"},
    {"zero top-k", NULL, "{\"num_experts_per_tok\":0}", NULL,
     "key 'num_experts_per_tok': 0 is out of range"},
    {"negative num_experts", NULL, "{\"num_experts\":-1}", NULL,
     "key 'num_experts': -1 is out of range (expected 0..2147483647)"},
    {"zero decoder_sparse_step", NULL, "{\"decoder_sparse_step\":0}", NULL,
     "config.json: key 'decoder_sparse_step': 0 is out of range (expected 1..2147483647)"},
    {"mlp_only_layers not a list", NULL, "{\"mlp_only_layers\":3}", NULL,
     "config.json: key 'mlp_only_layers': expected a list of layer indices, got an integer"},
    {"mlp_only_layers entry a string", NULL, "{\"mlp_only_layers\":[1,\"2\"]}", NULL,
     "key 'mlp_only_layers[1]': expected an integer, got a string"},
    {"mlp_only_layers out of range", NULL, "{\"mlp_only_layers\":[0,4]}", NULL,
     "config.json: key 'mlp_only_layers[1]': layer 4 is out of range (expected 0..3)"},
    {"norm_topk_prob not a boolean", NULL, "{\"norm_topk_prob\":1}", NULL,
     "config.json: key 'norm_topk_prob': expected true or false, got an integer"},
    {"tie_word_embeddings a string", NULL, "{\"tie_word_embeddings\":\"true\"}", NULL,
     "key 'tie_word_embeddings': expected true or false, got a string"},
    {"unsupported activation", NULL, "{\"hidden_act\":\"gelu\"}", NULL,
     "config.json: key 'hidden_act': unsupported activation 'gelu' (supported: silu)"},
    {"sliding window", NULL, "{\"use_sliding_window\":true,\"sliding_window\":4096}", NULL,
     "config.json: key 'use_sliding_window': sliding-window attention is not supported"},
    {"zero rms_norm_eps", NULL, "{\"rms_norm_eps\":0}", NULL,
     "key 'rms_norm_eps': 0 is out of range (expected > 0)"},
    {"rms_norm_eps a string", NULL, "{\"rms_norm_eps\":\"1e-6\"}", NULL,
     "key 'rms_norm_eps': expected a number, got a string"},
    {"negative rope_theta", NULL, "{\"rope_theta\":-1}", NULL,
     "key 'rope_theta': -1 is out of range (expected > 0)"},
    {"rope_scaling a string", NULL, "{\"rope_scaling\":\"yarn\"}", NULL,
     "config.json: key 'rope_scaling': expected an object or null, got a string"},
    {"rope_scaling without type", NULL, "{\"rope_scaling\":{\"factor\":2.0}}", NULL,
     "config.json: key 'rope_scaling': missing 'rope_type' (supported: default, linear, yarn)"},
    {"rope type dynamic", NULL, "{\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2.0}}",
     NULL,
     "config.json: key 'rope_scaling.rope_type': unsupported rope type 'dynamic' (supported: "
     "default, linear, yarn)"},
    {"legacy rope type longrope", NULL, "{\"rope_scaling\":{\"type\":\"longrope\"}}", NULL,
     "key 'rope_scaling.type': unsupported rope type 'longrope' (supported: default, linear, "
     "yarn)"},
    {"rope type not a string", NULL, "{\"rope_scaling\":{\"rope_type\":1}}", NULL,
     "key 'rope_scaling.rope_type': expected a string, got an integer"},
    {"yarn without factor", NULL, "{\"rope_scaling\":{\"rope_type\":\"yarn\"}}", NULL,
     "config.json: key 'rope_scaling': rope type 'yarn' requires 'factor'"},
    {"linear without factor", NULL, "{\"rope_scaling\":{\"rope_type\":\"linear\"}}", NULL,
     "key 'rope_scaling': rope type 'linear' requires 'factor'"},
    {"factor below 1", NULL, "{\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":0.5}}", NULL,
     "config.json: key 'rope_scaling.factor': 0.5 is out of range (expected >= 1)"},
    {"factor a string", NULL, "{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":\"4\"}}", NULL,
     "key 'rope_scaling.factor': expected a number, got a string"},
    {"yarn original_max a real", NULL,
     "{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,"
     "\"original_max_position_embeddings\":32768.5}}",
     NULL, "key 'rope_scaling.original_max_position_embeddings': expected a positive integer"},
    {"yarn beta_fast below beta_slow", NULL,
     "{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,\"beta_fast\":1,\"beta_slow\":2}}",
     NULL, "key 'rope_scaling': beta_fast 1 is below beta_slow 2"},
    {"yarn beta a string", NULL,
     "{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,\"beta_slow\":\"1\"}}", NULL,
     "key 'rope_scaling.beta_slow': expected a number, got a string"},
    {"yarn negative attention_factor", NULL,
     "{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,\"attention_factor\":-1}}", NULL,
     "key 'rope_scaling.attention_factor': -1 is negative"},
    {"yarn mscale", NULL,
     "{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,\"mscale\":1,\"mscale_all_dim\":1}}",
     NULL, "key 'rope_scaling.mscale': not supported for model types qwen3_moe, qwen3"},
    {"yarn truncate false", NULL,
     "{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,\"truncate\":false}}", NULL,
     "key 'rope_scaling.truncate': only true (the default) is supported"},
    {"rope_parameters type dynamic", NULL,
     "{\"rope_parameters\":{\"rope_type\":\"dynamic\",\"factor\":2.0}}", NULL,
     "key 'rope_parameters.rope_type': unsupported rope type 'dynamic'"},
    {"rope_parameters theta a string", NULL, "{\"rope_parameters\":{\"rope_theta\":\"1\"}}", NULL,
     "key 'rope_parameters.rope_theta': expected a number, got a string"},
    {"eos a string", NULL, "{\"eos_token_id\":\"</s>\"}", NULL,
     "config.json: key 'eos_token_id': expected an integer or a list of integers, got a string"},
    {"too many eos", NULL, "{\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", NULL,
     "config.json: key 'eos_token_id': 9 token ids, more than the 8 supported"},
    {"eos entry outside vocab", NULL, "{\"eos_token_id\":[1,1000]}", NULL,
     "config.json: key 'eos_token_id[1]': token id 1000 is out of range (expected 0..999)"},
    {"eos entry a real", NULL, "{\"eos_token_id\":[1.5]}", NULL,
     "key 'eos_token_id[0]': expected an integer, got a real number"},
    {"eos outside vocab", NULL, "{\"eos_token_id\":1000}", NULL,
     "key 'eos_token_id': 1000 is out of range (expected 0..999)"},
    {"negative bos", NULL, "{\"bos_token_id\":-1}", NULL,
     "config.json: key 'bos_token_id': -1 is out of range (expected 0..999)"},
    {"torch_dtype a number", NULL, "{\"torch_dtype\":16}", NULL,
     "key 'torch_dtype': expected a string, got an integer"},
};

static void test_errors(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof err_cases / sizeof *err_cases; i++) {
    const err_case *c = &err_cases[i];
    char *s = c->raw ? strdup(c->raw) : patched(tiny_moe, c->patch, c->del);
    assert_non_null(s);
    df_model_config m;
    memset(&m, 0xab, sizeof m);
    char err[512] = "";
    int rc = parse(s, &m, err, sizeof err);
    if (rc != -1 || strstr(err, c->expect) == NULL || strchr(err, '\n')) {
      print_error("case '%s': rc %d err \"%s\", expected \"%s\"\n", c->what, rc, err, c->expect);
      fail();
    }
    assert_zeroed(&m); /* on error *out is zeroed */
    free(s);
  }
  /* Integers beyond 64 bits are a syntax error with a position. */
  df_model_config m;
  char err[256];
  const char *big = "{\"model_type\":\"qwen3\",\"vocab_size\":99999999999999999999}";
  assert_int_equal(parse(big, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, "config.json:1:"));
  assert_non_null(strstr(err, "JSON syntax error"));
  /* Text with a NUL inside is not JSON. */
  assert_int_equal(df_cfg_parse("{}\0{}", 5, "c.json", &m, err, sizeof err), -1);
  assert_non_null(strstr(err, "c.json:1:"));
  /* Tiny buffers stay terminated. */
  char small[6];
  memset(small, 'x', sizeof small);
  assert_int_equal(df_cfg_parse("[", 1, "config.json", &m, small, 5), -1);
  assert_int_equal(small[4], '\0');
  assert_int_equal(small[5], 'x');
  assert_int_equal(df_cfg_parse("[", 1, "config.json", &m, NULL, 0), -1);
  assert_int_equal(df_cfg_parse(NULL, 0, "config.json", &m, err, sizeof err), -1);
  assert_int_equal(df_cfg_parse("{}", 2, "config.json", NULL, err, sizeof err), -1);
}

static void test_load_errors(void **state) {
  (void)state;
  char *dir = make_tmpdir();
  df_model_config m;
  char err[512];
  memset(&m, 0xab, sizeof m);
  assert_int_equal(df_cfg_load(dir, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, "/config.json: cannot open: No such file or directory"));
  assert_non_null(strstr(err, dir));
  assert_zeroed(&m);
  /* Messages from a file name the path. */
  write_text(dir, "config.json", "{\n\"model_type\": \"mixtral\"\n}");
  assert_int_equal(df_cfg_load(dir, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, dir));
  assert_non_null(strstr(err, "/config.json: key 'model_type': unsupported model type "
                              "'mixtral' (supported: qwen3_moe, qwen3, deepseek_v3, kimi_k2, kimi_linear, kimi_k3)"));
  write_text(dir, "config.json", "{\n\"model_type\": \"qwen3\",\n\"hidden_size\": 1\n");
  assert_int_equal(df_cfg_load(dir, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, "/config.json:4:0: JSON syntax error"));
  assert_int_equal(df_cfg_load(NULL, &m, err, sizeof err), -1);
  assert_string_equal(err, "config.json: NULL model folder");
  /* A folder in place of the file. */
  char sub[512];
  snprintf(sub, sizeof sub, "%s/config.json", dir);
  remove(sub);
  assert_int_equal(mkdir(sub, 0700), 0);
  assert_int_equal(df_cfg_load(dir, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, "/config.json: not a regular file"));
  /* A FIFO in place of the file: refused at once, never a blocked open. */
  assert_int_equal(rmdir(sub), 0);
  assert_int_equal(mkfifo(sub, 0600), 0);
  assert_int_equal(df_cfg_load(dir, &m, err, sizeof err), -1);
  assert_non_null(strstr(err, "/config.json: not a regular file"));
  remove(sub);
  rm_tmpdir(dir);
}

/* ---- generation_config.json ----------------------------------------------------------- */

static void test_generation_config(void **state) {
  (void)state;
  df_model_config mc;
  char err[512] = "";
  assert_int_equal(parse(qwen3_0_6b, &mc, err, sizeof err), 0);
  char *dir = make_tmpdir();
  df_gen_config g;

  /* Absent: transformers' defaults, tokens from config.json. */
  assert_int_equal(df_gen_cfg_load(dir, &mc, &g, err, sizeof err), 0);
  assert_false(g.do_sample);
  assert_true(g.temperature == 1.0);
  assert_true(g.top_p == 1.0);
  assert_int_equal(g.top_k, 50);
  assert_int_equal(g.bos_token_id, 151643);
  assert_int_equal(g.n_eos, 1);
  assert_int_equal(g.eos_token_ids[0], 151645);
  assert_int_equal(df_gen_cfg_load(dir, NULL, &g, err, sizeof err), 0);
  assert_int_equal(g.bos_token_id, -1);
  assert_int_equal(g.n_eos, 0);

  /* Qwen/Qwen3-0.6B generation_config.json as published. */
  write_text(dir, "generation_config.json",
             "{\n  \"bos_token_id\": 151643,\n  \"do_sample\": true,\n"
             "  \"eos_token_id\": [151645, 151643],\n  \"pad_token_id\": 151643,\n"
             "  \"temperature\": 0.6,\n  \"top_k\": 20,\n  \"top_p\": 0.95,\n"
             "  \"transformers_version\": \"4.51.0\"\n}\n");
  assert_int_equal(df_gen_cfg_load(dir, &mc, &g, err, sizeof err), 0);
  assert_true(g.do_sample);
  assert_true(g.temperature == 0.6);
  assert_true(g.top_p == 0.95);
  assert_int_equal(g.top_k, 20);
  assert_int_equal(g.bos_token_id, 151643);
  assert_int_equal(g.n_eos, 2);
  assert_int_equal(g.eos_token_ids[0], 151645);
  assert_int_equal(g.eos_token_ids[1], 151643);

  /* Partial: absent or null keys keep the defaults / config.json's tokens. */
  const char *partial = "{\"temperature\":0.7,\"eos_token_id\":null,\"top_k\":0}";
  assert_int_equal(
      df_gen_cfg_parse(partial, strlen(partial), "generation_config.json", &mc, &g, err,
                       sizeof err),
      0);
  assert_true(g.temperature == 0.7);
  assert_false(g.do_sample);
  assert_int_equal(g.top_k, 0);
  assert_int_equal(g.n_eos, 1);
  assert_int_equal(g.eos_token_ids[0], 151645);
  assert_int_equal(g.bos_token_id, 151643);
  const char *eos1 = "{\"eos_token_id\":2}";
  assert_int_equal(df_gen_cfg_parse(eos1, strlen(eos1), NULL, &mc, &g, err, sizeof err), 0);
  assert_int_equal(g.n_eos, 1);
  assert_int_equal(g.eos_token_ids[0], 2);

  static const struct {
    const char *json, *expect;
  } bad[] = {
      {"{\"top_k\":\"20\"}",
       "generation_config.json: key 'top_k': expected an integer, got a string"},
      {"{\"top_k\":-1}", "generation_config.json: key 'top_k': -1 is out of range"},
      {"{\"do_sample\":\"true\"}",
       "generation_config.json: key 'do_sample': expected true or false, got a string"},
      {"{\"temperature\":-0.5}", "generation_config.json: key 'temperature': -0.5 is negative"},
      {"{\"temperature\":\"hot\"}", "key 'temperature': expected a number, got a string"},
      {"{\"top_p\":1.5}",
       "generation_config.json: key 'top_p': 1.5 is out of range (expected 0 < top_p <= 1)"},
      {"{\"top_p\":0}", "key 'top_p': 0 is out of range"},
      {"{\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}",
       "key 'eos_token_id': 9 token ids, more than the 8 supported"},
      {"{\"eos_token_id\":[151936]}",
       "key 'eos_token_id[0]': token id 151936 is out of range (expected 0..151935)"},
      {"{\"bos_token_id\":\"<s>\"}", "key 'bos_token_id': expected an integer, got a string"},
      {"{\"top_k\": 20,\n}", "generation_config.json:2:1: JSON syntax error"},
      {"7", "generation_config.json:1:1: JSON syntax error"},
      {"[]", "generation_config.json: expected a JSON object at the top level, got an array"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    memset(&g, 0xab, sizeof g);
    int rc = df_gen_cfg_parse(bad[i].json, strlen(bad[i].json), "generation_config.json", &mc,
                              &g, err, sizeof err);
    if (rc != -1 || !strstr(err, bad[i].expect)) {
      print_error("gen case %zu: rc %d err \"%s\", expected \"%s\"\n", i, rc, err,
                  bad[i].expect);
      fail();
    }
    /* on error *out holds the defaults */
    assert_true(g.temperature == 1.0);
    assert_int_equal(g.top_k, 50);
    assert_int_equal(g.n_eos, 1);
  }
  /* From a file: the message names the path. */
  write_text(dir, "generation_config.json", "{\"top_p\": \"x\"}");
  assert_int_equal(df_gen_cfg_load(dir, &mc, &g, err, sizeof err), -1);
  assert_non_null(strstr(err, dir));
  assert_non_null(strstr(err, "/generation_config.json: key 'top_p': expected a number"));
  assert_int_equal(df_gen_cfg_load(dir, &mc, NULL, err, sizeof err), -1);
  rm_tmpdir(dir);
}

/* ---- deepseek_v3 / kimi_k2 ------------------------------------------------------------ */

/* deepseek-ai/DeepSeek-V3 config.json as published (auto_map omitted). */
static const char *deepseek_v3 =
    "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"aux_loss_alpha\":0.001,\"bos_token_id\":0,\"eos_token_id\":1,"
    "\"ep_size\":1,\"first_k_dense_replace\":3,\"hidden_act\":\"silu\",\"hidden_size\":7168,"
    "\"initializer_range\":0.02,\"intermediate_size\":18432,\"kv_lora_rank\":512,"
    "\"max_position_embeddings\":163840,\"model_type\":\"deepseek_v3\","
    "\"moe_intermediate_size\":2048,\"moe_layer_freq\":1,\"n_group\":8,\"n_routed_experts\":256,"
    "\"n_shared_experts\":1,\"norm_topk_prob\":true,\"num_attention_heads\":128,"
    "\"num_experts_per_tok\":8,\"num_hidden_layers\":61,\"num_key_value_heads\":128,"
    "\"num_nextn_predict_layers\":1,\"pretraining_tp\":1,\"q_lora_rank\":1536,"
    "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"quantization_config\":"
    "{\"activation_scheme\":\"dynamic\",\"fmt\":\"e4m3\",\"quant_method\":\"fp8\","
    "\"weight_block_size\":[128,128]},\"rms_norm_eps\":1e-06,\"rope_scaling\":{\"beta_fast\":32,"
    "\"beta_slow\":1,\"factor\":40,\"mscale\":1.0,\"mscale_all_dim\":1.0,"
    "\"original_max_position_embeddings\":4096,\"type\":\"yarn\"},\"rope_theta\":10000,"
    "\"routed_scaling_factor\":2.5,\"scoring_func\":\"sigmoid\",\"seq_aux\":true,"
    "\"tie_word_embeddings\":false,\"topk_group\":4,\"topk_method\":\"noaux_tc\","
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.33.1\",\"use_cache\":true,"
    "\"v_head_dim\":128,\"vocab_size\":129280}";

/* moonshotai/Kimi-K2-Instruct config.json as published (auto_map omitted). */
static const char *kimi_k2 =
    "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"aux_loss_alpha\":0.001,\"bos_token_id\":163584,"
    "\"eos_token_id\":163585,\"ep_size\":1,\"first_k_dense_replace\":1,\"hidden_act\":\"silu\","
    "\"hidden_size\":7168,\"initializer_range\":0.02,\"intermediate_size\":18432,"
    "\"kv_lora_rank\":512,\"max_position_embeddings\":131072,\"model_type\":\"kimi_k2\","
    "\"moe_intermediate_size\":2048,\"moe_layer_freq\":1,\"n_group\":1,\"n_routed_experts\":384,"
    "\"n_shared_experts\":1,\"norm_topk_prob\":true,\"num_attention_heads\":64,"
    "\"num_experts_per_tok\":8,\"num_hidden_layers\":61,\"num_key_value_heads\":64,"
    "\"num_nextn_predict_layers\":0,\"pretraining_tp\":1,\"q_lora_rank\":1536,"
    "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"quantization_config\":"
    "{\"activation_scheme\":\"dynamic\",\"fmt\":\"e4m3\",\"quant_method\":\"fp8\","
    "\"weight_block_size\":[128,128]},\"rms_norm_eps\":1e-06,\"rope_scaling\":{\"beta_fast\":1.0,"
    "\"beta_slow\":1.0,\"factor\":32.0,\"mscale\":1.0,\"mscale_all_dim\":1.0,"
    "\"original_max_position_embeddings\":4096,\"type\":\"yarn\"},\"rope_theta\":50000.0,"
    "\"routed_scaling_factor\":2.827,\"scoring_func\":\"sigmoid\",\"seq_aux\":true,"
    "\"tie_word_embeddings\":false,\"topk_group\":1,\"topk_method\":\"noaux_tc\","
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.48.3\",\"use_cache\":true,"
    "\"v_head_dim\":128,\"vocab_size\":163840}";

static void test_deepseek_v3(void **state) {
  (void)state;
  df_model_config c;
  char err[256] = "";
  assert_int_equal(parse(deepseek_v3, &c, err, sizeof err), 0);
  assert_int_equal(c.arch, DF_ARCH_DEEPSEEK_V3);
  assert_string_equal(c.model_type, "deepseek_v3");
  assert_string_equal(df_cfg_arch_name(c.arch), "deepseek_v3");
  assert_int_equal(c.hidden_size, 7168);
  assert_int_equal(c.num_attention_heads, 128);
  assert_int_equal(c.head_dim, 64); /* qk_rope_head_dim, as DeepseekV3Config sets it */
  assert_int_equal(c.q_lora_rank, 1536);
  assert_int_equal(c.kv_lora_rank, 512);
  assert_int_equal(c.qk_nope_head_dim, 128);
  assert_int_equal(c.qk_rope_head_dim, 64);
  assert_int_equal(c.v_head_dim, 128);
  assert_int_equal(c.num_experts, 256);
  assert_int_equal(c.num_experts_per_tok, 8);
  assert_int_equal(c.n_shared_experts, 1);
  assert_int_equal(c.moe_intermediate_size, 2048);
  assert_int_equal(c.intermediate_size, 18432);
  assert_int_equal(c.first_k_dense_replace, 3);
  assert_int_equal(c.moe_layer_freq, 1);
  assert_int_equal(c.n_group, 8);
  assert_int_equal(c.topk_group, 4);
  assert_true(c.routed_scaling_factor == 2.5);
  assert_true(c.norm_topk_prob);
  assert_true(c.rope_interleave);
  assert_int_equal(c.router, DF_ROUTER_SIGMOID_NOAUX);
  for (int i = 0; i < 61; i++) assert_int_equal(c.is_moe_layer[i], i >= 3);
  assert_false(c.is_moe_layer[61]);
  assert_int_equal(c.quant, DF_QUANT_FP8_BLOCK);
  assert_int_equal(c.quant_block_n, 128);
  assert_int_equal(c.quant_block_k, 128);
  assert_int_equal(c.rope_scaling.type, DF_ROPE_YARN);
  assert_true(c.rope_scaling.factor == 40.0);
  assert_int_equal(c.rope_scaling.original_max_position_embeddings, 4096);
  assert_true(c.rope_scaling.mscale == 1.0 && c.rope_scaling.mscale_all_dim == 1.0);
  assert_true(c.rope_scaling.beta_fast == 32.0 && c.rope_scaling.beta_slow == 1.0);
  assert_true(c.rope_theta == 10000.0);
  assert_int_equal(c.max_position_embeddings, 163840);
  assert_int_equal(c.bos_token_id, 0);
  assert_int_equal(c.n_eos, 1);
  assert_int_equal(c.eos_token_ids[0], 1);

  /* Unquantised, no q compression, defaults of DeepseekV3Config. */
  char *s = patched(deepseek_v3,
                    "{\"quantization_config\":null,\"q_lora_rank\":null,\"moe_layer_freq\":2}",
                    NULL);
  assert_int_equal(parse(s, &c, err, sizeof err), 0);
  assert_int_equal(c.quant, DF_QUANT_NONE);
  assert_int_equal(c.q_lora_rank, 0);
  assert_true(c.rope_interleave);
  for (int i = 0; i < 61; i++) assert_int_equal(c.is_moe_layer[i], i >= 3 && i % 2 == 0);
  free(s);
  s = patched(deepseek_v3, "{\"n_routed_experts\":0}", "num_experts_per_tok");
  assert_int_equal(parse(s, &c, err, sizeof err), 0);
  for (int i = 0; i < 61; i++) assert_false(c.is_moe_layer[i]);
  free(s);
}

static void test_kimi_k2(void **state) {
  (void)state;
  df_model_config c;
  char err[256] = "";
  assert_int_equal(parse(kimi_k2, &c, err, sizeof err), 0);
  assert_int_equal(c.arch, DF_ARCH_DEEPSEEK_V3);
  assert_string_equal(c.model_type, "kimi_k2");
  assert_int_equal(c.num_experts, 384);
  assert_int_equal(c.num_attention_heads, 64);
  assert_int_equal(c.n_group, 1);
  assert_int_equal(c.topk_group, 1);
  assert_int_equal(c.first_k_dense_replace, 1);
  assert_true(c.routed_scaling_factor == 2.827);
  assert_true(c.rope_theta == 50000.0);
  assert_true(c.rope_scaling.factor == 32.0);
  assert_true(c.rope_scaling.beta_fast == 1.0 && c.rope_scaling.beta_slow == 1.0);
  for (int i = 0; i < 61; i++) assert_int_equal(c.is_moe_layer[i], i >= 1);
  assert_int_equal(c.eos_token_ids[0], 163585);
}

static void test_deepseek_errors(void **state) {
  (void)state;
  static const struct {
    const char *patch, *del, *expect;
  } cases[] = {
      {NULL, "kv_lora_rank", "config.json: missing required key 'kv_lora_rank'"},
      {NULL, "qk_rope_head_dim", "missing required key 'qk_rope_head_dim'"},
      {NULL, "n_routed_experts", "missing required key 'n_routed_experts'"},
      {NULL, "num_experts_per_tok", "missing required key 'num_experts_per_tok'"},
      {"{\"qk_rope_head_dim\":63}", NULL, "key 'qk_rope_head_dim': 63 must be even"},
      {"{\"topk_method\":\"greedy\"}", NULL,
       "config.json: key 'topk_method': unsupported routing 'greedy' (supported: noaux_tc)"},
      {"{\"scoring_func\":\"softmax\"}", NULL,
       "key 'scoring_func': unsupported scoring 'softmax' (supported: sigmoid)"},
      {"{\"n_group\":3}", NULL,
       "key 'n_group': 3 groups do not split 256 experts into equal groups of at least 2"},
      {"{\"topk_group\":9}", NULL, "key 'topk_group': 9 exceeds n_group 8"},
      {"{\"topk_group\":1,\"num_experts_per_tok\":33}", NULL,
       "key 'num_experts_per_tok': top-k 33 exceeds the 32 experts of topk_group 1 groups"},
      {"{\"routed_scaling_factor\":0}", NULL, "key 'routed_scaling_factor': 0 is out of range"},
      {"{\"attention_bias\":true}", NULL,
       "key 'attention_bias': true is not supported for model type deepseek_v3"},
      {"{\"quantization_config\":{\"quant_method\":\"awq\"}}", NULL,
       "key 'quantization_config.quant_method': unsupported method 'awq' (supported: fp8)"},
      {"{\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e5m2\","
       "\"weight_block_size\":[128,128]}}",
       NULL, "key 'quantization_config.fmt': unsupported FP8 format 'e5m2' (supported: e4m3)"},
      {"{\"quantization_config\":{\"quant_method\":\"fp8\"}}", NULL,
       "key 'quantization_config.weight_block_size': expected [n, k] of two positive integers"},
      {"{\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[128,0]}}", NULL,
       "key 'quantization_config.weight_block_size': expected [n, k]"},
      {"{\"quantization_config\":[1]}", NULL,
       "key 'quantization_config': expected an object or null, got an array"},
      {"{\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,\"mscale\":\"1\"}}", NULL,
       "key 'rope_scaling.mscale': expected a non-negative number, got a string"},
      {"{\"first_k_dense_replace\":0}", "intermediate_size", NULL},
      {"{\"first_k_dense_replace\":1}", "intermediate_size",
       "config.json: missing required key 'intermediate_size'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *s = patched(deepseek_v3, cases[i].patch, cases[i].del);
    df_model_config m;
    char err[512] = "";
    int rc = parse(s, &m, err, sizeof err);
    if (cases[i].expect ? (rc != -1 || !strstr(err, cases[i].expect)) : rc != 0) {
      print_error("deepseek case %zu: rc %d err \"%s\", expected \"%s\"\n", i, rc, err,
                  cases[i].expect ? cases[i].expect : "success");
      fail();
    }
    free(s);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen3_30b_a3b),  cmocka_unit_test(test_qwen3_dense),
      cmocka_unit_test(test_defaults),       cmocka_unit_test(test_moe_layer_map),
      cmocka_unit_test(test_tokens_and_rope), cmocka_unit_test(test_errors),
      cmocka_unit_test(test_load_errors),    cmocka_unit_test(test_generation_config),
      cmocka_unit_test(test_deepseek_v3),    cmocka_unit_test(test_kimi_k2),
      cmocka_unit_test(test_deepseek_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
