/* node/device.c — `df-node join --device`; see device.h. */
#define _GNU_SOURCE
#include "node/device.h"

#include <stdio.h>

#include "engine/device/admission.h"
#include "engine/device/cuda_rt.h"

/* --device (docs/GPU.md): resolve it, admit (engine/device/admission.h: the reserve stays free, the
 * activation cap is charged, the rest up to --memory holds experts) and keep the experts
 * this node serves on the device as they are first used. Any failure: one line, and the
 * experts run on the CPU as without --device. */
df_tx *df_node_device_setup(const df_t_device *want, uint64_t memory, uint64_t work_bytes,
                            uint64_t *budget_out) {
  char nm[32], note[320];
  df_t_device got;
  *budget_out = 0;
  if (want->kind == DF_T_DEV_CPU) return NULL;
  df_t_device_resolve(want, &got, note, sizeof note);
  if (got.kind == DF_T_DEV_CPU) {
    fprintf(stderr, "df-node: device: %s\n",
            note[0] ? note : "--device auto: no usable CUDA device; experts run on the CPU");
    return NULL;
  }
  df_t_device_name(&got, nm, sizeof nm);
  uint64_t free_b = UINT64_MAX / 2, total_b = UINT64_MAX / 2;
  if (got.kind == DF_T_DEV_CUDA && df_cuda_mem_info(got.index, &free_b, &total_b, note,
                                                    sizeof note) != 0) {
    fprintf(stderr, "df-node: device %s: cannot measure free memory (%s); experts run on the "
            "CPU\n", nm, note);
    return NULL;
  }
  df_admit_in in = {.device = nm, .free_bytes = free_b, .total_bytes = total_b,
                    .work_bytes = work_bytes};
  df_admit_plan p;
  df_admit_plan_make(&in, NULL, &p);
  if (!p.ok) {
    fprintf(stderr, "df-node: device: %s\n", p.line);
    return NULL;
  }
  uint64_t budget = p.budget - p.charged < memory ? p.budget - p.charged : memory;
  df_tx *tx = df_tx_new(&got, budget, note, sizeof note);
  if (!tx) {
    fprintf(stderr, "df-node: device %s: %s; experts run on the CPU\n", nm, note);
    return NULL;
  }
  *budget_out = budget; /* <= --memory; the coordinator sends it the hottest experts */
  if (got.kind == DF_T_DEV_CUDA)
    fprintf(stderr, "df-node: device %s: up to %.1f MiB of experts kept there (%.2f GiB free, "
            "%.2f GiB reserve), the rest on the CPU\n", nm, budget / 1048576.0,
            free_b / 1073741824.0, p.reserve / 1073741824.0);
  else /* torch-cpu: host memory, no device figures to report */
    fprintf(stderr, "df-node: device %s (test device): up to %.1f MiB of experts kept there, "
            "the rest on the CPU\n", nm, budget / 1048576.0);
  return tx;
}
