/* engine/device/admission.c — the device admission rule of admission.h, pure arithmetic.
 *
 * Owns: reserve, charging and the hottest-first expert fill. Does not own: any device call.
 */
#include "engine/device/admission.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static double gib(uint64_t b) { return (double)b / (double)((uint64_t)1 << 30); }

uint64_t df_admit_reserve(uint64_t total) {
  uint64_t pct = total / 100 * DF_ADMIT_RESERVE_PCT + total % 100 * DF_ADMIT_RESERVE_PCT / 100;
  return pct > DF_ADMIT_MIN_RESERVE ? pct : DF_ADMIT_MIN_RESERVE;
}

/* A candidate expert: its heat and its index (C11 qsort has no context argument). */
typedef struct cand {
  uint64_t heat;
  int64_t idx;
} cand;

static int cand_cmp(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->heat != y->heat) return x->heat > y->heat ? -1 : 1; /* hottest first */
  return x->idx < y->idx ? -1 : (x->idx > y->idx); /* then lower (layer, expert) */
}

int df_admit_plan_make(const df_admit_in *in, uint8_t *on_device, df_admit_plan *plan) {
  memset(plan, 0, sizeof *plan);
  const char *dev = in->device ? in->device : "device";
  if (in->n_experts < 0 || (in->n_experts > 0 && (!on_device || !in->expert_bytes))) {
    snprintf(plan->line, sizeof plan->line, "%s: admission: invalid input (%lld experts%s)",
             dev, (long long)in->n_experts,
             in->n_experts > 0 ? ", missing per-expert bytes or output" : "");
    return -1;
  }
  if (in->n_experts > 0) memset(on_device, 0, (size_t)in->n_experts);
  plan->reserve = df_admit_reserve(in->total_bytes);
  plan->budget = in->free_bytes > plan->reserve ? in->free_bytes - plan->reserve : 0;
  plan->charged = sat_add(sat_add(in->resident_bytes, in->kv_bytes),
                          sat_add(in->draft_bytes, in->work_bytes));
  if (plan->charged > plan->budget) {
    snprintf(plan->line, sizeof plan->line,
             "%s: %.2f GiB free of %.2f GiB, %.2f GiB kept in reserve: resident weights "
             "%.2f GiB + KV cache %.2f GiB + draft %.2f GiB + work %.2f GiB do not fit in the "
             "%.2f GiB left; running on the CPU", dev, gib(in->free_bytes),
             gib(in->total_bytes), gib(plan->reserve), gib(in->resident_bytes),
             gib(in->kv_bytes), gib(in->draft_bytes), gib(in->work_bytes), gib(plan->budget));
    return 0;
  }
  plan->ok = true;
  uint64_t left = plan->budget - plan->charged;
  uint64_t all_experts = 0;
  int64_t real = 0; /* pairs with bytes: the routed experts that exist */
  if (in->n_experts > 0) {
    cand *c = malloc((size_t)in->n_experts * sizeof *c);
    if (!c) {
      plan->ok = false;
      snprintf(plan->line, sizeof plan->line, "%s: admission: out of memory", dev);
      return -1;
    }
    for (int64_t i = 0; i < in->n_experts; i++) {
      real += in->expert_bytes[i] > 0;
      c[i].heat = in->heat ? in->heat[i] : 0;
      c[i].idx = i;
      all_experts = sat_add(all_experts, in->expert_bytes[i]);
    }
    qsort(c, (size_t)in->n_experts, sizeof *c, cand_cmp);
    for (int64_t j = 0; j < in->n_experts && left > 0; j++) {
      uint64_t b = in->expert_bytes[c[j].idx];
      if (b == 0 || b > left) continue; /* 0 bytes: no expert there (a dense layer's slot) */
      on_device[c[j].idx] = 1;
      left -= b;
      plan->expert_bytes += b;
      plan->experts_on_device++;
    }
    free(c);
  }
  snprintf(plan->line, sizeof plan->line,
           "%s: %.2f GiB free of %.2f GiB, %.2f GiB kept in reserve; resident %.2f GiB + KV "
           "cache %.2f GiB + draft %.2f GiB + work %.2f GiB, experts on the device %lld of "
           "%lld (%.2f of %.2f GiB), the rest served from host memory", dev,
           gib(in->free_bytes), gib(in->total_bytes), gib(plan->reserve),
           gib(in->resident_bytes), gib(in->kv_bytes), gib(in->draft_bytes),
           gib(in->work_bytes), (long long)plan->experts_on_device, (long long)real,
           gib(plan->expert_bytes), gib(all_experts));
  return 0;
}
