/* tests/slow_close.c — LD_PRELOAD fault injection for tests/cluster_test.py (scenario
 * shutdown): every zmq_close returns DF_SLOW_CLOSE_MS milliseconds late (default 20), so
 * the next step of a teardown runs while peers react to it (a node answering the
 * coordinator's BYE by disconnecting, a coordinator exiting under a node). A teardown whose
 * correctness depends on nothing happening between two calls fails at once under it
 * instead of once in many runs on a loaded machine.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

int zmq_close(void *s) {
  static int (*real)(void *);
  if (!real) real = (int (*)(void *))dlsym(RTLD_NEXT, "zmq_close");
  if (!real) return -1;
  int rc = real(s);
  const char *v = getenv("DF_SLOW_CLOSE_MS");
  long ms = v ? atol(v) : 20;
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  if (ms > 0) nanosleep(&ts, NULL);
  return rc;
}
