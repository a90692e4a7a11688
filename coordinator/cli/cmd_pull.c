/* coordinator/cli/cmd_pull.c — `deltafin pull`: options and exit status; the work is
 * coordinator/hub/pull.c. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cli/cli.h"
#include "coordinator/hub/pull.h"
#include "coordinator/hub/pull_util.h"

static void pull_usage(FILE *f) {
  fprintf(f,
          "usage: deltafin pull ORG/NAME [options]\n"
          "  --revision REV       branch, tag or commit (default main)\n"
          "  --dir DIR            destination (default $DELTAFIN_HOME/models/ORG/NAME, else\n"
          "                       ~/.cache/deltafin/models/ORG/NAME)\n"
          "  --include GLOB       only files matching GLOB (repeatable; '*' crosses '/')\n"
          "  --exclude GLOB       skip files matching GLOB (repeatable)\n"
          "  --stream             download all but the routed experts; `deltafin run` fetches\n"
          "                       each expert on first use into a bounded cache\n"
          "  --cache-budget SIZE  stream mode: expert cache size, e.g. 20G (default 32G)\n"
          "  --jobs N             parallel file downloads (default 4)\n"
          "  --timeout S          abort a connection idle for S seconds and retry (default 60)\n"
          "  --retries N          retries per file after a transient failure (default 5)\n"
          "  --quiet              print errors only\n"
          "  --json               JSON lines on stdout (list, progress, file, done/error events)\n"
          "environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (bearer token;\n"
          "  else HF_TOKEN_PATH or ~/.cache/huggingface/token), https_proxy/http_proxy/no_proxy\n");
}

enum { O_REV = 1, O_DIR, O_INC, O_EXC, O_STREAM, O_BUDGET, O_JOBS, O_TIMEOUT, O_RETRIES,
       O_QUIET, O_JSON, O_HELP, O_INTERVAL };

int df_cmd_pull(int argc, char **argv) {
  static const struct option opts[] = {
      {"revision", required_argument, 0, O_REV},  {"dir", required_argument, 0, O_DIR},
      {"include", required_argument, 0, O_INC},   {"exclude", required_argument, 0, O_EXC},
      {"stream", no_argument, 0, O_STREAM},       {"cache-budget", required_argument, 0, O_BUDGET},
      {"jobs", required_argument, 0, O_JOBS},     {"timeout", required_argument, 0, O_TIMEOUT},
      {"retries", required_argument, 0, O_RETRIES}, {"quiet", no_argument, 0, O_QUIET},
      {"json", no_argument, 0, O_JSON},           {"help", no_argument, 0, O_HELP},
      {"progress-interval", required_argument, 0, O_INTERVAL}, {0, 0, 0, 0}};
  df_pull_opts o;
  df_pull_opts_init(&o);
  int64_t v;
  double d;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case O_REV: o.revision = optarg; break;
    case O_DIR: o.dir = optarg; break;
    case O_INC:
    case O_EXC: {
      int *n = c == O_INC ? &o.n_include : &o.n_exclude;
      const char **list = c == O_INC ? o.include : o.exclude;
      if (*n >= DF_PULL_MAX_GLOBS || !*optarg) {
        fprintf(stderr, "deltafin pull: --%s: at most %d non-empty patterns\n",
                c == O_INC ? "include" : "exclude", DF_PULL_MAX_GLOBS);
        return 2;
      }
      list[(*n)++] = optarg;
      break;
    }
    case O_STREAM: o.stream = true; break;
    case O_BUDGET:
      if (df_pull_parse_bytes(optarg, &o.cache_budget) != 0 || o.cache_budget == 0) {
        fprintf(stderr, "deltafin pull: --cache-budget: expected a size like 20G, got '%s'\n",
                optarg);
        return 2;
      }
      break;
    case O_JOBS: if (df_cli_int("jobs", optarg, 1, 64, &v)) return 2; o.jobs = (int)v; break;
    case O_TIMEOUT:
      if (df_cli_int("timeout", optarg, 1, 3600, &v)) return 2;
      o.net.stall_timeout_s = (long)v;
      if (o.net.connect_timeout_s > v) o.net.connect_timeout_s = (long)v;
      break;
    case O_RETRIES: if (df_cli_int("retries", optarg, 0, 100, &v)) return 2; o.net.retries = (int)v; break;
    case O_INTERVAL:
      if (df_cli_double("progress-interval", optarg, 0.01, 3600, &d)) return 2;
      o.progress_interval_s = d;
      break;
    case O_QUIET: o.quiet = true; break;
    case O_JSON: o.json = true; break;
    case O_HELP: pull_usage(stdout); return 0;
    default:
      fprintf(stderr, "deltafin pull: unknown or incomplete option '%s'\n", argv[optind - 1]);
      pull_usage(stderr);
      return 2;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "deltafin pull: expected one repository id ORG/NAME\n");
    pull_usage(stderr);
    return 2;
  }
  o.repo = argv[optind];
  if (!df_pull_repo_id_ok(o.repo)) {
    fprintf(stderr, "deltafin pull: '%s' is not a repository id: expected ORG/NAME\n", o.repo);
    return 2;
  }
  if (o.cache_budget && !o.stream) {
    fprintf(stderr, "deltafin pull: --cache-budget needs --stream\n");
    return 2;
  }
  char err[2048], dir[4096];
  if (df_pull_run(&o, dir, sizeof dir, err, sizeof err) != 0) {
    if (!o.json) fprintf(stderr, "deltafin pull: %s\n", err);
    return 1;
  }
  if (!o.json) printf("%s\n", dir);
  return 0;
}
