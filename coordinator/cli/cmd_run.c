/* coordinator/cli/cmd_run.c — `deltafin run`: prefill a prompt, generate, print tokens.
 *
 * Owns: the run subcommand's options and output (ids, --stats, --logits-out), the default
 * random seed, which steps show a progress bar (coordinator/cli/progress.h: loading the
 * target and the draft, the prefill); the generation itself (target alone or with a draft)
 * is coordinator/generate/spec.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "coordinator/cli/cli.h"
#include "coordinator/cli/progress.h"
#include "coordinator/cluster/cluster.h"
#include "coordinator/cluster/expert_heat.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "coordinator/generate/spec.h"
#include "config/fsutil.h"
#include "coordinator/hub/stream.h"
#include "engine/text/chat_template.h"
#include "engine/text/reasoning.h"
#include "engine/text/tokenizer.h"

static void run_usage(FILE *f) {
  fprintf(f,
          "usage: deltafin run [--model DIR] (--prompt TEXT | --prompt-ids 1,2,3) [options]\n"
          "  --model DIR          Hugging Face model folder (config.json, *.safetensors,\n"
          "                       tokenizer.json); default: the bundled demo model\n"
          "  --prompt TEXT        prompt text (tokenized with the model's tokenizer); the\n"
          "                       continuation is streamed as text\n"
          "  --chat               wrap the prompt as a user turn with the model's chat template\n"
          "  --system TEXT        system message for --chat\n"
          "  --no-think           --chat with enable_thinking=false\n"
          "  --prompt-ids LIST    prompt as comma-separated token ids; prints generated ids\n"
          "  --max-new N          tokens to generate (default 32)\n"
          "  --temperature T      0 = greedy (default: generation_config.json, else greedy)\n"
          "  --top-p P            nucleus sampling mass in (0, 1] (default from generation_config)\n"
          "  --top-k K            keep the K most likely tokens, 0 = off\n"
          "  --seed S             random seed for sampling (default: a new random seed each\n"
          "                       run; --stats prints it, --seed S repeats the draws)\n"
          "  --ignore-eos         do not stop at end-of-sequence tokens\n"
          "  --ctx N              context capacity in tokens (default min(max_position, 4096))\n"
          "  --chunk N            prefill chunk size in tokens (default 64)\n"
          "  --threads N          compute threads (default: every online CPU)\n"
          "  --draft DIR          draft for speculative decoding: a model of the same vocabulary,\n"
          "                       a model with its own tokenizer (it drafts text, read back\n"
          "                       into the target's tokens), or a DSpark block drafter folder\n"
          "                       (it reads the target's hidden states); give both kinds to\n"
          "                       let the prompt choose:\n"
          "                       the block drafter for --chat, the draft model otherwise\n"
          "                       (default: the block drafter `deltafin setup` recorded in the\n"
          "                       model folder; without --model, the bundled demo drafters)\n"
          "  --no-draft           run the target alone\n"
          "  --draft-k K          first draft length, 1..8 (default 4; adapts unless --fixed-k)\n"
          "  --fixed-k            keep the draft length fixed\n"
          "  --stats              print load, prefill and decode times and speeds, the seed\n"
          "                       and the drafting figures to stderr\n"
          "  --logits-out FILE    write fp32 logits of every prompt position, raw little-endian\n"
          "                       row-major [n_prompt, vocab_size]\n"
          "  --cluster            run routed experts on df-node agents (docs/CLUSTER.md)\n"
          "  --cluster-port N     port of the cluster socket (default 7070)\n"
          "  --cluster-bind HOST  interface to bind (default: all)\n"
          "  --cluster-wait S     seconds to wait for nodes before generating (default 10)\n"
          "  --cluster-nodes N    stop waiting once N nodes are ready (default 1)\n"
          "  --cluster-timeout S  deadline of one layer's round trip to the nodes (default 30)\n"
          "  --state-dir DIR      cluster keys, tokens, nodes and expert heat\n"
          "                       (default ~/.local/state/deltafin)\n"
          "  --device D           cpu (default), cuda, cuda:N or auto: where the target computes;\n"
          "                       falls back to the CPU with one line (docs/GPU.md)\n"
          "A load or prefill longer than a second shows a progress bar on stderr when it is a\n"
          "terminal (DF_PROGRESS=1: on any stderr, DF_PROGRESS=0: never).\n");
}

enum { O_MODEL = 1, O_IDS, O_MAXNEW, O_TEMP, O_TOPP, O_TOPK, O_SEED, O_STATS, O_LOGITS, O_CTX,
       O_CHUNK, O_NOEOS, O_HELP, O_DRAFT, O_NODRAFT, O_DRAFTK, O_FIXEDK,
       O_PROMPT, O_CHAT, O_SYSTEM, O_NOTHINK,
       O_CLUSTER, O_CPORT, O_CBIND, O_CWAIT, O_CNODES, O_CTIMEOUT, O_STATE, O_DEVICE, O_THREADS };

/* --logits-out: a regular file (or a new path) is written as a temporary file renamed into
 * place, since the target may be one of the mapped inputs; through a symbolic link, the
 * link's target is replaced and the link kept; a FIFO or device (e.g. /dev/stdout) is
 * written through, never replaced. -1 + message naming the path on any failure. */
static int write_logits(const char *path, const void *data, size_t len, char *err,
                        size_t errlen) {
  struct stat st, lst;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    /* without blocking: a FIFO nobody reads would otherwise hang the run at its end */
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
      snprintf(err, errlen, "cannot open %s: %s", path,
               errno == ENXIO ? "a FIFO with no reader" : strerror(errno));
      return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    const char *p = data;
    for (size_t left = len; left;) {
      ssize_t w = write(fd, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, w < 0 ? strerror(errno) : "short write");
        close(fd);
        return -1;
      }
      p += w;
      left -= (size_t)w;
    }
    if (close(fd) != 0) {
      snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
      return -1;
    }
    return 0;
  }
  char real[PATH_MAX];
  if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode) && realpath(path, real)) path = real;
  return df_fs_write_atomic(path, data, len, 0644, err, errlen);
}

/* Print generated text. Without rp (no --chat, or a family without reasoning) as it comes;
 * with it, split: the reasoning between a "<think>\n" line and "\n</think>\n\n" (Qwen3's own
 * layout, so a Qwen3 answer prints as the model wrote it; Kimi K3's think element the same
 * way), then the content. at_end: the text has ended (what rp held back is printed). Returns
 * 0, or -1 when out of memory. */
static int put_text(df_reasoning_parser *rp, bool *thinking, const char *text, size_t len,
                    bool at_end) {
  if (!rp) {
    fwrite(text, 1, len, stdout);
    return 0;
  }
  const df_reasoning_ev *ev;
  size_t n;
  if (df_reasoning_parser_feed(rp, text, len, &ev, &n) != 0) return -1;
  for (int pass = 0; pass < 1 + at_end; pass++) {
    if (pass && df_reasoning_parser_finish(rp, &ev, &n) != 0) return -1;
    for (size_t i = 0; i < n; i++) {
      bool r = ev[i].kind == DF_REASONING_EV_REASONING;
      if (r != *thinking) fputs(r ? "<think>\n" : "\n</think>\n\n", stdout);
      *thinking = r;
      fwrite(ev[i].text, 1, ev[i].len, stdout);
    }
  }
  return 0;
}

/* The model's progress hook (df_model_progress_fn) drawing a df_progress bar. */
static void show_progress(void *ctx, int64_t done, int64_t total) {
  df_progress_update(ctx, done, total, df_progress_now());
}

/* A new random seed in [0, INT64_MAX] (the range --seed accepts) from getrandom; the clock
 * and pid when that fails. */
static int64_t random_seed(void) {
  uint64_t x;
  if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
        ((uint64_t)getpid() << 32);
  }
  return (int64_t)(x >> 1);
}

/* "load NAME" for the bar of loading folder dir (its last component). */
static void load_label(char *buf, size_t cap, const char *what, const char *dir) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  size_t b = n;
  while (b > 0 && dir[b - 1] != '/') b--;
  snprintf(buf, cap, "%s %.*s", what, (int)(n - b), dir + b);
}

int df_cmd_run(int argc, char **argv) {
  /* "load" counts from the process's creation: libtorch's start-up before main is part of
   * what the user waits for (df_proc_age; the time since this call where /proc is absent) */
  double t_entry = df_cli_now(), startup = df_proc_age();
  static const struct option opts[] = {
      {"model", required_argument, 0, O_MODEL},   {"prompt-ids", required_argument, 0, O_IDS},
      {"max-new", required_argument, 0, O_MAXNEW}, {"temperature", required_argument, 0, O_TEMP},
      {"top-p", required_argument, 0, O_TOPP},     {"top-k", required_argument, 0, O_TOPK},
      {"seed", required_argument, 0, O_SEED},      {"stats", no_argument, 0, O_STATS},
      {"logits-out", required_argument, 0, O_LOGITS}, {"ctx", required_argument, 0, O_CTX},
      {"chunk", required_argument, 0, O_CHUNK},    {"ignore-eos", no_argument, 0, O_NOEOS},
      {"help", no_argument, 0, O_HELP},            {"draft", required_argument, 0, O_DRAFT},
      {"no-draft", no_argument, 0, O_NODRAFT},     {"draft-k", required_argument, 0, O_DRAFTK},
      {"fixed-k", no_argument, 0, O_FIXEDK},       {"prompt", required_argument, 0, O_PROMPT},
      {"chat", no_argument, 0, O_CHAT},            {"system", required_argument, 0, O_SYSTEM},
      {"no-think", no_argument, 0, O_NOTHINK},
      {"cluster", no_argument, 0, O_CLUSTER},      {"cluster-port", required_argument, 0, O_CPORT},
      {"cluster-bind", required_argument, 0, O_CBIND}, {"cluster-wait", required_argument, 0, O_CWAIT},
      {"cluster-nodes", required_argument, 0, O_CNODES},
      {"cluster-timeout", required_argument, 0, O_CTIMEOUT},
      {"state-dir", required_argument, 0, O_STATE}, {"device", required_argument, 0, O_DEVICE},
      {"threads", required_argument, 0, O_THREADS},
      {0, 0, 0, 0}};
  const char *model_dir = NULL, *ids_arg = NULL, *logits_path = NULL, *draft_dir = NULL;
  const char *draft_dirs[2];
  int n_draft_dirs = 0;
  const char *text = NULL, *system = NULL, *device = NULL;
  bool chat = false, no_think = false;
  int64_t max_new = 32, top_k = -1, seed = -1, ctx = 0, chunk = 0, draft_k = 4, threads = 0;
  double temp = -1, top_p = -1;
  bool stats = false, ignore_eos = false, no_draft = false, fixed_k = false, cluster = false;
  df_cluster_opts copts = {.wait_s = -1};
  int64_t cport = 0, cnodes = 0;
  int c, rc = 1;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case O_MODEL: model_dir = optarg; break;
    case O_IDS: ids_arg = optarg; break;
    case O_MAXNEW: if (df_cli_int("max-new", optarg, 0, 1 << 24, &max_new)) return 2; break;
    case O_TEMP: if (df_cli_double("temperature", optarg, 0, 100, &temp)) return 2; break;
    case O_TOPP: if (df_cli_double("top-p", optarg, 1e-9, 1, &top_p)) return 2; break;
    case O_TOPK: if (df_cli_int("top-k", optarg, 0, 1 << 30, &top_k)) return 2; break;
    case O_SEED: if (df_cli_int("seed", optarg, 0, INT64_MAX, &seed)) return 2; break;
    case O_CTX: if (df_cli_int("ctx", optarg, 1, 1 << 24, &ctx)) return 2; break;
    case O_CHUNK: if (df_cli_int("chunk", optarg, 1, 1 << 16, &chunk)) return 2; break;
    case O_THREADS: if (df_cli_int("threads", optarg, 1, 4096, &threads)) return 2; break;
    case O_STATS: stats = true; break;
    case O_NOEOS: ignore_eos = true; break;
    case O_LOGITS: logits_path = optarg; break;
    case O_DRAFT:
      if (n_draft_dirs == 2) {
        fprintf(stderr, "deltafin run: --draft at most twice (a draft model and a block drafter)\n");
        return 2;
      }
      draft_dirs[n_draft_dirs++] = optarg;
      break;
    case O_NODRAFT: no_draft = true; break;
    case O_DRAFTK: if (df_cli_int("draft-k", optarg, 1, DF_SPEC_K_MAX, &draft_k)) return 2; break;
    case O_FIXEDK: fixed_k = true; break;
    case O_PROMPT: text = optarg; break;
    case O_CHAT: chat = true; break;
    case O_SYSTEM: system = optarg; break;
    case O_NOTHINK: no_think = true; break;
    case O_CLUSTER: cluster = true; break;
    case O_CPORT: if (df_cli_int("cluster-port", optarg, 1, 65535, &cport)) return 2; copts.port = (int)cport; break;
    case O_CBIND: copts.bind_host = optarg; break;
    case O_CWAIT: if (df_cli_double("cluster-wait", optarg, 0, 86400, &copts.wait_s)) return 2; break;
    case O_CNODES: if (df_cli_int("cluster-nodes", optarg, 1, 256, &cnodes)) return 2; copts.min_nodes = (int)cnodes; break;
    case O_CTIMEOUT: if (df_cli_double("cluster-timeout", optarg, 0.01, 86400, &copts.timeout_s)) return 2; break;
    case O_STATE: if (df_cli_dir("state-dir", optarg)) return 2; copts.state_dir = optarg; break;
    case O_DEVICE: device = optarg; break;
    case O_HELP: run_usage(stdout); return 0;
    default:
      fprintf(stderr, "deltafin run: unknown or incomplete option '%s'\n", argv[optind - 1]);
      run_usage(stderr);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "deltafin run: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (!!text == !!ids_arg) {
    fprintf(stderr, "deltafin run: give exactly one of --prompt TEXT or --prompt-ids LIST\n");
    run_usage(stderr);
    return 2;
  }
  if ((chat || system || no_think) && !text) {
    fprintf(stderr, "deltafin run: --chat, --system and --no-think need --prompt TEXT\n");
    return 2;
  }
  if ((system || no_think) && !chat) {
    fprintf(stderr, "deltafin run: --system and --no-think apply to --chat prompts only\n");
    return 2;
  }
  /* the drafter: a chat turn drafts with the block drafter when there is one (it reads the
   * target's own hidden states), a raw completion with the draft model when there is one;
   * without --model and --draft, the bundled demo drafters */
  if (no_draft && n_draft_dirs)
    fprintf(stderr, "deltafin run: --no-draft: the target runs alone; --draft %s is not used\n",
            draft_dirs[0]);
  df_cli_drafters drafters;
  if (df_cli_drafters_sort("run", draft_dirs, n_draft_dirs, !model_dir && !no_draft,
                           model_dir, !no_draft, &drafters) != 0)
    return 2;
  const char *draft_why = NULL;
  if (!no_draft) {
    bool block = drafters.block && (chat || !drafters.text);
    draft_dir = block ? drafters.block : drafters.text;
    draft_why = !draft_dir ? NULL
                : block && drafters.text ? "block drafter for a chat turn"
                : drafters.recorded ? "block drafter `deltafin setup` fetched for this model"
                : block ? "block drafter, the only drafter given"
                : drafters.block ? "draft model for a raw completion"
                : "draft model, the only drafter given";
  }
  if (!model_dir) {
    model_dir = df_cli_default_model();
    char cfg[4300];
    snprintf(cfg, sizeof cfg, "%s/config.json", model_dir);
    if (access(cfg, R_OK) != 0) {
      fprintf(stderr, "deltafin run: no --model given and the bundled demo model %s is missing; "
              "pass --model DIR\n", model_dir);
      return 2;
    }
  }
  int32_t *prompt = NULL;
  int64_t n_prompt = 0;
  char err[1024];
  df_tok *tok = NULL;
  df_tok_stream *stream = NULL;
  df_chat_template *tmpl = NULL;
  df_reasoning_parser *rp = NULL; /* --chat: the answer's reasoning and content */
  bool thinking = false;          /* "<think>" printed, "</think>" not yet */
  /* Kimi K3 folders (a tokenizer with the XTML structural tokens): a turn ends with
   * <|end_of_msg|> (the config's eos) and [EOS] is a stop id too (docs/K3.md §5.1), whatever
   * config.json / generation_config.json list */
  int32_t k3_stop[4];
  int n_k3_stop = 0;
  if (ids_arg) {
    n_prompt = df_cli_ids("prompt-ids", ids_arg, &prompt);
    if (n_prompt < 0) return 2;
  } else {
    size_t n = 0;
    int rc_enc;
    /* text in: bytes that are not UTF-8 would be replaced by U+FFFD and lost */
    const char *what[2] = {"--prompt", "--system"}, *val[2] = {text, system};
    for (int k = 0; k < 2; k++) {
      size_t bad = val[k] ? df_tok_utf8_invalid_at(val[k], strlen(val[k])) : 0;
      if (val[k] && bad < strlen(val[k])) {
        fprintf(stderr, "deltafin run: %s is not valid UTF-8: byte %zu (0x%02X) does not start "
                "a well-formed character\n", what[k], bad, (unsigned char)val[k][bad]);
        return 2;
      }
    }
    if (df_tok_load(model_dir, &tok, err, sizeof err) != 0) {
      fprintf(stderr, "deltafin: %s\n", err);
      return 1;
    }
    n_k3_stop = df_chat_stop_ids(tok, k3_stop);
    if (chat) {
      if (df_chat_template_load(model_dir, &tmpl, err, sizeof err) != 0) {
        fprintf(stderr, "deltafin: %s\n", err);
        df_tok_destroy(&tok);
        return 1;
      }
      df_chat_msg msgs[2] = {{.role = "system", .content = system},
                             {.role = "user", .content = text}};
      if (no_think && !df_chat_template_has_thinking(tmpl)) {
        fprintf(stderr, "deltafin run: --no-think: this model's chat template has no thinking "
                "switch (it renders the same prompt either way)\n");
        df_chat_template_destroy(&tmpl);
        df_tok_destroy(&tok);
        return 2;
      }
      df_chat_opts co = {.add_generation_prompt = true, .enable_thinking = no_think ? 0 : -1};
      rc_enc = df_chat_encode(tmpl, tok, system ? msgs : msgs + 1, system ? 2 : 1, &co, &prompt,
                              &n, err, sizeof err);
    } else {
      rc_enc = df_tok_encode(tok, text, strlen(text), DF_TOK_ADD_SPECIAL | DF_TOK_BOS_ONCE, &prompt, &n, err,
                             sizeof err);
    }
    if (rc_enc != 0 || df_tok_stream_new(tok, DF_TOK_SKIP_SPECIAL, &stream, err, sizeof err) != 0) {
      fprintf(stderr, "deltafin: %s\n", err);
      df_chat_template_destroy(&tmpl);
      df_tok_destroy(&tok);
      free(prompt);
      return 1;
    }
    df_chat_family fam = tmpl ? df_chat_template_family(tmpl) : DF_CHAT_QWEN3;
    if (tmpl && df_reasoning_family(fam)) {
      /* the prompt opens Kimi K3's think element unless --no-think; Qwen3 --no-think renders
       * an empty think block; otherwise the model opens its reasoning itself */
      df_reasoning_start st = fam == DF_CHAT_KIMI_K3 ? (no_think ? DF_REASONING_OUT : DF_REASONING_IN)
                              : no_think ? DF_REASONING_OUT : DF_REASONING_AUTO;
      int32_t keep[DF_TOK_STREAM_KEEP_MAX];
      size_t nk = df_tok_special_ids(tok, df_reasoning_markers(fam), keep, DF_TOK_STREAM_KEEP_MAX);
      if (!(rp = df_reasoning_parser_new(fam, st)) || df_tok_stream_keep(stream, keep, nk) != 0) {
        fprintf(stderr, "deltafin: out of memory\n");
        df_reasoning_parser_destroy(&rp);
        df_tok_stream_destroy(&stream);
        df_chat_template_destroy(&tmpl);
        df_tok_destroy(&tok);
        free(prompt);
        return 1;
      }
    }
    n_prompt = (int64_t)n;
    if (n_prompt == 0) {
      fprintf(stderr, "deltafin: --prompt: the text encodes to no tokens\n");
      df_reasoning_parser_destroy(&rp);
      df_tok_stream_destroy(&stream);
      df_tok_destroy(&tok);
      return 2;
    }
  }

  df_model *m = NULL, *dm = NULL;
  df_tok *dtok = NULL, *ttok = NULL; /* a cross-tokenizer draft's tokenizer; the target's for it
                                        when the prompt came as ids */
  df_dspark *bd = NULL; /* a block drafter (--draft naming a DSpark folder) */
  df_spec *gen = NULL;
  uint64_t *heat = NULL;
  char heat_note[DF_HEAT_NOTE_MAX] = ""; /* what df_heat_load said about the heat file */
  float *logits = NULL;
  /* one bar at a time on stderr (progress.h): loading the target, the draft, the prefill */
  FILE *bar_f = df_progress_wanted(stderr) ? stderr : NULL;
  df_progress bar;
  char label[80];
  load_label(label, sizeof label, "load", model_dir);
  df_progress_begin(&bar, bar_f, label, "layers", df_progress_now());
  df_model_opts mo = {.max_ctx = ctx, .max_rows = chunk, .threads = (int)threads,
                      .progress = show_progress, .progress_ctx = &bar};
  if (device && df_cli_device(device, model_dir, &mo) != 0) {
    rc = 2;
    goto done;
  }
  if (mo.device.kind != DF_T_DEV_CPU || cluster) { /* earlier runs' routing: hottest first */
    heat = df_heat_load(copts.state_dir, model_dir, &copts.heat_n, heat_note, sizeof heat_note);
    if (heat_note[0]) fprintf(stderr, "deltafin: %s\n", heat_note);
    copts.heat = heat; /* cluster placement: the hottest pairs to nodes with a GPU budget */
    if (mo.device.kind != DF_T_DEV_CPU) mo.expert_heat = heat, mo.expert_heat_n = copts.heat_n;
  }
  int rc_load = df_model_load(model_dir, &mo, &m, err, sizeof err);
  df_progress_end(&bar);
  if (rc_load != 0) {
    fprintf(stderr, "deltafin: %s\n", err);
    goto done;
  }
  if (mo.device.kind == DF_T_DEV_CPU && df_model_admit_host(m, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: %s\n", err);
    goto done;
  }
  if (df_model_device_note(m)[0]) fprintf(stderr, "deltafin: device: %s\n", df_model_device_note(m));
  /* a folder pulled with --stream fetches routed experts on first use */
  if (df_stream_attach(m, model_dir, NULL, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: %s\n", err);
    goto done;
  }
  if (draft_dir && !no_draft) {
    /* a draft that cannot be loaded, or whose tokenizer differs, is not fatal: the target
     * runs alone; an embedding / lm_head identical to the target's is mapped once; the
     * draft loads with the target's thread count (a load sets the process's count) */
    load_label(label, sizeof label, "load draft", draft_dir);
    int rc_draft;
    if (df_dspark_is_folder(draft_dir)) { /* a block drafter reading the target's rows */
      rc_draft = df_dspark_load(draft_dir, m, df_model_max_ctx(m), &bd, err, sizeof err);
    } else {
      df_progress_begin(&bar, bar_f, label, "layers", df_progress_now());
      df_model_opts dmo = {.max_ctx = df_model_max_ctx(m), .max_rows = DF_SPEC_K_MAX + 1,
                           .threads = (int)threads, .progress = show_progress,
                           .progress_ctx = &bar};
      /* a draft with another tokenizer drafts through text (coordinator/generate/text_draft.h) */
      rc_draft = df_spec_draft_load_any(m, model_dir, draft_dir, &dmo, &dm, &dtok, err,
                                        sizeof err);
      df_progress_end(&bar);
    }
    if (rc_draft != 0) fprintf(stderr, "deltafin: drafting off: %s; the target runs alone\n", err);
  }
  copts.stats = stats;
  double waited = 0; /* --cluster: waiting for nodes, reported apart from the load */
  int nodes_ready = 0;
  copts.waited_s = &waited;
  copts.nodes_ready = &nodes_ready;
  if (cluster && df_cluster_attach(m, &copts, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: cluster: %s\n", err);
    goto done;
  }
  double t_load = (startup > 0 ? startup : 0) + df_cli_now() - t_entry - waited;
  const df_model_config *cfg = df_model_cfg(m);
  const df_gen_config *gcfg = df_model_gen_cfg(m);
  int64_t V = cfg->vocab_size;
  if (n_prompt + max_new > df_model_max_ctx(m)) {
    int64_t ctx = df_model_max_ctx(m), mpe = cfg->max_position_embeddings;
    if (mpe > ctx)
      fprintf(stderr, "deltafin: prompt %lld + max-new %lld tokens exceeds the context of %lld "
              "tokens (raise --ctx, up to max_position_embeddings %lld)\n", (long long)n_prompt,
              (long long)max_new, (long long)ctx, (long long)mpe);
    else /* --ctx cannot go past the model's own limit */
      fprintf(stderr, "deltafin: prompt %lld + max-new %lld tokens exceeds the context of %lld "
              "tokens, the model's limit (max_position_embeddings in config.json): use "
              "--max-new %lld or less, or a shorter prompt\n", (long long)n_prompt,
              (long long)max_new, (long long)ctx,
              (long long)(ctx - n_prompt > 0 ? ctx - n_prompt : 0));
    goto done;
  }
  if (seed < 0) seed = random_seed(); /* --stats prints it; --seed repeats it */
  df_sampler_params sp = {
      .temperature = temp >= 0 ? temp : (gcfg->do_sample ? gcfg->temperature : 0.0),
      .top_p = top_p > 0 ? top_p : (gcfg->do_sample ? gcfg->top_p : 1.0),
      .top_k = top_k >= 0 ? top_k : (gcfg->do_sample ? gcfg->top_k : 0),
      .seed = (uint64_t)seed};
  df_spec_params pp = {.k_init = (int)draft_k, .adaptive = !fixed_k};
  if (!(gen = df_spec_new(m, dtok ? NULL : dm, &sp, &pp, 0, err, sizeof err))) {
    fprintf(stderr, "deltafin: %s\n", err);
    goto done;
  }
  if (dtok && !tok && df_tok_load(model_dir, &ttok, err, sizeof err) != 0)
    fprintf(stderr, "deltafin: drafting off: the target's tokenizer: %s; the target runs alone\n",
            err);
  else if (dtok && df_spec_attach_text(gen, dm, dtok, tok ? tok : ttok, err, sizeof err) != 0)
    fprintf(stderr, "deltafin: drafting off: text draft %s: %s; the target runs alone\n",
            draft_dir, err);
  /* a switch-off while generating is reported after the output, not inside a line of it
   * (and, when it was the adaptive measurement's choice, only with --stats) */
  if (bd && df_spec_attach_block(gen, bd, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: drafting off: block drafter %s: %s; the target runs alone\n",
            draft_dir, err);
    df_dspark_destroy(&bd);
  }
  bool drafting_at_start = (dm || bd) && df_spec_get_stats(gen).drafting;
  df_spec_set_quiet(gen, true);
  if (logits_path) {
    logits = malloc((size_t)n_prompt * (size_t)V * sizeof(float));
    if (!logits) {
      fprintf(stderr, "deltafin: out of memory for --logits-out\n");
      goto done;
    }
  }
  double t1 = df_cli_now();
  df_progress_begin(&bar, bar_f, "prefill", "tokens", t1);
  df_model_set_progress(m, show_progress, &bar);
  int rc_prefill = df_spec_prefill(gen, prompt, n_prompt, logits, err, sizeof err);
  df_model_set_progress(m, NULL, NULL);
  df_progress_end(&bar);
  if (rc_prefill != 0) {
    fprintf(stderr, "deltafin: prefill: %s\n", err);
    goto done;
  }
  double t_prefill = df_cli_now() - t1;
  if (logits_path &&
      write_logits(logits_path, logits, (size_t)(n_prompt * V) * sizeof(float), err,
                   sizeof err) != 0) {
    fprintf(stderr, "deltafin: --logits-out: %s\n", err);
    goto done;
  }
  int64_t n_out = 0;
  bool stop = max_new == 0;
  double t2 = df_cli_now();
  while (!stop) {
    int32_t toks[DF_SPEC_K_MAX + 1];
    int n = df_spec_step(gen, toks, err, sizeof err);
    if (n < 0) {
      fprintf(stderr, "\ndeltafin: decode: %s\n", err);
      goto done;
    }
    for (int i = 0; i < n && !stop; i++) {
      if (stream) {
        const char *piece;
        size_t plen;
        if (df_tok_stream_feed(stream, toks[i], &piece, &plen, err, sizeof err) != 0) {
          fprintf(stderr, "\ndeltafin: decode: %s\n", err);
          goto done;
        }
        if (put_text(rp, &thinking, piece, plen, false) != 0) goto oom;
      } else {
        printf("%s%d", n_out ? " " : "", toks[i]);
      }
      n_out++;
      bool eos = false;
      for (int e = 0; e < gcfg->n_eos; e++) eos |= gcfg->eos_token_ids[e] == toks[i];
      for (int e = 0; e < n_k3_stop; e++) eos |= k3_stop[e] == toks[i];
      stop = (eos && !ignore_eos) || n_out == max_new;
    }
    fflush(stdout);
  }
  if (stream) {
    const char *piece;
    size_t plen;
    if (df_tok_stream_flush(stream, &piece, &plen, err, sizeof err) != 0 ||
        put_text(rp, &thinking, piece, plen, true) != 0)
      goto oom;
  }
  printf("\n");
  fflush(stdout); /* the text ends before --stats lines on stderr, also through a pipe */
  double t_decode = df_cli_now() - t2;
  df_spec_stats fin = df_spec_get_stats(gen);
  if (drafting_at_start && !fin.drafting && (stats || !fin.off_not_paying))
    fprintf(stderr, "deltafin: drafting went off: %s; the target ran alone from then on\n",
            fin.off_reason);
  if (stats) {
    df_spec_stats st = fin;
    /* no rate over a time below the clock's resolution, nor for a prefill that ran no
     * forward (a one-token prompt without --logits-out: that token is run with the first
     * generated one, so its time is bookkeeping and the rate would be absurd) */
    struct timespec res = {0, 1};
    clock_getres(CLOCK_MONOTONIC, &res);
    double t_min = (double)res.tv_sec + (double)res.tv_nsec * 1e-9;
    char pre_rate[48] = "n/a", gen_rate[64] = "n/a", up[48] = "", wait[64] = "";
    if (t_prefill >= t_min && (logits || n_prompt > 1))
      snprintf(pre_rate, sizeof pre_rate, "%.1f tok/s", n_prompt / t_prefill);
    if (n_out && t_decode >= t_min)
      snprintf(gen_rate, sizeof gen_rate, "%.2f tok/s, %.2f ms/token", n_out / t_decode,
               1e3 * t_decode / n_out);
    if (startup >= 0.05) snprintf(up, sizeof up, " (start-up %.3f s)", startup);
    if (cluster && copts.wait_s != 0)
      snprintf(wait, sizeof wait, " | waited %.3f s for %d node%s", waited, nodes_ready,
               nodes_ready == 1 ? "" : "s");
    fprintf(stderr,
            "load %.3f s%s%s | prefill %lld tokens in %.3f s = %s | generate %lld tokens in "
            "%.3f s = %s\n",
            t_load, up, wait, (long long)n_prompt, t_prefill, pre_rate, (long long)n_out,
            t_decode, gen_rate);
    if (sp.temperature > 0)
      fprintf(stderr, "sampling: temperature %g, top-k %lld, top-p %g, seed %lld (--seed %lld "
              "repeats this run%s)\n", sp.temperature, (long long)sp.top_k, sp.top_p,
              (long long)seed, (long long)seed,
              drafting_at_start ? ", with or without the draft" : "");
    if (draft_dir && draft_why)
      fprintf(stderr, "drafter: %s (%s%s)%s\n", draft_dir, draft_why,
              dtok ? "; its own tokenizer: it drafts text" : "",
              drafting_at_start ? "" : "; it could not be used");
    if (st.rounds) {
      fprintf(stderr,
              "draft: %lld rounds, acceptance %.3f, mean accepted length %.2f (+1 target token "
              "per round), draft %.2f ms per round, target %.2f ms per forward, k histogram",
              (long long)st.rounds, st.drafted ? (double)st.accepted / st.drafted : 0.0,
              (double)st.accepted / st.rounds, st.draft_ms / st.rounds,
              st.verify_ms / (st.target_forwards ? st.target_forwards : 1));
      for (int i = 0; i <= DF_SPEC_K_MAX; i++)
        if (st.k_hist[i] && i) fprintf(stderr, " k=%d:%d", i, st.k_hist[i]);
        else if (st.k_hist[i]) fprintf(stderr, " alone:%d", st.k_hist[i]);
      if (st.rests)
        fprintf(stderr, " | %d rest%s (the target alone for 64 tokens, twice as many each time, "
                "drafting measured again after each)", st.rests, st.rests == 1 ? "" : "s");
      fprintf(stderr, "%s%s\n", st.drafting ? "" : " | off: ", st.drafting ? "" : st.off_reason);
      fprintf(stderr, "draft: k over time (from token: k, 0 = target alone):");
      for (int i = 0; i < st.n_k_trace; i++)
        fprintf(stderr, " %lld:%d", (long long)st.k_trace[i].at, st.k_trace[i].k);
      fprintf(stderr, "%s\n", st.n_k_trace == DF_SPEC_K_TRACE ? " ..." : "");
    }
    if (df_spec_text_draft(gen)) {
      df_text_draft_stats xs = df_text_draft_get_stats(df_spec_text_draft(gen));
      fprintf(stderr, "text draft (its own tokenizer): %lld draft tokens generated, %lld of them "
              "kept as the target wrote their text, %lld read from the target's text, %lld "
              "rounds with no complete target piece, %lld rounds healed (the last token "
              "re-written), %lld windows of recent text re-read\n",
              (long long)xs.draft_tokens, (long long)xs.reused_tokens,
              (long long)xs.encoded_tokens, (long long)xs.empty_rounds, (long long)xs.healed,
              (long long)xs.windows);
    }
  }
  if ((mo.device.kind != DF_T_DEV_CPU || cluster) && df_model_route_counts(m)) {
    if (df_heat_save(copts.state_dir, model_dir, m, heat_note, sizeof heat_note, err,
                     sizeof err) < 0)
      fprintf(stderr, "deltafin: expert heat not saved: %s\n", err);
    if (heat_note[0]) fprintf(stderr, "deltafin: %s\n", heat_note); /* found at the save */
  }
  rc = 0;
  goto done;
oom:
  fprintf(stderr, "\ndeltafin: out of memory\n");
done:
  df_progress_end(&bar);
  df_reasoning_parser_destroy(&rp);
  free(heat);
  df_tok_stream_destroy(&stream);
  df_chat_template_destroy(&tmpl);
  df_tok_destroy(&tok);
  free(prompt);
  free(logits);
  df_spec_destroy(&gen);
  df_tok_destroy(&dtok);
  df_tok_destroy(&ttok);
  df_dspark_destroy(&bd);
  df_model_destroy(&dm);
  df_model_destroy(&m);
  return rc;
}
