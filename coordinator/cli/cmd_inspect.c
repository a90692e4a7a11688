/* coordinator/cli/cmd_inspect.c — `deltafin inspect DIR [--nodes SIZES]`: config summary,
 * tensor inventory, parameter counts and memory plan (resident part vs routed experts, KV cache
 * bytes per token: K and V per kv head, or the MLA latent + shared RoPE key; recurrent state
 * per sequence), and the expert placement a cluster of nodes with the given memory budgets
 * would get (coordinator/cluster/cluster_place.h, the rule the coordinator uses). With --json
 * the same facts are printed as one JSON object instead (keys: inspect_usage). */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cli/cli.h"
#include "coordinator/cluster/cluster_place.h"
#include "engine/model.h"

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

#define MAX_NODES 64

static void inspect_usage(FILE *f) {
  fprintf(f, "usage: deltafin inspect DIR [--nodes SIZE,SIZE,...] [--json]\n"
             "  config summary, tensor inventory, parameters and memory plan (resident part vs\n"
             "  routed experts, weight bytes read per decoded token, KV cache bytes per token,\n"
             "  state per sequence) of a model folder\n"
             "  --nodes   expert memory of each df-node (as df-node --memory: 64G, 512M, ...):\n"
             "            print the placement the coordinator would choose for them\n"
             "  --json    the same facts as one JSON object on stdout: model, model_type,\n"
             "            layers, hidden_size, vocab_size, summary (the family's lines), quant,\n"
             "            dense_mlp, tie_word_embeddings, tensors [{name, dtype, shape, bytes}],\n"
             "            expert_groups [{prefix, tensors, dtype, bytes}], other_tensors,\n"
             "            parameters {total, active_per_token, experts_per_token, experts},\n"
             "            memory {checkpoint_bytes, files, resident_bytes, expert_bytes,\n"
             "            read_per_token_bytes, kv_bytes_per_token, state_kind,\n"
             "            state_bytes_per_seq}, placement (with --nodes); sizes in bytes\n");
}


/* The coordinator's placement for nodes of budgets[n] (one replica where room is left):
 * printed, or set as "placement" on js when js is not NULL. */
static int print_placement(const df_model *m, const uint64_t *budgets, int n, json_t *js) {
  const df_model_config *c = df_model_cfg(m);
  int64_t n_moe = 0;
  for (int64_t l = 0; l < c->num_hidden_layers; l++) n_moe += c->is_moe_layer[l];
  df_model_bytes b = df_model_memory(m);
  int64_t P = n_moe * c->num_experts;
  if (P <= 0) {
    if (js) json_object_set_new(js, "placement", json_null());
    else printf("\nplacement: the model has no routed experts; a cluster would not help\n");
    return 0;
  }
  uint64_t pair = b.experts / (uint64_t)P;
  int32_t *prim = malloc((size_t)P * sizeof *prim), *repl = malloc((size_t)P * sizeof *repl);
  if (!prim || !repl) {
    free(prim);
    free(repl);
    fprintf(stderr, "deltafin inspect: out of memory\n");
    return 1;
  }
  int64_t placed = df_cluster_place(P, pair, n, budgets, 1, prim, repl);
  if (js) {
    json_t *nodes = json_array();
    for (int i = 0; i < n; i++) {
      int64_t np = 0, nr = 0;
      for (int64_t p = 0; p < P; p++) np += prim[p] == i, nr += repl[p] == i;
      json_array_append_new(nodes, json_pack("{s:I, s:I, s:I}", "budget", (json_int_t)budgets[i],
                                             "pairs", (json_int_t)np, "replicas", (json_int_t)nr));
    }
    json_object_set_new(js, "placement",
                        json_pack("{s:I, s:I, s:o, s:I}", "pairs", (json_int_t)P, "pair_bytes",
                                  (json_int_t)pair, "nodes", nodes, "coordinator_pairs",
                                  (json_int_t)(P - placed)));
    free(prim);
    free(repl);
    return 0;
  }
  printf("\nplacement on %d node(s): %lld (layer, expert) pairs of %.1f MiB\n", n, (long long)P,
         pair / 1048576.0);
  for (int i = 0; i < n; i++) {
    int64_t np = 0, nr = 0;
    for (int64_t p = 0; p < P; p++) np += prim[p] == i, nr += repl[p] == i;
    printf("  node %d (%.1f GiB)  %lld pairs (%.3f GiB) + %lld replicas (%.3f GiB)\n", i + 1,
           gib(budgets[i]), (long long)np, gib((uint64_t)np * pair), (long long)nr,
           gib((uint64_t)nr * pair));
  }
  int64_t local = P - placed;
  printf("  coordinator          %lld pairs (%.3f GiB) + the resident part (%.3f GiB)%s\n",
         (long long)local, gib((uint64_t)local * pair), gib(b.resident),
         local ? ": the nodes' budgets do not hold every expert" : "");
  free(prim);
  free(repl);
  return 0;
}

int df_cmd_inspect(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      inspect_usage(stdout);
      return 0;
    }
  uint64_t budgets[MAX_NODES];
  int n_nodes = 0;
  bool json = false;
  const char *dir = NULL, *nodes_arg = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = true;
    else if (!strcmp(argv[i], "--nodes") && i + 1 < argc && !nodes_arg) nodes_arg = argv[++i];
    else if (argv[i][0] != '-' && !dir) dir = argv[i];
    else {
      inspect_usage(stderr);
      return 2;
    }
  }
  if (!dir) {
    inspect_usage(stderr);
    return 2;
  }
  if (nodes_arg) {
    for (const char *s = nodes_arg;;) {
      size_t k = strcspn(s, ",");
      if (n_nodes == MAX_NODES || df_cli_size(s, k, &budgets[n_nodes]) != 0 ||
          budgets[n_nodes] == 0) {
        fprintf(stderr, "deltafin inspect: --nodes: expected up to %d sizes like 64G,64G, got "
                "'%s'\n", MAX_NODES, nodes_arg);
        return 2;
      }
      n_nodes++;
      if (!s[k]) break;
      s += k + 1;
    }
  }
  char err[1024];
  df_model *m = NULL;
  df_model_opts mo = {.max_ctx = 1, .max_rows = 1};
  if (df_model_load(dir, &mo, &m, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: %s\n", err);
    return 1;
  }
  /* text on stdout, or (--json) the same facts collected in js and printed at the end */
  json_t *js = json ? json_object() : NULL, *js_tensors = NULL, *js_groups = NULL;
  const df_model_config *c = df_model_cfg(m);
  if (js) {
    json_object_set_new(js, "model", json_string(dir));
    json_object_set_new(js, "model_type", json_string(c->model_type));
    json_object_set_new(js, "layers", json_integer(c->num_hidden_layers));
    json_object_set_new(js, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(js, "vocab_size", json_integer(c->vocab_size));
    /* the family's summary lines, as the text output prints them */
    char *sum = NULL;
    size_t sum_len = 0;
    FILE *sf = open_memstream(&sum, &sum_len);
    json_t *lines = json_array();
    if (sf) {
      df_model_print_summary(m, sf);
      fclose(sf);
      for (char *l = sum, *nl; l && *l; l = nl ? nl + 1 : NULL) {
        if ((nl = strchr(l, '\n'))) *nl = 0;
        json_array_append_new(lines, json_string(l));
      }
      free(sum);
    }
    json_object_set_new(js, "summary", lines);
  } else {
    printf("model        %s\n", dir);
    printf("type         %s\n", c->model_type);
    printf("layers       %lld (hidden %lld, vocab %lld)\n", (long long)c->num_hidden_layers,
           (long long)c->hidden_size, (long long)c->vocab_size);
    df_model_print_summary(m, stdout);
  }
  int64_t n_moe = 0;
  for (int64_t l = 0; l < c->num_hidden_layers; l++) n_moe += c->is_moe_layer[l];
  if (js) {
    json_object_set_new(js, "quant", c->quant == DF_QUANT_FP8_BLOCK
                                         ? json_pack("{s:s, s:[I, I]}", "format", "fp8_e4m3_block",
                                                     "block", (json_int_t)c->quant_block_n,
                                                     (json_int_t)c->quant_block_k)
                                         : json_null());
    json_object_set_new(js, "dense_mlp", n_moe < c->num_hidden_layers
                                             ? json_pack("{s:I, s:I}", "width",
                                                         (json_int_t)c->intermediate_size, "layers",
                                                         (json_int_t)(c->num_hidden_layers - n_moe))
                                             : json_null());
    json_object_set_new(js, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(js, "tensors", js_tensors = json_array());
    json_object_set_new(js, "expert_groups", js_groups = json_array());
  } else {
    if (c->quant == DF_QUANT_FP8_BLOCK)
      printf("weights      FP8 E4M3, %lldx%lld block scales (de-quantised inside the kernels)\n",
             (long long)c->quant_block_n, (long long)c->quant_block_k);
    if (n_moe < c->num_hidden_layers)
      printf("dense mlp    width %lld on %lld layers\n", (long long)c->intermediate_size,
             (long long)(c->num_hidden_layers - n_moe));
    printf("embeddings   %s\n",
           c->tie_word_embeddings ? "tied (lm_head = embed_tokens)" : "untied");
    printf("\ntensors:\n");
  }
  const df_st_model *st = df_model_tensors(m);
  int64_t last_layer = -1;
  uint64_t ex_bytes = 0, ex_n = 0, numel = 0, ex_numel = 0, embed_numel = 0, other_n = 0,
           other_bytes = 0;
  size_t pfx_len = strlen(c->tensor_prefix);
  const char *ex_dt = "";
  char ex_prefix[160] = "";
  for (size_t i = 0, n = df_st_count(st); i <= n; i++) {
    const df_st_tensor *t = i < n ? df_st_at(st, i) : NULL;
    long long layer = -1;
    /* a routed expert's tensor: "<...>layers.L.<...>.experts.E.<...>" (every family's
     * spelling: mlp.experts, block_sparse_moe.experts, a language_model. prefix) */
    const char *lp = t ? strstr(t->name, "layers.") : NULL, *ep = t ? strstr(t->name, ".experts.") : NULL;
    bool expert = lp && ep && ep > lp && sscanf(lp, "layers.%lld.", &layer) == 1;
    if ((!expert || layer != last_layer) && ex_n) {
      if (js)
        json_array_append_new(js_groups, json_pack("{s:s, s:I, s:s, s:I}", "prefix", ex_prefix,
                                                   "tensors", (json_int_t)ex_n, "dtype", ex_dt,
                                                   "bytes", (json_int_t)ex_bytes));
      else
        printf("  %s*  %llu tensors  %s  %.1f MiB\n", ex_prefix, (unsigned long long)ex_n, ex_dt,
               ex_bytes / 1048576.0);
      ex_n = ex_bytes = 0;
    }
    if (!t) break;
    if (pfx_len && strncmp(t->name, c->tensor_prefix, pfx_len) != 0) {
      other_n++; /* a wrapper's other towers (K3's vision_tower, mm_projector): never read */
      other_bytes += t->nbytes;
      continue;
    }
    uint64_t ne = df_dtype_bits(t->dtype) ? t->nbytes * 8 / (uint64_t)df_dtype_bits(t->dtype) : 0;
    size_t nl = strlen(t->name);
    /* MXFP4 (compressed-tensors): weight_packed holds two weights a byte, weight_scale no
     * parameters (one E8M0 per 32 weights) */
    if (t->dtype == DF_DT_U8 && nl >= 14 && !strcmp(t->name + nl - 14, ".weight_packed"))
      ne = t->nbytes * 2;
    if (t->dtype == DF_DT_U8 && nl >= 13 && !strcmp(t->name + nl - 13, ".weight_scale")) ne = 0;
    numel += ne;
    if (nl >= 19 && !strcmp(t->name + nl - 19, "embed_tokens.weight")) embed_numel += ne;
    if (expert) {
      ex_numel += ne;
      if (layer != last_layer)
        snprintf(ex_prefix, sizeof ex_prefix, "%.*s", (int)(ep - t->name) + 9, t->name);
      last_layer = layer;
      ex_n++;
      ex_bytes += t->nbytes;
      ex_dt = df_dtype_name(t->dtype);
      continue;
    }
    if (js) {
      json_t *shape = json_array();
      for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
      json_array_append_new(js_tensors, json_pack("{s:s, s:s, s:o, s:I}", "name", t->name,
                                                   "dtype", df_dtype_name(t->dtype), "shape",
                                                   shape, "bytes", (json_int_t)t->nbytes));
      continue;
    }
    char shape[96] = "";
    size_t o = 0;
    for (int d = 0; d < t->ndim; d++)
      o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    printf("  %-48s %-5s [%s]  %.1f KiB\n", t->name, df_dtype_name(t->dtype), shape, t->nbytes / 1024.0);
  }
  if (other_n && !js)
    printf("  (%llu tensors outside %s*, %.1f MiB: not the text model, never read)\n",
           (unsigned long long)other_n, c->tensor_prefix, other_bytes / 1048576.0);
  df_model_bytes b = df_model_memory(m);
  uint64_t kv_tok = df_model_kv_bytes_per_token(m);
  /* active per token: everything but the routed experts and the embedding table (a token
   * reads one row of it), plus top-k of num_experts routed experts */
  double active = (double)(numel - ex_numel - embed_numel);
  if (c->num_experts > 0) active += (double)ex_numel * (double)c->num_experts_per_tok /
                                    (double)c->num_experts;
  char kind[256];
  df_model_state_kind(m, kind, sizeof kind);
  uint64_t kv_seq = df_model_kv_bytes_per_seq(m);
  if (js) {
    json_object_set_new(js, "other_tensors",
                        other_n ? json_pack("{s:I, s:I, s:s}", "tensors", (json_int_t)other_n,
                                            "bytes", (json_int_t)other_bytes, "outside",
                                            c->tensor_prefix)
                                : json_null());
    json_object_set_new(js, "parameters",
                        json_pack("{s:I, s:I, s:I, s:I}", "total", (json_int_t)numel,
                                  "active_per_token", (json_int_t)(active + 0.5),
                                  "experts_per_token", (json_int_t)c->num_experts_per_tok,
                                  "experts", (json_int_t)c->num_experts));
    json_object_set_new(js, "memory",
                        json_pack("{s:I, s:i, s:I, s:I, s:I, s:I, s:s, s:I}", "checkpoint_bytes",
                                  (json_int_t)b.total, "files", df_st_file_count(st),
                                  "resident_bytes", (json_int_t)b.resident, "expert_bytes",
                                  (json_int_t)b.experts, "read_per_token_bytes",
                                  (json_int_t)b.active_per_token, "kv_bytes_per_token",
                                  (json_int_t)kv_tok, "state_kind", kind,
                                  "state_bytes_per_seq", (json_int_t)kv_seq));
    int rc = n_nodes ? print_placement(m, budgets, n_nodes, js) : 0;
    if (rc == 0) {
      json_dumpf(js, stdout, JSON_INDENT(2));
      printf("\n");
    }
    json_decref(js);
    df_model_destroy(&m);
    return rc;
  }
  printf("\nparameters   %.2f B total, %.2f B active per token (all but the embedding table and "
         "the routed experts, plus %lld of %lld routed experts per MoE layer)\n", numel / 1e9,
         active / 1e9, (long long)c->num_experts_per_tok, (long long)c->num_experts);
  printf("\nmemory plan:\n");
  printf("  checkpoint tensors   %12llu bytes (%.3f GiB) in %d file(s)\n",
         (unsigned long long)b.total, gib(b.total), df_st_file_count(st));
  printf("  resident part        %12llu bytes (%.3f GiB): embeddings, attention, norms, routers, "
         "dense MLPs, lm_head\n", (unsigned long long)b.resident, gib(b.resident));
  printf("  routed experts       %12llu bytes (%.3f GiB)\n", (unsigned long long)b.experts,
         gib(b.experts));
  printf("  weights read/token   %12llu bytes (%.3f GiB) at decode\n",
         (unsigned long long)b.active_per_token, gib(b.active_per_token));
  printf("  KV cache per token   %12llu bytes (all layers; their state: %s)\n",
         (unsigned long long)kv_tok, kind);
  if (kv_seq)
    printf("  state per sequence   %12llu bytes (%.3f MiB): recurrent state + conv windows, their "
           "rollback base and log, all layers\n", (unsigned long long)kv_seq,
           kv_seq / (1024.0 * 1024.0));
  int rc = n_nodes ? print_placement(m, budgets, n_nodes, NULL) : 0;
  df_model_destroy(&m);
  return rc;
}
