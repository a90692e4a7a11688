/* transport/dnssd.h — finding the coordinator on the LAN with mDNS / DNS-SD, through each
 * machine's avahi-daemon (Avahi's client library, over the D-Bus system bus).
 *
 * Owns: the coordinator's `_deltafin._tcp` announcement (instance name: the host name; TXT
 * `fp=` the fingerprint of its public key, df_proto_key_fingerprint, and `v=`
 * DF_PROTO_VERSION), a node's browse that resolves announcements to an IPv4 address, a port
 * and that TXT, and the choice among them by the key the node pins (df_proto_dnssd_rank: pure,
 * unit-tested without a daemon). An announcement is a hint, never a credential: anyone on the
 * LAN can announce anything, a copy of the real fingerprint included. A node dials only
 * announcers whose fingerprint is its pinned key's, and the CURVE handshake against the pinned
 * key (transport/sock.h) is what proves the peer. Does not own: sockets, keys, when to look
 * again (node/target.c).
 *
 * Built without libavahi-client (DF_HAVE_AVAHI undefined: CMake found no avahi-client, or
 * DF_DISCOVERY=OFF), df_proto_dnssd_compiled() is false, announcing prints one line and does
 * nothing, and browsing and probing fail with a message saying so. Only IPv4 addresses are
 * resolved: the cluster sockets are IPv4.
 */
#ifndef DF_TRANSPORT_DNSSD_H
#define DF_TRANSPORT_DNSSD_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#define DF_PROTO_DNSSD_TYPE "_deltafin._tcp"
#define DF_PROTO_DNSSD_MAX 32 /* announcements one browse keeps (a LAN flooding more is cut) */

/* Whether discovery was compiled in (libavahi-client found at build time). */
bool df_proto_dnssd_compiled(void);

/* Whether announcing and browsing can work now: connects to avahi-daemon over the system bus
 * and disconnects (blocking; a hung daemon is bounded by D-Bus's reply timeout, 25 s).
 * 0 with "avahi-daemon VERSION, host name NAME" in msg, or -1 with the reason in msg (not
 * built in; no system bus or the daemon not running). msg (len bytes) is always written. */
int df_proto_dnssd_probe(char *msg, size_t len);

typedef struct df_proto_dnssd_ann df_proto_dnssd_ann;

/* Announce `_deltafin._tcp` on `port` (1..65535) for the coordinator whose public key is
 * pub_z85 (Z85), on the interfaces where bind_host listens: NULL, "*" or "0.0.0.0" every
 * interface; an IPv4 address or interface name its interface; a loopback address nothing
 * (silently: no other machine could connect). The work runs on a thread of Avahi's own
 * (threaded poll); the caller never waits for the daemon. Progress is written to stderr as
 * single lines "<log_prefix>discovery: ...": once when announced (instance name, port, key
 * fingerprint); once when avahi-daemon is not running (the cluster works by address; the
 * announcement follows when the daemon starts); a renamed instance after a name collision;
 * a failure. Returns the announcer, to free with df_proto_dnssd_announce_stop, or NULL when
 * nothing is announced (not built in, loopback, bind_host not on this machine, no D-Bus
 * system bus, out of memory), each but loopback after one line saying why. With quiet only
 * failures are written (not the announcement, a rename, nor a missing daemon or bus, which
 * leave the cluster working by address). pub_z85 and log_prefix are copied. */
df_proto_dnssd_ann *df_proto_dnssd_announce(const char *pub_z85, int port, const char *bind_host,
                                            const char *log_prefix, bool quiet);

/* Withdraw the announcement, stop its thread, free; NULLs *a (may be NULL or hold NULL). */
void df_proto_dnssd_announce_stop(df_proto_dnssd_ann **a);

/* One resolved announcement. */
typedef struct df_proto_dnssd_found {
  char name[64]; /* instance name, control bytes replaced by '?' */
  char addr[16]; /* IPv4 address, dotted quad */
  int port;      /* 1..65535 */
  int ifindex;   /* the interface it was seen on */
  char fp[17];   /* TXT fp: 16 lower-case hex characters, or "" when absent or malformed */
  int version;   /* TXT v: 1..65535, or 0 when absent or malformed */
} df_proto_dnssd_found;

/* Browse `_deltafin._tcp` in the local domain for at most wait_ms milliseconds, resolving
 * each announcement to an IPv4 address, port and TXT; the first `cap` (at most
 * DF_PROTO_DNSSD_MAX) resolved are written to out. Returns early once the daemon has reported
 * what it knows (ALL_FOR_NOW), no resolution is pending and one result carries fingerprint
 * want_fp (NULL: never early). A non-zero *stop (may be NULL; e.g. set by a signal handler)
 * ends it within 200 ms. Returns how many were written (0..cap), or -1 with the reason in err
 * (not built in, no system bus or avahi-daemon not running, the browser failed). */
int df_proto_dnssd_browse(const char *want_fp, int wait_ms, volatile sig_atomic_t *stop,
                          df_proto_dnssd_found *out, int cap, char *err, size_t errlen);

/* Verdicts of df_proto_dnssd_rank, one per announcement. */
enum {
  DF_PROTO_DNSSD_MATCH = 0,     /* the pinned key's fingerprint, this protocol version */
  DF_PROTO_DNSSD_WRONG_KEY = 1, /* another key's fingerprint: never dialled */
  DF_PROTO_DNSSD_NO_KEY = 2,    /* no (well-formed) fp in its TXT: never dialled */
  DF_PROTO_DNSSD_VERSION = 3,   /* the pinned key, another protocol version: never dialled */
  DF_PROTO_DNSSD_DUPLICATE = 4, /* the same address and port as an earlier match */
};

/* Judge found[0..n) against want_fp (the pinned key's fingerprint, 16 hex characters) and
 * DF_PROTO_VERSION: verdict[i] gets one of the enum above. The matches go to order[] (indices
 * into found), best first: those whose endpoint (df_proto_dnssd_endpoint) is not among
 * avoid[0..n_avoid) (endpoints that failed lately) before those that are, then routable IPv4
 * before link-local (169.254/16) before loopback (127/8), then in the order found. Returns
 * the number of matches. Pure: reads only its arguments; verdict and order hold n entries. */
int df_proto_dnssd_rank(const df_proto_dnssd_found *found, int n, const char *want_fp,
                        const char *const *avoid, int n_avoid, int *verdict, int *order);

/* "tcp://ADDR:PORT" of f into out (cap bytes, truncated to fit, always terminated). */
void df_proto_dnssd_endpoint(const df_proto_dnssd_found *f, char *out, size_t cap);

/* Read one TXT string "key=value" (len bytes, not terminated) into f: "fp" must be 16 hex
 * characters (stored lower-case; else f->fp = ""), "v" a decimal 1..65535 (else 0); other
 * keys are ignored. */
void df_proto_dnssd_txt(const char *kv, size_t len, df_proto_dnssd_found *f);

#endif
