/* engine/models/family.h — what a model family is, and the table of them.
 *
 * Owns: the contract between the generic loader (engine/model.c) and one family file per
 * architecture (qwen3_moe.c, deepseek_v3.c, ...). A family binds its layers' tensors by name
 * (through engine/layers/bind.h) and composes each decoder layer from the shared blocks of
 * engine/layers/ (token mixer, channel mixer, norms), chooses the residual scheme, and reads
 * its own config.json keys (config/model_config.h df_cfg_family). The table (families.c)
 * lists the families; it and the family files are the only places that tell families
 * apart. Adding a family: docs/ADDING_A_FAMILY.md.
 * Does not own: the layer loop (engine/forward.c), embeddings and lm_head (engine/model.c).
 */
#ifndef DF_ENGINE_MODELS_FAMILY_H
#define DF_ENGINE_MODELS_FAMILY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/model_config.h"
#include "engine/layers/bind.h"
#include "engine/layers/layer.h"
#include "engine/layers/workspace.h"

/* What a family's build_layer gets: the binder, the model's shared block environment and
 * its workspace (all borrowed). */
typedef struct df_family_ctx {
  df_binder *bind;
  const df_model_config *cfg;
  const df_layer_env *env;
  df_ws *ws;
} df_family_ctx;

typedef struct df_family {
  df_cfg_family config; /* first member: a parsed config's `family` points here */
  const char *name;     /* e.g. "qwen3_moe" */
  /* Bind layer l's tensors ("model.layers.<l>.*") and compose it into *L (norms, token
   * mixer, channel mixer). -1 + one line naming the file and tensor (the binder's) on a
   * missing, mis-typed or mis-shaped tensor, or out of memory; *L may then hold blocks for
   * df_layer_clear. */
  int (*build_layer)(const df_family_ctx *fc, int64_t l, df_layer *L, char *err, size_t errlen);
  /* The model's residual scheme, made after every layer of `layers` [n_layers] was built
   * (a scheme may bind tensors of its own through fc->bind and read the layers' res_*
   * weights). NULL + message: out of memory, a missing tensor (the binder's message). */
  df_residual *(*residual_new)(const df_family_ctx *fc, const df_layer *layers, char *err,
                               size_t errlen);
  /* `deltafin inspect`'s lines on the family's attention and MoE shape for config c, each
   * "<label padded to 13>text\n", written to f. */
  void (*summary)(const df_model_config *c, FILE *f);
  /* The checkpoint name of routed expert e's weight `part` (0 gate, 1 up, 2 down) of layer l
   * into buf (cap bytes; FP8 scales add "_scale_inv"), for the cluster manifest and expert
   * streaming. NULL: "model.layers.<l>.mlp.experts.<e>.{gate,up,down}_proj.weight". */
  void (*expert_tensor_name)(const df_model_config *c, int64_t l, int64_t e, int part, char *buf,
                             size_t cap);
} df_family;

/* The family whose parser read config c (c->family), or NULL + message when c was not
 * parsed by df_cfg_load / df_cfg_parse. */
const df_family *df_family_of(const df_model_config *c, char *err, size_t errlen);

/* Parse DIR/config.json of any family in the table into *out (config/model_config.h
 * df_cfg_load_for: the shared keys, then the family's own, each family file documenting its
 * keys). Supported model_type values: qwen3_moe, qwen3 (engine/models/qwen3_moe.c),
 * deepseek_v3, kimi_k2 (engine/models/deepseek_v3.c), kimi_linear and the kimi_k3 wrapper of
 * it (engine/models/kimi_linear.c). Errors (-1, one line in err naming the
 * file and key): missing/unreadable file, JSON syntax (line:column), unknown model_type (the
 * message lists the supported ones), a missing, mistyped or out-of-range key. On error *out
 * is zeroed. */
int df_cfg_load(const char *dir, df_model_config *out, char *err, size_t errlen);

/* Human-readable arch name ("qwen3_moe"). Never NULL. */
const char *df_cfg_arch_name(df_arch a);

/* Same as df_cfg_load but from a JSON text in memory; `name` is used in messages. */
int df_cfg_parse(const char *json, size_t len, const char *name, df_model_config *out,
                 char *err, size_t errlen);

#endif
