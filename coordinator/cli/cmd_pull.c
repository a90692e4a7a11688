/* coordinator/cli/cmd_pull.c — `deltafin pull`: options and exit status; the work is
 * coordinator/hub/pull.c. The option parser is shared with `deltafin setup` (cmd_setup.c). */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cli/cli.h"
#include "coordinator/hub/pull.h"
#include "coordinator/hub/pull_util.h"

static void pull_options_usage(FILE *f) {
  fprintf(f,
          "  --revision REV       branch, tag or commit (default main)\n"
          "  --dir DIR            destination (default $DELTAFIN_HOME/models/ORG/NAME, else\n"
          "                       ~/.cache/deltafin/models/ORG/NAME)\n"
          "  --include GLOB       only files matching GLOB (repeatable; '*' crosses '/')\n"
          "  --exclude GLOB       skip files matching GLOB (repeatable)\n"
          "  --cache-budget SIZE  stream mode: expert cache size, e.g. 20G (default 32G)\n"
          "  --dry-run            list and plan (stream mode reads the shard headers), print\n"
          "                       what would be downloaded, streamed and skipped; write nothing\n"
          "  --jobs N             parallel file downloads (default 4)\n"
          "  --timeout S          abort a connection idle for S seconds and retry (default 60)\n"
          "  --retries N          retries per file after a transient failure (default 5)\n"
          "  --quiet              print errors only\n");
}

static void pull_usage(FILE *f) {
  fprintf(f,
          "usage: deltafin pull ORG/NAME [options]\n"
          "  --stream             download all but the routed experts (and, for a wrapper\n"
          "                       config such as Kimi K3's, all but its other towers);\n"
          "                       `deltafin run` fetches each expert on first use into a\n"
          "                       bounded cache\n");
  pull_options_usage(f);
  fprintf(f,
          "  --json               JSON lines on stdout (list, plan, progress, file, done/error)\n"
          "environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (bearer token;\n"
          "  else HF_TOKEN_PATH or ~/.cache/huggingface/token), https_proxy/http_proxy/no_proxy\n");
}

static void setup_usage(FILE *f) {
  fprintf(f,
          "usage: deltafin setup --full | --stream [ORG/NAME] [options]\n"
          "  gets a model ready to run (default " DF_SETUP_DEFAULT_MODEL "): pulls it, loads it\n"
          "  as `deltafin inspect` does, prints its memory plan, whether its resident part fits\n"
          "  this machine's memory, and the command to run next\n"
          "  --full               download every file (deltafin pull ORG/NAME)\n"
          "  --stream             download all but the routed experts, which `deltafin run`\n"
          "                       fetches on first use (deltafin pull ORG/NAME --stream)\n");
  pull_options_usage(f);
  fprintf(f,
          "  --drafter ORG/NAME   the block drafter to fetch beside the model (default for\n"
          "                       Kimi K3: " DF_SETUP_K3_DRAFTER "; none for other models)\n"
          "  --no-drafter         fetch no drafter\n"
          "  --drafter-dir DIR    where the drafter goes (default: beside the model folder,\n"
          "                       named after the repository)\n"
          "  A drafter that cannot be fetched or does not fit the model is reported and left\n"
          "  out: the model still runs, with the target alone.\n"
          "environment: as deltafin pull: HF_ENDPOINT, HF_TOKEN (else HF_TOKEN_PATH or\n"
          "  ~/.cache/huggingface/token), https_proxy/http_proxy/no_proxy\n");
}

enum { O_REV = 1, O_DIR, O_INC, O_EXC, O_STREAM, O_BUDGET, O_JOBS, O_TIMEOUT, O_RETRIES,
       O_QUIET, O_JSON, O_HELP, O_INTERVAL, O_DRY, O_FULL, O_DRAFTER, O_NO_DRAFTER,
       O_DRAFTER_DIR };

int df_cli_pull_args(int argc, char **argv, df_cli_setup_opts *setup, df_pull_opts *o,
                     bool *full) {
  static const struct option opts[] = {
      {"revision", required_argument, 0, O_REV},  {"dir", required_argument, 0, O_DIR},
      {"include", required_argument, 0, O_INC},   {"exclude", required_argument, 0, O_EXC},
      {"stream", no_argument, 0, O_STREAM},       {"cache-budget", required_argument, 0, O_BUDGET},
      {"jobs", required_argument, 0, O_JOBS},     {"timeout", required_argument, 0, O_TIMEOUT},
      {"retries", required_argument, 0, O_RETRIES}, {"quiet", no_argument, 0, O_QUIET},
      {"json", no_argument, 0, O_JSON},           {"help", no_argument, 0, O_HELP},
      {"progress-interval", required_argument, 0, O_INTERVAL},
      {"dry-run", no_argument, 0, O_DRY},         {"full", no_argument, 0, O_FULL},
      {"drafter", required_argument, 0, O_DRAFTER}, {"no-drafter", no_argument, 0, O_NO_DRAFTER},
      {"drafter-dir", required_argument, 0, O_DRAFTER_DIR},
      {0, 0, 0, 0}};
  const char *cmd = setup ? "setup" : "pull";
  void (*usage)(FILE *) = setup ? setup_usage : pull_usage;
  df_pull_opts_init(o);
  if (full) *full = false;
  if (setup) *setup = (df_cli_setup_opts){0};
  int64_t v;
  double d;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if ((c == O_FULL && !setup) || (c == O_JSON && setup) ||
        (!setup && (c == O_DRAFTER || c == O_NO_DRAFTER || c == O_DRAFTER_DIR)))
      c = '?';
    switch (c) {
    case O_REV: o->revision = optarg; break;
    case O_DIR: o->dir = optarg; break;
    case O_INC:
    case O_EXC: {
      int *n = c == O_INC ? &o->n_include : &o->n_exclude;
      const char **list = c == O_INC ? o->include : o->exclude;
      if (*n >= DF_PULL_MAX_GLOBS || !*optarg) {
        fprintf(stderr, "deltafin %s: --%s: at most %d non-empty patterns\n", cmd,
                c == O_INC ? "include" : "exclude", DF_PULL_MAX_GLOBS);
        return 2;
      }
      list[(*n)++] = optarg;
      break;
    }
    case O_STREAM: o->stream = true; break;
    case O_FULL: *full = true; break;
    case O_DRY: o->dry_run = true; break;
    case O_DRAFTER:
      if (!df_pull_repo_id_ok(optarg)) {
        fprintf(stderr, "deltafin setup: --drafter: '%s' is not a repository id: expected "
                "ORG/NAME\n", optarg);
        return 2;
      }
      setup->drafter = optarg;
      break;
    case O_NO_DRAFTER: setup->no_drafter = true; break;
    case O_DRAFTER_DIR: setup->drafter_dir = optarg; break;
    case O_BUDGET:
      if (df_pull_parse_bytes(optarg, &o->cache_budget) != 0 || o->cache_budget == 0) {
        fprintf(stderr, "deltafin %s: --cache-budget: expected a size like 20G, got '%s'\n", cmd,
                optarg);
        return 2;
      }
      break;
    case O_JOBS: if (df_cli_int("jobs", optarg, 1, 64, &v)) return 2; o->jobs = (int)v; break;
    case O_TIMEOUT:
      if (df_cli_int("timeout", optarg, 1, 3600, &v)) return 2;
      o->net.stall_timeout_s = (long)v;
      if (o->net.connect_timeout_s > v) o->net.connect_timeout_s = (long)v;
      break;
    case O_RETRIES: if (df_cli_int("retries", optarg, 0, 100, &v)) return 2; o->net.retries = (int)v; break;
    case O_INTERVAL:
      if (df_cli_double("progress-interval", optarg, 0.01, 3600, &d)) return 2;
      o->progress_interval_s = d;
      break;
    case O_QUIET: o->quiet = true; break;
    case O_JSON: o->json = true; break;
    case O_HELP: usage(stdout); return 0;
    default:
      fprintf(stderr, "deltafin %s: unknown or incomplete option '%s'\n", cmd, argv[optind - 1]);
      usage(stderr);
      return 2;
    }
  }
  if (setup && (*full == o->stream)) {
    fprintf(stderr, "deltafin setup: choose one of --full (download everything) and --stream "
            "(routed experts fetched on first use)\n");
    usage(stderr);
    return 2;
  }
  if (optind == argc && setup) {
    o->repo = DF_SETUP_DEFAULT_MODEL;
  } else if (optind != argc - 1) {
    fprintf(stderr, "deltafin %s: expected %sone repository id ORG/NAME\n", cmd,
            setup ? "at most " : "");
    usage(stderr);
    return 2;
  } else {
    o->repo = argv[optind];
  }
  if (!df_pull_repo_id_ok(o->repo)) {
    fprintf(stderr, "deltafin %s: '%s' is not a repository id: expected ORG/NAME\n", cmd, o->repo);
    return 2;
  }
  if (setup && setup->no_drafter && (setup->drafter || setup->drafter_dir)) {
    fprintf(stderr, "deltafin setup: --no-drafter with --drafter or --drafter-dir\n");
    return 2;
  }
  if (o->cache_budget && !o->stream) {
    fprintf(stderr, "deltafin %s: --cache-budget needs --stream\n", cmd);
    return 2;
  }
  return -1;
}

int df_cmd_pull(int argc, char **argv) {
  df_pull_opts o;
  int st = df_cli_pull_args(argc, argv, NULL, &o, NULL);
  if (st >= 0) return st;
  char err[2048], dir[4096];
  if (df_pull_run(&o, dir, sizeof dir, err, sizeof err) != 0) {
    if (!o.json) fprintf(stderr, "deltafin pull: %s\n", err);
    return 1;
  }
  if (!o.json && !o.dry_run) printf("%s\n", dir);
  return 0;
}
