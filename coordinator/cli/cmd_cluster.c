/* coordinator/cli/cmd_cluster.c — `deltafin cluster init|token|status`.
 *
 * Owns: the cluster subcommand's options and output. init creates the coordinator keypair
 * and names it by its fingerprint (the Z85 key itself is never printed for reading: a join
 * token carries it to the nodes); token appends a join token to STATE/tokens, prints it on
 * stdout and its coordinator fingerprint, use and expiry time on stderr; status reads the
 * STATE/cluster-status.json a running coordinator keeps current (nodes, key fingerprints,
 * health, RTT, budgets, placement, bytes held) and the allow-list STATE/nodes.
 * Keys, tokens and files: transport/keys.h; the status writer: coordinator/cluster/cluster.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/cli/cli.h"
#include "transport/keys.h"

static void cluster_usage(FILE *f) {
  fprintf(f,
          "usage: deltafin cluster init   [--state-dir DIR]\n"
          "       deltafin cluster token  [--ttl 1h] [--reusable] [--state-dir DIR]\n"
          "       deltafin cluster status [--json] [--state-dir DIR]\n"
          "       deltafin cluster revoke NAME|FINGERPRINT [--state-dir DIR]\n"
          "  init      create the coordinator's CURVE keypair (done on first use anyway) and\n"
          "            print its fingerprint\n"
          "  token     print a join token for 'df-node join HOST:PORT --token T' on stdout and,\n"
          "            on stderr, the coordinator's key fingerprint and when the token expires\n"
          "            (UTC); single-use unless --reusable; --ttl 30s/15m/1h/7d, 0 = never\n"
          "            expires (default 1h)\n"
          "  status    nodes of the running coordinator: key fingerprint, health, RTT,\n"
          "            budget, bytes held, expert placement\n"
          "  revoke    remove node keys from the allow-list, by the name they joined with or\n"
          "            the start (8+ hex characters) of their fingerprint; a running\n"
          "            coordinator drops such a node within a second, and the node cannot\n"
          "            reconnect (it needs a new token)\n"
          "  --state-dir DIR  default ~/.local/state/deltafin\n");
}

/* "90", "90s", "15m", "1h", "7d" -> seconds; -1 when malformed. */
static int64_t parse_ttl(const char *s) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || v < 0 || errno) return -1;
  int64_t mul = 1;
  if (*end == 's') end++;
  else if (*end == 'm') mul = 60, end++;
  else if (*end == 'h') mul = 3600, end++;
  else if (*end == 'd') mul = 86400, end++;
  /* at most 100 years: the expiry is now + ttl in an int64, and 0 already means "never" */
  if (*end || v > 36500ll * 86400 / mul) return -1;
  return v * mul;
}

/* "1d 2h 3m 4s" (only the non-zero parts; "0s" for 0) into the caller's buf (cap bytes). */
static void fmt_duration(int64_t s, char *buf, size_t cap) {
  static const struct { int64_t sec; char unit; } parts[] = {{86400, 'd'}, {3600, 'h'},
                                                            {60, 'm'}, {1, 's'}};
  size_t n = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0] && n < cap; i++) {
    int64_t v = s / parts[i].sec;
    s %= parts[i].sec;
    if (v) n += (size_t)snprintf(buf + n, cap - n, "%s%lld%c", n ? " " : "", (long long)v, parts[i].unit);
  }
  if (!buf[0]) snprintf(buf, cap, "0s");
}

static int status_cmd(const char *state, bool json) {
  char p[4200];
  snprintf(p, sizeof p, "%s/cluster-status.json", state);
  json_error_t je;
  json_t *root = json_load_file(p, 0, &je);
  if (!root) {
    fprintf(stderr, "deltafin cluster status: no coordinator has run with --state-dir %s "
            "(%s)\n", state, je.text);
    return 1;
  }
  if (json) {
    json_dumpf(root, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(root);
    return 0;
  }
  int pid = (int)json_integer_value(json_object_get(root, "pid"));
  bool running = pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
  time_t upd = (time_t)json_integer_value(json_object_get(root, "updated"));
  printf("coordinator %s (key %s) %s, status of %s",
         json_string_value(json_object_get(root, "endpoint")),
         json_string_value(json_object_get(root, "key_fingerprint")),
         running ? "running" : "not running", ctime(&upd));
  printf("expert pairs %lld (%.2f MiB each), %lld on the coordinator; %lld layer calls, "
         "%lld round trips, %.1f MiB sent, %.1f MiB received\n",
         (long long)json_integer_value(json_object_get(root, "pairs")),
         json_integer_value(json_object_get(root, "pair_bytes")) / 1048576.0,
         (long long)json_integer_value(json_object_get(root, "pairs_on_coordinator")),
         (long long)json_integer_value(json_object_get(root, "dispatches")),
         (long long)json_integer_value(json_object_get(root, "round_trips")),
         json_integer_value(json_object_get(root, "bytes_tx")) / 1048576.0,
         json_integer_value(json_object_get(root, "bytes_rx")) / 1048576.0);
  json_t *nodes = json_object_get(root, "nodes");
  printf("%-16s %-16s %-12s %9s %11s %11s %7s %7s  %s\n", "NAME", "KEY", "HEALTH", "RTT", "BUDGET",
         "HELD", "EXPERTS", "ROUTED", "PLACEMENT");
  size_t i;
  json_t *n;
  json_array_foreach(nodes, i, n) {
    char rtt[32];
    long long us = (long long)json_integer_value(json_object_get(n, "rtt_us"));
    if (us > 0) snprintf(rtt, sizeof rtt, "%.2f ms", us / 1000.0);
    else snprintf(rtt, sizeof rtt, "-");
    printf("%-16s %-16s %-12s %9s %7.1f MiB %7.1f MiB %7lld %7lld  %s\n",
           json_string_value(json_object_get(n, "name")),
           json_string_value(json_object_get(n, "key_fingerprint")),
           running ? json_string_value(json_object_get(n, "health")) : "offline", rtt,
           json_integer_value(json_object_get(n, "budget")) / 1048576.0,
           json_integer_value(json_object_get(n, "held")) / 1048576.0,
           (long long)json_integer_value(json_object_get(n, "experts")),
           (long long)json_integer_value(json_object_get(n, "routed")),
           json_string_value(json_object_get(n, "placement")));
  }
  json_decref(root);
  /* allow-listed keys that never joined this run */
  snprintf(p, sizeof p, "%s/nodes", state);
  FILE *f = fopen(p, "r");
  if (f) {
    char line[512];
    int k = 0;
    while (fgets(line, sizeof line, f)) {
      char key[64], name[128];
      if (sscanf(line, "%63s %127s", key, name) != 2) continue;
      char fp[17];
      df_proto_key_fingerprint(key, fp);
      if (!k++) printf("allow-listed node keys:\n");
      printf("  %-16s %s\n", fp, name);
    }
    fclose(f);
  }
  return 0;
}

int df_cmd_cluster(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    cluster_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *sub = argv[1], *state_arg = NULL;
  int64_t ttl = 3600;
  bool reusable = false, json = false;
  static const struct option opts[] = {{"state-dir", required_argument, 0, 's'},
                                       {"ttl", required_argument, 0, 't'},
                                       {"reusable", no_argument, 0, 'r'},
                                       {"json", no_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  int c;
  optind = 2;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      if (df_cli_dir("state-dir", optarg)) return 2;
      state_arg = optarg;
      break;
    case 't':
      if ((ttl = parse_ttl(optarg)) < 0) {
        fprintf(stderr, "deltafin: --ttl: expected seconds or 30s/15m/1h/7d, at most 36500d (0: never), got '%s'\n", optarg);
        return 2;
      }
      break;
    case 'r': reusable = true; break;
    case 'j': json = true; break;
    case 'h': cluster_usage(stdout); return 0;
    default:
      fprintf(stderr, "deltafin cluster: unknown or incomplete option '%s'\n", argv[optind - 1]);
      cluster_usage(stderr);
      return 2;
    }
  }
  const char *who = NULL;
  if (!strcmp(sub, "revoke") && optind < argc) who = argv[optind++];
  if (optind < argc) {
    fprintf(stderr, "deltafin cluster: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (!strcmp(sub, "revoke") && (!who || !who[0])) {
    fprintf(stderr, "deltafin cluster revoke: give the node's name or key fingerprint\n");
    return 2;
  }
  char state[4096], err[512], p[4200];
  if (state_arg) snprintf(state, sizeof state, "%s", state_arg);
  else if (df_proto_state_default("deltafin", state, sizeof state, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: %s\n", err);
    return 1;
  }
  if (!strcmp(sub, "status")) return status_cmd(state, json);
  if (!strcmp(sub, "revoke")) {
    char removed[4096];
    int n = df_proto_allow_revoke(state, who, removed, sizeof removed, err, sizeof err);
    if (n < 0) {
      fprintf(stderr, "deltafin: %s\n", err);
      return 1;
    }
    if (n == 0) {
      fprintf(stderr, "deltafin cluster revoke: no allow-listed key has the name or fingerprint "
              "'%s' (see 'deltafin cluster status')\n", who);
      return 1;
    }
    printf("revoked %d key%s:\n%s", n, n == 1 ? "" : "s", removed);
    return 0;
  }
  if (strcmp(sub, "init") && strcmp(sub, "token")) {
    fprintf(stderr, "deltafin cluster: unknown subcommand '%s'\n", sub);
    cluster_usage(stderr);
    return 2;
  }
  df_proto_keypair kp;
  bool created;
  snprintf(p, sizeof p, "%s/coordinator.key", state);
  if (df_proto_state_mkdir(state, err, sizeof err) != 0 ||
      df_proto_keys_load(p, true, &kp, &created, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: %s\n", err);
    return 1;
  }
  char fp[17];
  df_proto_key_fingerprint(kp.pub, fp);
  if (!strcmp(sub, "init")) {
    printf("%s coordinator key, fingerprint %s, in %s/coordinator.key\n",
           created ? "created" : "existing", fp, state);
    return 0;
  }
  char tok[DF_PROTO_TOKEN_LEN + 1];
  int64_t expiry = 0;
  if (df_proto_token_create(state, kp.pub, ttl, reusable, tok, sizeof tok, &expiry, err,
                            sizeof err) != 0) {
    fprintf(stderr, "deltafin: %s\n", err);
    return 1;
  }
  printf("%s\n", tok);
  fflush(stdout);
  char when[64] = "", in[64];
  time_t t = (time_t)expiry;
  struct tm tm;
  if (expiry && gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  fmt_duration(ttl, in, sizeof in);
  if (expiry)
    fprintf(stderr, "join token for coordinator %s: %s, expires %s (in %s)\n", fp,
            reusable ? "reusable" : "single-use", when, in);
  else
    fprintf(stderr, "join token for coordinator %s: %s, never expires\n", fp,
            reusable ? "reusable" : "single-use");
  return 0;
}
