/* coordinator/cluster_place.c — deterministic budget-proportional placement; see
 * cluster_place.h. */
#include "coordinator/cluster_place.h"

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

int64_t df_cluster_place(int64_t n_pairs, uint64_t pair_bytes, int n_nodes, const uint64_t *budgets,
                         int replicas, int32_t *primary, int32_t *replica) {
  if (pair_bytes == 0) pair_bytes = 1;
  int64_t *taken = calloc((size_t)(n_nodes > 0 ? n_nodes : 1), sizeof *taken);
  int64_t *room = calloc((size_t)(n_nodes > 0 ? n_nodes : 1), sizeof *room);
  int64_t placed = 0;
  for (int64_t p = 0; p < n_pairs; p++) {
    primary[p] = -1;
    if (replica) replica[p] = -1;
  }
  if (!taken || !room) goto done; /* out of memory: everything stays with the coordinator */
  for (int i = 0; i < n_nodes; i++) {
    uint64_t slots = budgets[i] / pair_bytes;
    room[i] = slots > (uint64_t)n_pairs ? n_pairs : (int64_t)slots;
  }
  for (int64_t p = 0; p < n_pairs; p++) {
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
  return placed;
}
