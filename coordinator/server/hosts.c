/* coordinator/server/hosts.c — connections per client address; see hosts.h. */
#include "coordinator/server/hosts.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct df_srv_hosts {
  pthread_mutex_t mu;
  struct host_count {
    unsigned char addr[16]; /* IPv4 as ::ffff:a.b.c.d */
    unsigned n;             /* open connections */
  } *v;
  unsigned n, cap;
  unsigned limit;
  int64_t refusals;
};

df_srv_hosts *df_srv_hosts_new(int limit, unsigned cap) {
  df_srv_hosts *h = calloc(1, sizeof *h);
  if (!h || !(h->v = calloc(cap ? cap : 1, sizeof *h->v))) {
    free(h);
    return NULL;
  }
  h->cap = cap;
  h->limit = limit > 0 ? (unsigned)limit : 0;
  pthread_mutex_init(&h->mu, NULL);
  return h;
}

void df_srv_hosts_free(df_srv_hosts **hp) {
  if (!hp || !*hp) return;
  pthread_mutex_destroy(&(*hp)->mu);
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

/* A client address as 16 bytes; false for families other than IPv4 / IPv6. */
static bool addr_key(const struct sockaddr *a, unsigned char k[16]) {
  if (a->sa_family == AF_INET) {
    memset(k, 0, 10);
    k[10] = k[11] = 0xff;
    memcpy(k + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
    return true;
  }
  if (a->sa_family == AF_INET6) {
    memcpy(k, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
    return true;
  }
  return false;
}

enum MHD_Result df_srv_hosts_on_accept(void *cls, const struct sockaddr *addr, socklen_t len) {
  df_srv_hosts *h = cls;
  unsigned char k[16];
  (void)len;
  if (!h->limit || !addr_key(addr, k)) return MHD_YES;
  bool ok = true;
  pthread_mutex_lock(&h->mu);
  for (unsigned i = 0; i < h->n; i++)
    if (!memcmp(h->v[i].addr, k, 16)) ok = h->v[i].n < h->limit;
  if (!ok) h->refusals++;
  pthread_mutex_unlock(&h->mu);
  return ok ? MHD_YES : MHD_NO;
}

void df_srv_hosts_on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                                enum MHD_ConnectionNotificationCode toe) {
  df_srv_hosts *h = cls;
  (void)socket_context;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  unsigned char k[16];
  if (!ci || !ci->client_addr || !addr_key(ci->client_addr, k)) return;
  pthread_mutex_lock(&h->mu);
  unsigned i = 0;
  while (i < h->n && memcmp(h->v[i].addr, k, 16)) i++;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    if (i == h->n && h->n < h->cap) {
      memcpy(h->v[i].addr, k, 16);
      h->v[i].n = 0;
      h->n++;
    }
    if (i < h->n) h->v[i].n++;
  } else if (i < h->n && h->v[i].n > 0 && --h->v[i].n == 0) {
    h->v[i] = h->v[--h->n]; /* the table holds open hosts only */
  }
  pthread_mutex_unlock(&h->mu);
}
