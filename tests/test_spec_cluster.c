/* tests/test_spec_cluster.c — many prompts through speculative decoding on a cluster, in one
 * process (driven by tests/spec_cli.py demo_cluster, which starts the df-node processes).
 *
 * usage: test_spec_cluster TARGET DRAFT N_NEW PORT STATE_DIR NODES [ALONE_FILE] < prompts
 * prompts: one text per line, tokenized with TARGET's tokenizer.
 * For every prompt: N_NEW greedy ids of the target alone, from ALONE_FILE when it holds every
 * prompt's (the fixture spec_demo_alone: tests/spec_demo_alone.h), else computed locally, by a
 * second instance of TARGET that never joins the cluster, on its own thread; meanwhile the
 * model is attached to the cluster (bound to 127.0.0.1:PORT, waiting for NODES nodes) and
 * every prompt runs again with the draft (fixed k = 4; the first prompt also target-alone and
 * with adaptive k). The local ids are awaited before any comparison. (Run one after the other,
 * the local half left the nodes idle and backing off their dials for its whole duration.)
 * Prints one line per prompt and the drafting figures; exit status 0 when every run gave the
 * local ids, 1 otherwise, 2 on a setup error.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cluster/cluster.h"
#include "coordinator/generate/spec.h"
#include "engine/text/tokenizer.h"
#include "spec_demo_alone.h"

#define MAX_PROMPTS 64

typedef struct acc {
  int64_t rounds, drafted, accepted, target_forwards, emitted;
} acc;

static int gen(df_model *t, df_model *d, int k, bool adaptive, const int32_t *ids, int64_t n,
               int n_new, int32_t *out, acc *a) {
  char err[1024];
  df_sampler_params sp = {.temperature = 0, .top_p = 1};
  df_spec_params pp = {.k_init = k, .k_min = adaptive ? 0 : k, .k_max = adaptive ? 0 : k,
                       .adaptive = adaptive, .quiet = true, .mem_reserve = -1};
  df_spec *s = df_spec_new(t, d, &sp, &pp, n + n_new + DF_SPEC_K_MAX + 1, err, sizeof err);
  if (!s || df_spec_prefill(s, ids, n, NULL, err, sizeof err) != 0) {
    fprintf(stderr, "generate: %s\n", err);
    df_spec_destroy(&s);
    return -1;
  }
  int got_n = 0;
  while (got_n < n_new) {
    int32_t toks[DF_SPEC_K_MAX + 1];
    int got = df_spec_step(s, toks, err, sizeof err);
    if (got < 1) {
      fprintf(stderr, "step: %s\n", err);
      df_spec_destroy(&s);
      return -1;
    }
    for (int i = 0; i < got && got_n < n_new; i++) out[got_n++] = toks[i];
  }
  df_spec_stats st = df_spec_get_stats(s);
  if (a) {
    a->rounds += st.rounds;
    a->drafted += st.drafted;
    a->accepted += st.accepted;
    a->target_forwards += st.target_forwards;
    a->emitted += n_new;
  }
  df_spec_destroy(&s);
  return 0;
}

/* The local target-alone ids, on their own model instance and thread. */
typedef struct local_job {
  const char *tdir;
  int np, n_new;
  int32_t **ids;
  const size_t *n_ids;
  int32_t (*local)[256];
  int rc;
  char err[1024];
} local_job;

static void *local_run(void *arg) {
  local_job *j = arg;
  df_model *t = NULL;
  df_model_opts o = {.max_ctx = 512, .threads = 1};
  if (j->np == 0) return NULL; /* every prompt's ids came from ALONE_FILE */
  if (df_model_load(j->tdir, &o, &t, j->err, sizeof j->err) != 0) {
    j->rc = 2;
    return NULL;
  }
  for (int p = 0; p < j->np && j->rc == 0; p++)
    if (gen(t, NULL, 1, false, j->ids[p], (int64_t)j->n_ids[p], j->n_new, j->local[p], NULL) != 0) {
      snprintf(j->err, sizeof j->err, "local target-alone run of prompt %d failed", p);
      j->rc = 2;
    }
  df_model_destroy(&t);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 7 && argc != 8) {
    fprintf(stderr, "usage: test_spec_cluster TARGET DRAFT N_NEW PORT STATE_DIR NODES [ALONE_FILE] "
            "< prompts\n");
    return 2;
  }
  const char *tdir = argv[1], *ddir = argv[2];
  int n_new = atoi(argv[3]);
  char err[1024];
  df_model *t = NULL, *d = NULL;
  df_tok *tok = NULL;
  df_model_opts o = {.max_ctx = 512, .threads = 1};
  df_model_opts dopt = {.max_ctx = 512, .max_rows = DF_SPEC_K_MAX + 1, .threads = 1};
  if (n_new <= 0 || n_new > 256 || df_tok_load(tdir, &tok, err, sizeof err) != 0) {
    fprintf(stderr, "setup: %s\n", n_new <= 0 || n_new > 256 ? "N_NEW outside 1..256" : err);
    return 2;
  }
  int32_t *ids[MAX_PROMPTS];
  size_t n_ids[MAX_PROMPTS];
  int32_t(*local)[256] = calloc(MAX_PROMPTS, sizeof *local);
  int32_t(*got)[3][256] = calloc(MAX_PROMPTS, sizeof *got);
  int np = 0;
  char line[4096];
  bool have = argc == 8; /* every prompt's local ids in ALONE_FILE */
  while (np < MAX_PROMPTS && fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = 0;
    if (!line[0]) continue;
    if (df_tok_encode(tok, line, strlen(line), DF_TOK_ADD_SPECIAL, &ids[np], &n_ids[np], err,
                      sizeof err) != 0) {
      fprintf(stderr, "tokenize: %s\n", err);
      return 2;
    }
    have = have && spec_demo_alone_find(argv[7], line, ids[np], n_ids[np], n_new, local[np]);
    np++;
  }
  printf("local target-alone ids: %s\n", have ? argv[7] : "computed here");
  local_job job = {.tdir = tdir, .np = have ? 0 : np, .n_new = n_new, .ids = ids,
                   .n_ids = n_ids, .local = local};
  pthread_t th;
  if (pthread_create(&th, NULL, local_run, &job) != 0) {
    fprintf(stderr, "setup: cannot start the local thread\n");
    return 2;
  }
  if (df_model_load(tdir, &o, &t, err, sizeof err) != 0 ||
      df_spec_draft_load(t, tdir, ddir, &dopt, &d, err, sizeof err) != 0) {
    fprintf(stderr, "setup: %s\n", err);
    return 2;
  }
  printf("%d prompts, %d tokens each; draft shares %.1f MiB with the target\n", np, n_new,
         df_model_memory(d).shared / 1048576.0);
  fflush(stdout);
  df_cluster_opts co = {.bind_host = "127.0.0.1", .port = atoi(argv[4]), .state_dir = argv[5],
                        .wait_s = 120, .min_nodes = atoi(argv[6]), .stats = true};
  if (df_cluster_attach(t, &co, err, sizeof err) != 0) {
    fprintf(stderr, "cluster: %s\n", err);
    return 2;
  }
  acc a4 = {0}, alone = {0}, ad = {0};
  struct {
    const char *what;
    df_model *d;
    int k;
    bool adaptive;
    acc *a;
  } runs[3] = {{"draft k=4", d, 4, false, &a4},
               {"target alone", NULL, 1, false, &alone},
               {"draft adaptive k", d, 4, true, &ad}};
  for (int p = 0; p < np; p++)
    for (int r = 0; r < (p == 0 ? 3 : 1); r++)
      if (gen(t, runs[r].d, runs[r].k, runs[r].adaptive, ids[p], (int64_t)n_ids[p], n_new,
              got[p][r], runs[r].a) != 0)
        return 2;
  pthread_join(th, NULL);
  if (job.rc != 0) {
    fprintf(stderr, "local: %s\n", job.err);
    return 2;
  }
  printf("local target-alone ids computed\n");
  int bad = 0;
  for (int p = 0; p < np; p++)
    for (int r = 0; r < (p == 0 ? 3 : 1); r++) {
      bool same = memcmp(got[p][r], local[p], (size_t)n_new * sizeof(int32_t)) == 0;
      bad += !same;
      printf("%s prompt %d, cluster, %s: ids %s\n", same ? "ok   " : "FAIL ", p, runs[r].what,
             same ? "identical to local" : "DIFFER from local");
    }
  printf("cluster, draft k=4: %lld rounds, acceptance %.3f, mean accepted length %.2f, "
         "%lld target forwards for %lld tokens (target alone: %lld for %lld)\n",
         (long long)a4.rounds, a4.drafted ? (double)a4.accepted / (double)a4.drafted : 0.0,
         a4.rounds ? (double)a4.accepted / (double)a4.rounds : 0.0, (long long)a4.target_forwards,
         (long long)a4.emitted, (long long)alone.target_forwards, (long long)alone.emitted);
  for (int p = 0; p < np; p++) free(ids[p]);
  free(local);
  free(got);
  df_tok_destroy(&tok);
  df_model_destroy(&d);
  df_model_destroy(&t); /* stops the cluster manager; prints its traffic figures */
  return bad ? 1 : 0;
}
