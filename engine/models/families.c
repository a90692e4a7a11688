/* engine/models/families.c — the family table: every model family the engine loads, in the
 * order error messages list their model types. Adding a family is one row here plus its
 * file (docs/ADDING_A_FAMILY.md). */
#include <stdio.h>

#include "engine/models/family.h"

extern const df_family df_family_qwen3_moe;   /* engine/models/qwen3_moe.c: qwen3_moe, qwen3 */
extern const df_family df_family_deepseek_v3; /* engine/models/deepseek_v3.c: deepseek_v3, kimi_k2 */
extern const df_family df_family_kimi_linear; /* engine/models/kimi_linear.c: kimi_linear (+ kimi_k3 wrapper) */

static const df_cfg_family *const families[] = {
    &df_family_qwen3_moe.config,
    &df_family_deepseek_v3.config,
    &df_family_kimi_linear.config,
};

#define N_FAMILIES (sizeof families / sizeof families[0])

const df_family *df_family_of(const df_model_config *c, char *err, size_t errlen) {
  for (size_t i = 0; i < N_FAMILIES; i++)
    if (c->family == families[i]) return (const df_family *)(const void *)families[i];
  snprintf(err, errlen, "model_type '%s': no model family read this config", c->model_type);
  return NULL;
}

int df_cfg_load(const char *dir, df_model_config *out, char *err, size_t errlen) {
  return df_cfg_load_for(dir, families, N_FAMILIES, out, err, errlen);
}

int df_cfg_parse(const char *json, size_t len, const char *name, df_model_config *out,
                 char *err, size_t errlen) {
  return df_cfg_parse_for(json, len, name, families, N_FAMILIES, out, err, errlen);
}

const char *df_cfg_arch_name(df_arch a) {
  switch (a) {
  case DF_ARCH_QWEN3: return "qwen3";
  case DF_ARCH_QWEN3_MOE: return "qwen3_moe";
  case DF_ARCH_DEEPSEEK_V3: return "deepseek_v3";
  case DF_ARCH_KIMI_LINEAR: return "kimi_linear";
  }
  return "unknown";
}
