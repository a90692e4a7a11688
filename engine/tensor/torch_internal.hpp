// engine/tensor/torch_internal.hpp — what the two C++ files of the tensor layer share; private
// to engine/tensor/ (everything else uses the C API of torch_shim.h).
//
// Owns: the layout of the df_t_tensor handle, row_elems, and the declaration of at_device
// (defined with the devices in torch_shim.cpp) — what torch_shim.cpp (the handle, the CPU
// ops, the oracles, devices) and torch_path.cpp (the torch compute path df_tm_*, the df-node
// device experts df_tx_*) both need. Does not own: any op, weight upload or device state. The
// arrow runs one way: torch_path.cpp builds on torch_shim.cpp (through this header and the C
// API of torch_shim.h); torch_shim.cpp uses nothing of torch_path.cpp. Includes no torch_shim.h
// itself, so that this header stands below both files.
#ifndef DF_ENGINE_TORCH_INTERNAL_HPP
#define DF_ENGINE_TORCH_INTERNAL_HPP

extern "C" {
#include "engine/safetensors.h" // a C header without its own extern "C" guard
}

#include <ATen/ATen.h>

#include <cstdint>

struct df_t_tensor {
  at::Tensor t;
  df_dtype dt;
  bool owned; // memory allocated by the shim (writable)
  // F8_E4M3 weights: block scales [ceil(N/bn), ceil(K/bk)] F32; F4 (MXFP4) weights of
  // logical [N, K]: E8M0 scales [N, K/32] U8 with bn = 1, bk = 32 (not owned); else null
  const df_t_tensor *scale = nullptr;
  int64_t bn = 0, bk = 0;
  // F4: its scales were scanned for the NaN byte 255 and hold none (df_t_mx_scale_check)
  mutable bool mx_checked = false;
};

// Elements per row of a tensor viewed as [rows, row_elems].
inline int64_t row_elems(const df_t_tensor *t) { return t->t.numel() / t->t.size(0); }

struct df_t_device; // torch_shim.h

// The at::Device a df_t_device names: cuda:N, else the CPU (torch_shim.cpp, its devices).
at::Device at_device(const df_t_device *d);

#endif
