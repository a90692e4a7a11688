/* coordinator/hub/pull_progress.c — what a pull tells the user while it runs: notes, the
 * redrawn progress bar (TTY), plain progress lines and JSON events; see pull_progress.h. */
#define _GNU_SOURCE
#include "coordinator/hub/pull_progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double df_pull__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void df_pull__json_event(json_t *ev) {
  char *s = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (s) {
    flockfile(stdout);
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    funlockfile(stdout);
    free(s);
  }
  json_decref(ev);
}

void df_pull__note(df_pull_state *p, bool is_error, const char *fmt, ...) {
  if (p->o->json || (p->o->quiet && !is_error)) return;
  char line[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&p->mu);
  if (p->tty) {
    char **nn = realloc(p->notes, (size_t)(p->n_notes + 1) * sizeof *nn);
    if (nn) {
      p->notes = nn;
      if ((p->notes[p->n_notes] = strdup(line))) p->n_notes++;
    }
  } else {
    fprintf(stderr, "%s\n", line);
  }
  pthread_mutex_unlock(&p->mu);
}

static void progress_line(char *buf, size_t cap, const char *label, uint64_t done, uint64_t need,
                          double rate, int bar_w) {
  char a[32], b[32], r[32], eta[32];
  double frac = need ? (double)done / (double)need : 1.0;
  char bar[64];
  int w = bar_w < 60 ? bar_w : 60, k = (int)(frac * w);
  for (int i = 0; i < w; i++) bar[i] = i < k ? '#' : '.';
  bar[w] = 0;
  df_pull_fmt_eta(rate > 0 ? (double)(need - done) / rate : -1, eta, sizeof eta);
  snprintf(buf, cap, "%-32.32s %s%s%s %3d%% %10s / %-10s %10s/s  ETA %s", label, w ? "[" : "",
           bar, w ? "]" : "", (int)(frac * 100), df_pull_fmt_bytes(done, a, sizeof a),
           df_pull_fmt_bytes(need, b, sizeof b), df_pull_fmt_bytes((uint64_t)rate, r, sizeof r),
           eta);
}

void df_pull__draw(df_pull_state *p, bool final) {
  const df_pull_opts *o = p->o;
  double t = df_pull__now(), el = t - p->t_start;
  uint64_t done = atomic_load(&p->total_done);
  double rate = el > 0.2 ? (double)done / el : 0;
  int files_done = 0, files = 0;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < p->n; i++) {
    files_done += p->e[i].state == E_DONE || p->e[i].state == E_SKIP;
    files += p->e[i].state != E_EXCLUDED;
  }
  if (o->json || o->quiet) pthread_mutex_unlock(&p->mu);
  if (o->json) {
    if (final || t - p->last_plain >= o->progress_interval_s) {
      p->last_plain = t;
      df_pull__json_event(json_pack("{s:s, s:I, s:I, s:f, s:i, s:i}", "event", "progress",
                                    "done", (json_int_t)done, "total", (json_int_t)p->total_need,
                                    "rate", rate, "files_done", files_done, "files", files));
    }
    return;
  }
  if (o->quiet) return;
  char line[512];
  if (p->tty) {
    if (p->drawn_lines) fprintf(stderr, "\x1b[%dA", p->drawn_lines);
    fprintf(stderr, "\r\x1b[J");
    for (int i = 0; i < p->n_notes; i++) {
      fprintf(stderr, "%s\n", p->notes[i]);
      free(p->notes[i]);
    }
    p->n_notes = 0;
    p->drawn_lines = 0;
    if (!final) {
      for (int i = 0; i < p->n; i++) {
        df_pull_entry *e = &p->e[i];
        if (!atomic_load(&e->active)) continue;
        uint64_t d = atomic_load(&e->done);
        double fe = t - e->t0;
        progress_line(line, sizeof line, e->path, d, e->need, fe > 0.2 ? (double)d / fe : 0, 0);
        if (p->cols > 3 && (int)strlen(line) > p->cols - 3) line[p->cols - 3] = 0;
        fprintf(stderr, "  %s\n", line);
        p->drawn_lines++;
      }
    }
    char label[64];
    snprintf(label, sizeof label, "total (%d/%d files)", files_done, files);
    progress_line(line, sizeof line, label, done, p->total_need, rate,
                  p->cols >= 120 ? 24 : 0);
    if (p->cols > 1 && (int)strlen(line) > p->cols - 1) line[p->cols - 1] = 0;
    fprintf(stderr, "%s\n", line);
    p->drawn_lines++;
    if (final) p->drawn_lines = 0;
  } else if (final || t - p->last_plain >= o->progress_interval_s) {
    p->last_plain = t;
    char a[32], b[32], r[32], eta[32];
    df_pull_fmt_eta(rate > 0 ? (double)(p->total_need - done) / rate : -1, eta, sizeof eta);
    fprintf(stderr, "pull: %d/%d files, %s of %s, %s/s, ETA %s\n", files_done, files,
            df_pull_fmt_bytes(done, a, sizeof a), df_pull_fmt_bytes(p->total_need, b, sizeof b),
            df_pull_fmt_bytes((uint64_t)rate, r, sizeof r), eta);
  }
  fflush(stderr);
  pthread_mutex_unlock(&p->mu);
}
