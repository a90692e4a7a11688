/* coordinator/server/hosts.c — open connections, per address and against the request
 * deadline; see hosts.h.
 *
 * A connection's record lives from its accept (df_srv_hosts_admit, on the accept thread) to
 * libmicrohttpd's CLOSED notification. In between, MHD_add_connection queues the socket to
 * the daemon thread, which announces it (STARTED) a moment later: until then the record is
 * "pending". libmicrohttpd may also close a queued socket without any notification (it
 * could not allocate the connection's memory pool); a pending record whose descriptor is
 * accepted again, or that waited PENDING_MAX_MS, is therefore dropped. Connections are
 * counted (in total and per address) from the accept, so a burst from one host cannot slip
 * past the limits while the daemon thread catches up.
 *
 * The watchdog (df_srv_hosts_cut_overdue) shuts down a socket only while its record is in
 * the started list, under the mutex; the CLOSED notification takes the same mutex to remove
 * the record, and libmicrohttpd (0.9.75 and 1.0: MHD_cleanup_connections, and the failure
 * path of new_connection_process_) closes the socket only after that notification returns.
 * So a descriptor is never shut down after libmicrohttpd closed it (and the number may
 * belong to another file). Pending records are never shut down for the same reason. CLOSED
 * also comes after the connection's thread was joined, so the access handler's and
 * NOTIFY_COMPLETED's uses of the record (via MHD_CONNECTION_INFO_SOCKET_CONTEXT) are over
 * when it is freed. A request completed in the very millisecond its deadline passes may be
 * cut; the client sees a closed connection, as with any timeout.
 */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/server/hosts.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PENDING_MAX_MS 60000 /* a queued socket not announced by then was closed silently */

typedef struct conn_rec {
  struct conn_rec *prev, *next;
  int fd;
  bool has_addr;
  bool cut;               /* shut down by the watchdog */
  unsigned char addr[16]; /* IPv4 as ::ffff:a.b.c.d */
  int64_t admitted_ms;
  int64_t deadline_ms;    /* the request must be complete by then; 0 = none (being answered) */
} conn_rec;

struct df_srv_hosts {
  pthread_mutex_t mu;
  struct host_count {
    unsigned char addr[16];
    unsigned n; /* open connections */
  } *v;
  unsigned n, cap;
  unsigned limit;
  unsigned max_conns, open;
  int64_t timeout_ms;
  int wake_fd;
  conn_rec *pending, *started; /* doubly linked, newest first */
  int64_t refusals, timeouts;
};

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void list_push(conn_rec **head, conn_rec *r) {
  r->prev = NULL;
  r->next = *head;
  if (*head) (*head)->prev = r;
  *head = r;
}

static void list_remove(conn_rec **head, conn_rec *r) {
  if (r->prev) r->prev->next = r->next;
  else *head = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
}

static void list_free(conn_rec *r) {
  while (r) {
    conn_rec *n = r->next;
    free(r);
    r = n;
  }
}

df_srv_hosts *df_srv_hosts_new(int per_host, unsigned max_conns, unsigned request_timeout_s,
                               int wake_fd) {
  df_srv_hosts *h = calloc(1, sizeof *h);
  unsigned cap = max_conns + 16; /* open addresses <= open connections */
  if (!h || !(h->v = calloc(cap, sizeof *h->v))) {
    free(h);
    return NULL;
  }
  h->cap = cap;
  h->limit = per_host > 0 ? (unsigned)per_host : 0;
  h->max_conns = max_conns;
  h->timeout_ms = (int64_t)request_timeout_s * 1000;
  h->wake_fd = wake_fd;
  pthread_mutex_init(&h->mu, NULL);
  return h;
}

void df_srv_hosts_free(df_srv_hosts **hp) {
  if (!hp || !*hp) return;
  pthread_mutex_destroy(&(*hp)->mu);
  list_free((*hp)->pending);
  list_free((*hp)->started);
  free((*hp)->v);
  free(*hp);
  *hp = NULL;
}

int64_t df_srv_hosts_refusals(df_srv_hosts *h) {
  pthread_mutex_lock(&h->mu);
  int64_t r = h->refusals;
  pthread_mutex_unlock(&h->mu);
  return r;
}

int64_t df_srv_hosts_timeouts(df_srv_hosts *h) {
  pthread_mutex_lock(&h->mu);
  int64_t r = h->timeouts;
  pthread_mutex_unlock(&h->mu);
  return r;
}

bool df_srv_hosts_full(df_srv_hosts *h) {
  pthread_mutex_lock(&h->mu);
  bool full = h->open >= h->max_conns;
  pthread_mutex_unlock(&h->mu);
  return full;
}

/* A client address as 16 bytes: IPv4 as IPv4-mapped, IPv6 by its /64 prefix (one host may
 * hold a whole /64, so counting full addresses would give it 2^64 quotas); false for other
 * families. */
static bool addr_key(const struct sockaddr *a, unsigned char k[16]) {
  if (!a) return false;
  if (a->sa_family == AF_INET) {
    memset(k, 0, 10);
    k[10] = k[11] = 0xff;
    memcpy(k + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
    return true;
  }
  if (a->sa_family == AF_INET6) {
    const struct in6_addr *ip = &((const struct sockaddr_in6 *)a)->sin6_addr;
    memcpy(k, ip, 16);
    if (!IN6_IS_ADDR_V4MAPPED(ip)) memset(k + 8, 0, 8);
    return true;
  }
  return false;
}

/* The slot of address k in the host table, h->n when it holds none. Caller holds h->mu. */
static unsigned host_find(const df_srv_hosts *h, const unsigned char k[16]) {
  unsigned i = 0;
  while (i < h->n && memcmp(h->v[i].addr, k, 16)) i++;
  return i;
}

/* Count a connection of r's address in (out). Caller holds h->mu. */
static void host_in(df_srv_hosts *h, const conn_rec *r) {
  if (!r->has_addr) return;
  unsigned i = host_find(h, r->addr);
  if (i == h->n && h->n < h->cap) {
    memcpy(h->v[i].addr, r->addr, 16);
    h->v[i].n = 0;
    h->n++;
  }
  if (i < h->n) h->v[i].n++;
}

static void host_out(df_srv_hosts *h, const conn_rec *r) {
  if (!r->has_addr) return;
  unsigned i = host_find(h, r->addr);
  if (i < h->n && h->v[i].n > 0 && --h->v[i].n == 0)
    h->v[i] = h->v[--h->n]; /* the table holds open hosts only */
}

/* Forget record r of list *head (its connection is gone) and free it; wakes the accept
 * thread when this frees the table's last slot. Caller holds h->mu. */
static void rec_drop(df_srv_hosts *h, conn_rec **head, conn_rec *r) {
  bool was_full = h->open >= h->max_conns;
  list_remove(head, r);
  host_out(h, r);
  if (h->open) h->open--;
  if (was_full && h->open < h->max_conns && h->wake_fd >= 0) {
    uint64_t one = 1;
    if (write(h->wake_fd, &one, sizeof one) < 0) { /* the counter is full: a wake is pending */
    }
  }
  free(r);
}

int df_srv_hosts_admit(df_srv_hosts *h, int fd, const struct sockaddr *addr, socklen_t len) {
  (void)len;
  conn_rec *r = calloc(1, sizeof *r);
  if (!r) return -1;
  r->fd = fd;
  r->has_addr = addr_key(addr, r->addr);
  r->admitted_ms = mono_ms();
  r->deadline_ms = r->admitted_ms + h->timeout_ms;
  pthread_mutex_lock(&h->mu);
  /* a pending record of the same descriptor: libmicrohttpd closed that socket unannounced */
  for (conn_rec *p = h->pending; p; p = p->next) {
    if (p->fd == fd) {
      rec_drop(h, &h->pending, p);
      break;
    }
  }
  int rc = 0;
  if (h->open >= h->max_conns) {
    rc = -1;
  } else if (h->limit && r->has_addr) {
    unsigned i = host_find(h, r->addr);
    if (i < h->n && h->v[i].n >= h->limit) {
      h->refusals++;
      rc = 1;
    }
  }
  if (rc == 0) {
    list_push(&h->pending, r);
    host_in(h, r);
    h->open++;
  }
  pthread_mutex_unlock(&h->mu);
  if (rc != 0) free(r);
  return rc;
}

void df_srv_hosts_unadmit(df_srv_hosts *h, int fd) {
  pthread_mutex_lock(&h->mu);
  for (conn_rec *p = h->pending; p; p = p->next) {
    if (p->fd == fd) {
      rec_drop(h, &h->pending, p);
      break;
    }
  }
  pthread_mutex_unlock(&h->mu);
}

void df_srv_hosts_on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                                enum MHD_ConnectionNotificationCode toe) {
  df_srv_hosts *h = cls;
  if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
    conn_rec *r = *socket_context;
    if (!r) return;
    pthread_mutex_lock(&h->mu);
    rec_drop(h, &h->started, r);
    pthread_mutex_unlock(&h->mu);
    *socket_context = NULL;
    return;
  }
  if (toe != MHD_CONNECTION_NOTIFY_STARTED) return;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci) return;
  int fd = ci->connect_fd;
  pthread_mutex_lock(&h->mu);
  conn_rec *r = h->pending;
  while (r && r->fd != fd) r = r->next;
  if (r) {
    list_remove(&h->pending, r);
  } else if ((r = calloc(1, sizeof *r))) {
    /* not admitted here (its pending record expired): counted from now on */
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    r->fd = fd;
    r->has_addr = ai && addr_key(ai->client_addr, r->addr);
    r->admitted_ms = mono_ms();
    r->deadline_ms = r->admitted_ms + h->timeout_ms;
    host_in(h, r);
    h->open++;
  }
  if (r) list_push(&h->started, r);
  pthread_mutex_unlock(&h->mu);
  *socket_context = r;
}

/* The record of connection mc (NULL when it has none). */
static conn_rec *rec_of(struct MHD_Connection *mc) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

void df_srv_hosts_request_received(df_srv_hosts *h, struct MHD_Connection *mc) {
  conn_rec *r = rec_of(mc);
  if (!r) return;
  pthread_mutex_lock(&h->mu);
  r->deadline_ms = 0;
  pthread_mutex_unlock(&h->mu);
}

void df_srv_hosts_request_rearm(df_srv_hosts *h, struct MHD_Connection *mc) {
  conn_rec *r = rec_of(mc);
  if (!r) return;
  int64_t now = mono_ms();
  pthread_mutex_lock(&h->mu);
  r->deadline_ms = now + h->timeout_ms;
  pthread_mutex_unlock(&h->mu);
}

int64_t df_srv_hosts_cut_overdue(df_srv_hosts *h) {
  int64_t now = mono_ms(), next = -1;
  pthread_mutex_lock(&h->mu);
  for (conn_rec *r = h->started; r; r = r->next) {
    if (!r->deadline_ms || r->cut) continue;
    if (r->deadline_ms <= now) {
      /* the socket is open: its CLOSED notification (which removes r) waits for h->mu */
      shutdown(r->fd, SHUT_RDWR);
      r->cut = true;
      h->timeouts++;
    } else if (next < 0 || r->deadline_ms - now < next) {
      next = r->deadline_ms - now;
    }
  }
  for (conn_rec *r = h->pending, *n; r; r = n) {
    n = r->next;
    if (now - r->admitted_ms >= PENDING_MAX_MS) {
      rec_drop(h, &h->pending, r);
      continue;
    }
    /* cut once announced; look again soon when it is overdue already */
    int64_t left = r->deadline_ms - now > 100 ? r->deadline_ms - now : 100;
    if (next < 0 || left < next) next = left;
  }
  pthread_mutex_unlock(&h->mu);
  return next;
}
