/* transport/dnssd.c — mDNS / DNS-SD announcement and discovery of the coordinator; see
 * dnssd.h.
 *
 * The announcer runs on Avahi's threaded poll: its client is created there (by a timeout due
 * at once), with AVAHI_CLIENT_NO_FAIL, so a missing avahi-daemon is one line and the
 * announcement follows when the daemon starts, and a daemon that goes away and comes back is
 * announced to again. The browse runs on a simple poll in the caller's thread, in slices of at
 * most 200 ms so that a signal ends it promptly. The pure part (TXT parsing, ranking,
 * endpoints) is compiled whether or not Avahi is.
 */
#define _GNU_SOURCE
#include "transport/dnssd.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "transport/codec.h"
#include "transport/keys.h"

#ifdef DF_HAVE_AVAHI
#include <avahi-client/client.h>
#include <avahi-client/lookup.h>
#include <avahi-client/publish.h>
#include <avahi-common/alternative.h>
#include <avahi-common/error.h>
#include <avahi-common/malloc.h>
#include <avahi-common/simple-watch.h>
#include <avahi-common/thread-watch.h>
#include <avahi-common/timeval.h>
#endif

#define SLICE_MS 200 /* longest wait of one browse step: how soon *stop is seen */

/* ---- pure part ------------------------------------------------------------------------- */

void df_proto_dnssd_txt(const char *kv, size_t len, df_proto_dnssd_found *f) {
  const char *eq = memchr(kv, '=', len);
  if (!eq) return;
  size_t kl = (size_t)(eq - kv), vl = len - kl - 1;
  const char *v = eq + 1;
  if (kl == 2 && !memcmp(kv, "fp", 2)) {
    f->fp[0] = 0;
    if (vl != 16) return;
    for (size_t i = 0; i < 16; i++)
      if (!isxdigit((unsigned char)v[i])) return;
    for (size_t i = 0; i < 16; i++) f->fp[i] = (char)tolower((unsigned char)v[i]);
    f->fp[16] = 0;
  } else if (kl == 1 && kv[0] == 'v') {
    long x = 0;
    f->version = 0;
    if (vl == 0 || vl > 5) return;
    for (size_t i = 0; i < vl; i++) {
      if (v[i] < '0' || v[i] > '9') return;
      x = x * 10 + (v[i] - '0');
    }
    if (x >= 1 && x <= 65535) f->version = (int)x;
  }
}

void df_proto_dnssd_endpoint(const df_proto_dnssd_found *f, char *out, size_t cap) {
  if (cap) snprintf(out, cap, "tcp://%s:%d", f->addr, f->port);
}

/* 0 routable, 1 link-local 169.254/16, 2 loopback 127/8, 3 not an IPv4 address. */
static int addr_class(const char *a) {
  struct in_addr x;
  if (inet_pton(AF_INET, a, &x) != 1) return 3;
  uint32_t h = ntohl(x.s_addr);
  if ((h >> 24) == 127) return 2;
  if ((h >> 16) == 0xA9FEu) return 1;
  return 0;
}

static int rank_key(const df_proto_dnssd_found *f, const char *const *avoid, int n_avoid) {
  char ep[64];
  df_proto_dnssd_endpoint(f, ep, sizeof ep);
  int avoided = 0;
  for (int i = 0; i < n_avoid && !avoided; i++) avoided = avoid[i] && !strcmp(avoid[i], ep);
  return avoided * 4 + addr_class(f->addr);
}

int df_proto_dnssd_rank(const df_proto_dnssd_found *found, int n, const char *want_fp,
                        const char *const *avoid, int n_avoid, int *verdict, int *order) {
  bool want_ok = want_fp && strlen(want_fp) == 16;
  int m = 0;
  for (int i = 0; i < n; i++) {
    const df_proto_dnssd_found *f = &found[i];
    if (!f->fp[0]) verdict[i] = DF_PROTO_DNSSD_NO_KEY;
    else if (!want_ok || strcasecmp(f->fp, want_fp)) verdict[i] = DF_PROTO_DNSSD_WRONG_KEY;
    else if (f->version != DF_PROTO_VERSION) verdict[i] = DF_PROTO_DNSSD_VERSION;
    else verdict[i] = DF_PROTO_DNSSD_MATCH;
    if (verdict[i] != DF_PROTO_DNSSD_MATCH) continue;
    for (int j = 0; j < m; j++)
      if (found[order[j]].port == f->port && !strcmp(found[order[j]].addr, f->addr))
        verdict[i] = DF_PROTO_DNSSD_DUPLICATE;
    if (verdict[i] == DF_PROTO_DNSSD_MATCH) order[m++] = i;
  }
  for (int i = 1; i < m; i++) { /* stable insertion sort: the order found breaks ties */
    int x = order[i], kx = rank_key(&found[x], avoid, n_avoid), j = i;
    while (j > 0 && rank_key(&found[order[j - 1]], avoid, n_avoid) > kx) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = x;
  }
  return m;
}

/* The interface to announce on for bind_host: -1 for every one (AVAHI_IF_UNSPEC), an index,
 * -2 for loopback (nothing announced), -3 when bind_host is no address of this machine. */
static int bind_interface(const char *h) {
  if (!h || !*h || !strcmp(h, "*") || !strcmp(h, "0.0.0.0")) return -1;
  struct in_addr want;
  bool by_addr = inet_pton(AF_INET, h, &want) == 1;
  if (!by_addr && !if_nametoindex(h)) { /* a host name: its first IPv4 address */
    struct addrinfo hints = {.ai_family = AF_INET}, *res = NULL;
    if (getaddrinfo(h, NULL, &hints, &res) != 0 || !res) return -3;
    want = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    by_addr = true;
  }
  if (by_addr && (ntohl(want.s_addr) >> 24) == 127) return -2;
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) return -3;
  int ix = -3;
  for (struct ifaddrs *i = ifs; i && ix == -3; i = i->ifa_next) {
    bool hit = by_addr ? i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                             ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == want.s_addr
                       : !strcmp(i->ifa_name, h);
    if (hit) ix = (i->ifa_flags & IFF_LOOPBACK) ? -2 : (int)if_nametoindex(i->ifa_name);
  }
  freeifaddrs(ifs);
  return ix == 0 ? -3 : ix;
}

#ifndef DF_HAVE_AVAHI

/* ---- built without Avahi --------------------------------------------------------------- */

#define NOT_BUILT "discovery is not built in (libavahi-client was not found at build time)"

bool df_proto_dnssd_compiled(void) { return false; }

int df_proto_dnssd_probe(char *msg, size_t len) {
  if (len) snprintf(msg, len, NOT_BUILT);
  return -1;
}

df_proto_dnssd_ann *df_proto_dnssd_announce(const char *pub_z85, int port, const char *bind_host,
                                            const char *log_prefix, bool quiet) {
  (void)pub_z85;
  if (bind_interface(bind_host) == -2 || quiet) return NULL; /* loopback: nothing to say */
  fprintf(stderr, "%sdiscovery: not announced: %s; nodes must be given this coordinator's "
          "address (df-node join HOST:%d)\n", log_prefix ? log_prefix : "", NOT_BUILT, port);
  return NULL;
}

void df_proto_dnssd_announce_stop(df_proto_dnssd_ann **a) {
  if (a) *a = NULL;
}

int df_proto_dnssd_browse(const char *want_fp, int wait_ms, volatile sig_atomic_t *stop,
                          df_proto_dnssd_found *out, int cap, char *err, size_t errlen) {
  (void)want_fp, (void)wait_ms, (void)stop, (void)out, (void)cap;
  if (errlen) snprintf(err, errlen, NOT_BUILT);
  return -1;
}

#else

/* ---- with Avahi ------------------------------------------------------------------------ */

bool df_proto_dnssd_compiled(void) { return true; }

_Static_assert(AVAHI_IF_UNSPEC == -1, "bind_interface returns -1 for every interface");

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void quiet_cb(AvahiClient *c, AvahiClientState st, void *ud) { (void)c, (void)st, (void)ud; }

int df_proto_dnssd_probe(char *msg, size_t len) {
  AvahiSimplePoll *sp = avahi_simple_poll_new();
  if (!sp) {
    snprintf(msg, len, "out of memory");
    return -1;
  }
  int e = 0, rc = -1;
  AvahiClient *c = avahi_client_new(avahi_simple_poll_get(sp), 0, quiet_cb, NULL, &e);
  if (!c) {
    snprintf(msg, len, "avahi-daemon is not running or there is no D-Bus system bus (%s)",
             avahi_strerror(e));
  } else {
    const char *v = avahi_client_get_version_string(c);
    const char *h = avahi_client_get_host_name_fqdn(c);
    snprintf(msg, len, "%s, host name %s", v ? v : "avahi-daemon", h ? h : "unknown");
    rc = 0;
    avahi_client_free(c);
  }
  avahi_simple_poll_free(sp);
  return rc;
}

struct df_proto_dnssd_ann {
  AvahiThreadedPoll *tp;
  AvahiClient *client;   /* owned by the poll thread while it runs */
  AvahiEntryGroup *group;
  char *name;            /* instance name (avahi_malloc), renamed on a collision */
  char fp[17];
  char prefix[64];
  int port, ifindex;
  bool said_waiting, said_up;
  bool quiet; /* failures only (ann_info writes nothing) */
};

static void ann_log(const df_proto_dnssd_ann *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void ann_log(const df_proto_dnssd_ann *a, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%sdiscovery: %s\n", a->prefix, line);
}

/* A line that reports progress, not a failure: not written when quiet. */
#define ann_info(a, ...)                   \
  do {                                     \
    if (!(a)->quiet) ann_log(a, __VA_ARGS__); \
  } while (0)

static void ann_rename(df_proto_dnssd_ann *a) {
  char *alt = avahi_alternative_service_name(a->name);
  if (!alt) return;
  avahi_free(a->name);
  a->name = alt;
  ann_info(a, "another service has this name; announcing as '%s'", a->name);
}

static void group_cb(AvahiEntryGroup *g, AvahiEntryGroupState st, void *ud);

/* (Re)register the service in the entry group; renames on a local collision. */
static void ann_publish(df_proto_dnssd_ann *a, AvahiClient *c) {
  if (!a->group && !(a->group = avahi_entry_group_new(c, group_cb, a))) {
    ann_log(a, "not announced: %s", avahi_strerror(avahi_client_errno(c)));
    return;
  }
  char fp[24], v[16];
  snprintf(fp, sizeof fp, "fp=%s", a->fp);
  snprintf(v, sizeof v, "v=%d", DF_PROTO_VERSION);
  for (int tries = 0; tries < 16; tries++) {
    avahi_entry_group_reset(a->group);
    int r = avahi_entry_group_add_service(a->group, a->ifindex, AVAHI_PROTO_UNSPEC, 0, a->name,
                                          DF_PROTO_DNSSD_TYPE, NULL, NULL, (uint16_t)a->port, fp,
                                          v, NULL);
    if (r == AVAHI_ERR_COLLISION) {
      ann_rename(a);
      continue;
    }
    if (r >= 0) r = avahi_entry_group_commit(a->group);
    if (r < 0) ann_log(a, "not announced: %s", avahi_strerror(r));
    return;
  }
  ann_log(a, "not announced: no free instance name after 16 tries");
}

static void group_cb(AvahiEntryGroup *g, AvahiEntryGroupState st, void *ud) {
  df_proto_dnssd_ann *a = ud;
  a->group = g;
  if (st == AVAHI_ENTRY_GROUP_ESTABLISHED && !a->said_up) {
    a->said_up = true;
    ann_info(a, "announced '%s' as %s on port %d (key %s)", a->name, DF_PROTO_DNSSD_TYPE, a->port,
            a->fp);
  } else if (st == AVAHI_ENTRY_GROUP_COLLISION) { /* a remote service took the name */
    ann_rename(a);
    ann_publish(a, avahi_entry_group_get_client(g));
  } else if (st == AVAHI_ENTRY_GROUP_FAILURE) {
    ann_log(a, "announcement failed: %s",
            avahi_strerror(avahi_client_errno(avahi_entry_group_get_client(g))));
  }
}

static void client_cb(AvahiClient *c, AvahiClientState st, void *ud) {
  df_proto_dnssd_ann *a = ud;
  a->client = c; /* also during avahi_client_new, before it returns */
  switch (st) {
  case AVAHI_CLIENT_S_RUNNING:
    ann_publish(a, c);
    break;
  case AVAHI_CLIENT_S_COLLISION: /* the host name is being renegotiated */
  case AVAHI_CLIENT_S_REGISTERING:
    if (a->group) avahi_entry_group_reset(a->group);
    break;
  case AVAHI_CLIENT_CONNECTING: /* no daemon (yet, or any more): wait for it */
    if (a->group) avahi_entry_group_free(a->group);
    a->group = NULL;
    if (!a->said_waiting)
      ann_info(a, "avahi-daemon is not running, so this coordinator is not announced: nodes must "
              "be given its address (df-node join HOST:%d); it is announced once the daemon "
              "starts", a->port);
    a->said_waiting = true;
    a->said_up = false;
    break;
  case AVAHI_CLIENT_FAILURE:
    if (avahi_client_errno(c) == AVAHI_ERR_DISCONNECTED) { /* the bus went away: start over */
      a->group = NULL;
      avahi_client_free(c);
      int e = 0;
      a->said_up = false;
      a->client = NULL;
      AvahiClient *n = avahi_client_new(avahi_threaded_poll_get(a->tp), AVAHI_CLIENT_NO_FAIL,
                                        client_cb, a, &e);
      a->client = n;
      if (!n) ann_log(a, "announcement stopped: %s", avahi_strerror(e));
    } else {
      ann_log(a, "announcement failed: %s", avahi_strerror(avahi_client_errno(c)));
    }
    break;
  }
}

/* Runs once on the poll thread: create the client there, so the caller never waits. */
static void ann_start(AvahiTimeout *t, void *ud) {
  df_proto_dnssd_ann *a = ud;
  int e = 0;
  AvahiClient *c = avahi_client_new(avahi_threaded_poll_get(a->tp), AVAHI_CLIENT_NO_FAIL,
                                    client_cb, a, &e);
  a->client = c;
  if (!c)
    ann_info(a, "not announced: no D-Bus system bus (%s): nodes must be given this "
            "coordinator's address (df-node join HOST:%d)", avahi_strerror(e), a->port);
  avahi_threaded_poll_get(a->tp)->timeout_free(t);
}

df_proto_dnssd_ann *df_proto_dnssd_announce(const char *pub_z85, int port, const char *bind_host,
                                            const char *log_prefix, bool quiet) {
  df_proto_dnssd_ann *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->quiet = quiet;
  snprintf(a->prefix, sizeof a->prefix, "%s", log_prefix ? log_prefix : "");
  df_proto_key_fingerprint(pub_z85, a->fp);
  a->port = port;
  a->ifindex = bind_interface(bind_host);
  if (a->ifindex == -2) { /* loopback: nobody else could connect */
    free(a);
    return NULL;
  }
  if (a->ifindex == -3) {
    ann_log(a, "not announced: %s is not an address or interface of this machine", bind_host);
    free(a);
    return NULL;
  }
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "deltafin");
  host[63] = 0; /* a DNS label */
  struct timeval now;
  if (!(a->name = avahi_strdup(host)) || !(a->tp = avahi_threaded_poll_new()) ||
      !avahi_threaded_poll_get(a->tp)->timeout_new(avahi_threaded_poll_get(a->tp),
                                                   avahi_elapse_time(&now, 0, 0), ann_start, a) ||
      avahi_threaded_poll_start(a->tp) < 0) {
    ann_log(a, "not announced: cannot start Avahi's poll thread");
    if (a->tp) avahi_threaded_poll_free(a->tp);
    avahi_free(a->name);
    free(a);
    return NULL;
  }
  return a;
}

void df_proto_dnssd_announce_stop(df_proto_dnssd_ann **ap) {
  if (!ap || !*ap) return;
  df_proto_dnssd_ann *a = *ap;
  avahi_threaded_poll_stop(a->tp); /* joins the poll thread: nothing runs on a after this */
  if (a->client) avahi_client_free(a->client); /* frees the group: the daemon withdraws it */
  avahi_threaded_poll_free(a->tp);
  avahi_free(a->name);
  free(a);
  *ap = NULL;
}

/* ---- browsing -------------------------------------------------------------------------- */

typedef struct browse_st {
  AvahiClient *client;
  df_proto_dnssd_found *out;
  int cap, n;
  int pending;       /* resolvers running */
  bool all_for_now;  /* the daemon reported what it knows */
  bool failed;
  char why[256];
} browse_st;

static void resolve_cb(AvahiServiceResolver *r, AvahiIfIndex iface, AvahiProtocol proto,
                       AvahiResolverEvent ev, const char *name, const char *type,
                       const char *domain, const char *host, const AvahiAddress *addr,
                       uint16_t port, AvahiStringList *txt, AvahiLookupResultFlags flags,
                       void *ud) {
  (void)proto, (void)type, (void)domain, (void)host, (void)flags;
  browse_st *st = ud;
  if (ev == AVAHI_RESOLVER_FOUND && addr && addr->proto == AVAHI_PROTO_INET && port &&
      st->n < st->cap) {
    df_proto_dnssd_found *f = &st->out[st->n];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name ? name : "");
    for (char *p = f->name; *p; p++)
      if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    avahi_address_snprint(f->addr, sizeof f->addr, addr);
    f->port = port;
    f->ifindex = iface;
    for (AvahiStringList *s = txt; s; s = avahi_string_list_get_next(s))
      df_proto_dnssd_txt((const char *)avahi_string_list_get_text(s),
                         avahi_string_list_get_size(s), f);
    st->n++;
  }
  avahi_service_resolver_free(r);
  st->pending--;
}

static void browse_cb(AvahiServiceBrowser *b, AvahiIfIndex iface, AvahiProtocol proto,
                      AvahiBrowserEvent ev, const char *name, const char *type,
                      const char *domain, AvahiLookupResultFlags flags, void *ud) {
  (void)flags;
  browse_st *st = ud;
  if (ev == AVAHI_BROWSER_NEW && st->n + st->pending < st->cap) {
    if (avahi_service_resolver_new(st->client, iface, proto, name, type, domain,
                                   AVAHI_PROTO_INET, 0, resolve_cb, st))
      st->pending++;
  } else if (ev == AVAHI_BROWSER_ALL_FOR_NOW) {
    st->all_for_now = true;
  } else if (ev == AVAHI_BROWSER_FAILURE) {
    st->failed = true;
    snprintf(st->why, sizeof st->why, "browsing failed: %s",
             avahi_strerror(avahi_client_errno(avahi_service_browser_get_client(b))));
  }
}

int df_proto_dnssd_browse(const char *want_fp, int wait_ms, volatile sig_atomic_t *stop,
                          df_proto_dnssd_found *out, int cap, char *err, size_t errlen) {
  browse_st st = {.out = out, .cap = cap < DF_PROTO_DNSSD_MAX ? cap : DF_PROTO_DNSSD_MAX};
  AvahiSimplePoll *sp = avahi_simple_poll_new();
  AvahiServiceBrowser *b = NULL;
  int e = 0, rc = -1;
  if (!sp) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (!(st.client = avahi_client_new(avahi_simple_poll_get(sp), 0, quiet_cb, NULL, &e))) {
    snprintf(err, errlen, "avahi-daemon is not running or there is no D-Bus system bus (%s)",
             avahi_strerror(e));
    goto done;
  }
  if (!(b = avahi_service_browser_new(st.client, AVAHI_IF_UNSPEC, AVAHI_PROTO_INET,
                                      DF_PROTO_DNSSD_TYPE, NULL, 0, browse_cb, &st))) {
    snprintf(err, errlen, "cannot browse %s: %s", DF_PROTO_DNSSD_TYPE,
             avahi_strerror(avahi_client_errno(st.client)));
    goto done;
  }
  int64_t deadline = mono_ms() + (wait_ms > 0 ? wait_ms : 0);
  for (;;) {
    if (stop && *stop) break;
    if (st.failed) {
      snprintf(err, errlen, "%s", st.why);
      goto done;
    }
    bool match = false;
    for (int i = 0; i < st.n && want_fp && !match; i++) match = !strcasecmp(out[i].fp, want_fp);
    if (match && st.all_for_now && st.pending == 0) break;
    int64_t left = deadline - mono_ms();
    if (left <= 0) break;
    if (avahi_simple_poll_iterate(sp, (int)(left < SLICE_MS ? left : SLICE_MS)) != 0) break;
  }
  rc = st.n;
done:
  if (st.client) avahi_client_free(st.client); /* frees the browser and pending resolvers */
  avahi_simple_poll_free(sp);
  return rc;
}

#endif
