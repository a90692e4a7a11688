/* tests/test_plan_model.c — the planning cost model (coordinator/cluster/plan_model.h) on
 * hand-computed numbers: one machine with everything in RAM (1 row and 4 rows per forward), two
 * machines over a network (placement by the cluster's rule, network bytes, round trips,
 * latency), a coordinator that streams part of its resident part and every expert from disk,
 * infeasible machines with their shortfalls, disks filled in proportion to their bandwidth,
 * the hypergeometric miss probability, and bad input refused.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "coordinator/cluster/plan_model.h"

#define NEAR(a, b) assert_true(fabs((double)(a) - (double)(b)) <= 1e-9 * (1.0 + fabs((double)(b))))

/* One machine, 100 GB RAM at 10 GB/s; resident 10 GB (8 GB read per forward), state 1 GB;
 * 2 MoE layers x 8 experts of 1 GB, top-2. Everything fits in RAM. */
static void test_one_machine_in_ram(void **st) {
  (void)st;
  df_plan_model m = {.resident_bytes = 10000000000ull, .resident_read = 8000000000ull,
                     .state_bytes = 1000000000ull, .state_read = 1000000000ull,
                     .n_moe_layers = 2, .n_experts = 8, .top_k = 2, .pair_bytes = 1000000000ull,
                     .width = 1000};
  df_plan_node n = {.mem = 100000000000ull, .mem_gbps = 10, .disk_bytes = UINT64_MAX};
  df_plan_opts o = {.reserve = 0, .rtt_s = 0.001, .draft_k = 3, .accept = 2.0};
  df_plan p;
  char err[256];
  assert_int_equal(df_plan_compute(&m, &n, 1, &o, &p, err, sizeof err), 0);
  assert_true(p.feasible);
  assert_int_equal(p.pairs, 16);
  assert_int_equal(p.node[0].pairs_ram, 16);
  assert_int_equal(p.node[0].pairs_disk, 0);
  assert_int_equal(p.node[0].resident_ram, 10000000000ull);
  assert_int_equal(p.node[0].resident_disk, 0);
  NEAR(p.expert_bytes_token, 2 * 2 * 1e9);
  /* 1 row: serial (8 + 1) GB / 10 GB/s = 0.9 s; each layer uses 8 x 2/8 = 2 GB: 0.2 s */
  NEAR(p.coord_serial_s[0], 0.9);
  NEAR(p.experts_s[0], 0.4);
  NEAR(p.forward_s[0], 1.3);
  NEAR(p.s_per_token[0], 1.3);
  NEAR(p.node[0].mem_read[0], 13e9);
  NEAR(p.node[0].net_bytes[0], 0);
  NEAR(p.latency_s[0], 0);
  /* 4 rows: a pair is used with probability 1 - (3/4)^4 = 0.68359375: 5.46875 GB a layer */
  assert_int_equal(p.rows[1], 4);
  NEAR(p.experts_s[1], 2 * 0.546875);
  NEAR(p.forward_s[1], 0.9 + 1.09375);
  NEAR(p.tokens_per_forward[1], 3.0);
  NEAR(p.s_per_token[1], (0.9 + 1.09375) / 3.0);
  NEAR(p.node[0].busy_s[1], p.forward_s[1]);
  df_plan_free(&p);
  assert_null(p.node);
}

/* Two machines on 8 Gbit/s (1 GB/s): the coordinator (12 GB, 10 GB/s) keeps the 10 GB resident
 * part and 2 GB of experts, the node (2 GB, 5 GB/s) 2 GB; 1 MoE layer x 4 experts of 1 GB,
 * top-1, rows of 1e6 fp32 values (4 MB); round trip 1 ms. */
static void test_two_machines(void **st) {
  (void)st;
  df_plan_model m = {.resident_bytes = 10000000000ull, .resident_read = 8000000000ull,
                     .n_moe_layers = 1, .n_experts = 4, .top_k = 1, .pair_bytes = 1000000000ull,
                     .width = 1000000};
  df_plan_node n[2] = {
      {.mem = 12000000000ull, .mem_gbps = 10, .link_gbitps = 8, .disk_bytes = UINT64_MAX},
      {.mem = 2000000000ull, .mem_gbps = 5, .link_gbitps = 8, .disk_bytes = UINT64_MAX}};
  df_plan_opts o = {.reserve = 0, .rtt_s = 0.001, .draft_k = 1, .accept = 0.5};
  df_plan p;
  char err[256];
  assert_int_equal(df_plan_compute(&m, n, 2, &o, &p, err, sizeof err), 0);
  assert_true(p.feasible);
  /* equal budgets of 2 GB: pairs alternate, coordinator first */
  assert_int_equal(p.node[0].pairs_ram, 2);
  assert_int_equal(p.node[1].pairs_ram, 2);
  /* 1 row: serial 0.8 s; local 2 x 1/4 GB at 10 GB/s = 0.05 s; node 0.5 GB at 5 GB/s = 0.1 s +
   * 1 row x top-1 x 2/4 share x 4 MB x 2 ways = 4 MB at 1 GB/s = 0.004 s; the row reaches the
   * node with probability 1 - C(2,1)/C(4,1) = 0.5: latency 0.5 ms */
  NEAR(p.node[1].net_bytes[0], 4e6);
  NEAR(p.node[0].net_bytes[0], 4e6);
  NEAR(p.node[1].round_trips[0], 0.5);
  NEAR(p.node[1].mem_read[0], 0.5e9);
  NEAR(p.node[1].busy_s[0], 0.104);
  NEAR(p.latency_s[0], 0.0005);
  NEAR(p.forward_s[0], 0.8 + 0.0005 + 0.104);
  NEAR(p.node[0].busy_s[0], 0.8 + 0.05); /* its experts (0.05 s) overlap its link (0.004 s) */
  NEAR(p.node[0].round_trips[0], 0.5);
  /* 2 rows: pair used with 1 - (3/4)^2 = 0.4375; node 0.875 GB / 5 = 0.175 s + 8 MB = 0.008 s;
   * P(any row reaches it) = 1 - 0.5^2 = 0.75 */
  NEAR(p.node[1].round_trips[1], 0.75);
  NEAR(p.node[1].net_bytes[1], 8e6);
  NEAR(p.forward_s[1], 0.8 + 0.00075 + 0.183);
  NEAR(p.s_per_token[1], (0.8 + 0.00075 + 0.183) / 1.5);
  df_plan_free(&p);

  /* a second machine without a link is refused */
  n[1].link_gbitps = 0;
  assert_int_equal(df_plan_compute(&m, n, 2, &o, &p, err, sizeof err), -1);
  assert_non_null(strstr(err, "machine 2"));
}

/* A coordinator of 7 GB (1 GB reserve, 1 GB state) at 10 GB/s with a 2 GB/s disk: 5 GB of the
 * 10 GB resident part in RAM, 5 GB on disk, of which a forward reads 8 - 5 = 3 GB (the unread
 * part is left on disk first); all 4 experts (1 GB, top-2 of 4) read from disk on use. */
static void test_streaming(void **st) {
  (void)st;
  df_plan_model m = {.resident_bytes = 10000000000ull, .resident_read = 8000000000ull,
                     .state_bytes = 1000000000ull, .state_read = 1000000000ull,
                     .n_moe_layers = 1, .n_experts = 4, .top_k = 2, .pair_bytes = 1000000000ull,
                     .width = 10};
  df_plan_node n = {.mem = 7000000000ull, .mem_gbps = 10, .disk_gbps = 2,
                    .disk_bytes = UINT64_MAX};
  df_plan_opts o = {.reserve = 1000000000ull, .rtt_s = 0.0002, .draft_k = 4, .accept = 2.0};
  df_plan p;
  char err[256];
  assert_int_equal(df_plan_compute(&m, &n, 1, &o, &p, err, sizeof err), 0);
  assert_true(p.feasible);
  assert_int_equal(p.node[0].avail, 6000000000ull);
  assert_int_equal(p.node[0].resident_ram, 5000000000ull);
  assert_int_equal(p.node[0].resident_disk, 5000000000ull);
  assert_int_equal(p.node[0].pairs_ram, 0);
  assert_int_equal(p.node[0].pairs_disk, 4);
  /* serial: (5 + 1) GB / 10 + 3 GB / 2 = 2.1 s; experts 4 x 1/2 GB / 2 GB/s = 1.0 s */
  NEAR(p.coord_serial_s[0], 2.1);
  NEAR(p.node[0].disk_read[0], 3e9 + 2e9);
  NEAR(p.forward_s[0], 3.1);
  df_plan_free(&p);
}

/* Too little: shortfalls in bytes, no time figures. */
static void test_infeasible(void **st) {
  (void)st;
  df_plan_model m = {.resident_bytes = 10000000000ull, .resident_read = 8000000000ull,
                     .state_bytes = 1000000000ull, .state_read = 1000000000ull,
                     .n_moe_layers = 1, .n_experts = 4, .top_k = 2, .pair_bytes = 1000000000ull,
                     .width = 10};
  df_plan_node n = {.mem = 8000000000ull, .mem_gbps = 10, .disk_bytes = UINT64_MAX};
  df_plan_opts o = {.reserve = 1000000000ull, .rtt_s = 0.0002, .draft_k = 4, .accept = 2.0};
  df_plan p;
  char err[256];
  /* no disk: 7 GB for 1 GB of state + 10 GB resident: short by 4 GB; experts short by 4 GB */
  assert_int_equal(df_plan_compute(&m, &n, 1, &o, &p, err, sizeof err), 0);
  assert_false(p.feasible);
  assert_int_equal(p.coord_short, 4000000000ull);
  assert_int_equal(p.expert_short, 4000000000ull);
  assert_int_equal(p.pairs_unheld, 4);
  df_plan_free(&p);
  /* a 6 GB disk: the resident part's 4 GB fit, then 2 of the 4 experts */
  n.disk_gbps = 3;
  n.disk_bytes = 6000000000ull;
  assert_int_equal(df_plan_compute(&m, &n, 1, &o, &p, err, sizeof err), 0);
  assert_false(p.feasible);
  assert_int_equal(p.coord_short, 0);
  assert_int_equal(p.node[0].resident_disk, 4000000000ull);
  assert_int_equal(p.node[0].pairs_disk, 2);
  assert_int_equal(p.expert_short, 2000000000ull);
  df_plan_free(&p);
  /* the state itself does not fit in RAM */
  n.mem = 1500000000ull;
  assert_int_equal(df_plan_compute(&m, &n, 1, &o, &p, err, sizeof err), 0);
  assert_false(p.feasible);
  /* 0.5 GB RAM: 0.5 GB of state short, the resident part on disk (6 GB holds 6 of it), 4 short */
  assert_int_equal(p.coord_short, 500000000ull + 4000000000ull);
  df_plan_free(&p);
}

/* Pairs no RAM holds go to the disks, the faster disk taking more in proportion (1:3). */
static void test_disk_balance(void **st) {
  (void)st;
  df_plan_model m = {.n_moe_layers = 2, .n_experts = 4, .top_k = 1, .pair_bytes = 1000, .width = 1};
  df_plan_node n[2] = {{.mem = 4096, .mem_gbps = 1, .disk_gbps = 1, .link_gbitps = 1,
                        .disk_bytes = UINT64_MAX},
                       {.mem = 4096, .mem_gbps = 1, .disk_gbps = 3, .link_gbitps = 1,
                        .disk_bytes = UINT64_MAX}};
  df_plan_opts o = {.reserve = 4096, .draft_k = 1, .accept = 1};
  df_plan p;
  char err[256];
  assert_int_equal(df_plan_compute(&m, n, 2, &o, &p, err, sizeof err), 0);
  assert_true(p.feasible);
  assert_int_equal(p.node[0].pairs_ram + p.node[1].pairs_ram, 0);
  assert_int_equal(p.node[0].pairs_disk, 2);
  assert_int_equal(p.node[1].pairs_disk, 6);
  df_plan_free(&p);
}

static void test_miss_prob(void **st) {
  (void)st;
  NEAR(df_plan_miss_prob(896, 16, 0), 1.0);
  NEAR(df_plan_miss_prob(4, 1, 2), 0.5);
  NEAR(df_plan_miss_prob(10, 3, 2), 56.0 / 120.0); /* C(8,3) / C(10,3) */
  NEAR(df_plan_miss_prob(10, 3, 7), 1.0 / 120.0);
  NEAR(df_plan_miss_prob(10, 3, 8), 0.0);
}

static void test_bad_input(void **st) {
  (void)st;
  df_plan_model m = {.resident_bytes = 1, .resident_read = 1, .n_moe_layers = 1, .n_experts = 4,
                     .top_k = 8, .pair_bytes = 1, .width = 1};
  df_plan_node n = {.mem = 1 << 20, .mem_gbps = 1};
  df_plan_opts o = {.draft_k = 2, .accept = 1};
  df_plan p;
  char err[256];
  assert_int_equal(df_plan_compute(&m, &n, 1, &o, &p, err, sizeof err), -1); /* k > E */
  m.top_k = 2;
  o.accept = 3; /* more than draft_k */
  assert_int_equal(df_plan_compute(&m, &n, 1, &o, &p, err, sizeof err), -1);
  o.accept = 1;
  n.mem_gbps = 0;
  assert_int_equal(df_plan_compute(&m, &n, 1, &o, &p, err, sizeof err), -1);
  n.mem_gbps = 1;
  assert_int_equal(df_plan_compute(&m, &n, 0, &o, &p, err, sizeof err), -1);
  assert_int_equal(df_plan_compute(&m, &n, 1, &o, &p, err, sizeof err), 0);
  df_plan_free(&p);
  df_plan_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_machine_in_ram), cmocka_unit_test(test_two_machines),
      cmocka_unit_test(test_streaming),          cmocka_unit_test(test_infeasible),
      cmocka_unit_test(test_disk_balance),       cmocka_unit_test(test_miss_prob),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
