/* coordinator/hub/pull_progress.h — one pull's shared state, and what the user sees of it
 * while it runs.
 *
 * Owns: the state the parts of `deltafin pull` share (pull.c lists, plans and runs the
 * workers; pull_fetch.c transfers; pull_progress.c shows): every listed file (entry: what the
 * hub lists, the plan, the progress counters its worker writes, the manifest record on
 * success) and the pull (options, folder, commit, the workers' shared cursor, the byte
 * totals, the output state); and the output: notes (queued above the live bar on a TTY),
 * the redrawn progress bar, plain progress lines and JSON events. Threads: see pull.c.
 */
#ifndef DF_COORD_PULL_PROGRESS_H
#define DF_COORD_PULL_PROGRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "coordinator/hub/pull_opts.h"
#include "coordinator/hub/pull_manifest.h"
#include "coordinator/hub/pull_util.h"

enum { E_TODO, E_SKIP, E_EXCLUDED, E_DONE, E_FAILED };

typedef struct df_pull_span {
  uint64_t off, len;
} df_pull_span;

typedef struct df_pull_entry {
  char *path;
  uint64_t size;                       /* listed size, bytes */
  char lfs[DF_PULL_SHA256_HEX];        /* hub LFS oid or "" */
  char git[DF_PULL_SHA1_HEX];          /* hub blob id or "" */
  bool sparse;                         /* stream mode: write header + non-expert ranges */
  int state;
  char partial[4300];                  /* temp path under .deltafin/partial (messages) */
  char pname[80];                      /* its name in that folder (state.part_fd): one per
                                          listed path and oid (df_pull__partial_name) */
  /* sparse plan */
  uint64_t head_len;                   /* 8 + header length (written at planning) */
  char head_sha[DF_PULL_SHA256_HEX];   /* SHA-256 of those head_len bytes */
  df_pull_span *spans;                 /* non-expert data ranges after the header */
  int n_spans;
  uint64_t omitted;                    /* expert bytes left as holes (fetched on use) */
  uint64_t unused;                     /* bytes of tensors the engine never reads (outside a
                                          wrapper config's text prefix) left as holes */
  uint64_t need;                       /* bytes still to download */
  /* progress (written by the worker) */
  _Atomic uint64_t done;               /* bytes of `need` done */
  _Atomic int active;
  uint64_t resumed;                    /* bytes already present from an earlier run */
  double t0;
  df_pull_mfile out;                   /* the manifest record on success */
  char err[768];
} df_pull_entry;

typedef struct df_pull_state {
  const df_pull_opts *o;
  char dir[4096];
  char commit[96];
  char rev[256];
  df_pull_entry *e;
  int n;
  char text_prefix[32];   /* stream mode: the text model's tensor prefix from config.json
                             ("language_model." for kimi_k3); "" = every tensor is read */
  char partial_dir[4200]; /* where partial files go (DIR/.deltafin/partial; a temporary
                             folder for --dry-run) */
  int dir_fd;             /* the folder (-1 until opened; a --dry-run of a new folder: -1) */
  int part_fd;            /* partial_dir, opened without following links (-1 until opened);
                             partial files are only ever reached through it */
  pthread_mutex_t mu;
  int next;
  _Atomic int workers_done;
  _Atomic uint64_t total_done;
  uint64_t total_need;
  /* output */
  bool tty;
  int cols;        /* terminal width; live lines are cut to fit so redraws stay aligned */
  int drawn_lines;
  char **notes;  /* lines to print above the live bar */
  int n_notes;
  double t_start, last_plain;
} df_pull_state;

/* Monotonic clock in seconds. */
double df_pull__now(void);
/* Print one JSON line on stdout (--json) and free ev. */
void df_pull__json_event(json_t *ev);
/* A line for the user: stderr in plain/TTY mode (queued above the live bar on a TTY). */
void df_pull__note(df_pull_state *p, bool is_error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Progress: redraw the bar (TTY), or a plain / JSON line every progress_interval_s; `final`
 * draws the last one. */
void df_pull__draw(df_pull_state *p, bool final);

#endif
