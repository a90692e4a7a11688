/* node/target.c — the coordinator a df-node dials and its pinned key; see target.h.
 *
 * Discovery is a hint finder: it narrows the LAN's `_deltafin._tcp` announcers to those whose
 * TXT fingerprint is the pinned key's (df_proto_dnssd_rank), and node.c then proves the one
 * chosen with the CURVE handshake against the pinned key. An announcer with another key is
 * never dialled; one that copies the fingerprint but fails the handshake is remembered here
 * as failed (df_node_target_avoid) and tried after every other candidate.
 */
#define _GNU_SOURCE
#include "node/target.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "transport/codec.h"
#include "transport/dnssd.h"

#define BROWSE_MS 4000   /* one browse: long enough for every announcer on a LAN to answer */
#define PAUSE_MS 3000    /* between tries when discovery cannot run */
#define AVOID_MS 60000   /* how long a failed endpoint is tried last */

/* One line through the caller's log. */
static void say(df_node_logf log, void *user, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(df_node_logf log, void *user, const char *fmt, ...) {
  char line[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  log(user, line);
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int df_node_target_load(df_node_target *t, const char *state_dir, const char *token,
                        const char *endpoint, char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  char p[4200], key[64] = "", addr[300] = "";
  snprintf(p, sizeof p, "%s/coordinator", state_dir);
  FILE *f = fopen(p, "r");
  if (f) {
    if (fscanf(f, "%63s %299s", key, addr) < 1) key[0] = 0;
    fclose(f);
  }
  if (strncmp(addr, "tcp://", 6)) addr[0] = 0;
  if (token) {
    if (df_proto_token_parse(token, t->pub, t->secret, err, errlen) != 0) return -1;
    if (df_proto_token_join_keypair(t->secret, &t->join_kp) != 0) {
      snprintf(err, errlen, "cannot derive the token's join key (libzmq without CURVE?)");
      return -1;
    }
    if (endpoint) snprintf(t->recorded, sizeof t->recorded, "%s", endpoint);
    else if (!strcmp(key, t->pub)) snprintf(t->recorded, sizeof t->recorded, "%s", addr);
    char line[400];
    int len = snprintf(line, sizeof line, "%s%s%s\n", t->pub, t->recorded[0] ? " " : "",
                       t->recorded);
    if (df_proto_write_atomic(p, line, (size_t)len, 0600, err, errlen) != 0) return -1;
  } else {
    if (strlen(key) != DF_PROTO_Z85_KEY) {
      snprintf(err, errlen, "no --token and no stored coordinator key in %s (first join needs "
               "a token from 'deltafin cluster token')", p);
      return -1;
    }
    memcpy(t->pub, key, DF_PROTO_Z85_KEY + 1);
    snprintf(t->recorded, sizeof t->recorded, "%s", addr);
  }
  df_proto_key_fingerprint(t->pub, t->fp);
  t->discover = !endpoint;
  if (endpoint) snprintf(t->endpoint, sizeof t->endpoint, "%s", endpoint);
  return 0;
}

/* Whether ep failed lately; forgets entries older than AVOID_MS. */
static bool avoided(df_node_target *t, const char *ep) {
  int64_t now = mono_ms();
  int k = 0;
  for (int i = 0; i < t->n_avoid; i++)
    if (now - t->avoid_ms[i] < AVOID_MS) {
      memmove(t->avoid[k], t->avoid[i], sizeof t->avoid[k]);
      t->avoid_ms[k++] = t->avoid_ms[i];
    }
  t->n_avoid = k;
  for (int i = 0; i < t->n_avoid; i++)
    if (!strcmp(t->avoid[i], ep)) return true;
  return false;
}

void df_node_target_avoid(df_node_target *t) {
  if (!t->discover || !t->endpoint[0]) return;
  int slot = -1;
  for (int i = 0; i < t->n_avoid; i++)
    if (!strcmp(t->avoid[i], t->endpoint)) slot = i;
  if (slot < 0 && t->n_avoid < DF_NODE_AVOID) slot = t->n_avoid++;
  if (slot < 0) { /* full: replace the oldest */
    slot = 0;
    for (int i = 1; i < t->n_avoid; i++)
      if (t->avoid_ms[i] < t->avoid_ms[slot]) slot = i;
  }
  snprintf(t->avoid[slot], sizeof t->avoid[slot], "%s", t->endpoint);
  t->avoid_ms[slot] = mono_ms();
  t->endpoint[0] = 0;
}

int df_node_target_record(df_node_target *t, const char *state_dir, char *err, size_t errlen) {
  if (!t->endpoint[0] || !strcmp(t->endpoint, t->recorded)) return 0;
  char p[4200], line[400];
  snprintf(p, sizeof p, "%s/coordinator", state_dir);
  int len = snprintf(line, sizeof line, "%s %s\n", t->pub, t->endpoint);
  if (df_proto_write_atomic(p, line, (size_t)len, 0600, err, errlen) != 0) return -1;
  snprintf(t->recorded, sizeof t->recorded, "%s", t->endpoint);
  return 0;
}

/* Log why each announcer that is not a match is skipped. */
static void log_skipped(const df_node_target *t, const df_proto_dnssd_found *found,
                        const int *verdict, int n, df_node_logf log, void *user) {
  for (int i = 0; i < n; i++) {
    const df_proto_dnssd_found *f = &found[i];
    char what[160];
    if (verdict[i] == DF_PROTO_DNSSD_WRONG_KEY)
      snprintf(what, sizeof what, "its key fingerprint %s is not the pinned %s", f->fp, t->fp);
    else if (verdict[i] == DF_PROTO_DNSSD_NO_KEY)
      snprintf(what, sizeof what, "it names no key fingerprint");
    else if (verdict[i] == DF_PROTO_DNSSD_VERSION)
      snprintf(what, sizeof what, "protocol version %d, this node speaks %d", f->version,
               DF_PROTO_VERSION);
    else
      continue;
    say(log, user, "discovery: skipping the announcer '%s' at %s:%d: %s", f->name, f->addr,
        f->port, what);
  }
}

int df_node_target_find(df_node_target *t, volatile sig_atomic_t *stop, df_node_logf log,
                        void *user, char *err, size_t errlen) {
  if (!df_proto_dnssd_compiled()) {
    if (!t->recorded[0]) {
      snprintf(err, errlen, "no coordinator address given, and this build cannot discover one "
               "(built without libavahi-client): df-node join HOST:PORT");
      return -1;
    }
    say(log, user, "discovery is not built in; dialling the recorded address %s", t->recorded);
    snprintf(t->endpoint, sizeof t->endpoint, "%s", t->recorded);
    return 1;
  }
  df_proto_dnssd_found found[DF_PROTO_DNSSD_MAX];
  int verdict[DF_PROTO_DNSSD_MAX], order[DF_PROTO_DNSSD_MAX];
  while (!*stop) {
    char why[320];
    int64_t t0 = mono_ms();
    int n = df_proto_dnssd_browse(t->fp, BROWSE_MS, stop, found, DF_PROTO_DNSSD_MAX, why,
                                  sizeof why);
    if (*stop) break;
    if (n < 0) {
      say(log, user, "discovery unavailable: %s%s", why, t->recorded[0] ? "" :
          "; start avahi-daemon, or give the coordinator's address: df-node join HOST:PORT");
    } else {
      const char *av[DF_NODE_AVOID];
      avoided(t, ""); /* expire old entries first */
      for (int i = 0; i < t->n_avoid; i++) av[i] = t->avoid[i];
      int m = df_proto_dnssd_rank(found, n, t->fp, av, t->n_avoid, verdict, order);
      log_skipped(t, found, verdict, n, log, user);
      if (m > 0) {
        const df_proto_dnssd_found *f = &found[order[0]];
        df_proto_dnssd_endpoint(f, t->endpoint, sizeof t->endpoint);
        say(log, user, "discovery: trying the announcer '%s' at %s:%d, which names the pinned "
            "key %s%s", f->name, f->addr, f->port, t->fp,
            avoided(t, t->endpoint) ? " (it failed lately; trying it again)" : "");
        return 1;
      }
    }
    if (t->recorded[0] && !avoided(t, t->recorded)) {
      if (n < 0)
        say(log, user, "discovery: dialling the recorded address %s meanwhile", t->recorded);
      else
        say(log, user, "discovery: no announcer has key %s; dialling the recorded address %s",
            t->fp, t->recorded);
      snprintf(t->endpoint, sizeof t->endpoint, "%s", t->recorded);
      return 1;
    }
    if (n >= 0)
      say(log, user, "discovery: no coordinator with key %s is announced; looking again", t->fp);
    /* the next try no sooner than one browse (or PAUSE_MS after a failure) after this one */
    for (int64_t end = t0 + (n < 0 ? PAUSE_MS : BROWSE_MS); !*stop && mono_ms() < end;)
      nanosleep(&(struct timespec){0, 100 * 1000000L}, NULL);
  }
  return 0;
}
