/* coordinator/cli/cmd_setup.c — `deltafin setup --full | --stream [ORG/NAME]`: one command
 * that gets a model (default Kimi K3) ready to run. A thin layer over pull: the options are
 * pull's (cmd_pull.c df_cli_pull_args), the download is df_pull_run (coordinator/hub/pull.h,
 * HF_ENDPOINT / HF_TOKEN as pull reads them); then the folder is loaded as `deltafin inspect`
 * loads it (nothing of the routed experts is read, so a --stream folder loads without
 * fetching), and the memory plan, the host admission verdict (engine/model.h
 * df_model_admit_host, the check `run` and `serve` make) and the command to run next are
 * printed on stdout. A model with a known block drafter (Kimi K3: DF_SETUP_K3_DRAFTER), or
 * one named with --drafter, gets it pulled beside it and loaded against it
 * (engine/draft/dspark.h); a drafter that cannot be fetched or loaded is reported and left
 * out, the model runs alone. Exit: 0 ready, 1 pull / load failed or the resident part does
 * not fit this machine's memory (the download is kept), 2 usage. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coordinator/cli/cli.h"
#include "coordinator/hub/pull.h"
#include "coordinator/hub/pull_manifest.h"
#include "coordinator/hub/pull_util.h"
#include "engine/draft/dspark.h"
#include "engine/model.h"

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }


static bool has_file(const char *dir, const char *name) {
  char p[4400];
  snprintf(p, sizeof p, "%.4096s/%s", dir, name);
  return access(p, R_OK) == 0;
}

/* Name the drafter folder ddir in dir's DF_CLI_DRAFTER_RECORD (ddir NULL: remove the record),
 * written to a temporary file and renamed. Returns 0, or -1 with a message on stderr. */
static int record_drafter(const char *dir, const char *ddir) {
  char p[4400], tmp[4500], real[PATH_MAX];
  snprintf(p, sizeof p, "%s/" DF_CLI_DRAFTER_RECORD, dir);
  if (!ddir) {
    if (unlink(p) != 0 && errno != ENOENT) {
      fprintf(stderr, "deltafin setup: %s: %s\n", p, strerror(errno));
      return -1;
    }
    return 0;
  }
  if (!realpath(ddir, real)) snprintf(real, sizeof real, "%s", ddir);
  snprintf(tmp, sizeof tmp, "%s/.deltafin", dir);
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "deltafin setup: %s: %s\n", tmp, strerror(errno));
    return -1;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", p);
  FILE *f = fopen(tmp, "w");
  bool ok = f && fprintf(f, "%s\n", real) > 0;
  if (f && fclose(f) != 0) ok = false;
  if (!ok || rename(tmp, p) != 0) {
    fprintf(stderr, "deltafin setup: %s: %s\n", p, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* The drafter so names for model m (pulled into dir): pulled beside dir (or so->drafter_dir)
 * with the model's network options, then loaded against m. Prints one "drafter" line; the
 * folder into ddir (empty when there is none to use). */
static void setup_drafter(const df_cli_setup_opts *so, const df_pull_opts *mo, const char *dir,
                          const df_model *m, char *ddir, size_t cap) {
  ddir[0] = 0;
  bool k3 = !strcmp(df_model_cfg(m)->model_type, "kimi_k3");
  const char *repo = so->drafter ? so->drafter : k3 ? DF_SETUP_K3_DRAFTER : NULL;
  record_drafter(dir, NULL); /* recorded again below once this setup's drafter loads */
  if (so->no_drafter || !repo) {
    if (k3)
      printf("drafter      none (--no-drafter): `deltafin run` decodes with the target alone\n");
    return;
  }
  char where[4400];
  if (so->drafter_dir) {
    snprintf(where, sizeof where, "%s", so->drafter_dir);
  } else { /* beside the model: DIR/../NAME */
    const char *slash = strrchr(dir, '/'), *name = strchr(repo, '/') + 1;
    if (slash)
      snprintf(where, sizeof where, "%.*s/%s", (int)(slash - dir), dir, name);
    else
      snprintf(where, sizeof where, "%s", name);
  }
  df_pull_opts d;
  df_pull_opts_init(&d);
  d.repo = repo;
  d.dir = where;
  d.jobs = mo->jobs;
  d.quiet = mo->quiet;
  d.progress_interval_s = mo->progress_interval_s;
  d.net = mo->net;
  char err[2048], got[4096];
  if (df_pull_run(&d, got, sizeof got, err, sizeof err) != 0) {
    printf("drafter      not fetched (%s: %s); `deltafin run` decodes with the target alone\n",
           repo, err);
    return;
  }
  df_dspark *bd = NULL;
  if (!df_dspark_is_folder(got)) {
    printf("drafter      %s in %s is not a DSpark block drafter (config.json architectures); "
           "left out\n", repo, got);
    return;
  }
  if (df_dspark_load(got, m, 16, &bd, err, sizeof err) != 0) {
    printf("drafter      %s in %s does not fit this model: %s; left out\n", repo, got, err);
    return;
  }
  df_dspark_destroy(&bd);
  if (record_drafter(dir, got) != 0) return;
  printf("drafter      %s in %s (a block drafter reading the model's hidden states; `deltafin "
         "run` and `serve` on this model draft with it unless given --draft or --no-draft: "
         "%s/" DF_CLI_DRAFTER_RECORD " names it)\n", repo, got, dir);
  snprintf(ddir, cap, "%s", got);
}

int df_cmd_setup(int argc, char **argv) {
  df_pull_opts o;
  df_cli_setup_opts so;
  bool full = false;
  int st = df_cli_pull_args(argc, argv, &so, &o, &full);
  if (st >= 0) return st;
  char err[2048], dir[4096];
  if (df_pull_run(&o, dir, sizeof dir, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin setup: %s\n", err);
    return 1;
  }
  if (o.dry_run) return 0; /* the plan is the answer */

  df_model *m = NULL;
  df_model_opts mo = {.max_ctx = 1, .max_rows = 1};
  if (df_model_load(dir, &mo, &m, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin setup: %s is downloaded, but the engine does not load it: %s\n",
            dir, err);
    return 1;
  }
  const df_model_config *c = df_model_cfg(m);
  df_model_bytes b = df_model_memory(m);
  df_pull_manifest man;
  char merr[512];
  bool stream = df_pull_manifest_read(dir, &man, merr, sizeof merr) == 0 && man.stream;
  uint64_t budget = stream ? man.cache_budget : 0;
  df_pull_manifest_free(&man);

  char q[8400], bb[32];
  const char *qd = df_cli_shell_word(dir, q, sizeof q);
  printf("setup: %s is in %s (%s)\n", o.repo, dir,
         stream ? "stream mode: routed experts are fetched on first use" : "full download");
  printf("model        %s, %lld layers (hidden %lld, vocab %lld)\n", c->model_type,
         (long long)c->num_hidden_layers, (long long)c->hidden_size, (long long)c->vocab_size);
  fflush(stdout);
  df_model_print_summary(m, stdout);
  char r1[32], r2[32], r3[32];
  printf("memory       resident part %s (read on every token), routed experts %s, %s of "
         "weights read per decoded token\n", df_pull_fmt_bytes(b.resident, r1, sizeof r1),
         df_pull_fmt_bytes(b.experts, r2, sizeof r2),
         df_pull_fmt_bytes(b.active_per_token, r3, sizeof r3));
  if (stream)
    printf("experts      fetched from the hub on first use into %s/.deltafin/experts, at most "
           "%s (DELTAFIN_STREAM_BUDGET changes it)\n", dir,
           df_pull_fmt_bytes(budget, bb, sizeof bb));
  int64_t mem = df_host_mem_total();
  int rc = 0;
  if (df_model_admit_host(m, err, sizeof err) != 0) {
    printf("admission    NO: %s\n", err);
    rc = 1;
  } else if (mem > 0) {
    printf("admission    ok: the resident part (%s) fits this machine's %s of memory\n",
           df_pull_fmt_bytes(b.resident, r1, sizeof r1),
           df_pull_fmt_bytes((uint64_t)mem, r2, sizeof r2));
  } else {
    printf("admission    unknown: this machine's memory size is unreadable (/proc/meminfo)\n");
  }
  char ddir[4096];
  setup_drafter(&so, &o, dir, m, ddir, sizeof ddir);
  if (rc == 0) {
    bool tok = has_file(dir, "tokenizer.json") || has_file(dir, "tiktoken.model");
    printf("\nnext:\n");
    if (tok)
      printf("  deltafin run --model %s --chat --prompt 'Hello' --stats\n", qd);
    else
      printf("  deltafin run --model %s --prompt-ids 1,2,3 --max-new 16   (no tokenizer in the "
             "folder: token ids only)\n", qd);
    printf("  deltafin inspect %s      deltafin verify %s\n", qd, qd);
  } else {
    printf("\nthe download is complete and kept; run it on a machine with at least %.1f GiB of "
           "memory, or serve its routed experts from df-nodes (docs/CLUSTER.md)\n",
           gib(b.resident));
  }
  df_model_destroy(&m);
  return rc;
}
