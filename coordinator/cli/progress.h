/* coordinator/cli/progress.h — the one-line progress bar `deltafin run` shows on stderr
 * while a long step (loading a model, a prefill) runs, and the process clock its "load"
 * figure starts from.
 *
 * Owns: whether a bar may be drawn (stderr a terminal, or DF_PROGRESS), when it appears (once
 * the step has run DF_PROGRESS_DELAY_S), its text ("LABEL [####....]  45%  DONE/TOTAL UNIT
 * ETA M:SS", cut to the terminal's width), its redraw rate and clearing it; the age of the
 * process. Does not own: what the steps are (cmd_run.c), the engine's progress hooks
 * (df_model_opts.progress, df_model_set_progress in engine/model.h). The remaining time is
 * printed as `deltafin pull` prints it (df_pull_fmt_eta, coordinator/hub/pull_util.h).
 * Nothing is ever written to stdout.
 */
#ifndef DF_COORD_CLI_PROGRESS_H
#define DF_COORD_CLI_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A step's bar appears only once the step has run this long, seconds. */
#define DF_PROGRESS_DELAY_S 1.0
/* Least time between two redraws, seconds. */
#define DF_PROGRESS_REDRAW_S 0.1

/* One step's bar. Caller-owned storage (zero or df_progress_begin it; nothing to free). */
typedef struct df_progress {
  FILE *f;           /* where the line goes (stderr); NULL = drawing is off */
  char label[48];    /* "prefill", "load demo-moe", ... */
  const char *unit;  /* "tokens", "layers" (static storage) */
  double t0;         /* when the step began, df_progress_now() seconds */
  double last;       /* last redraw, same clock; 0 = never drawn */
  int width;         /* characters of the line on screen now (0 = nothing to clear) */
  int cols;          /* terminal width (80 when f is not a terminal) */
} df_progress;

/* Whether bars are drawn on stream f: DF_PROGRESS=1 in the environment turns them on
 * whatever f is (tests; a log that wants them), DF_PROGRESS=0 off; otherwise on exactly when
 * f is a terminal (isatty). Reads the environment; no error. */
bool df_progress_wanted(FILE *f);

/* Start a step labelled `label` (copied, cut to 47 bytes) counting in `unit` (static
 * storage, e.g. "tokens"), begun at t0 (df_progress_now() seconds; a step that began
 * before this call may pass its own start). f: the stream to draw on, or NULL for no bar;
 * callers pass df_progress_wanted(stderr) ? stderr : NULL. Draws nothing yet. */
void df_progress_begin(df_progress *p, FILE *f, const char *label, const char *unit,
                       double t0);

/* The step has done `done` of `total` units (total > 0; done clamped to [0, total]) at time
 * now (df_progress_now() seconds). Redraws the line in place ("\r", no newline) when drawing
 * is on, the step has run at least DF_PROGRESS_DELAY_S, and DF_PROGRESS_REDRAW_S passed since
 * the last redraw; otherwise does nothing. ETA = elapsed x (total - done) / done ("--:--"
 * before the first unit). Errors of the stream are ignored (a bar is never fatal). */
void df_progress_update(df_progress *p, int64_t done, int64_t total, double now);

/* The step is over: a drawn line is overwritten with spaces and the cursor returned to the
 * start of the line, so what is printed next starts on a clean line. Safe to call on a bar
 * never drawn (nothing is written) and more than once. */
void df_progress_end(df_progress *p);

/* Monotonic clock (CLOCK_MONOTONIC), seconds. */
double df_progress_now(void);

/* Seconds since this process was created (its fork: the dynamic loading of libtorch, the
 * re-execution of engine/omp_preinit.c and everything before main are included), from
 * /proc/self/stat's starttime against CLOCK_BOOTTIME; resolution one clock tick (1 /
 * sysconf(_SC_CLK_TCK), 10 ms on Linux). -1 when /proc/self/stat cannot be read or parsed.
 * Allocates nothing that outlives the call. */
double df_proc_age(void);

#endif
