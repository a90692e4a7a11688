/* coordinator/cluster/cluster_place.c — deterministic budget-proportional placement; see
 * cluster_place.h. */
#include "coordinator/cluster/cluster_place.h"

#include <stdbool.h>
#include <stdlib.h>

/* The node with room whose (taken[i] + 1) / budget[i] is lowest, skipping `skip`; -1 if none.
 * Compared exactly: (a+1) * b_j < (b+1) * b_i in 128-bit. */
static int pick(int n, const uint64_t *budgets, const int64_t *taken, const int64_t *room, int skip) {
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (i == skip || room[i] <= 0 || budgets[i] == 0) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    unsigned __int128 lhs = (unsigned __int128)(uint64_t)(taken[i] + 1) * budgets[best];
    unsigned __int128 rhs = (unsigned __int128)(uint64_t)(taken[best] + 1) * budgets[i];
    if (lhs < rhs) best = i;
  }
  return best;
}

/* Hottest first: heat descending, ties lower index (C11 qsort has no context argument). */
typedef struct hot {
  uint64_t heat;
  int64_t p;
} hot;

static int cmp_hot(const void *a, const void *b) {
  const hot *x = a, *y = b;
  if (x->heat != y->heat) return x->heat > y->heat ? -1 : 1;
  return x->p < y->p ? -1 : x->p > y->p;
}

int64_t df_cluster_place(int64_t n_pairs, uint64_t pair_bytes, int n_nodes, const uint64_t *budgets,
                         int replicas, int32_t *primary, int32_t *replica) {
  return df_cluster_place_hot(n_pairs, pair_bytes, n_nodes, budgets, NULL, NULL, replicas, primary,
                              replica);
}

int64_t df_cluster_place_hot(int64_t n_pairs, uint64_t pair_bytes, int n_nodes,
                             const uint64_t *budgets, const uint64_t *device, const uint64_t *heat,
                             int replicas, int32_t *primary, int32_t *replica) {
  if (pair_bytes == 0) pair_bytes = 1;
  size_t nn = (size_t)(n_nodes > 0 ? n_nodes : 1);
  int64_t *taken = calloc(nn, sizeof *taken);
  int64_t *room = calloc(nn, sizeof *room);
  int64_t *dtaken = calloc(nn, sizeof *dtaken);
  int64_t *droom = calloc(nn, sizeof *droom);
  uint64_t *dev = calloc(nn, sizeof *dev);
  hot *order = NULL;
  int64_t placed = 0;
  bool any_dev = false;
  for (int64_t p = 0; p < n_pairs; p++) {
    primary[p] = -1;
    if (replica) replica[p] = -1;
  }
  if (!taken || !room || !dtaken || !droom || !dev)
    goto done; /* out of memory: everything stays with the coordinator */
  for (int i = 0; i < n_nodes; i++) {
    uint64_t slots = budgets[i] / pair_bytes;
    room[i] = slots > (uint64_t)n_pairs ? n_pairs : (int64_t)slots;
    dev[i] = device && device[i] < budgets[i] ? device[i] : device ? budgets[i] : 0;
    uint64_t ds = dev[i] / pair_bytes;
    droom[i] = ds > (uint64_t)room[i] ? room[i] : (int64_t)ds;
    if (droom[i] > 0) any_dev = true;
  }
  if (any_dev && n_pairs > 0) { /* the hottest pairs to the device nodes, up to their budgets */
    if (!(order = malloc((size_t)n_pairs * sizeof *order))) goto done;
    for (int64_t p = 0; p < n_pairs; p++) order[p] = (hot){heat ? heat[p] : 0, p};
    qsort(order, (size_t)n_pairs, sizeof *order, cmp_hot);
    for (int64_t k = 0; k < n_pairs; k++) {
      int i = pick(n_nodes, dev, dtaken, droom, -1);
      if (i < 0) break;
      int64_t p = order[k].p;
      primary[p] = i;
      dtaken[i]++;
      droom[i]--;
      taken[i]++;
      room[i]--;
      placed++;
    }
  }
  for (int64_t p = 0; p < n_pairs; p++) {
    if (primary[p] >= 0) continue; /* on a device node already */
    int i = pick(n_nodes, budgets, taken, room, -1);
    if (i < 0) break;
    primary[p] = i;
    taken[i]++;
    room[i]--;
    placed++;
  }
  if (replicas && replica)
    for (int64_t p = 0; p < n_pairs; p++) {
      if (primary[p] < 0) continue;
      int i = pick(n_nodes, budgets, taken, room, primary[p]);
      if (i < 0) continue;
      replica[p] = i;
      taken[i]++;
      room[i]--;
    }
done:
  free(taken);
  free(room);
  free(dtaken);
  free(droom);
  free(dev);
  free(order);
  return placed;
}
