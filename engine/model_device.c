/* engine/model_device.c — placing a loaded model on a device for the torch compute path
 * (docs/GPU.md): the device resolved, memory admitted (engine/device/admission.h: resident,
 * KV cache, draft and work charged first, the hottest routed experts in the rest) and the
 * weights handed to the torch path as each block describes them; see model_internal.h.
 * Does not own: the admission rule, the torch path itself (engine/tensor/).
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine/device/admission.h"
#include "engine/device/cuda_rt.h"
#include "engine/model_internal.h"

/* Bytes of a weight as stored, FP8 block scales included. */
static uint64_t tensor_bytes(const df_t_tensor *t) {
  if (!t) return 0;
  const df_t_tensor *sc = df_t_block_scale(t, NULL, NULL);
  return (uint64_t)df_t_numel(t) * df_dtype_size(df_t_dtype(t)) +
         (sc ? (uint64_t)df_t_numel(sc) * sizeof(float) : 0);
}

int df_model_device_attach(df_model *m, const df_model_opts *opts, char *err, size_t errlen) {
  const df_model_config *c = &m->cfg;
  char want_nm[32], nm[32], note[320], cerr[256];
  df_t_device got;
  df_t_device_name(&opts->device, want_nm, sizeof want_nm);
  df_t_device_resolve(&opts->device, &got, note, sizeof note);
  df_t_device_name(&got, nm, sizeof nm);
  m->device.kind = DF_T_DEV_CPU;
  m->device.index = 0;
  if (got.kind == DF_T_DEV_CPU) {
    snprintf(m->device_note, sizeof m->device_note, "%s",
             note[0] ? note : "--device auto: no usable CUDA device; running on the CPU");
    return 0;
  }
  /* memory figures: the device's, or the caller's (tests), or unlimited (torch-cpu) */
  uint64_t free_b = opts->device_free, total_b = opts->device_total;
  if (!free_b || !total_b) {
    if (got.kind == DF_T_DEV_TORCH_CPU) {
      free_b = total_b = UINT64_MAX / 2;
    } else if (df_cuda_mem_info(got.index, &free_b, &total_b, cerr, sizeof cerr) != 0) {
      snprintf(m->device_note, sizeof m->device_note, "--device %s: cannot measure free device "
               "memory (%s); running on the CPU", nm, cerr);
      return 0;
    }
  }
  int64_t L = c->num_hidden_layers, E = c->num_experts > 0 ? c->num_experts : 0;
  int64_t n_pairs = E > 0 ? L * E : 0, seqs = opts->device_seqs > 0 ? opts->device_seqs : 1;
  uint64_t *eb = n_pairs ? calloc((size_t)n_pairs, sizeof *eb) : NULL;
  uint8_t *on = n_pairs ? calloc((size_t)n_pairs, 1) : NULL;
  df_tm_layer *tl = calloc((size_t)L, sizeof *tl);
  if ((n_pairs && (!eb || !on)) || !tl) {
    free(eb);
    free(on);
    free(tl);
    snprintf(err, errlen, "out of memory planning device placement");
    return -1;
  }
  uint64_t max_w = tensor_bytes(m->lm_head); /* largest weight: its fp32 copy per op */
  /* the torch path's view of every layer: each block describes its own weights */
  df_tm_desc d = {.n_layers = L, .hidden = c->hidden_size, .n_head = c->num_attention_heads,
                  .n_kv = c->num_key_value_heads, .head_dim = c->head_dim,
                  .vocab = c->vocab_size, .n_experts = E, .top_k = c->num_experts_per_tok,
                  .norm_topk = c->norm_topk_prob, .eps = (float)c->rms_norm_eps,
                  .embed = m->embed, .final_norm = m->final_norm, .lm_head = m->lm_head,
                  .rope_cos = m->rope_cos, .rope_sin = m->rope_sin, .layers = tl,
                  .n_group = c->n_group, .topk_group = c->topk_group,
                  .routed_scaling = (float)c->routed_scaling_factor};
  uint64_t kv_per_token = 0;
  for (int64_t l = 0; l < L; l++) {
    const df_layer *w = &m->layers[l];
    df_tm_layer *t = &tl[l];
    *t = (df_tm_layer){.in_norm = w->norm[0], .post_norm = w->norm[1]};
    w->attn->ops->describe(w->attn, &d, t);
    w->ffn->ops->describe(w->ffn, &d, t);
    kv_per_token += w->attn->ops->state_bytes_per_token(w->attn);
    if (!w->ffn->ops->expert_weights) continue;
    for (int64_t e = 0; e < E && !opts->device_host_experts; e++) {
      const df_t_tensor *g, *u, *dn;
      if (w->ffn->ops->expert_weights(w->ffn, e, &g, &u, &dn) == 0)
        eb[l * E + e] = tensor_bytes(g) + tensor_bytes(u) + tensor_bytes(dn);
    }
  }
  /* work: planned activations, the fp32 copy of the largest weight (twice: the widened
   * weight and the product's workspace), the logits of a chunk */
  uint64_t kv = kv_per_token * (uint64_t)m->max_ctx * (uint64_t)seqs;
  uint64_t work = m->bytes.buffers + 2 * (max_w / (df_dtype_size(df_t_dtype(m->lm_head)))) * 4;
  df_admit_in in = {.device = nm, .free_bytes = free_b, .total_bytes = total_b,
                    .resident_bytes = m->bytes.resident,
                    .kv_bytes = kv, .draft_bytes = opts->device_extra, .work_bytes = work,
                    .n_experts = n_pairs, .expert_bytes = eb,
                    .heat = opts->expert_heat_n == n_pairs ? opts->expert_heat : NULL};
  df_admit_plan plan;
  int rc = df_admit_plan_make(&in, on, &plan);
  m->device_plan = plan;
  if (rc != 0 || !plan.ok) {
    snprintf(m->device_note, sizeof m->device_note, "%s", plan.line);
    goto done;
  }
  d.expert_on_device = on;
  m->tm = df_tm_new(&d, &got, note, sizeof note);
  if (!m->tm) {
    snprintf(m->device_note, sizeof m->device_note, "%s; running on the CPU", note);
    goto done;
  }
  m->device = got;
  m->experts_on_device = plan.experts_on_device;
  m->expert_on_device = on;
  on = NULL;
  if (got.kind == DF_T_DEV_TORCH_CPU && !(opts->device_free && opts->device_total))
    snprintf(m->device_note, sizeof m->device_note, "torch-cpu: the torch compute path on the "
             "CPU (a test device), %lld routed experts through it", (long long)plan.experts_on_device);
  else
    snprintf(m->device_note, sizeof m->device_note, "%s", plan.line);
done:
  free(eb);
  free(on);
  free(tl);
  return 0;
}

