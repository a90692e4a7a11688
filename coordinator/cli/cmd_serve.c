/* coordinator/cli/cmd_serve.c — `deltafin serve`: load a model and serve the OpenAI-compatible
 * /v1 API until SIGINT or SIGTERM.
 *
 * Owns: the serve subcommand's options, loading (model, tokenizer, chat template), the
 * start/stop order of scheduler and HTTP server, and signal handling (the main thread waits
 * in sigwait; every other thread has the signals blocked). The server is
 * coordinator/server/server.c, generation coordinator/generate/sched.c.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/cli/cli.h"
#include "coordinator/cluster/cluster.h"
#include "coordinator/cluster/expert_heat.h"
#include "coordinator/generate/sched.h"
#include "coordinator/server/server.h"
#include "coordinator/generate/spec.h"
#include "engine/draft/dspark.h"
#include "engine/text/chat_template.h"
#include "config/fsutil.h"
#include "engine/model.h"
#include "engine/text/tokenizer.h"

static void serve_usage(FILE *f) {
  fprintf(f,
          "usage: deltafin serve [--model DIR] [options]\n"
          "  --model DIR          Hugging Face model folder (default: the bundled demo model)\n"
          "  --model-name NAME    the id clients give as \"model\" (default: the folder's name)\n"
          "  --host ADDR          address to listen on (default 127.0.0.1)\n"
          "  --port N             TCP port (default 8000; 0 = any free port, printed at start)\n"
          "  --api-key-file F     require \"Authorization: Bearer KEY\" on /v1, KEY the first\n"
          "                       line of file F (mode 600); or set DELTAFIN_API_KEY; none\n"
          "                       when neither is given\n"
          "  --api-key KEY        the key on the command line (visible to local users in ps)\n"
          "  --parallel N         sequences decoded together, 1..%d (default 8)\n"
          "  --max-queue N        requests that may wait for a free sequence (default 64);\n"
          "                       beyond it the answer is 429 with Retry-After\n"
          "  --ctx N              tokens per sequence, prompt + completion (default\n"
          "                       min(max_position_embeddings, 4096))\n"
          "  --max-prompt N       most prompt tokens a request may have (default ctx - 1)\n"
          "  --max-body BYTES     largest request body (default 4194304); larger is 413\n"
          "  --max-connections N  simultaneous HTTP connections, 1..%d (default %d; lowered\n"
          "                       to fit the open-file limit); more wait until one closes\n"
          "  --max-connections-per-host N  connections one client address may hold at once,\n"
          "                       0..%d (default %d; 0 = no limit); more are closed at once\n"
          "  --idle-timeout S     close a connection silent for S seconds before a complete\n"
          "                       request, between requests, or not reading its response;\n"
          "                       never while generating (default 10)\n"
          "  --request-timeout S  close a connection that has not delivered a complete\n"
          "                       request (header and body) S seconds after it opened or\n"
          "                       after its previous response ended, 1..%d (default %d);\n"
          "                       never while generating or sending a response\n"
          "  --chunk N            prompt tokens fed per step over all sequences (default 256)\n"
          "  --prefix-cache SIZE  memory for finished sequences' KV caches kept beyond the\n"
          "                       --parallel working slots, so a request that extends an earlier\n"
          "                       prompt (the next turn of a chat) prefills only its new tokens\n"
          "                       (e.g. 512M, 4G; default 1G, at most a quarter of the free\n"
          "                       memory; 0 = the working slots only)\n"
          "  --no-prefix-cache    every request prefills its whole prompt\n"
          "  --reasoning-format F split: a chat answer's reasoning (Qwen3 and Kimi K2 Thinking\n"
          "                       <think>, Kimi K3's think element) goes to reasoning_content,\n"
          "                       the rest to content (default); none: content is the model's\n"
          "                       text as written\n"
          "  --threads N          compute threads (default: every online CPU)\n"
          "  --draft DIR          draft for speculative decoding of greedy requests: a model (of\n"
          "                       the same vocabulary, or with its own tokenizer: it drafts\n"
          "                       text), or a DSpark block drafter folder; with\n"
          "                       both kinds, chat requests draft with the block drafter\n"
          "                       (default: the block drafter `deltafin setup` recorded in the\n"
          "                       model folder; without --model, the bundled demo drafters)\n"
          "  --no-draft           run the target alone\n"
          "  --draft-k K          draft tokens per round, 1..%d (default 4)\n"
          "  --draft-max-seqs N   draft only while at most N sequences run (default 1)\n"
          "  --cluster            run routed experts on df-node agents (docs/CLUSTER.md)\n"
          "  --cluster-port N     port of the cluster socket (default 7070)\n"
          "  --cluster-bind HOST  interface to bind (default: all)\n"
          "  --cluster-wait S     seconds to wait for nodes before serving (default 10)\n"
          "  --cluster-nodes N    stop waiting once N nodes are ready (default 1)\n"
          "  --cluster-timeout S  deadline of one layer's round trip to the nodes (default 30)\n"
          "  --state-dir DIR      cluster keys, tokens, nodes and expert heat\n"
          "                       (default ~/.local/state/deltafin)\n"
          "  --device D           cpu (default), cuda, cuda:N or auto: where the target computes;\n"
          "                       falls back to the CPU with one line (docs/GPU.md)\n"
          "  --quiet              log only errors, warnings and the listening line (no\n"
          "                       request, cluster or discovery progress lines)\n"
          "Endpoints: /v1/chat/completions, /v1/completions, /v1/models, /v1/cluster, /health,\n"
          "/metrics, and a web UI (chat, cluster dashboard) at / (docs/API.md).\n",
          DF_MODEL_MAX_BATCH, DF_SRV_MAX_CONNS, DF_SRV_DEFAULT_CONNS, DF_SRV_MAX_CONNS,
          DF_SRV_DEFAULT_PER_HOST, DF_SRV_MAX_REQUEST_TIMEOUT, DF_SRV_DEFAULT_REQUEST_TIMEOUT,
          DF_SCHED_K_MAX);
}

enum { O_MODEL = 1, O_NAME, O_HOST, O_PORT, O_KEY, O_KEYFILE, O_PAR, O_QUEUE, O_CTX, O_MAXP, O_BODY,
       O_CHUNK, O_THREADS, O_QUIET, O_HELP, O_DRAFT, O_NODRAFT, O_DRAFTK, O_DRAFTSEQS,
       O_CLUSTER, O_CPORT, O_CBIND, O_CWAIT, O_CNODES, O_CTIMEOUT, O_STATE, O_MAXCONN, O_PERHOST, O_IDLE,
       O_REQTIMEOUT, O_DEVICE, O_PCACHE, O_NOPCACHE, O_REASONING };

static bool is_loopback(const char *h) {
  return !strcmp(h, "localhost") || !strncmp(h, "127.", 4) || !strcmp(h, "::1") ||
         !strcmp(h, "[::1]");
}

int df_cmd_serve(int argc, char **argv) {
  static const struct option opts[] = {
      {"model", required_argument, 0, O_MODEL},     {"model-name", required_argument, 0, O_NAME},
      {"host", required_argument, 0, O_HOST},       {"port", required_argument, 0, O_PORT},
      {"api-key", required_argument, 0, O_KEY},     {"api-key-file", required_argument, 0, O_KEYFILE},
          {"parallel", required_argument, 0, O_PAR},
      {"max-queue", required_argument, 0, O_QUEUE}, {"ctx", required_argument, 0, O_CTX},
      {"max-prompt", required_argument, 0, O_MAXP}, {"max-body", required_argument, 0, O_BODY},
      {"chunk", required_argument, 0, O_CHUNK},     {"threads", required_argument, 0, O_THREADS},
      {"quiet", no_argument, 0, O_QUIET},           {"help", no_argument, 0, O_HELP},
      {"draft", required_argument, 0, O_DRAFT},     {"no-draft", no_argument, 0, O_NODRAFT},
      {"draft-k", required_argument, 0, O_DRAFTK},  {"draft-max-seqs", required_argument, 0, O_DRAFTSEQS},
      {"cluster", no_argument, 0, O_CLUSTER},      {"cluster-port", required_argument, 0, O_CPORT},
      {"cluster-bind", required_argument, 0, O_CBIND}, {"cluster-wait", required_argument, 0, O_CWAIT},
      {"cluster-nodes", required_argument, 0, O_CNODES},
      {"cluster-timeout", required_argument, 0, O_CTIMEOUT},
      {"state-dir", required_argument, 0, O_STATE},
      {"max-connections", required_argument, 0, O_MAXCONN},
      {"max-connections-per-host", required_argument, 0, O_PERHOST},
      {"idle-timeout", required_argument, 0, O_IDLE},
      {"request-timeout", required_argument, 0, O_REQTIMEOUT},
      {"device", required_argument, 0, O_DEVICE},
      {"prefix-cache", required_argument, 0, O_PCACHE},
      {"no-prefix-cache", no_argument, 0, O_NOPCACHE},
      {"reasoning-format", required_argument, 0, O_REASONING},
      {0, 0, 0, 0}};
  const char *model_dir = NULL, *name = NULL, *host = "127.0.0.1", *key = NULL;
  const char *draft_dirs[2];
  int n_draft_dirs = 0;
  const char *key_file = NULL;
  char *key_owned = NULL; /* the key read from --api-key-file */
  const char *device = NULL;
  bool no_draft = false;
  int64_t draft_k = 4, draft_seqs = 1, cport = 0, cnodes = 0;
  bool cluster = false;
  struct df_cluster *cmgr = NULL; /* the cluster manager, for GET /v1/cluster (owned by the model) */
  df_cluster_opts copts = {.wait_s = -1, .manager = &cmgr};
  int64_t port = 8000, par = 8, queue = 64, ctx = 0, maxp = 0, body = 4 << 20, chunk = 256,
          threads = 0, max_conns = DF_SRV_DEFAULT_CONNS, idle_s = 10,
          per_host = DF_SRV_DEFAULT_PER_HOST, request_s = DF_SRV_DEFAULT_REQUEST_TIMEOUT;
  bool quiet = false, no_pcache = false, pcache_given = false, reasoning_raw = false;
  int64_t pcache = DF_SCHED_CACHE_DEFAULT;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case O_MODEL: model_dir = optarg; break;
    case O_NAME: name = optarg; break;
    case O_HOST: host = optarg; break;
    case O_PORT: if (df_cli_int("port", optarg, 0, 65535, &port)) return 2; break;
    case O_KEY: key = optarg; break;
    case O_PCACHE: {
      uint64_t b = 0;
      if (df_cli_size(optarg, strlen(optarg), &b) != 0 || b > (uint64_t)INT64_MAX) {
        fprintf(stderr, "deltafin serve: --prefix-cache: expected a size such as 512M or 4G "
                "(0 = the working slots only), got '%s'\n", optarg);
        return 2;
      }
      pcache = b ? (int64_t)b : -1;
      pcache_given = true;
      break;
    }
    case O_NOPCACHE: no_pcache = true; break;
    case O_KEYFILE: key_file = optarg; break;
    case O_PAR: if (df_cli_int("parallel", optarg, 1, DF_MODEL_MAX_BATCH, &par)) return 2; break;
    case O_QUEUE: if (df_cli_int("max-queue", optarg, 0, 1 << 20, &queue)) return 2; break;
    case O_CTX: if (df_cli_int("ctx", optarg, 2, 1 << 24, &ctx)) return 2; break;
    case O_MAXP: if (df_cli_int("max-prompt", optarg, 1, 1 << 24, &maxp)) return 2; break;
    case O_BODY: if (df_cli_int("max-body", optarg, 1024, 1 << 30, &body)) return 2; break;
    case O_CHUNK: if (df_cli_int("chunk", optarg, 1, 1 << 16, &chunk)) return 2; break;
    case O_THREADS: if (df_cli_int("threads", optarg, 1, 4096, &threads)) return 2; break;
    case O_QUIET: quiet = true, copts.quiet = true; break;
    case O_REASONING:
      if (strcmp(optarg, "split") && strcmp(optarg, "none")) {
        fprintf(stderr, "deltafin serve: --reasoning-format: expected split or none, got '%s'\n",
                optarg);
        return 2;
      }
      reasoning_raw = !strcmp(optarg, "none");
      break;
    case O_DRAFT:
      if (n_draft_dirs == 2) {
        fprintf(stderr, "deltafin serve: --draft at most twice (a draft model and a block "
                "drafter)\n");
        return 2;
      }
      draft_dirs[n_draft_dirs++] = optarg;
      break;
    case O_NODRAFT: no_draft = true; break;
    case O_DRAFTK: if (df_cli_int("draft-k", optarg, 1, DF_SCHED_K_MAX, &draft_k)) return 2; break;
    case O_CLUSTER: cluster = true; break;
    case O_CPORT: if (df_cli_int("cluster-port", optarg, 1, 65535, &cport)) return 2; copts.port = (int)cport; break;
    case O_CBIND: copts.bind_host = optarg; break;
    case O_CWAIT: if (df_cli_double("cluster-wait", optarg, 0, 86400, &copts.wait_s)) return 2; break;
    case O_CNODES: if (df_cli_int("cluster-nodes", optarg, 1, 256, &cnodes)) return 2; copts.min_nodes = (int)cnodes; break;
    case O_CTIMEOUT: if (df_cli_double("cluster-timeout", optarg, 0.01, 86400, &copts.timeout_s)) return 2; break;
    case O_STATE: if (df_cli_dir("state-dir", optarg)) return 2; copts.state_dir = optarg; break;
    case O_MAXCONN:
      if (df_cli_int("max-connections", optarg, 1, DF_SRV_MAX_CONNS, &max_conns)) return 2;
      break;
    case O_PERHOST:
      if (df_cli_int("max-connections-per-host", optarg, 0, DF_SRV_MAX_CONNS, &per_host)) return 2;
      break;
    case O_IDLE: if (df_cli_int("idle-timeout", optarg, 1, 86400, &idle_s)) return 2; break;
    case O_REQTIMEOUT:
      if (df_cli_int("request-timeout", optarg, 1, DF_SRV_MAX_REQUEST_TIMEOUT, &request_s))
        return 2;
      break;
    case O_DRAFTSEQS:
      if (df_cli_int("draft-max-seqs", optarg, 1, DF_MODEL_MAX_BATCH, &draft_seqs)) return 2;
      break;
    case O_DEVICE: device = optarg; break;
    case O_HELP: serve_usage(stdout); return 0;
    default:
      fprintf(stderr, "deltafin serve: unknown or incomplete option '%s'\n", argv[optind - 1]);
      serve_usage(stderr);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "deltafin serve: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (key && key_file) {
    fprintf(stderr, "deltafin serve: give --api-key-file or --api-key, not both\n");
    return 2;
  }
  if (key_file) {
    char kerr[600];
    if (df_fs_read_secret(key_file, &key_owned, kerr, sizeof kerr) != 0) {
      fprintf(stderr, "deltafin serve: --api-key-file: %s\n", kerr);
      return 2;
    }
    key = key_owned;
  }
  if (!key) {
    key = getenv("DELTAFIN_API_KEY");
    if (key && !key[0]) {
      /* an empty key would turn the check off without a word */
      fprintf(stderr, "deltafin serve: DELTAFIN_API_KEY is set but empty: give it a key, or "
              "unset it to serve without one\n");
      return 2;
    }
  } else if (!key[0]) {
    fprintf(stderr, "deltafin serve: --api-key is empty: give a key, or leave the option out "
            "to serve without one\n");
    return 2;
  }
  /* both drafters stay loaded: chat requests draft with the block drafter, raw completions
   * with the draft model (coordinator/generate/sched.h) */
  if (no_draft && n_draft_dirs)
    fprintf(stderr, "deltafin serve: --no-draft: the target runs alone; --draft %s is not used\n",
            draft_dirs[0]);
  df_cli_drafters drafters;
  if (df_cli_drafters_sort("serve", draft_dirs, n_draft_dirs, !model_dir && !no_draft,
                           model_dir, !no_draft, &drafters) != 0)
    return 2;
  if (!model_dir) {
    model_dir = df_cli_default_model();
    char cfg[4300];
    snprintf(cfg, sizeof cfg, "%s/config.json", model_dir);
    if (access(cfg, R_OK) != 0) {
      fprintf(stderr, "deltafin serve: no --model given and the bundled demo model %s is "
              "missing; pass --model DIR\n", model_dir);
      return 2;
    }
  }
  if (!key && !is_loopback(host))
    fprintf(stderr, "deltafin serve: warning: listening on %s without an API key: anyone who can "
            "reach this address can use the model (set --api-key-file or DELTAFIN_API_KEY)\n", host);

  /* Signals: handled by sigwait in this thread only; threads created below inherit the mask. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  int rc = 1;
  char err[1024];
  df_model *m = NULL, *dm = NULL;
  df_dspark *bd = NULL; /* a block drafter (--draft naming a DSpark folder) */
  df_tok *dtok = NULL;  /* a cross-tokenizer draft's own tokenizer */
  uint64_t *heat = NULL;
  char heat_note[DF_HEAT_NOTE_MAX] = ""; /* what df_heat_load said about the heat file */
  df_tok *tok = NULL;
  df_chat_template *tmpl = NULL;
  df_sched *sched = NULL;
  df_srv *srv = NULL;
  char *dircopy = strdup(model_dir);
  if (!dircopy) goto done;
  {
    size_t n = strlen(dircopy);
    while (n > 1 && dircopy[n - 1] == '/') dircopy[--n] = 0;
  }
  if (!name) name = basename(dircopy);
  if (!quiet) fprintf(stderr, "deltafin serve: loading %s\n", model_dir);
  df_model_opts mo = {.max_ctx = ctx, .threads = (int)threads, .device_seqs = par};
  if (device && df_cli_device(device, model_dir, &mo) != 0) {
    rc = 2;
    goto done;
  }
  if (mo.device.kind != DF_T_DEV_CPU || cluster) { /* earlier runs' routing: hottest first */
    heat = df_heat_load(copts.state_dir, model_dir, &copts.heat_n, heat_note, sizeof heat_note);
    if (heat_note[0]) fprintf(stderr, "deltafin serve: %s\n", heat_note);
    copts.heat = heat; /* cluster placement: the hottest pairs to nodes with a GPU budget */
    if (mo.device.kind != DF_T_DEV_CPU) mo.expert_heat = heat, mo.expert_heat_n = copts.heat_n;
  }
  if (df_model_load(model_dir, &mo, &m, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin serve: %s\n", err);
    goto done;
  }
  if (mo.device.kind == DF_T_DEV_CPU && df_model_admit_host(m, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin serve: %s\n", err);
    goto done;
  }
  if (df_model_device_note(m)[0])
    fprintf(stderr, "deltafin serve: device: %s\n", df_model_device_note(m));
  if (drafters.text && !no_draft) {
    /* a draft that cannot be used is not fatal: the target runs alone (as deltafin run) */
    df_model_opts dmo = {.max_ctx = df_model_max_ctx(m), .max_rows = DF_SPEC_K_MAX + 1,
                         .threads = (int)threads};
    /* a draft with another tokenizer drafts through text (coordinator/generate/text_draft.h) */
    if (df_spec_draft_load_any(m, model_dir, drafters.text, &dmo, &dm, &dtok, err,
                               sizeof err) != 0)
      fprintf(stderr, "deltafin serve: drafting off: %s; %s\n", err,
              drafters.block ? "the block drafter drafts for every request"
                             : "the target runs alone");
  }
  if (drafters.block && !no_draft &&
      df_dspark_load(drafters.block, m, df_model_max_ctx(m), &bd, err, sizeof err) != 0)
    fprintf(stderr, "deltafin serve: drafting off: %s; %s\n", err,
            dm ? "the draft model drafts for every request" : "the target runs alone");
  if (cluster && df_cluster_attach(m, &copts, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin serve: cluster: %s\n", err);
    goto done;
  }
  if (df_tok_load(model_dir, &tok, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin serve: %s\n", err);
    goto done;
  }
  if (df_chat_template_load(model_dir, &tmpl, err, sizeof err) != 0)
    fprintf(stderr, "deltafin serve: warning: %s; /v1/chat/completions is unavailable\n", err);
  {
    /* the batch limit fits memory: each slot holds a sequence's KV cache for the context and
     * its recurrent state (Kimi Linear's KDA), allocated when first used */
    uint64_t per_slot = df_model_seq_state_bytes(m, df_model_max_ctx(m));
    int64_t avail = df_host_mem_available();
    if (avail > 0 && per_slot > 0 && (double)per_slot * (double)par > 0.8 * (double)avail) {
      int64_t fit = (int64_t)(0.8 * (double)avail / (double)per_slot);
      if (fit < 1) {
        fprintf(stderr, "deltafin serve: one sequence's state (%.1f MiB for %lld tokens) does not "
                "fit the %.1f MiB available; lower --ctx\n", per_slot / 1048576.0,
                (long long)df_model_max_ctx(m), avail / 1048576.0);
        goto done;
      }
      fprintf(stderr, "deltafin serve: --parallel %lld lowered to %lld: each sequence's state "
              "takes %.1f MiB (%lld tokens of KV cache + recurrent state) and %.1f MiB is "
              "available\n", (long long)par, (long long)fit, per_slot / 1048576.0,
              (long long)df_model_max_ctx(m), avail / 1048576.0);
      par = fit;
    }
  }
  if (!pcache_given) {
    /* the default prefix cache takes at most a quarter of what is free after the slots */
    uint64_t slots = df_model_seq_state_bytes(m, df_model_max_ctx(m)) * (uint64_t)par;
    int64_t avail = df_host_mem_available();
    if (avail > 0) {
      int64_t quarter = ((int64_t)slots < avail ? avail - (int64_t)slots : 0) / 4;
      if (quarter < pcache) pcache = quarter > 0 ? quarter : -1;
    }
  }
  df_sched_opts so = {.max_seqs = (int)par, .max_queue = (int)queue, .ctx = df_model_max_ctx(m),
                      .prefill_budget = chunk, .draft = dm, .draft_tok = dtok, .block = bd,
                      .draft_k = (int)draft_k,
                      .draft_max_seqs = (int)draft_seqs, .cache_bytes = pcache,
                      .no_prefix_cache = no_pcache};
  if (df_sched_new(m, tok, &so, &sched, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin serve: %s\n", err);
    goto done;
  }
  df_srv_opts sv = {.host = host, .port = (int)port, .api_key = key, .model_id = name,
                    .max_body = (size_t)body, .max_prompt = maxp, .max_conns = (unsigned)max_conns,
                    .max_per_host = (int)per_host,
                    .idle_timeout_s = (unsigned)idle_s,
                    .request_timeout_s = (unsigned)request_s, .quiet = quiet, .cluster = cluster,
                    .cluster_mgr = cmgr, .reasoning_raw = reasoning_raw};
  if (df_srv_start(&sv, sched, m, tok, tmpl, &srv, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin serve: %s\n", err);
    goto done;
  }
  fprintf(stderr, "deltafin serve: listening on http://%s%s%s:%d (model \"%s\", context %lld "
          "tokens, %lld parallel, queue %lld%s%s)\n", strchr(host, ':') ? "[" : "", host,
          strchr(host, ':') ? "]" : "", df_srv_port(srv), name, (long long)df_sched_ctx(sched),
          (long long)par, (long long)queue, df_sched_get_stats(sched).drafting ? ", drafting" : "",
          key ? ", API key required" : "");
  int sig = 0;
  sigwait(&sigs, &sig);
  if (!quiet) fprintf(stderr, "deltafin serve: %s: shutting down\n", strsignal(sig));
  if (sched) df_sched_shutdown(sched);
  if ((mo.device.kind != DF_T_DEV_CPU || cluster) && df_model_route_counts(m)) {
    if (df_heat_save(copts.state_dir, model_dir, m, heat_note, sizeof heat_note, err,
                     sizeof err) < 0)
      fprintf(stderr, "deltafin serve: expert heat not saved: %s\n", err);
    if (heat_note[0]) fprintf(stderr, "deltafin serve: %s\n", heat_note); /* found at the save */
  }
  rc = 0;
done:
  free(heat);
  if (sched) df_sched_shutdown(sched); /* requests in flight end now */
  df_srv_stop(&srv);
  df_sched_destroy(&sched);
  df_chat_template_destroy(&tmpl);
  df_tok_destroy(&tok);
  df_model_destroy(&dm);
  df_tok_destroy(&dtok);
  df_dspark_destroy(&bd);
  df_model_destroy(&m);
  free(dircopy);
  free(key_owned);
  return rc;
}
