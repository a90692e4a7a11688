/* tests/test_dnssd.c — the daemon-free part of coordinator discovery: TXT parsing and the
 * choice of announcers by the pinned key (transport/dnssd.h), and a node's target
 * (node/target.h): the pinned key and recorded address from a token or STATE/coordinator, the
 * failed-endpoint memory, and df_node_target_find when discovery cannot run (no D-Bus system
 * bus: DBUS_SYSTEM_BUS_ADDRESS points at a socket that does not exist), which must say so in
 * one line and fall back to the recorded address, never hang or crash. Tables are
 * hand-written; temporary state goes under a fresh mkdtemp() folder.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "node/target.h"
#include "transport/codec.h"
#include "transport/dnssd.h"
#include "transport/keys.h"

#define FP_A "00112233aabbccdd"
#define FP_B "ffeeddcc99887766"

static df_proto_dnssd_found mk(const char *name, const char *addr, int port, const char *fp,
                               int version) {
  df_proto_dnssd_found f;
  memset(&f, 0, sizeof f);
  snprintf(f.name, sizeof f.name, "%s", name);
  snprintf(f.addr, sizeof f.addr, "%s", addr);
  f.port = port;
  snprintf(f.fp, sizeof f.fp, "%s", fp);
  f.version = version;
  return f;
}

/* ---- TXT ------------------------------------------------------------------------------ */

static void test_txt(void **state) {
  (void)state;
  static const struct {
    const char *kv;
    const char *fp; /* expected f.fp after it ("" = cleared or untouched empty) */
    int v;          /* expected f.version */
  } cases[] = {
      {"fp=00112233AABBCCDD", FP_A, 0},   /* upper case stored lower */
      {"fp=00112233aabbccdd", FP_A, 0},
      {"fp=00112233aabbccd", "", 0},      /* 15 characters */
      {"fp=00112233aabbccdde", "", 0},    /* 17 */
      {"fp=00112233aabbccdg", "", 0},     /* not hex */
      {"fp=", "", 0},
      {"fp", "", 0},                      /* no '=' */
      {"v=2", "", 2},
      {"v=65535", "", 65535},
      {"v=0", "", 0},
      {"v=65536", "", 0},
      {"v=2a", "", 0},
      {"v=-2", "", 0},
      {"v=", "", 0},
      {"vv=2", "", 0},                    /* other keys are ignored */
      {"fpx=00112233aabbccdd", "", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    df_proto_dnssd_found f;
    memset(&f, 0, sizeof f);
    df_proto_dnssd_txt(cases[i].kv, strlen(cases[i].kv), &f);
    if (strcmp(f.fp, cases[i].fp) || f.version != cases[i].v)
      fail_msg("TXT '%s': fp '%s' v %d, want '%s' %d", cases[i].kv, f.fp, f.version,
               cases[i].fp, cases[i].v);
  }
  /* a malformed fp after a good one clears it: a forged second fp cannot keep the first */
  df_proto_dnssd_found f;
  memset(&f, 0, sizeof f);
  df_proto_dnssd_txt("fp=" FP_A, 19, &f);
  assert_string_equal(f.fp, FP_A);
  df_proto_dnssd_txt("fp=zz", 5, &f);
  assert_string_equal(f.fp, "");
  /* not NUL-terminated: only len bytes are read */
  memset(&f, 0, sizeof f);
  df_proto_dnssd_txt("v=12345678", 5, &f);
  assert_int_equal(f.version, 123);
}

/* ---- rank ----------------------------------------------------------------------------- */

static void test_rank_verdicts(void **state) {
  (void)state;
  df_proto_dnssd_found f[] = {
      mk("impostor", "10.0.0.3", 7070, FP_B, DF_PROTO_VERSION),       /* another key */
      mk("nokey", "10.0.0.4", 7070, "", DF_PROTO_VERSION),            /* no fp */
      mk("old", "10.0.0.5", 7070, FP_A, DF_PROTO_VERSION + 1),        /* other version */
      mk("noversion", "10.0.0.6", 7070, FP_A, 0),
      mk("real", "10.0.0.1", 7070, FP_A, DF_PROTO_VERSION),
      mk("real again", "10.0.0.1", 7070, FP_A, DF_PROTO_VERSION),     /* 2nd interface */
      mk("real other port", "10.0.0.1", 7071, FP_A, DF_PROTO_VERSION),
  };
  int n = (int)(sizeof f / sizeof f[0]), verdict[8], order[8];
  int m = df_proto_dnssd_rank(f, n, FP_A, NULL, 0, verdict, order);
  static const int want[] = {DF_PROTO_DNSSD_WRONG_KEY, DF_PROTO_DNSSD_NO_KEY,
                             DF_PROTO_DNSSD_VERSION,   DF_PROTO_DNSSD_VERSION,
                             DF_PROTO_DNSSD_MATCH,     DF_PROTO_DNSSD_DUPLICATE,
                             DF_PROTO_DNSSD_MATCH};
  for (int i = 0; i < n; i++)
    if (verdict[i] != want[i]) fail_msg("%s: verdict %d, want %d", f[i].name, verdict[i], want[i]);
  assert_int_equal(m, 2);
  assert_int_equal(order[0], 4);
  assert_int_equal(order[1], 6);
  /* the pinned fingerprint compares case-insensitively; a malformed one matches nothing */
  assert_int_equal(df_proto_dnssd_rank(f, n, "00112233AABBCCDD", NULL, 0, verdict, order), 2);
  assert_int_equal(df_proto_dnssd_rank(f, n, "0011", NULL, 0, verdict, order), 0);
  assert_int_equal(df_proto_dnssd_rank(f, n, NULL, NULL, 0, verdict, order), 0);
  assert_int_equal(verdict[4], DF_PROTO_DNSSD_WRONG_KEY);
  /* nothing to judge */
  assert_int_equal(df_proto_dnssd_rank(f, 0, FP_A, NULL, 0, verdict, order), 0);
}

static void test_rank_order(void **state) {
  (void)state;
  df_proto_dnssd_found f[] = {
      mk("lo", "127.0.0.1", 7070, FP_A, DF_PROTO_VERSION),
      mk("ll", "169.254.3.4", 7070, FP_A, DF_PROTO_VERSION),
      mk("lan1", "192.168.1.10", 7070, FP_A, DF_PROTO_VERSION),
      mk("lan2", "10.1.2.3", 7070, FP_A, DF_PROTO_VERSION),
  };
  int verdict[4], order[4];
  /* routable first (in the order found), then link-local, then loopback */
  assert_int_equal(df_proto_dnssd_rank(f, 4, FP_A, NULL, 0, verdict, order), 4);
  int want[] = {2, 3, 1, 0};
  assert_memory_equal(order, want, sizeof want);
  /* endpoints that failed lately go last, keeping that order among themselves */
  const char *avoid[] = {"tcp://192.168.1.10:7070", "tcp://127.0.0.1:7070", "tcp://1.2.3.4:1"};
  assert_int_equal(df_proto_dnssd_rank(f, 4, FP_A, avoid, 3, verdict, order), 4);
  int want2[] = {3, 1, 2, 0};
  assert_memory_equal(order, want2, sizeof want2);
  char ep[64];
  df_proto_dnssd_endpoint(&f[2], ep, sizeof ep);
  assert_string_equal(ep, "tcp://192.168.1.10:7070");
  df_proto_dnssd_endpoint(&f[2], ep, 8); /* truncated, terminated */
  assert_string_equal(ep, "tcp://1");
}

/* ---- the node's target ---------------------------------------------------------------- */

static char g_dir[256];

static void write_file(const char *name, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  chmod(p, 0600);
}

static void read_file(const char *name, char *out, size_t cap) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = 0;
  fclose(f);
}

/* A token of a fresh key, and that key (Z85). */
static void make_token(char *tok, size_t cap, char pub[DF_PROTO_Z85_KEY + 1]) {
  df_proto_keypair kp;
  char p[512], err[256];
  snprintf(p, sizeof p, "%s/coord.key", g_dir);
  unlink(p);
  assert_int_equal(df_proto_keys_load(p, true, &kp, NULL, err, sizeof err), 0);
  assert_int_equal(df_proto_token_create(g_dir, kp.pub, 3600, false, tok, cap, NULL, err,
                                         sizeof err), 0);
  memcpy(pub, kp.pub, DF_PROTO_Z85_KEY + 1);
}

static void test_target_load(void **state) {
  (void)state;
  char tok[256], pub[DF_PROTO_Z85_KEY + 1], tok2[256], pub2[DF_PROTO_Z85_KEY + 1], err[512];
  char text[512], want[512], fp[17];
  make_token(tok, sizeof tok, pub);
  make_token(tok2, sizeof tok2, pub2);
  df_node_target t;
  unlink("coordinator");
  /* no token and nothing stored: the first join needs one */
  assert_int_equal(df_node_target_load(&t, g_dir, NULL, NULL, err, sizeof err), -1);
  assert_non_null(strstr(err, "no --token"));
  /* a token and an address: both recorded */
  assert_int_equal(df_node_target_load(&t, g_dir, tok, "tcp://10.0.0.1:7070", err, sizeof err), 0);
  df_proto_key_fingerprint(pub, fp);
  assert_string_equal(t.pub, pub);
  assert_string_equal(t.fp, fp);
  assert_false(t.discover);
  assert_string_equal(t.endpoint, "tcp://10.0.0.1:7070");
  assert_int_equal(strlen(t.secret), DF_PROTO_SECRET_HEX);
  read_file("coordinator", text, sizeof text);
  snprintf(want, sizeof want, "%s tcp://10.0.0.1:7070\n", pub);
  assert_string_equal(text, want);
  /* the same token without an address: discovery, the recorded address kept */
  assert_int_equal(df_node_target_load(&t, g_dir, tok, NULL, err, sizeof err), 0);
  assert_true(t.discover);
  assert_string_equal(t.endpoint, "");
  assert_string_equal(t.recorded, "tcp://10.0.0.1:7070");
  read_file("coordinator", text, sizeof text);
  assert_string_equal(text, want);
  /* another coordinator's token without an address: the old address is not its */
  assert_int_equal(df_node_target_load(&t, g_dir, tok2, NULL, err, sizeof err), 0);
  assert_string_equal(t.recorded, "");
  read_file("coordinator", text, sizeof text);
  snprintf(want, sizeof want, "%s\n", pub2);
  assert_string_equal(text, want);
  /* rejoin (no token, no address): the stored key, discovery */
  assert_int_equal(df_node_target_load(&t, g_dir, NULL, NULL, err, sizeof err), 0);
  assert_string_equal(t.pub, pub2);
  assert_string_equal(t.secret, "");
  assert_true(t.discover);
  /* the handshake proved a discovered endpoint: recorded, once */
  snprintf(t.endpoint, sizeof t.endpoint, "tcp://10.0.0.9:7071");
  assert_int_equal(df_node_target_record(&t, g_dir, err, sizeof err), 0);
  read_file("coordinator", text, sizeof text);
  snprintf(want, sizeof want, "%s tcp://10.0.0.9:7071\n", pub2);
  assert_string_equal(text, want);
  assert_string_equal(t.recorded, "tcp://10.0.0.9:7071");
  /* a malformed token, a record without a key */
  assert_int_equal(df_node_target_load(&t, g_dir, "dft1_nope", NULL, err, sizeof err), -1);
  write_file("coordinator", "short tcp://10.0.0.1:7070\n");
  assert_int_equal(df_node_target_load(&t, g_dir, NULL, NULL, err, sizeof err), -1);
  /* a recorded address that is not tcp:// is not used */
  snprintf(text, sizeof text, "%s 10.0.0.1:7070\n", pub);
  write_file("coordinator", text);
  assert_int_equal(df_node_target_load(&t, g_dir, NULL, NULL, err, sizeof err), 0);
  assert_string_equal(t.recorded, "");
}

static void test_target_avoid(void **state) {
  (void)state;
  df_node_target t;
  memset(&t, 0, sizeof t);
  snprintf(t.endpoint, sizeof t.endpoint, "tcp://10.0.0.1:1");
  df_node_target_avoid(&t); /* not in discovery mode: nothing */
  assert_int_equal(t.n_avoid, 0);
  assert_string_equal(t.endpoint, "tcp://10.0.0.1:1");
  t.discover = true;
  for (int i = 0; i < DF_NODE_AVOID + 3; i++) {
    snprintf(t.endpoint, sizeof t.endpoint, "tcp://10.0.0.%d:1", i);
    df_node_target_avoid(&t);
    assert_string_equal(t.endpoint, "");
  }
  assert_int_equal(t.n_avoid, DF_NODE_AVOID); /* bounded; the oldest replaced */
  snprintf(t.endpoint, sizeof t.endpoint, "tcp://10.0.0.%d:1", DF_NODE_AVOID + 2);
  df_node_target_avoid(&t); /* the same again: no new entry */
  assert_int_equal(t.n_avoid, DF_NODE_AVOID);
  int seen_last = 0, seen_first = 0;
  for (int i = 0; i < t.n_avoid; i++) {
    seen_last += !strcmp(t.avoid[i], "tcp://10.0.0.10:1");
    seen_first += !strcmp(t.avoid[i], "tcp://10.0.0.0:1");
  }
  assert_int_equal(seen_last, 1);
  assert_int_equal(seen_first, 0);
}

/* find() without a reachable daemon: one line, then the recorded address; or, with none
 * recorded, it keeps looking until stopped (the log callback stops it after its first line). */
static volatile sig_atomic_t g_stop;
static char g_lines[2048];
static int g_nlines;

static void logf_stop(void *user, const char *line) {
  (void)user;
  size_t o = strlen(g_lines);
  snprintf(g_lines + o, sizeof g_lines - o, "%s\n", line);
  g_nlines++;
  g_stop = 1;
}

static void test_target_find_no_daemon(void **state) {
  (void)state;
  char bus[512], err[512];
  snprintf(bus, sizeof bus, "unix:path=%s/no-such-bus", g_dir);
  setenv("DBUS_SYSTEM_BUS_ADDRESS", bus, 1);
  df_proto_dnssd_found f[4];
  int n = df_proto_dnssd_browse(FP_A, 2000, NULL, f, 4, err, sizeof err);
  assert_int_equal(n, -1);
  if (df_proto_dnssd_compiled()) assert_non_null(strstr(err, "avahi-daemon is not running"));
  else assert_non_null(strstr(err, "not built in"));
  assert_int_equal(df_proto_dnssd_probe(err, sizeof err), -1);
  df_node_target t;
  memset(&t, 0, sizeof t);
  t.discover = true;
  snprintf(t.fp, sizeof t.fp, FP_A);
  snprintf(t.recorded, sizeof t.recorded, "tcp://10.0.0.1:7070");
  g_stop = 0;
  g_lines[0] = 0;
  g_nlines = 0;
  assert_int_equal(df_node_target_find(&t, &g_stop, logf_stop, NULL, err, sizeof err), 1);
  assert_string_equal(t.endpoint, "tcp://10.0.0.1:7070");
  assert_non_null(strstr(g_lines, "10.0.0.1:7070"));
  /* nothing recorded */
  t.recorded[0] = t.endpoint[0] = 0;
  g_stop = 0;
  g_lines[0] = 0;
  int rc = df_node_target_find(&t, &g_stop, logf_stop, NULL, err, sizeof err);
  if (df_proto_dnssd_compiled()) {
    assert_int_equal(rc, 0); /* stopped by the callback after its line */
    assert_non_null(strstr(g_lines, "discovery unavailable"));
    assert_non_null(strstr(g_lines, "df-node join HOST:PORT"));
  } else {
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "HOST:PORT"));
  }
  assert_string_equal(t.endpoint, "");
  unsetenv("DBUS_SYSTEM_BUS_ADDRESS");
}

/* Announcing to a bus that does not exist: NULL after one line, nothing left running; and
 * a loopback bind announces nothing, silently. */
static void test_announce_no_daemon(void **state) {
  (void)state;
  char bus[512];
  snprintf(bus, sizeof bus, "unix:path=%s/no-such-bus", g_dir);
  setenv("DBUS_SYSTEM_BUS_ADDRESS", bus, 1);
  df_proto_keypair kp;
  char p[512], err[256];
  snprintf(p, sizeof p, "%s/ann.key", g_dir);
  assert_int_equal(df_proto_keys_load(p, true, &kp, NULL, err, sizeof err), 0);
  assert_null(df_proto_dnssd_announce(kp.pub, 7070, "127.0.0.1", "test: ", false));
  assert_null(df_proto_dnssd_announce(kp.pub, 7070, "no-such-host.invalid", "test: ", false));
  df_proto_dnssd_ann *a = df_proto_dnssd_announce(kp.pub, 7070, NULL, "test: ", false);
  usleep(300 * 1000); /* its thread tries the bus meanwhile */
  df_proto_dnssd_announce_stop(&a);
  assert_null(a);
  df_proto_dnssd_announce_stop(&a); /* twice: harmless */
  df_proto_dnssd_announce_stop(NULL);
  unsetenv("DBUS_SYSTEM_BUS_ADDRESS");
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/df-dnssd-XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  char *home = getcwd(NULL, 0);
  if (chdir(g_dir) != 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_txt),
      cmocka_unit_test(test_rank_verdicts),
      cmocka_unit_test(test_rank_order),
      cmocka_unit_test(test_target_load),
      cmocka_unit_test(test_target_avoid),
      cmocka_unit_test(test_target_find_no_daemon),
      cmocka_unit_test(test_announce_no_daemon),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  if (home && chdir(home) == 0) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) rc = rc ? rc : 1;
  }
  free(home);
  return rc;
}
