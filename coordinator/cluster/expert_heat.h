/* coordinator/cluster/expert_heat.h — routing counts kept between runs: the heat by which
 * device admission places the hottest routed experts on a GPU (docs/GPU.md "Admission") and
 * cluster placement gives them to the nodes with a device budget first (cluster_place.h).
 *
 * Owns: the heat file STATE/heat/<key>.u64 of a model folder (key: FNV-1a 64 of the
 * folder's real path, 16 hex digits) and its format: the 8 bytes "DFHEAT1\0", the pair
 * count n (uint64 LE, 1 .. 2^24), then n uint64 LE routing counts, layer-major
 * [n_layers * num_experts]; nothing after them. Accumulated over runs: a save re-reads the
 * file, adds this process's counts and publishes the sum atomically (config/fsutil.h), all
 * under an exclusive flock of STATE/heat/.lock, so concurrent processes lose no update.
 * Never blocks on what it finds at the path (opened O_NONBLOCK; only a regular file is read).
 * Does not own: counting (engine/model.c df_model_route_counts) or admission
 * (engine/device/admission.c), nor printing: problems come back as one-line notes.
 *
 * A file that is present but wrong is reported in a note, never silently dropped:
 *   corrupt (readable regular file of the wrong shape: shorter than the header, no magic,
 *     a count of 0 or over 2^24, a size other than 16 + 8 n bytes, a pair count other than
 *     the model's) — ignored, and replaced by this run's counts when it saves;
 *   unusable (not a regular file, cannot be opened or read) — ignored and left in place:
 *     the save does not write over it.
 */
#ifndef DF_COORD_EXPERT_HEAT_H
#define DF_COORD_EXPERT_HEAT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

/* Size (bytes, with the NUL) of a note buffer that holds any note below untruncated. */
#define DF_HEAT_NOTE_MAX 6144

/* Seconds df_heat_save waits for another process's lock before giving up. */
#define DF_HEAT_LOCK_WAIT_S 10

/* The heat of `model_dir` from state directory `state` (NULL: the default,
 * ~/.local/state/deltafin, or $XDG_STATE_HOME/deltafin; "" is not a directory: nothing is
 * read and the note says so). Returns a malloc'd [*n] array of routing counts (the caller
 * frees it), or NULL with *n = 0 when there is none: no file yet (note ""), or a file that
 * is present but corrupt or unusable (note: one line naming the file, what is wrong and what
 * happens to it, e.g. "heat file S/heat/K.u64: expected 272 bytes for 32 counts, found 100;
 * ignored, this run's counts replace it"). Not an error: admission then places lower
 * (layer, expert) first. `note` (notelen bytes, caller-owned; may be NULL if notelen is 0)
 * always ends up NUL-terminated; the caller prints it and passes it on to df_heat_save. */
uint64_t *df_heat_load(const char *state, const char *model_dir, int64_t *n, char *note,
                       size_t notelen);

/* Add m's routing counts since load (df_model_route_counts, [n_layers * num_experts]) to
 * the stored heat of `model_dir` in `state` (as df_heat_load) and publish the sum
 * atomically (mode 0600; a count that would pass UINT64_MAX stays there). The re-read, the
 * sum and the rename happen under an exclusive flock of STATE/heat/.lock, waited for at most
 * DF_HEAT_LOCK_WAIT_S seconds. `note` (in/out, caller-owned, notelen bytes, NULL allowed
 * when notelen is 0): on entry the note df_heat_load gave (what the caller already printed);
 * on return a note about the file as found now that differs from it (a corrupt file or one
 * for another pair count, replaced; an unusable one, left alone), else "".
 * Returns 0 when the sum was written; 1 when the file is present but unusable and was left
 * as it is (nothing written; the note, on entry or on return, says why); -1 with a message
 * in err (errlen bytes, caller-owned) when the model has no routed experts' counts, the
 * state directory is unknown or "", the heat folder cannot be created, the lock cannot be
 * taken in time, memory runs out or the write fails (the file at the path is then
 * unchanged). */
int df_heat_save(const char *state, const char *model_dir, const df_model *m, char *note,
                 size_t notelen, char *err, size_t errlen);

#endif
