/* coordinator/hub/pull_fetch.h — the transfers of `deltafin pull`, called by pull.c.
 *
 * Owns: downloading one listed file (full: resumed from its partial file, retried, hashed
 * against the hub's oid; stream mode: a sparse shard whose header and non-expert ranges
 * alone are fetched) and publishing it, and the worker loop that takes files from the
 * pull's shared cursor. Does not own: listing and planning (pull.c), HTTP (pull_http.h),
 * output (pull_progress.h).
 */
#ifndef DF_COORD_PULL_FETCH_H
#define DF_COORD_PULL_FETCH_H

#include <stddef.h>

#include "coordinator/hub/pull_progress.h"

/* Stream mode, planning (calling thread): fetch the header, lay out the sparse partial file,
 * and list the non-expert spans to download. A shard without experts becomes a full file. */
int df_pull__plan_sparse(df_pull_state *p, void *h, df_pull_entry *e, char *err, size_t errlen);
/* A download thread (pthread start routine, arg: the pull): takes E_TODO entries from the
 * shared cursor until none is left, downloads each (sparse or full) and reports it. */
void *df_pull__worker(void *arg);

#endif
