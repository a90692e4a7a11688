/* coordinator/cli/cmd_verify.c — `deltafin verify DIR`: options and output; the checks are
 * coordinator/hub/verify.c. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "coordinator/cli/cli.h"
#include "coordinator/hub/verify.h"

typedef struct out {
  bool quiet, json;
  const char *dir;
} out;

static void on_report(void *ud, df_verify_level lvl, const char *path, const char *msg) {
  out *o = ud;
  static const char *names[] = {"ok", "note", "problem"};
  if (o->json) {
    json_t *ev = json_pack("{s:s, s:s, s:s}", "level", names[lvl], "path", path, "message", msg);
    char *s = ev ? json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (s) printf("%s\n", s);
    free(s);
    json_decref(ev);
    return;
  }
  if (lvl == DF_VERIFY_PROBLEM)
    fprintf(stderr, "deltafin verify: %s/%s: %s\n", o->dir, path, msg);
  else if (!o->quiet)
    printf("%-7s %s%s%s\n", lvl == DF_VERIFY_OK ? "ok" : "note", path, *path ? ": " : "", msg);
}

static void verify_usage(FILE *f) {
  fprintf(f, "usage: deltafin verify DIR [--quick] [--deep] [--quiet] [--json]\n"
             "  checks, offline and without writing: each file's size and SHA-256 against\n"
             "  the manifest deltafin pull wrote, the safetensors headers against config.json,\n"
             "  and that the tokenizer (tokenizer.json or tiktoken.model) loads. Exit 0 when\n"
             "  nothing is wrong, 1 otherwise.\n"
             "  --quick   sizes only, no hashing\n"
             "  --deep    also read every floating-point tensor: NaN or Inf values are problems\n"
             "  --quiet   print problems only\n"
             "  --json    one JSON object per finding on stdout\n");
}

int df_cmd_verify(int argc, char **argv) {
  static const struct option opts[] = {{"quick", no_argument, 0, 'k'},
                                       {"deep", no_argument, 0, 'd'},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"json", no_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  out o = {0};
  df_verify_opts vo = {.report = on_report, .ud = &o};
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'k': vo.skip_hashes = true; break;
    case 'd': vo.deep = true; break;
    case 'q': o.quiet = true; break;
    case 'j': o.json = true; break;
    case 'h': verify_usage(stdout); return 0;
    default:
      fprintf(stderr, "deltafin verify: unknown option '%s'\n", argv[optind - 1]);
      verify_usage(stderr);
      return 2;
    }
  }
  if (optind != argc - 1) {
    verify_usage(stderr);
    return 2;
  }
  o.dir = argv[optind];
  df_verify_result res;
  char err[1024];
  if (df_verify_dir(o.dir, &vo, &res, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin verify: %s\n", err);
    return 1;
  }
  if (!o.json && !o.quiet)
    printf("%s: %d problem%s, %d files checked, %llu bytes hashed\n", o.dir, res.problems,
           res.problems == 1 ? "" : "s", res.files_checked, (unsigned long long)res.bytes_hashed);
  if (res.problems && !o.json)
    fprintf(stderr, "deltafin verify: %s: %d problem%s found\n", o.dir, res.problems,
            res.problems == 1 ? "" : "s");
  return res.problems ? 1 : 0;
}
