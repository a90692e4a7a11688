/* coordinator/cluster/cluster_status.c — the board a cluster manager publishes its snapshots
 * on, and the status file written from the current one; see cluster_status.h.
 */
#define _GNU_SOURCE
#include "coordinator/cluster/cluster_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transport/codec.h"
#include "transport/keys.h"

_Static_assert(sizeof(((df_cluster_node_info *)0)->name) > DF_PROTO_MAX_NAME,
               "a node name fits df_cluster_node_info.name");

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void df_cluster_snapshot_destroy(df_cluster_snapshot **sp) {
  if (!sp || !*sp) return;
  df_cluster_snapshot *s = *sp;
  for (int i = 0; i < s->n_nodes; i++) free(s->nodes[i].placement);
  free(s->nodes);
  free(s->holder);
  free(s->heat);
  free(s);
  *sp = NULL;
}

/* A deep copy of s (NULL when out of memory). */
static df_cluster_snapshot *snapshot_copy(const df_cluster_snapshot *s) {
  df_cluster_snapshot *d = malloc(sizeof *d);
  if (!d) return NULL;
  *d = *s;
  d->nodes = NULL;
  d->holder = NULL;
  d->heat = NULL;
  d->n_nodes = 0;
  size_t grid = s->holder ? (size_t)(s->n_layers * s->n_experts) : 0;
  if ((s->n_nodes && !(d->nodes = calloc((size_t)s->n_nodes, sizeof *d->nodes))) ||
      (grid && (!(d->holder = malloc(grid * sizeof *d->holder)) ||
                !(d->heat = malloc(grid * sizeof *d->heat)))))
    goto fail;
  if (grid) {
    memcpy(d->holder, s->holder, grid * sizeof *d->holder);
    memcpy(d->heat, s->heat, grid * sizeof *d->heat);
  }
  for (int i = 0; i < s->n_nodes; i++) {
    d->nodes[i] = s->nodes[i];
    d->nodes[i].placement = strdup(s->nodes[i].placement ? s->nodes[i].placement : "");
    d->n_nodes = i + 1;
    if (!d->nodes[i].placement) goto fail;
  }
  return d;
fail:
  df_cluster_snapshot_destroy(&d);
  return NULL;
}

int df_cluster_board_init(df_cluster_board *b) {
  memset(b, 0, sizeof *b);
  atomic_init(&b->wanted_ms, INT64_MIN / 2);
  if (pthread_mutex_init(&b->mu, NULL) != 0) return -1;
  b->mu_init = true;
  return 0;
}

void df_cluster_board_destroy(df_cluster_board *b) {
  if (!b) return;
  df_cluster_snapshot_destroy(&b->snap);
  if (b->mu_init) pthread_mutex_destroy(&b->mu);
  b->mu_init = false;
}

void df_cluster_board_publish(df_cluster_board *b, df_cluster_snapshot *s) {
  if (!s) return;
  pthread_mutex_lock(&b->mu);
  df_cluster_snapshot *old = b->snap;
  b->snap = s;
  pthread_mutex_unlock(&b->mu);
  df_cluster_snapshot_destroy(&old);
}

int df_cluster_board_get(df_cluster_board *b, df_cluster_snapshot **out) {
  *out = NULL;
  if (!b || !b->mu_init) return -1;
  atomic_store(&b->wanted_ms, (long long)mono_ms());
  pthread_mutex_lock(&b->mu);
  if (b->snap) *out = snapshot_copy(b->snap);
  pthread_mutex_unlock(&b->mu);
  return *out ? 0 : -1;
}

bool df_cluster_board_wanted(const df_cluster_board *b, int64_t within_ms) {
  return mono_ms() - (int64_t)atomic_load(&b->wanted_ms) < within_ms;
}

void df_cluster_board_write(df_cluster_board *b, const char *path) {
  char *buf = NULL;
  size_t len = 0;
  pthread_mutex_lock(&b->mu); /* only this thread replaces it: held for the formatting */
  const df_cluster_snapshot *s = b->snap;
  FILE *f = s ? open_memstream(&buf, &len) : NULL;
  if (!f) {
    pthread_mutex_unlock(&b->mu);
    return;
  }
  /* the deltafin subcommand this coordinator runs under (argv[1]: "run", "serve"), for
   * `deltafin cluster status`; kept to [a-z0-9-] */
  char cmd[16] = "", args[256] = "";
  FILE *cl = fopen("/proc/self/cmdline", "rb");
  if (cl) {
    size_t n = fread(args, 1, sizeof args - 1, cl), o = 0;
    fclose(cl);
    args[n] = 0;
    const char *a = strlen(args) + 1 < n ? args + strlen(args) + 1 : "";
    for (; *a && o + 1 < sizeof cmd; a++)
      if ((*a >= 'a' && *a <= 'z') || (*a >= '0' && *a <= '9') || *a == '-') cmd[o++] = *a;
    cmd[o] = 0;
  }
  fprintf(f, "{\n  \"pid\": %d,\n  \"command\": \"%s\",\n  \"updated\": %lld,\n  \"endpoint\": \"%s\",\n  \"key_fingerprint\": \"%s\",\n",
          (int)getpid(), cmd, (long long)(s->updated_unix_ms / 1000), s->endpoint,
          s->key_fingerprint);
  fprintf(f, "  \"pairs\": %lld,\n  \"pairs_on_coordinator\": %lld,\n  \"pair_bytes\": %llu,\n",
          (long long)s->pairs, (long long)s->pairs_on_coordinator,
          (unsigned long long)s->pair_bytes);
  fprintf(f, "  \"dispatches\": %llu,\n  \"round_trips\": %llu,\n  \"bytes_tx\": %llu,\n  \"bytes_rx\": %llu,\n"
          "  \"groups_rerun\": %llu,\n  \"nodes\": [",
          (unsigned long long)s->dispatches, (unsigned long long)s->round_trips,
          (unsigned long long)s->bytes_tx, (unsigned long long)s->bytes_rx,
          (unsigned long long)s->groups_rerun);
  for (int i = 0; i < s->n_nodes; i++) {
    const df_cluster_node_info *n = &s->nodes[i];
    fprintf(f, "%s\n    {\"name\": \"", i ? "," : "");
    for (const char *q = n->name; *q; q++)
      if (*q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) fputc(*q, f);
    fprintf(f, "\", \"key_fingerprint\": \"%s\", \"health\": \"%s\", \"rtt_us\": %lld, "
            "\"budget\": %llu, \"device\": %llu, \"held\": %llu, \"experts\": %lld, "
            "\"routed\": %lld, \"served\": %llu, \"round_trips\": %llu, \"placement\": \"%s\"}",
            n->key_fingerprint, n->health, (long long)n->rtt_us, (unsigned long long)n->budget,
            (unsigned long long)n->device, (unsigned long long)n->held, (long long)n->experts,
            (long long)n->routed, (unsigned long long)n->served,
            (unsigned long long)n->round_trips, n->placement ? n->placement : "");
  }
  fprintf(f, "\n  ]\n}\n");
  pthread_mutex_unlock(&b->mu);
  if (fclose(f) != 0) {
    free(buf);
    return;
  }
  char err[256];
  df_proto_write_atomic(path, buf, len, 0600, err, sizeof err);
  free(buf);
}
