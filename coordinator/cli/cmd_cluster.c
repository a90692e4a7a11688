/* coordinator/cli/cmd_cluster.c — `deltafin cluster init|token|status`.
 *
 * Owns: the cluster subcommand's options and output. init creates the coordinator keypair
 * and names it by its fingerprint (the Z85 key itself is never printed for reading: a join
 * token carries it to the nodes); token appends a join token to STATE/tokens, prints it on
 * stdout and its coordinator fingerprint, use and expiry time on stderr; status says whether
 * a coordinator (`run` or `serve` with --cluster) is running on the state directory now (its
 * pid and subcommand: coordinator/cluster/coord_state.h) and reads the
 * STATE/cluster-status.json a running coordinator keeps current (nodes, key fingerprints,
 * health, RTT, budgets, placement, bytes held) and the allow-list STATE/nodes; --json prints
 * all of it as one object. Keys, tokens and files: transport/keys.h; the status writer:
 * coordinator/cluster/cluster.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/cli/cli.h"
#include "coordinator/cluster/coord_state.h"
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
          "  status    whether a coordinator (run or serve --cluster) is running on this\n"
          "            state directory (pid, command), and its nodes: key fingerprint, health,\n"
          "            RTT, budget, bytes held, expert placement; the allow-listed keys.\n"
          "            --json: one object (the status file's fields, 'coordinator': running,\n"
          "            pid, command, endpoint; 'allow_listed'; 'nodes' [] before any status)\n"
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

/* "running (pid N, serve)" / "not running (last: pid N, run)" / "not running" into buf. */
static const char *coord_phrase(const df_coord_state *cs, char *buf, size_t cap) {
  char who[64] = "";
  if (cs->pid > 0)
    snprintf(who, sizeof who, "pid %ld%s%s", cs->pid, cs->command[0] ? ", " : "", cs->command);
  if (cs->running) snprintf(buf, cap, "running (%s)", who);
  else if (who[0]) snprintf(buf, cap, "not running (last: %s)", who);
  else snprintf(buf, cap, "not running");
  return buf;
}

/* STATE/nodes as [{"key_fingerprint", "name"}] (an empty array when there is none). */
static json_t *allow_list(const char *state) {
  char p[4200], line[512];
  snprintf(p, sizeof p, "%s/nodes", state);
  json_t *a = json_array();
  FILE *f = fopen(p, "r");
  while (f && fgets(line, sizeof line, f)) {
    char key[64], name[128], fp[17];
    if (sscanf(line, "%63s %127s", key, name) != 2) continue;
    df_proto_key_fingerprint(key, fp);
    json_array_append_new(a, json_pack("{s:s, s:s}", "key_fingerprint", fp, "name", name));
  }
  if (f) fclose(f);
  return a;
}

static int status_cmd(const char *state, bool json) {
  df_coord_state cs;
  json_t *root = NULL;
  df_coord_state_read(state, &cs, &root);
  if (!cs.dir_exists) {
    fprintf(stderr, "deltafin cluster status: no state directory %s (deltafin cluster init "
            "creates it)\n", state);
    return 1;
  }
  json_t *allowed = allow_list(state);
  char phrase[128];
  coord_phrase(&cs, phrase, sizeof phrase);
  if (json) {
    /* the status file's fields as the coordinator wrote them, plus what is known now */
    if (!root) root = json_pack("{s:[]}", "nodes");
    if (!cs.running) { /* as the text says: no coordinator, so no node is connected to it */
      size_t i;
      json_t *n;
      json_array_foreach(json_object_get(root, "nodes"), i, n)
        if (json_is_object(n)) json_object_set_new(n, "health", json_string("offline"));
    }
    json_object_set_new(root, "state_dir", json_string(state));
    json_object_set_new(root, "coordinator",
                        json_pack("{s:b, s:o, s:o, s:o, s:o}", "running", cs.running, "pid",
                                  cs.pid > 0 ? json_integer(cs.pid) : json_null(), "command",
                                  cs.command[0] ? json_string(cs.command) : json_null(),
                                  "endpoint", cs.endpoint[0] ? json_string(cs.endpoint)
                                                             : json_null(),
                                  "status_written", cs.has_status ? json_true() : json_false()));
    json_object_set_new(root, "allow_listed", allowed);
    json_dumpf(root, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(root);
    return 0;
  }
  if (!root) {
    printf("coordinator: %s; no coordinator has written a status with --state-dir %s yet\n",
           phrase, state);
  } else {
    time_t upd = (time_t)json_integer_value(json_object_get(root, "updated"));
    printf("coordinator: %s on %s (key %s), status of %s", phrase,
           cs.endpoint[0] ? cs.endpoint : json_string_value(json_object_get(root, "endpoint")),
           json_string_value(json_object_get(root, "key_fingerprint")), ctime(&upd));
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
    printf("%-16s %-16s %-12s %9s %11s %11s %7s %7s  %s\n", "NAME", "KEY", "HEALTH", "RTT",
           "BUDGET", "HELD", "EXPERTS", "ROUTED", "PLACEMENT");
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
             cs.running ? json_string_value(json_object_get(n, "health")) : "offline", rtt,
             json_integer_value(json_object_get(n, "budget")) / 1048576.0,
             json_integer_value(json_object_get(n, "held")) / 1048576.0,
             (long long)json_integer_value(json_object_get(n, "experts")),
             (long long)json_integer_value(json_object_get(n, "routed")),
             json_string_value(json_object_get(n, "placement")));
    }
    json_decref(root);
  }
  /* allow-listed keys, whether they joined this run or not */
  size_t i;
  json_t *e;
  json_array_foreach(allowed, i, e) {
    if (!i) printf("allow-listed node keys:\n");
    printf("  %-16s %s\n", json_string_value(json_object_get(e, "key_fingerprint")),
           json_string_value(json_object_get(e, "name")));
  }
  json_decref(allowed);
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
    size_t wl = strlen(who);
    if (n == 0 && wl < 8 && strspn(who, "0123456789abcdefABCDEF") == wl) {
      /* matched no name; too short to be taken as a fingerprint (transport/keys.h) */
      fprintf(stderr, "deltafin cluster revoke: no allow-listed key has the name '%s', and a "
              "fingerprint must be given by at least 8 of its 16 hex characters (see 'deltafin "
              "cluster status')\n", who);
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
