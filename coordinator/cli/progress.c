/* coordinator/cli/progress.c — run's one-line progress bar and the process clock; see
 * progress.h. */
#define _GNU_SOURCE
#include "coordinator/cli/progress.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/hub/pull_util.h"

double df_progress_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool df_progress_wanted(FILE *f) {
  const char *e = getenv("DF_PROGRESS");
  if (e && !strcmp(e, "1")) return true;
  if (e && !strcmp(e, "0")) return false;
  return f && isatty(fileno(f));
}

void df_progress_begin(df_progress *p, FILE *f, const char *label, const char *unit,
                       double t0) {
  *p = (df_progress){.f = f, .unit = unit ? unit : "", .t0 = t0, .cols = 80};
  snprintf(p->label, sizeof p->label, "%s", label ? label : "");
  struct winsize ws;
  if (f && ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) p->cols = ws.ws_col;
}

void df_progress_update(df_progress *p, int64_t done, int64_t total, double now) {
  if (!p->f || total <= 0) return;
  if (now - p->t0 < DF_PROGRESS_DELAY_S) return;
  if (p->last > 0 && now - p->last < DF_PROGRESS_REDRAW_S) return;
  p->last = now;
  if (done < 0) done = 0;
  if (done > total) done = total;
  double frac = (double)done / (double)total, el = now - p->t0;
  char eta[16], bar[24], line[256];
  df_pull_fmt_eta(done > 0 ? el * (double)(total - done) / (double)done : -1, eta, sizeof eta);
  int w = (int)sizeof bar - 1, k = (int)(frac * w);
  for (int i = 0; i < w; i++) bar[i] = i < k ? '#' : '.';
  bar[w] = 0;
  int n = snprintf(line, sizeof line, "%s [%s] %3d%%  %lld/%lld %s  ETA %s", p->label, bar,
                   (int)(frac * 100), (long long)done, (long long)total, p->unit, eta);
  if (n < 0) return;
  if (n >= (int)sizeof line) n = (int)sizeof line - 1;
  if (p->cols > 1 && n > p->cols - 1) n = p->cols - 1; /* never wrap: "\r" could not undo it */
  /* the new text, then blanks over what is left of a longer previous line */
  fprintf(p->f, "\r%.*s%*s", n, line, p->width > n ? p->width - n : 0, "");
  if (n > p->width) p->width = n;
  fflush(p->f);
}

void df_progress_end(df_progress *p) {
  if (!p->f || p->width == 0) return;
  fprintf(p->f, "\r%*s\r", p->width, "");
  fflush(p->f);
  p->width = 0;
  p->last = 0;
}

double df_proc_age(void) {
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return -1;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  /* "pid (comm) state ppid ...": comm may hold spaces and parentheses, so fields are
   * counted from the last ')'; starttime is field 22, the 20th after it */
  char *s = strrchr(buf, ')');
  if (!s) return -1;
  s++;
  for (int field = 3; field < 22; field++) {
    while (*s == ' ') s++;
    while (*s && *s != ' ') s++;
    if (!*s) return -1;
  }
  char *end;
  unsigned long long ticks = strtoull(s, &end, 10);
  long hz = sysconf(_SC_CLK_TCK);
  struct timespec ts;
  if (end == s || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &ts) != 0) return -1;
  double age = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 - (double)ticks / (double)hz;
  return age > 0 ? age : 0;
}
