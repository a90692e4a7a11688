/* engine/device/admission.h — device memory admission: what of a model goes on an accelerator
 * before anything is allocated there.
 *
 * Owns: the admission rule (docs/GPU.md "Admission") as a pure function of numbers, so
 * that it is unit-tested without a device (tests/test_admission.c). Does not own: where
 * the numbers come from (cudaMemGetInfo through engine/device/cuda_rt.h, the model's byte
 * counts from engine/model.c) nor the uploads themselves (engine/tensor/torch_path.cpp).
 *
 * The rule:
 *   reserve = max(2 GiB, 10% of total device memory)       -- never handed out
 *   budget  = free - reserve                               -- 0 when free <= reserve
 *   charged = resident + kv + draft + work                 -- charged first, all or nothing
 *   if charged > budget: the whole model stays on the CPU (plan.ok = false, one log line)
 *   else the routed experts (layer, expert) are taken hottest first (heat = routing
 *   counts, descending; ties: lower index first, i.e. lower layer, then lower expert) while
 *   their bytes fit in budget - charged; an expert that does not fit is skipped and smaller
 *   ones after it are still tried. Experts not taken are served from host memory.
 * All sizes are bytes (uint64); the arithmetic saturates instead of wrapping.
 */
#ifndef DF_ENGINE_ADMISSION_H
#define DF_ENGINE_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Smallest reserve kept free on a device: 2 GiB. */
#define DF_ADMIT_MIN_RESERVE ((uint64_t)2 << 30)
/* Reserve as a share of the device's total memory, in percent. */
#define DF_ADMIT_RESERVE_PCT 10

typedef struct df_admit_in {
  const char *device;      /* name for the log line ("cuda:0"); NULL = "device" */
  uint64_t free_bytes;     /* device memory free now (cudaMemGetInfo's free) */
  uint64_t total_bytes;    /* device memory in all (cudaMemGetInfo's total) */
  uint64_t resident_bytes; /* non-expert weights as stored (embeddings, attention, norms,
                              routers, dense MLPs, lm_head) */
  uint64_t kv_bytes;       /* KV caches the caller will allocate on the device */
  uint64_t draft_bytes;    /* speculative draft weights + its KV caches (0 = no draft) */
  uint64_t work_bytes;     /* activations and per-op temporaries (fp32 copies of weights) */
  int64_t n_experts;       /* routed (layer, expert) pairs, >= 0 */
  const uint64_t *expert_bytes; /* [n_experts] stored bytes of each pair (gate+up+down);
                                   0 = no expert there (a dense layer's slot), never placed */
  const uint64_t *heat;    /* [n_experts] routing counts, or NULL (all equally hot) */
} df_admit_in;

typedef struct df_admit_plan {
  bool ok;                  /* false: nothing goes on the device, run on the CPU */
  uint64_t reserve;         /* bytes kept free */
  uint64_t budget;          /* free - reserve (0 when free <= reserve) */
  uint64_t charged;         /* resident + kv + draft + work */
  uint64_t expert_bytes;    /* bytes of the experts placed on the device */
  int64_t experts_on_device;/* how many pairs were placed */
  char line[320];           /* one log line: the placement, or why the CPU is used */
} df_admit_plan;

/* The reserve for a device of `total` bytes: max(2 GiB, total * 10 / 100). */
uint64_t df_admit_reserve(uint64_t total);

/* Plan the placement. on_device [in->n_experts] (caller-owned, may be NULL when n_experts
 * is 0) receives 1 for a pair placed on the device, 0 for host memory; all 0 when !ok.
 * Returns 0 with plan->ok telling the outcome (a refusal is an outcome, not an error), or
 * -1 for invalid input (n_experts < 0, missing arrays, out of memory): plan->line names it
 * and on_device is left all 0. */
int df_admit_plan_make(const df_admit_in *in, uint8_t *on_device, df_admit_plan *plan);

#endif
