/* node/main.c — the df-node command line: `df-node join`, `df-node status`.
 *
 * Owns: option parsing (sizes with K/M/G/T suffixes, binary) and the status report of a
 * node's state directory. The agent itself is node/node.c.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/fsutil.h"
#include "node/node.h"
#include "transport/keys.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: df-node join [HOST:PORT] [--token-file F | --token T] [--memory BYTES]\n"
          "                              [--model-dir DIR]\n"
          "                              [--state-dir DIR] [--name NAME] [--threads N] [--quiet]\n"
          "                              [--device cpu|cuda|cuda:N|auto]\n"
          "       df-node status [--state-dir DIR]\n"
          "  HOST:PORT        the coordinator (port default 7070); without it, the coordinator\n"
          "                   is found on the LAN by mDNS/DNS-SD: only an announcer of the key\n"
          "                   the token (or the state directory) pins is dialled\n"
          "  --token-file F   read the join token from 'deltafin cluster token' from file F\n"
          "                   (mode 600; first join only: later joins use the key stored in\n"
          "                   the state directory); or set DELTAFIN_JOIN_TOKEN\n"
          "  --token T        the token on the command line (visible to local users in ps)\n"
          "  --memory BYTES   expert memory budget, K/M/G/T suffixes (default: half the RAM)\n"
          "  --model-dir DIR  this machine's copy of the checkpoint (tensors are checked against\n"
          "                   the coordinator's SHA-256 manifest; missing ones are streamed)\n"
          "  --state-dir DIR  keys and shard cache (default ~/.local/state/deltafin-node)\n"
          "  --device D       cpu (default), cuda, cuda:N or auto: keep the experts served on\n"
          "                   the GPU as far as its free memory allows (docs/GPU.md)\n"
          "exit status: 0 stopped by SIGINT/SIGTERM, 1 local error, 2 usage error, 3 refused by\n"
          "the coordinator (key not admitted, token refused, wrong coordinator key)\n");
}

/* "12G" -> bytes; -1 on a malformed value. */
static int parse_size(const char *s, uint64_t *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || !(v > 0)) return -1;
  double mul = 1;
  switch (*end) {
  case 'k': case 'K': mul = 1024.0; end++; break;
  case 'm': case 'M': mul = 1048576.0; end++; break;
  case 'g': case 'G': mul = 1073741824.0; end++; break;
  case 't': case 'T': mul = 1099511627776.0; end++; break;
  default: break;
  }
  if (*end == 'i' || *end == 'B') end++;
  if (*end == 'B') end++;
  if (*end || v * mul > 1.8e19) return -1;
  *out = (uint64_t)(v * mul);
  return 0;
}

/* The coordinator argument, HOST, HOST:PORT, [V6]:PORT, each optionally after tcp://, as a
 * ZeroMQ endpoint "tcp://HOST:PORT" (port default 7070). A missing host or a port that is
 * not 1..65535 is a usage error: the node would otherwise retry it forever. */
static int parse_endpoint(const char *arg, char *ep, size_t cap) {
  const char *rest = strncmp(arg, "tcp://", 6) ? arg : arg + 6;
  const char *host = rest, *port = NULL;
  size_t hlen;
  if (rest[0] == '[') { /* [v6] or [v6]:PORT */
    const char *end = strchr(rest, ']');
    if (!end || (end[1] && end[1] != ':')) {
      fprintf(stderr, "df-node join: '%s': expected [ADDRESS]:PORT for an IPv6 address\n", arg);
      return -1;
    }
    hlen = (size_t)(end - rest) + 1;
    if (end[1] == ':') port = end + 2;
    if (hlen == 2) hlen = 0;
  } else {
    const char *colon = strchr(rest, ':');
    hlen = colon ? (size_t)(colon - rest) : strlen(rest);
    if (colon) port = colon + 1;
  }
  if (!hlen) {
    fprintf(stderr, "df-node join: '%s': no host (expected HOST:PORT, e.g. "
            "coordinator.lan:7070)\n", arg);
    return -1;
  }
  for (size_t i = 0; i < hlen; i++)
    if (host[i] == '/' || host[i] == ' ' || host[i] == '*') {
      fprintf(stderr, "df-node join: '%s': '%.*s' is not a host name or address (expected "
              "HOST:PORT, e.g. coordinator.lan:7070)\n", arg, (int)hlen, host);
      return -1;
    }
  long pn = 7070;
  if (port) {
    char *end = NULL;
    pn = port[0] >= '0' && port[0] <= '9' ? strtol(port, &end, 10) : -1;
    if (pn < 1 || pn > 65535 || *end) {
      fprintf(stderr, "df-node join: '%s': port '%s' is not a number from 1 to 65535 "
              "(expected HOST:PORT, e.g. coordinator.lan:7070)\n", arg, port);
      return -1;
    }
  }
  if ((size_t)snprintf(ep, cap, "tcp://%.*s:%ld", (int)hlen, host, pn) >= cap) {
    fprintf(stderr, "df-node join: '%.80s...': too long for a HOST:PORT\n", arg);
    return -1;
  }
  return 0;
}

static int state_dir_of(const char *given, char *buf, size_t cap) {
  char err[256];
  if (given) {
    snprintf(buf, cap, "%s", given);
    return 0;
  }
  if (df_proto_state_default("deltafin-node", buf, cap, err, sizeof err) != 0) {
    fprintf(stderr, "df-node: %s\n", err);
    return -1;
  }
  return 0;
}

static int cmd_status(const char *state) {
  char p[4300], err[512];
  df_proto_keypair kp;
  snprintf(p, sizeof p, "%s/node.key", state);
  if (df_proto_keys_load(p, false, &kp, NULL, err, sizeof err) != 0) {
    fprintf(stderr, "df-node: not joined yet (%s)\n", err);
    return 1;
  }
  char fp[17];
  df_proto_key_fingerprint(kp.pub, fp);
  printf("state dir     %s\nnode key      %s (fingerprint %s)\n", state, kp.pub, fp);
  snprintf(p, sizeof p, "%s/coordinator", state);
  FILE *f = fopen(p, "r");
  char key[64] = "", ep[256] = "";
  if (f && fscanf(f, "%63s %255s", key, ep) >= 1) {
    df_proto_key_fingerprint(key, fp);
    printf("coordinator   %s (key fingerprint %s)\n", ep[0] ? ep : "to be found by discovery", fp);
  } else {
    printf("coordinator   none pinned\n");
  }
  if (f) fclose(f);
  snprintf(p, sizeof p, "%s/cache/sha256", state);
  DIR *d = opendir(p);
  uint64_t bytes = 0, n = 0;
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char q[4600];
      struct stat st;
      snprintf(q, sizeof q, "%s/%s", p, e->d_name);
      if (stat(q, &st) == 0 && S_ISREG(st.st_mode)) {
        n++;
        bytes += (uint64_t)st.st_size;
      }
    }
    closedir(d);
  }
  printf("shard cache   %llu tensors, %.1f MiB\n", (unsigned long long)n, bytes / 1048576.0);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *cmd = argv[1];
  static const struct option opts[] = {
      {"token", required_argument, 0, 't'},   {"memory", required_argument, 0, 'm'},
      {"model-dir", required_argument, 0, 'd'}, {"state-dir", required_argument, 0, 's'},
      {"name", required_argument, 0, 'n'},    {"threads", required_argument, 0, 'j'},
      {"quiet", no_argument, 0, 'q'},         {"help", no_argument, 0, 'h'},
      {"device", required_argument, 0, 'D'},  {"token-file", required_argument, 0, 'T'},
      {0, 0, 0, 0}};
  char *token_owned = NULL;
  const char *token_file = NULL;
  df_node_opts o = {0};
  const char *state_arg = NULL;
  int c;
  optind = 2;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 't': o.token = optarg; break;
    case 'T': token_file = optarg; break;
    case 'm':
      if (parse_size(optarg, &o.memory) != 0) {
        fprintf(stderr, "df-node: --memory: expected a size like 512M or 12G, got '%s'\n", optarg);
        return 2;
      }
      break;
    case 'd': o.model_dir = optarg; break;
    case 's':
      if (!optarg[0]) { /* a path built on "" lands at the filesystem root */
        fprintf(stderr, "df-node: --state-dir: expected a folder path, got ''\n");
        return 2;
      }
      state_arg = optarg;
      break;
    case 'n': o.name = optarg; break;
    case 'j': o.threads = atoi(optarg); break;
    case 'q': o.quiet = true; break;
    case 'D': {
      char derr[256];
      if (df_t_device_parse(optarg, &o.device, derr, sizeof derr) != 0) {
        fprintf(stderr, "df-node: --device: %s\n", derr);
        return 2;
      }
      break;
    }
    case 'h': usage(stdout); return 0;
    default:
      fprintf(stderr, "df-node: unknown or incomplete option '%s'\n", argv[optind - 1]);
      usage(stderr);
      return 2;
    }
  }
  /* the coordinator's address first: a wrong one is a usage error before anything is read */
  char ep[512];
  const char *hp = NULL; /* none: discovery (node/target.h) */
  if (!strcmp(cmd, "join")) {
    if (optind < argc - 1) {
      fprintf(stderr, "df-node join: expected at most one HOST:PORT argument\n");
      return 2;
    }
    hp = optind < argc ? argv[optind] : NULL;
    if (hp && parse_endpoint(hp, ep, sizeof ep) != 0) return 2;
  }
  if (token_file && o.token) {
    fprintf(stderr, "df-node: give --token-file or --token, not both\n");
    return 2;
  }
  if (token_file) {
    char terr[600];
    if (df_fs_read_secret(token_file, &token_owned, terr, sizeof terr) != 0) {
      fprintf(stderr, "df-node: --token-file: %s\n", terr);
      return 2;
    }
    o.token = token_owned;
  } else if (!o.token && getenv("DELTAFIN_JOIN_TOKEN") && getenv("DELTAFIN_JOIN_TOKEN")[0]) {
    o.token = getenv("DELTAFIN_JOIN_TOKEN");
  }
  char state[4096];
  if (state_dir_of(state_arg, state, sizeof state) != 0) return 1;
  if (!strcmp(cmd, "status")) return cmd_status(state);
  if (strcmp(cmd, "join")) {
    fprintf(stderr, "df-node: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
  }
  o.endpoint = hp ? ep : NULL;
  o.state_dir = state;
  if (!o.memory) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    o.memory = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 2 : (1ull << 30);
  }
  char err[1024] = "";
  int rc = df_node_run(&o, err, sizeof err);
  if (rc != 0) fprintf(stderr, "df-node: %s\n", err);
  free(token_owned);
  return rc;
}
