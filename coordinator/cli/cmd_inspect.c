/* coordinator/cli/cmd_inspect.c — `deltafin inspect DIR`: config summary, tensor inventory and
 * memory plan (resident part vs routed experts, KV cache bytes per token: K and V per kv
 * head, or the MLA latent + shared RoPE key for deepseek_v3 / kimi_k2). */
#include <stdio.h>
#include <string.h>

#include "coordinator/cli/cli.h"
#include "engine/model.h"

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

int df_cmd_inspect(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf("usage: deltafin inspect DIR\n"
           "  config summary, tensor inventory and memory plan (resident part vs routed experts,\n"
           "  weight bytes read per decoded token, KV cache bytes per token) of a model folder\n");
    return 0;
  }
  if (argc != 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: deltafin inspect DIR\n");
    return 2;
  }
  char err[1024];
  df_model *m = NULL;
  df_model_opts mo = {.max_ctx = 1, .max_rows = 1};
  if (df_model_load(argv[1], &mo, &m, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: %s\n", err);
    return 1;
  }
  const df_model_config *c = df_model_cfg(m);
  printf("model        %s\n", argv[1]);
  printf("type         %s\n", c->model_type);
  printf("layers       %lld (hidden %lld, vocab %lld)\n", (long long)c->num_hidden_layers,
         (long long)c->hidden_size, (long long)c->vocab_size);
  df_model_print_summary(m, stdout);
  int64_t n_moe = 0;
  for (int64_t l = 0; l < c->num_hidden_layers; l++) n_moe += c->is_moe_layer[l];
  if (c->quant == DF_QUANT_FP8_BLOCK)
    printf("weights      FP8 E4M3, %lldx%lld block scales (de-quantised inside the kernels)\n",
           (long long)c->quant_block_n, (long long)c->quant_block_k);
  if (n_moe < c->num_hidden_layers)
    printf("dense mlp    width %lld on %lld layers\n", (long long)c->intermediate_size,
           (long long)(c->num_hidden_layers - n_moe));
  printf("embeddings   %s\n", c->tie_word_embeddings ? "tied (lm_head = embed_tokens)" : "untied");
  printf("\ntensors:\n");
  const df_st_model *st = df_model_tensors(m);
  int64_t last_layer = -1;
  uint64_t ex_bytes = 0, ex_n = 0;
  const char *ex_dt = "";
  for (size_t i = 0, n = df_st_count(st); i <= n; i++) {
    const df_st_tensor *t = i < n ? df_st_at(st, i) : NULL;
    long long layer = -1;
    int off = 0;
    bool expert = t && sscanf(t->name, "model.layers.%lld.mlp.experts.%n", &layer, &off) == 1 && off > 0;
    if ((!expert || layer != last_layer) && ex_n) {
      printf("  model.layers.%lld.mlp.experts.*  %llu tensors  %s  %.1f MiB\n",
             (long long)last_layer, (unsigned long long)ex_n, ex_dt, ex_bytes / 1048576.0);
      ex_n = ex_bytes = 0;
    }
    if (!t) break;
    if (expert) {
      last_layer = layer;
      ex_n++;
      ex_bytes += t->nbytes;
      ex_dt = df_dtype_name(t->dtype);
      continue;
    }
    char shape[96] = "";
    size_t o = 0;
    for (int d = 0; d < t->ndim; d++)
      o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    printf("  %-48s %-5s [%s]  %.1f KiB\n", t->name, df_dtype_name(t->dtype), shape, t->nbytes / 1024.0);
  }
  df_model_bytes b = df_model_memory(m);
  uint64_t kv_tok = df_model_kv_bytes_per_token(m);
  printf("\nmemory plan:\n");
  printf("  checkpoint tensors   %12llu bytes (%.3f GiB) in %d file(s)\n",
         (unsigned long long)b.total, gib(b.total), df_st_file_count(st));
  printf("  resident part        %12llu bytes (%.3f GiB): embeddings, attention, norms, routers, "
         "dense MLPs, lm_head\n", (unsigned long long)b.resident, gib(b.resident));
  printf("  routed experts       %12llu bytes (%.3f GiB)\n", (unsigned long long)b.experts,
         gib(b.experts));
  printf("  weights read/token   %12llu bytes (%.3f GiB) at decode\n",
         (unsigned long long)b.active_per_token, gib(b.active_per_token));
  char kind[256];
  df_model_state_kind(m, kind, sizeof kind);
  printf("  KV cache per token   %12llu bytes (%s, all layers)\n", (unsigned long long)kv_tok,
         kind);
  uint64_t kv_seq = df_model_kv_bytes_per_seq(m);
  if (kv_seq)
    printf("  state per sequence   %12llu bytes (%.3f MiB): recurrent state + conv windows, their "
           "rollback base and log, all layers\n", (unsigned long long)kv_seq,
           kv_seq / (1024.0 * 1024.0));
  df_model_destroy(&m);
  return 0;
}
