/* coordinator/hub/pull_opts.h — the options of one `deltafin pull` (df_pull_run in pull.h).
 *
 * Owns: the option struct alone, so that the parts of a pull (pull.c, pull_fetch.c,
 * pull_progress.c) read it without depending on each other's headers. Does not own: the
 * defaults (df_pull_opts_init, pull.h) or what the options do (pull.h).
 */
#ifndef DF_COORD_PULL_OPTS_H
#define DF_COORD_PULL_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "coordinator/hub/pull_http.h"

#define DF_PULL_MAX_GLOBS 32

typedef struct df_pull_opts {
  const char *repo;                        /* "ORG/NAME" (required) */
  const char *revision;                    /* branch, tag or commit; NULL = "main" */
  const char *dir;                         /* destination; NULL = df_pull_default_dir */
  const char *include[DF_PULL_MAX_GLOBS];  /* fnmatch globs on the repo path ('*' crosses '/') */
  int n_include;                           /* 0 = every file */
  const char *exclude[DF_PULL_MAX_GLOBS];  /* applied after include */
  int n_exclude;
  bool stream;                             /* leave routed experts to be fetched on use */
  bool dry_run;                            /* list and plan (stream: read the shard headers),
                                              print the plan, write nothing */
  uint64_t cache_budget;                   /* stream: expert cache bytes; 0 = keep / default */
  int jobs;                                /* parallel file downloads, 1..64; 0 = 4 */
  bool quiet;                              /* errors only */
  bool json;                               /* JSON lines on stdout instead of progress */
  double progress_interval_s;              /* plain (non-TTY) progress period; 0 = 10 s */
  df_pull_net net;                         /* endpoint, token, timeouts, retries */
} df_pull_opts;

#endif
