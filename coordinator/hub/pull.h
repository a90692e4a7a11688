/* coordinator/hub/pull.h — `deltafin pull`: fetch a model folder from the Hugging Face hub.
 *
 * Owns: listing a repo at a revision through the hub API (one commit for every file),
 * include/exclude filtering, the free-disk check, parallel downloads with resume
 * (DIR/.deltafin/partial/<sha256(oid NUL path)>.incomplete, one per listed path, continued
 * with HTTP Range across retries and across runs), SHA-256 of each LFS file against the hub's oid (git blob SHA-1 for the small
 * files), atomic publication (fsync + rename), the manifest (pull_manifest.h) and progress
 * output (a redrawn bar on a TTY, plain lines otherwise, JSON lines with --json).
 * Stream mode (--stream) writes each *.safetensors shard at full size with its header and
 * every non-expert tensor in place and leaves the routed-expert byte ranges as sparse holes;
 * coordinator/hub/stream.h fetches those on first use. For a wrapper config (kimi_k3: the
 * repo's config.json parsed by the engine gives a text prefix "language_model.") tensors
 * outside the prefix (the vision tower) are holes too and are never fetched at all. The
 * shard headers are read up to `jobs` at a time. --dry-run lists and plans (stream mode:
 * headers read into a temporary folder), prints the plan (a "plan" JSON event with --json)
 * and writes nothing into the folder.
 * Does not own: HTTP mechanics (pull_http.h), the manifest format (pull_manifest.h),
 * checking a folder afterwards (verify.h).
 * Files: pull.c lists, plans, runs the workers and writes the manifest; pull_fetch.c
 * transfers and publishes each file; pull_progress.c holds the state they share and the
 * output.
 *
 * Nothing below DIR is reached through a symbolic link (folders are opened with openat and
 * O_NOFOLLOW from a descriptor of DIR); DIR itself may be one.
 *
 * Layout of a pulled folder DIR:
 *   DIR/<files as published>           only complete, verified files ever appear here
 *   DIR/.deltafin-manifest.json        sizes, hashes, origin
 *   DIR/.deltafin/partial/             resumable partial downloads (named by oid and path)
 *   DIR/.deltafin/experts/             stream mode's expert cache (stream.h)
 *   DIR/.deltafin/lock                 held (flock) while a pull runs
 */
#ifndef DF_COORD_PULL_H
#define DF_COORD_PULL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/hub/pull_opts.h"

/* Defaults for everything but repo (net from the environment, see df_pull_net_defaults). */
void df_pull_opts_init(df_pull_opts *o);

/* Default expert cache budget of stream mode, bytes. */
#define DF_PULL_DEFAULT_CACHE_BUDGET ((uint64_t)32 << 30)

/* Pull o->repo into the folder (created as needed; its path is copied to dir_out when not
 * NULL). Files already present with the listed size and hash are kept. With o->dry_run:
 * list and plan, print the plan (stdout, or a JSON event), create and write nothing in the
 * folder, and return 0 even when the free disk would not do (the plan says so).
 * Returns 0 when every selected file is published and verified; -1 + one-line message
 * otherwise: a bad repo id / revision / glob, the hub refusing (401/403 with a hint about
 * HF_TOKEN, 404 naming repo, revision or file), too little free disk (bytes needed and
 * free), another pull holding the folder, or files that failed (the first error; every
 * failure was printed as it happened). After a failure, nothing partial is at a final
 * path: partial downloads stay under DIR/.deltafin/partial for the next run to resume, and
 * the manifest lists what was published and what is pending. */
int df_pull_run(const df_pull_opts *o, char *dir_out, size_t dir_cap, char *err, size_t errlen);

/* True for a routed-expert tensor name: "...layers.<L>.mlp.experts.<E>.<rest>" (or Kimi
 * Linear's and Kimi K3's "...layers.<L>.block_sparse_moe.experts.<E>.<rest>": K3's MXFP4
 * "w1.weight_packed" / "w1.weight_scale" included). */
bool df_pull_is_expert_tensor(const char *name);

#endif
