/* coordinator/expert_heat.h — routing counts kept between runs: the heat by which device
 * admission places the hottest routed experts on a GPU (docs/GPU.md "Admission").
 *
 * Owns: the heat file STATE/heat/<key>.u64 of a model folder (key: FNV-1a 64 of the
 * folder's real path, 16 hex digits) and its format: the 8 bytes "DFHEAT1\0", the pair
 * count n (uint64 LE), then n uint64 LE routing counts, layer-major [n_layers * num_experts].
 * Written atomically (config/fsutil.h), accumulated over runs. Does not own: counting
 * (engine/model.c df_model_route_counts) or admission (engine/admission.c).
 */
#ifndef DF_COORD_EXPERT_HEAT_H
#define DF_COORD_EXPERT_HEAT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

/* The heat of `model_dir` from state directory `state` (NULL: the default,
 * ~/.local/state/deltafin). Returns a malloc'd [*n] array (caller frees), or NULL with *n = 0
 * when there is none yet or the file is unreadable / malformed (not an error: admission
 * then places lower (layer, expert) first). */
uint64_t *df_heat_load(const char *state, const char *model_dir, int64_t *n);

/* Add m's routing counts since load to the stored heat of `model_dir` (a file for another
 * pair count is replaced) and write it atomically. 0; -1 with a message on an I/O error or a
 * model without routed experts' counts. */
int df_heat_save(const char *state, const char *model_dir, const df_model *m, char *err,
                 size_t errlen);

#endif
