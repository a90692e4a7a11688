/* coordinator/cluster/cluster_place.h — expert placement: which node holds which (layer, expert).
 *
 * Owns: the placement rule of docs/PROTOCOL.md §3, as a pure function of the membership
 * (nodes in the caller's order, which is by public key) and their budgets, so the plan is
 * deterministic for the same membership. Does not own: membership, readiness, routing.
 */
#ifndef DF_COORD_CLUSTER_PLACE_H
#define DF_COORD_CLUSTER_PLACE_H

#include <stdint.h>

/* Place n_pairs pairs of pair_bytes bytes each on n_nodes nodes with budgets[i] bytes:
 * node i takes at most floor(budgets[i] / pair_bytes) pairs; pairs go, in index order, to
 * the node with room whose (pairs taken + 1) / budget is lowest (ties: lower index), so
 * every layer's experts spread over the nodes in proportion to their budgets; pairs that
 * fit nowhere get -1 (the coordinator keeps them). With `replicas`, each placed pair also
 * gets a second holder (another node with room left after the primaries, same rule) or -1.
 *   primary [n_pairs], replica [n_pairs] (may be NULL when !replicas): node index or -1.
 * Returns the number of pairs placed on nodes. pair_bytes 0 is treated as 1. */
int64_t df_cluster_place(int64_t n_pairs, uint64_t pair_bytes, int n_nodes, const uint64_t *budgets,
                         int replicas, int32_t *primary, int32_t *replica);

/* The same with device budgets first: device[i] (NULL = all 0) is the part of budgets[i] that
 * node i keeps on a GPU (JOIN `device`; clamped to budgets[i]). Before the rule above, the
 * pairs taken hottest first (heat [n_pairs] routing counts, descending; ties and heat NULL:
 * lower index first — engine/device/admission.h's order) go to the nodes with device room, node i
 * taking at most floor(device[i] / pair_bytes) of them, each to the device node whose
 * (device pairs taken + 1) / device[i] is lowest (ties: lower index); when no device room is
 * left, the remaining pairs are placed by the rule above in index order, the device pairs
 * counting towards their nodes' budgets. Replicas as above. With no device budget the
 * result is exactly df_cluster_place's. Deterministic: a function of its arguments. */
int64_t df_cluster_place_hot(int64_t n_pairs, uint64_t pair_bytes, int n_nodes,
                             const uint64_t *budgets, const uint64_t *device, const uint64_t *heat,
                             int replicas, int32_t *primary, int32_t *replica);

#endif
