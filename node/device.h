/* node/device.h — `df-node join --device`: where the experts a node serves are kept.
 *
 * Owns: resolving the --device choice, the memory admission on that device
 * (engine/device/admission.h: the reserve stays free, the activation cap is charged, the rest
 * up to --memory holds experts) and creating the device expert cache (df_tx) the agent
 * (node/node.c) runs served experts through. Does not own: which experts go there (the
 * coordinator sends the hottest first, docs/GPU.md), the expert execution.
 */
#ifndef DF_NODE_DEVICE_H
#define DF_NODE_DEVICE_H

#include <stdint.h>

#include "engine/tensor/torch_shim.h"

/* Set up the device `want` (df-node --device; borrowed) for experts: returns the device
 * expert cache (the caller destroys it with df_tx_destroy) and its budget in *budget (bytes,
 * at most `memory`, the node's --memory budget in bytes), or NULL with *budget = 0 when the
 * experts run on the CPU: --device cpu (silently), or no usable device, its free memory
 * unknown, the admission refusing, or the cache failing (one "df-node: device ..." line on
 * stderr each). work_bytes: the activation buffers the admission charges (bytes). */
df_tx *df_node_device_setup(const df_t_device *want, uint64_t memory, uint64_t work_bytes,
                            uint64_t *budget);

#endif
