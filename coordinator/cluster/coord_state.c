/* coordinator/cluster/coord_state.c — a state directory's coordinator, read from outside; see
 * coord_state.h. */
#define _GNU_SOURCE
#include "coordinator/cluster/coord_state.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/* The pid written in a lock file (df_proto_state_claim), 0 when none. */
static long lock_file_pid(const char *path) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return 0;
  char b[32] = "";
  ssize_t r = read(fd, b, sizeof b - 1);
  close(fd);
  b[r > 0 ? r : 0] = 0;
  long pid = strtol(b, NULL, 10);
  return pid > 0 ? pid : 0;
}

static bool pid_alive(long pid) { return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM); }

/* The holder of the flock on `path`: its pid, 0 when nobody holds it. /proc/locks lines are
 * "N: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE 0 EOF" (device numbers in hex; a waiter's line
 * has "->" before FLOCK). The inode must match, and the device too unless the pid is the one
 * the file records (an overlay filesystem may show the lower device). */
static long lock_holder(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  long written = lock_file_pid(path);
  FILE *f = fopen("/proc/locks", "r");
  if (!f) return pid_alive(written) ? written : 0;
  char line[256];
  long holder = 0;
  while (!holder && fgets(line, sizeof line, f)) {
    char kind[16];
    long pid;
    unsigned maj, min;
    unsigned long long ino;
    if (sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%llu", kind, &pid, &maj, &min, &ino) != 5 ||
        strcmp(kind, "FLOCK") != 0 || ino != (unsigned long long)st.st_ino)
      continue;
    if ((maj == major(st.st_dev) && min == minor(st.st_dev)) || (written && pid == written))
      holder = pid;
  }
  fclose(f);
  return holder;
}

/* argv[1] of process pid (its deltafin subcommand), sanitised to [a-z0-9-]; "" if unknown. */
static void proc_command(long pid, char *out, size_t cap) {
  out[0] = 0;
  char p[64], a[1024];
  snprintf(p, sizeof p, "/proc/%ld/cmdline", pid);
  FILE *f = fopen(p, "rb");
  if (!f) return;
  size_t n = fread(a, 1, sizeof a - 1, f);
  fclose(f);
  a[n] = 0;
  size_t l0 = strlen(a);
  if (l0 + 1 >= n) return;
  const char *s = a + l0 + 1;
  size_t o = 0;
  for (; *s && o + 1 < cap; s++)
    if ((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-') out[o++] = *s;
  out[o] = 0;
}

void df_coord_state_read(const char *state_dir, df_coord_state *out, struct json_t **status) {
  memset(out, 0, sizeof *out);
  if (status) *status = NULL;
  struct stat st;
  out->dir_exists = stat(state_dir, &st) == 0 && S_ISDIR(st.st_mode);
  if (!out->dir_exists) return;
  char p[4200];
  snprintf(p, sizeof p, "%s/cluster-status.json", state_dir);
  json_t *root = json_load_file(p, 0, NULL);
  if (root && !json_is_object(root)) {
    json_decref(root);
    root = NULL;
  }
  long file_pid = 0;
  if (root) {
    out->has_status = true;
    file_pid = (long)json_integer_value(json_object_get(root, "pid"));
    const char *s = json_string_value(json_object_get(root, "endpoint"));
    snprintf(out->endpoint, sizeof out->endpoint, "%s", s ? s : "");
    s = json_string_value(json_object_get(root, "command"));
    snprintf(out->command, sizeof out->command, "%s", s ? s : "");
    out->updated = (int64_t)json_integer_value(json_object_get(root, "updated"));
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(root, "nodes"), i, n) {
      out->nodes++;
      const char *h = json_string_value(json_object_get(n, "health"));
      out->nodes_ready += h && !strcmp(h, "ready");
    }
  }
  snprintf(p, sizeof p, "%s/coordinator.lock", state_dir);
  long holder = lock_holder(p);
  out->running = holder > 0;
  out->pid = holder > 0 ? holder : file_pid;
  if (holder > 0 && holder != file_pid) {
    /* running, but the status file is an earlier coordinator's (or not written yet) */
    proc_command(holder, out->command, sizeof out->command);
    out->endpoint[0] = 0;
  } else if (holder > 0 && !out->command[0]) {
    proc_command(holder, out->command, sizeof out->command); /* a status file without it */
  }
  if (status) *status = root;
  else json_decref(root);
}

int df_coord_endpoint_local(const char *endpoint, char *host, size_t cap, int *port) {
  if (strncmp(endpoint, "tcp://", 6) != 0) return -1;
  const char *h = endpoint + 6, *colon = strrchr(h, ':');
  if (!colon || colon == h) return -1;
  char *end;
  long v = strtol(colon + 1, &end, 10);
  if (*end || v < 1 || v > 65535) return -1;
  size_t n = (size_t)(colon - h);
  if (n >= 2 && h[0] == '[' && h[n - 1] == ']') h++, n -= 2;
  char raw[256];
  if (n >= sizeof raw) return -1;
  memcpy(raw, h, n);
  raw[n] = 0;
  if (!strcmp(raw, "*") || !strcmp(raw, "0.0.0.0")) snprintf(host, cap, "127.0.0.1");
  else if (!strcmp(raw, "::")) snprintf(host, cap, "::1");
  else snprintf(host, cap, "%s", raw);
  *port = (int)v;
  return 0;
}

static int64_t ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int df_coord_tcp_probe(const char *host, int port, int timeout_ms, char *err, size_t errlen) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int g = getaddrinfo(host, ps, &hints, &res);
  if (g != 0) {
    snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(g));
    return -1;
  }
  int64_t deadline = ms_now() + timeout_ms;
  int rc = -1;
  snprintf(err, errlen, "no address");
  for (struct addrinfo *a = res; a && rc != 0; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      snprintf(err, errlen, "socket: %s", strerror(errno));
      continue;
    }
    int e = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      e = errno;
      if (e == EINPROGRESS) {
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int64_t left = deadline - ms_now();
        int r = left > 0 ? poll(&pf, 1, (int)left) : 0;
        socklen_t len = sizeof e;
        if (r == 1) {
          if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0) e = errno;
        } else {
          e = r == 0 ? ETIMEDOUT : errno;
        }
      }
    }
    close(fd);
    if (e == 0) rc = 0;
    else if (e == ETIMEDOUT) snprintf(err, errlen, "no answer within %d ms", timeout_ms);
    else snprintf(err, errlen, "%s", strerror(e));
  }
  freeaddrinfo(res);
  if (rc == 0 && errlen) err[0] = 0;
  return rc;
}
