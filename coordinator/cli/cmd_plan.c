/* coordinator/cli/cmd_plan.c — `deltafin plan`: a placement and a predicted time per token for a
 * model folder on the machines named with --node (the first is the coordinator's). Reads the
 * model's figures through engine/model.h (a header-only folder is enough: no weight byte is
 * read), hands them to the cost model (coordinator/cluster/plan_model.h, which owns every
 * formula) and prints a table per machine or, with --json, one JSON object. Exit status: 0 a
 * feasible plan, 1 an infeasible one (the shortfall in GiB on stderr) or a model that does not
 * load, 2 usage. */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cli/cli.h"
#include "coordinator/cluster/plan_model.h"
#include "engine/model.h"

#define PLAN_MAX_NODES 256
#define PLAN_DEFAULT_MEM_GBPS 50.0
#define PLAN_DEFAULT_RTT_MS 0.2
#define PLAN_DEFAULT_RESERVE (4ull << 30)
#define PLAN_DEFAULT_CTX 4096
#define PLAN_DEFAULT_DRAFT_K 4
#define PLAN_DEFAULT_ACCEPT 2.0

static double gib(double b) { return b / 1073741824.0; }

static void plan_usage(FILE *f) {
  fprintf(f,
          "usage: deltafin plan --model DIR --node MEM,DISK_GBPS,LINK_GBITPS[,MEM_GBPS[,DISK_SIZE]]\n"
          "                     [--node ...] [--accept L] [--draft-k K] [--mem-bw GBPS] [--rtt-ms MS]\n"
          "                     [--reserve SIZE] [--ctx N] [--json]\n"
          "  Where a model's bytes go on these machines and the time per token that follows from\n"
          "  the bytes each forward moves (memory, disk, network). No weight byte is read: a\n"
          "  folder of headers is enough. The first --node is the coordinator's machine.\n"
          "  --node     MEM: RAM (512G, 64G: K/M/G/T are powers of 1024); DISK_GBPS: disk read\n"
          "             GB/s, 0 = no disk; LINK_GBITPS: network Gbit/s (0 only for one machine\n"
          "             alone); optional MEM_GBPS: this machine's memory bandwidth (default\n"
          "             --mem-bw) and DISK_SIZE: disk room for weights (default: enough)\n"
          "  --accept   mean accepted draft tokens per verify forward (default %.1f: %.1f tokens\n"
          "             per forward with the target's own)\n"
          "  --draft-k  draft tokens per verify forward (default %d: %d rows)\n"
          "  --mem-bw   memory read GB/s of machines that do not give one (default %.0f: a\n"
          "             dual-channel DDR4-3200 desktop's peak, about what a DDR5 one sustains)\n"
          "  --rtt-ms   latency of one round trip to a node (default %.1f ms, a switched LAN)\n"
          "  --reserve  RAM each machine keeps for its OS (default 4G)\n"
          "  --ctx      context the sequence state is sized for (default %d tokens)\n"
          "  --json     one JSON object on stdout\n"
          "  Cost model and its assumptions: coordinator/cluster/plan_model.h, docs/K3.md\n"
          "  (Planning a machine or a cluster). Exit status 1 when the machines cannot hold the\n"
          "  model (the shortfall in GiB is printed).\n",
          PLAN_DEFAULT_ACCEPT, PLAN_DEFAULT_ACCEPT + 1, PLAN_DEFAULT_DRAFT_K,
          PLAN_DEFAULT_DRAFT_K + 1, PLAN_DEFAULT_MEM_GBPS, PLAN_DEFAULT_RTT_MS, PLAN_DEFAULT_CTX);
}

static int parse_num(const char *s, size_t n, double lo, double hi, double *out) {
  char buf[32];
  if (n == 0 || n >= sizeof buf) return -1;
  memcpy(buf, s, n);
  buf[n] = 0;
  char *end;
  double v = strtod(buf, &end);
  if (end == buf || *end || !(v >= lo && v <= hi)) return -1;
  *out = v;
  return 0;
}

/* A rate: 0 (none) or 1e-3 .. 1e6. */
static int parse_rate(const char *s, size_t n, double *out) {
  return parse_num(s, n, 0, 1e6, out) || (*out > 0 && *out < 1e-3) ? -1 : 0;
}

/* MEM,DISK_GBPS,LINK_GBITPS[,MEM_GBPS[,DISK_SIZE]]; mem_gbps 0 = the --mem-bw default.
 * 0, or -1 with *which the 1-based field at fault (0: too few fields). */
static int parse_node(const char *v, df_plan_node *d, int *which) {
  memset(d, 0, sizeof *d);
  d->disk_bytes = UINT64_MAX;
  int field = 0;
  for (const char *s = v;; field++) {
    size_t k = strcspn(s, ",");
    int bad = 0;
    switch (field) {
    case 0: bad = df_cli_size(s, k, &d->mem) || d->mem == 0; break;
    case 1: bad = parse_rate(s, k, &d->disk_gbps); break;
    case 2: bad = parse_rate(s, k, &d->link_gbitps); break;
    case 3: bad = k && (parse_num(s, k, 1e-3, 1e6, &d->mem_gbps)); break;
    case 4: bad = df_cli_size(s, k, &d->disk_bytes); break;
    default: bad = 1;
    }
    *which = field + 1;
    if (bad) return -1;
    if (!s[k]) break;
    s += k + 1;
  }
  if (field < 2) *which = 0;
  return field >= 2 ? 0 : -1;
}

static const char *role(int i) { return i == 0 ? "coordinator" : "node"; }

static void print_placement(const df_plan *p, const df_plan_node *nodes, const df_plan_model *m) {
  printf("\nplacement (GiB)\n");
  printf("  %-15s %8s %6s %6s %7s %15s %7s %19s %19s\n", "machine", "RAM", "mem", "disk", "link",
         "resident", "state", "experts in RAM", "experts on disk");
  printf("  %-15s %8s %6s %6s %7s %15s %7s %19s %19s\n", "", "", "GB/s", "GB/s", "Gbit/s",
         "RAM+disk", "", "GiB (pairs)", "GiB (pairs)");
  for (int i = 0; i < p->n_nodes; i++) {
    const df_plan_node_out *o = &p->node[i];
    char res[32] = "-", st[16] = "-", link[16] = "-", disk[16] = "-", er[32], ed[32];
    if (i == 0) {
      snprintf(res, sizeof res, "%.3f%s", gib((double)o->resident_ram),
               o->resident_disk ? "+" : "");
      if (o->resident_disk)
        snprintf(res + strlen(res), sizeof res - strlen(res), "%.3f", gib((double)o->resident_disk));
      snprintf(st, sizeof st, "%.3f", gib((double)o->state));
    }
    if (nodes[i].link_gbitps > 0) snprintf(link, sizeof link, "%g", nodes[i].link_gbitps);
    if (nodes[i].disk_gbps > 0) snprintf(disk, sizeof disk, "%g", nodes[i].disk_gbps);
    snprintf(er, sizeof er, "%.3f (%lld)", gib((double)o->pairs_ram * (double)m->pair_bytes),
             (long long)o->pairs_ram);
    snprintf(ed, sizeof ed, "%.3f (%lld)", gib((double)o->pairs_disk * (double)m->pair_bytes),
             (long long)o->pairs_disk);
    char name[24];
    snprintf(name, sizeof name, "%d %s", i + 1, role(i));
    printf("  %-15s %8.1f %6g %6s %7s %15s %7s %19s %19s\n", name, gib((double)nodes[i].mem),
           nodes[i].mem_gbps, disk, link, res, st, er, ed);
  }
}

static void print_costs(const df_plan *p, int mode) {
  double tpf = p->tokens_per_forward[mode];
  if (mode == 0)
    printf("\nper token, target alone (1 row per forward)\n");
  else
    printf("\nper token, speculative (%lld rows per verify forward, %.2f tokens per forward)\n",
           (long long)p->rows[mode], tpf);
  printf("  %-15s %11s %11s %13s %12s %9s %6s\n", "machine", "memory GB", "disk GB",
         "network MB", "round trips", "busy s", "share");
  for (int i = 0; i < p->n_nodes; i++) {
    const df_plan_node_out *o = &p->node[i];
    char name[24];
    snprintf(name, sizeof name, "%d %s", i + 1, role(i));
    printf("  %-15s %11.3f %11.3f %13.3f %12.2f %9.3f %5.1f%%\n", name,
           o->mem_read[mode] / tpf / 1e9, o->disk_read[mode] / tpf / 1e9,
           o->net_bytes[mode] / tpf / 1e6, o->round_trips[mode] / tpf, o->busy_s[mode] / tpf,
           100.0 * o->busy_s[mode] / p->forward_s[mode]);
  }
  printf("  forward %.3f s = coordinator's serial part %.3f s + MoE layers %.3f s (round-trip "
         "latency %.3f s)\n", p->forward_s[mode], p->coord_serial_s[mode], p->experts_s[mode],
         p->latency_s[mode]);
  printf("  predicted      %.*f s/token  (%.3f tok/s)\n", p->s_per_token[mode] < 0.1 ? 6 : 3,
         p->s_per_token[mode], 1.0 / p->s_per_token[mode]);
}

static json_t *costs_json(const df_plan *p, const df_plan_node_out *o, int mode) {
  double tpf = p->tokens_per_forward[mode];
  return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "memory_bytes", o->mem_read[mode] / tpf,
                   "disk_bytes", o->disk_read[mode] / tpf, "network_bytes",
                   o->net_bytes[mode] / tpf, "round_trips", o->round_trips[mode] / tpf,
                   "busy_s", o->busy_s[mode] / tpf, "share",
                   p->forward_s[mode] > 0 ? o->busy_s[mode] / p->forward_s[mode] : 0.0);
}

static void print_json(const char *dir, const char *type, const df_plan *p,
                       const df_plan_node *nodes, const df_plan_model *m, const df_plan_opts *po,
                       int64_t ctx) {
  json_t *root = json_object(), *mach = json_array();
  json_object_set_new(root, "model", json_string(dir));
  json_object_set_new(root, "type", json_string(type));
  json_object_set_new(root, "feasible", json_boolean(p->feasible));
  json_object_set_new(root, "resident_bytes", json_integer((json_int_t)m->resident_bytes));
  json_object_set_new(root, "resident_read_bytes", json_integer((json_int_t)m->resident_read));
  json_object_set_new(root, "state_bytes", json_integer((json_int_t)m->state_bytes));
  json_object_set_new(root, "state_read_bytes", json_integer((json_int_t)m->state_read));
  json_object_set_new(root, "experts",
                      json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "moe_layers",
                                (json_int_t)m->n_moe_layers, "per_layer", (json_int_t)m->n_experts,
                                "top_k", (json_int_t)m->top_k, "pairs", (json_int_t)p->pairs,
                                "pair_bytes", (json_int_t)m->pair_bytes, "bytes_per_token_row",
                                (json_int_t)p->expert_bytes_token, "row_width", (json_int_t)m->width));
  json_object_set_new(root, "assumptions",
                      json_pack("{s:I, s:f, s:I, s:f, s:I}", "reserve_bytes",
                                (json_int_t)po->reserve, "rtt_s", po->rtt_s, "draft_k",
                                (json_int_t)po->draft_k, "accept", po->accept, "ctx",
                                (json_int_t)ctx));
  for (int i = 0; i < p->n_nodes; i++) {
    const df_plan_node_out *o = &p->node[i];
    json_t *n = json_pack(
        "{s:s, s:I, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "role", role(i),
        "mem_bytes", (json_int_t)nodes[i].mem, "mem_gbps", nodes[i].mem_gbps, "disk_gbps",
        nodes[i].disk_gbps, "link_gbitps", nodes[i].link_gbitps, "avail_bytes",
        (json_int_t)o->avail, "resident_ram_bytes", (json_int_t)o->resident_ram,
        "resident_disk_bytes", (json_int_t)o->resident_disk, "state_bytes", (json_int_t)o->state,
        "pairs_ram", (json_int_t)o->pairs_ram, "pairs_disk", (json_int_t)o->pairs_disk,
        "experts_ram_bytes", (json_int_t)((uint64_t)o->pairs_ram * m->pair_bytes),
        "experts_disk_bytes", (json_int_t)((uint64_t)o->pairs_disk * m->pair_bytes));
    if (p->feasible) {
      json_object_set_new(n, "per_token", costs_json(p, o, 0));
      json_object_set_new(n, "per_token_speculative", costs_json(p, o, 1));
    }
    json_array_append_new(mach, n);
  }
  json_object_set_new(root, "machines", mach);
  if (p->feasible)
    for (int mode = 0; mode < 2; mode++)
      json_object_set_new(root, mode ? "speculative" : "target_alone",
                          json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "rows",
                                    (json_int_t)p->rows[mode], "tokens_per_forward",
                                    p->tokens_per_forward[mode], "forward_s", p->forward_s[mode],
                                    "coordinator_serial_s", p->coord_serial_s[mode], "moe_layers_s",
                                    p->experts_s[mode], "latency_s", p->latency_s[mode],
                                    "s_per_token", p->s_per_token[mode], "tok_per_s",
                                    1.0 / p->s_per_token[mode]));
  json_object_set_new(root, "shortfall",
                      json_pack("{s:I, s:I, s:I}", "coordinator_bytes",
                                (json_int_t)p->coord_short, "experts_bytes",
                                (json_int_t)p->expert_short, "pairs_unheld",
                                (json_int_t)p->pairs_unheld));
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
  if (s) printf("%s\n", s);
  free(s);
  json_decref(root);
}

enum { O_MODEL = 1, O_NODE, O_ACCEPT, O_DRAFTK, O_MEMBW, O_RTT, O_RESERVE, O_CTX, O_JSON, O_HELP };

int df_cmd_plan(int argc, char **argv) {
  static const struct option opts[] = {
      {"model", required_argument, 0, O_MODEL},     {"node", required_argument, 0, O_NODE},
      {"accept", required_argument, 0, O_ACCEPT},   {"draft-k", required_argument, 0, O_DRAFTK},
      {"mem-bw", required_argument, 0, O_MEMBW},    {"rtt-ms", required_argument, 0, O_RTT},
      {"reserve", required_argument, 0, O_RESERVE}, {"ctx", required_argument, 0, O_CTX},
      {"json", no_argument, 0, O_JSON},             {"help", no_argument, 0, O_HELP},
      {0, 0, 0, 0}};
  df_plan_node nodes[PLAN_MAX_NODES];
  int n_nodes = 0;
  const char *dir = NULL;
  double accept = PLAN_DEFAULT_ACCEPT, mem_bw = PLAN_DEFAULT_MEM_GBPS, rtt_ms = PLAN_DEFAULT_RTT_MS;
  int64_t draft_k = PLAN_DEFAULT_DRAFT_K, ctx = PLAN_DEFAULT_CTX;
  uint64_t reserve = PLAN_DEFAULT_RESERVE;
  bool json = false, accept_set = false;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case O_MODEL: dir = optarg; break;
    case O_NODE:
      int which = 0;
      if (n_nodes == PLAN_MAX_NODES || parse_node(optarg, &nodes[n_nodes], &which) != 0) {
        static const char *const field[] = {
            "too few fields", "MEM (a size > 0, e.g. 128G)",
            "DISK_GBPS (0 or 0.001 .. 1e6 GB/s)", "LINK_GBITPS (0 or 0.001 .. 1e6 Gbit/s)",
            "MEM_GBPS (0.001 .. 1e6 GB/s)", "DISK_SIZE (a size)", "too many fields"};
        fprintf(stderr, "deltafin plan: --node: expected MEM,DISK_GBPS,LINK_GBITPS[,MEM_GBPS"
                "[,DISK_SIZE]] like 128G,3.5,10 (at most %d machines), got '%s'%s%s\n",
                PLAN_MAX_NODES, optarg, n_nodes == PLAN_MAX_NODES ? "" : ": bad ",
                n_nodes == PLAN_MAX_NODES ? "" : field[which < 6 ? which : 6]);
        return 2;
      }
      n_nodes++;
      break;
    case O_ACCEPT: if (df_cli_double("accept", optarg, 0, 1024, &accept)) return 2; accept_set = true; break;
    case O_DRAFTK: if (df_cli_int("draft-k", optarg, 1, 1024, &draft_k)) return 2; break;
    case O_MEMBW: if (df_cli_double("mem-bw", optarg, 1e-3, 1e6, &mem_bw)) return 2; break;
    case O_RTT: if (df_cli_double("rtt-ms", optarg, 0, 1e6, &rtt_ms)) return 2; break;
    case O_RESERVE:
      if (df_cli_size(optarg, strlen(optarg), &reserve) != 0) {
        fprintf(stderr, "deltafin plan: --reserve: expected a size like 4G, got '%s'\n", optarg);
        return 2;
      }
      break;
    case O_CTX: if (df_cli_int("ctx", optarg, 1, 1 << 24, &ctx)) return 2; break;
    case O_JSON: json = true; break;
    case O_HELP: plan_usage(stdout); return 0;
    default:
      fprintf(stderr, "deltafin plan: unknown or incomplete option '%s'\n", argv[optind - 1]);
      plan_usage(stderr);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "deltafin plan: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (!dir || !n_nodes) {
    fprintf(stderr, "deltafin plan: --model DIR and at least one --node are required\n");
    plan_usage(stderr);
    return 2;
  }
  if (accept > (double)draft_k) {
    fprintf(stderr, "deltafin plan: --accept %g is more than --draft-k %lld%s\n", accept,
            (long long)draft_k, accept_set ? "" : " (the default --accept)");
    return 2;
  }
  for (int i = 0; i < n_nodes; i++) {
    if (!(nodes[i].mem_gbps > 0)) nodes[i].mem_gbps = mem_bw;
    if (n_nodes > 1 && !(nodes[i].link_gbitps > 0)) {
      fprintf(stderr, "deltafin plan: --node %d: link 0 Gbit/s, but %d machines must talk over a "
              "network\n", i + 1, n_nodes);
      return 2;
    }
  }

  char err[1024];
  df_model *mdl = NULL;
  df_model_opts mo = {.max_ctx = 1, .max_rows = draft_k + 1};
  if (df_model_load(dir, &mo, &mdl, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin: %s\n", err);
    return 1;
  }
  const df_model_config *cfg = df_model_cfg(mdl);
  df_model_bytes b = df_model_memory(mdl);
  int64_t n_moe = 0;
  for (int64_t l = 0; l < cfg->num_hidden_layers; l++) n_moe += cfg->is_moe_layer[l];
  df_plan_model m = {0};
  if (n_moe > 0 && cfg->num_experts > 0) {
    m.n_moe_layers = n_moe;
    m.n_experts = cfg->num_experts;
    m.top_k = cfg->num_experts_per_tok;
    m.pair_bytes = b.experts / (uint64_t)(n_moe * cfg->num_experts);
    m.width = cfg->latent_dim > 0 ? cfg->latent_dim : cfg->hidden_size;
  }
  m.resident_bytes = b.resident;
  /* df_model_memory's decode traffic: the resident part without the embedding table's unread
   * rows, plus top-k experts of every MoE layer */
  uint64_t ex_tok = (uint64_t)m.n_moe_layers * (uint64_t)m.top_k * m.pair_bytes;
  m.resident_read = b.active_per_token > ex_tok ? b.active_per_token - ex_tok : 0;
  if (m.resident_read > m.resident_bytes) m.resident_read = m.resident_bytes;
  m.shared_read = b.shared_experts <= m.resident_read ? b.shared_experts : 0;
  uint64_t kv_seq = df_model_kv_bytes_per_seq(mdl), kv_tok = df_model_kv_bytes_per_token(mdl);
  m.state_read = kv_seq + (uint64_t)ctx * kv_tok;
  m.state_bytes = m.state_read + b.buffers;
  char type[64];
  snprintf(type, sizeof type, "%s", cfg->model_type);
  df_model_destroy(&mdl);

  df_plan_opts po = {.reserve = reserve, .rtt_s = rtt_ms * 1e-3, .draft_k = draft_k,
                     .accept = accept};
  df_plan p;
  if (df_plan_compute(&m, nodes, n_nodes, &po, &p, err, sizeof err) != 0) {
    fprintf(stderr, "deltafin %s\n", err);
    return 2;
  }
  if (json) {
    print_json(dir, type, &p, nodes, &m, &po, ctx);
  } else {
    printf("model        %s (%s)\n", dir, type);
    printf("resident     %llu bytes (%.3f GiB) held by the coordinator; %.3f GiB read per "
           "forward\n", (unsigned long long)m.resident_bytes, gib((double)m.resident_bytes),
           gib((double)m.resident_read));
    if (m.n_moe_layers)
      printf("experts      %lld pairs (%lld MoE layers x %lld) of %llu bytes = %.3f GiB; top-%lld: "
             "%.3f GiB per token row\n", (long long)p.pairs, (long long)m.n_moe_layers,
             (long long)m.n_experts, (unsigned long long)m.pair_bytes,
             gib((double)p.pairs * (double)m.pair_bytes), (long long)m.top_k,
             gib(p.expert_bytes_token));
    else
      printf("experts      none (a dense model: everything is the resident part)\n");
    printf("state        %.3f GiB on the coordinator (per-sequence state %.3f GiB + %llu bytes "
           "x %lld tokens of context + buffers)\n", gib((double)m.state_bytes), gib((double)kv_seq),
           (unsigned long long)kv_tok, (long long)ctx);
    printf("assumptions  memory %g GB/s unless a --node says, round trip %g ms, reserve %.1f GiB "
           "per machine, draft k=%lld accepting %.2f\n", mem_bw, rtt_ms, gib((double)reserve),
           (long long)draft_k, accept);
    print_placement(&p, nodes, &m);
    if (p.feasible) {
      print_costs(&p, 0);
      print_costs(&p, 1);
      int prec = p.s_per_token[1] < 0.1 || p.s_per_token[0] < 0.1 ? 6 : 3;
      printf("\nspeculation: %.*f s/token against %.*f alone (%.2fx)\n", prec, p.s_per_token[1],
             prec, p.s_per_token[0], p.s_per_token[0] / p.s_per_token[1]);
    }
  }
  int rc = 0;
  if (!p.feasible) {
    rc = 1;
    if (p.coord_short) {
      char disk[48];
      if (nodes[0].disk_gbps > 0 && nodes[0].disk_bytes != UINT64_MAX)
        snprintf(disk, sizeof disk, "a %.1f GiB disk", gib((double)nodes[0].disk_bytes));
      else
        snprintf(disk, sizeof disk, "%s", nodes[0].disk_gbps > 0 ? "its disk" : "no disk");
      fprintf(stderr, "deltafin plan: infeasible: the coordinator (%.1f GiB RAM less the %.1f GiB "
              "reserve, %s) cannot hold the resident part (%.3f GiB) and the sequence state "
              "(%.3f GiB, in RAM): short by %.3f GiB\n", gib((double)nodes[0].mem),
              gib((double)reserve), disk, gib((double)m.resident_bytes),
              gib((double)m.state_bytes), gib((double)p.coord_short));
    }
    if (p.expert_short)
      fprintf(stderr, "deltafin plan: infeasible: the machines' RAM and disks hold %.3f of %.3f "
              "GiB of routed experts: short by %.3f GiB (%lld of %lld pairs)\n",
              gib((double)(p.pairs - p.pairs_unheld) * (double)m.pair_bytes),
              gib((double)p.pairs * (double)m.pair_bytes), gib((double)p.expert_short),
              (long long)p.pairs_unheld, (long long)p.pairs);
  }
  df_plan_free(&p);
  return rc;
}
