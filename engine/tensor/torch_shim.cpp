// engine/tensor/torch_shim.cpp — libtorch tensors behind the C API of torch_shim.h.
//
// Owns: the df_t_tensor handle (an at::Tensor plus its dtype and, for FP8 and MXFP4
// weights, their scales; the struct itself is in torch_internal.hpp), op dispatch to the CPU kernels,
// the float64 libtorch oracles used by tests, and devices (parsing, naming, resolution, fp32
// buffers on a device). Does not own: the torch compute path (df_tm_*) nor the df-node device
// experts (df_tx_*), both in engine/tensor/torch_path.cpp, which builds on this file and never
// the reverse; the mmap (the safetensors loader does), buffer planning and admission
// (engine/model.c, engine/device/admission.c), direct CUDA runtime calls
// (engine/device/cuda_rt.c).
//
// Portability: written against the libtorch API common to 1.13 (Debian's libtorch-dev) and
// 2.x (PyTorch wheels): ATen operators only, no c10::optional spelled out (an alias of
// std::optional in 2.x), torch::cuda::is_available / device_count from <torch/cuda.h> (stable
// since 1.0), and no CUDA header: a CPU-only libtorch compiles this file unchanged.
#include "engine/tensor/torch_internal.hpp"
#include "engine/tensor/torch_shim.h"

#include <ATen/Parallel.h>
#include <omp.h>
#include <torch/cuda.h>

#include <sys/mman.h>

#include <cassert>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

static at::ScalarType to_scalar_type(df_dtype dt, bool *ok) {
  *ok = true;
  switch (dt) {
  case DF_DT_BF16: return at::kBFloat16;
  case DF_DT_F16: return at::kHalf;
  case DF_DT_F32: return at::kFloat;
  case DF_DT_I32: return at::kInt;
  case DF_DT_U8: return at::kByte;
  case DF_DT_F8_E4M3: return at::kByte; // raw bytes; libtorch 1.13 has no float8 type
  case DF_DT_F4: return at::kByte;      // packed pairs, logical shape: see df_t_wrap
  default: *ok = false; return at::kFloat;
  }
}

extern "C" int df_t_set_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  try {
    at::init_num_threads();
    at::set_num_threads(n);
  } catch (const std::exception &) {
    // libtorch refuses to change the count after its pool started; OpenMP still follows.
  }
  omp_set_num_threads(n);
  return df_k_set_threads(n); // this thread's count is not the other threads': see kernels.h
}

extern "C" df_t_tensor *df_t_wrap(const void *data, df_dtype dt, int ndim, const int64_t *shape,
                                  char *err, size_t errlen) {
  bool ok;
  at::ScalarType st = to_scalar_type(dt, &ok);
  if (!ok) {
    snprintf(err, errlen, "dtype %s cannot be wrapped as a tensor (expected BF16, F16, F32, "
             "I32, U8, F8_E4M3, F4)", df_dtype_name(dt));
    return nullptr;
  }
  if (ndim < 1 || ndim > 8) {
    snprintf(err, errlen, "tensor rank %d out of range 1..8", ndim);
    return nullptr;
  }
  if (dt == DF_DT_F4 && (ndim != 2 || shape[0] < 0 || shape[1] < 2 || shape[1] % 2 != 0)) {
    snprintf(err, errlen, "an F4 (MXFP4) tensor must be a 2-D [N, K] weight with K even and "
             "positive, got rank %d%s", ndim, ndim == 2 ? " with an odd or empty K" : "");
    return nullptr;
  }
  try {
    std::vector<int64_t> sizes(shape, shape + ndim);
    auto *h = new df_t_tensor;
    // from_blob never copies nor frees; the tensor is only read through const paths.
    if (dt == DF_DT_F4) // logical [N, K] over the [N, K/2] packed bytes: the column stride 0
      // keeps any at:: read inside the buffer (such reads give no weight values; the kernels
      // decode the packed bytes through df_t_kweight)
      h->t = at::from_blob(const_cast<void *>(data), sizes, {shape[1] / 2, 0},
                           at::TensorOptions().dtype(st));
    else
      h->t = at::from_blob(const_cast<void *>(data), sizes, at::TensorOptions().dtype(st));
    h->dt = dt;
    h->owned = false;
    return h;
  } catch (const std::exception &e) {
    snprintf(err, errlen, "wrapping tensor: %s", e.what());
    return nullptr;
  }
}

extern "C" int df_t_set_block_scale(df_t_tensor *w, const df_t_tensor *scale, int64_t block_n,
                                    int64_t block_k, char *err, size_t errlen) {
  if (w->dt != DF_DT_F8_E4M3 || w->t.dim() != 2) {
    snprintf(err, errlen, "block scales need a 2-D F8_E4M3 weight, got %s of rank %d",
             df_dtype_name(w->dt), (int)w->t.dim());
    return -1;
  }
  if (block_n < 1 || block_k < 1) {
    snprintf(err, errlen, "block size [%lld, %lld] must be positive", (long long)block_n,
             (long long)block_k);
    return -1;
  }
  int64_t gn = (w->t.size(0) + block_n - 1) / block_n, gk = (w->t.size(1) + block_k - 1) / block_k;
  if (!scale || scale->dt != DF_DT_F32 || scale->t.dim() != 2 || scale->t.size(0) != gn ||
      scale->t.size(1) != gk) {
    snprintf(err, errlen, "block scales must be F32 [%lld, %lld] for a [%lld, %lld] weight in "
             "[%lld, %lld] blocks", (long long)gn, (long long)gk, (long long)w->t.size(0),
             (long long)w->t.size(1), (long long)block_n, (long long)block_k);
    return -1;
  }
  w->scale = scale;
  w->bn = block_n;
  w->bk = block_k;
  return 0;
}

extern "C" int df_t_set_mx_scale(df_t_tensor *w, const df_t_tensor *scale, char *err,
                                 size_t errlen) {
  if (w->dt != DF_DT_F4 || w->t.dim() != 2) {
    snprintf(err, errlen, "E8M0 scales need a 2-D F4 (MXFP4) weight, got %s of rank %d",
             df_dtype_name(w->dt), (int)w->t.dim());
    return -1;
  }
  int64_t N = w->t.size(0), K = w->t.size(1);
  if (K % 32 != 0) {
    snprintf(err, errlen, "an MXFP4 weight's row length must be a multiple of 32, got [%lld, "
             "%lld]", (long long)N, (long long)K);
    return -1;
  }
  if (!scale || scale->dt != DF_DT_U8 || scale->t.dim() != 2 || scale->t.size(0) != N ||
      scale->t.size(1) != K / 32) {
    snprintf(err, errlen, "E8M0 scales must be U8 [%lld, %lld] for a [%lld, %lld] MXFP4 weight "
             "(one per 32 columns)", (long long)N, (long long)(K / 32), (long long)N,
             (long long)K);
    return -1;
  }
  w->scale = scale;
  w->bn = 1;
  w->bk = 32;
  return 0;
}

extern "C" const df_t_tensor *df_t_block_scale(const df_t_tensor *w, int64_t *block_n,
                                               int64_t *block_k) {
  if (block_n) *block_n = w->bn;
  if (block_k) *block_k = w->bk;
  return w->scale;
}

extern "C" uint64_t df_t_stored_bytes(const df_t_tensor *w) {
  uint64_t nb = (uint64_t)w->t.numel() * (uint64_t)df_dtype_bits(w->dt) / 8;
  if (w->scale) nb += (uint64_t)w->scale->t.numel() * (uint64_t)df_dtype_size(w->scale->dt);
  return nb;
}

extern "C" int df_t_mx_scale_check(const df_t_tensor *w, int64_t *row, int64_t *group) {
  if (w->dt != DF_DT_F4 || w->mx_checked) return 0;
  int64_t G = w->t.size(1) / 32;
  int64_t at = df_k_mxfp4_find_nan_scale(static_cast<const uint8_t *>(w->scale->t.data_ptr()),
                                         w->t.size(0) * G);
  if (at >= 0) {
    if (row) *row = at / G;
    if (group) *group = at % G;
    return -1;
  }
  w->mx_checked = true;
  return 0;
}

extern "C" df_k_weight df_t_kweight(const df_t_tensor *w) {
  assert(w->t.dim() == 2);
  df_k_weight k = {w->t.data_ptr(), w->dt, w->t.size(1), nullptr, 0, 0, 0};
  if (w->dt == DF_DT_F8_E4M3) {
    assert(w->scale); // bound weights always carry their scales
    k.scale = static_cast<const float *>(w->scale->t.data_ptr());
    k.scale_ld = w->scale->t.size(1);
    k.bn = w->bn;
    k.bk = w->bk;
  } else if (w->dt == DF_DT_F4) {
    assert(w->scale); // df_t_set_mx_scale before use
    k.mx_scale = static_cast<const uint8_t *>(w->scale->t.data_ptr());
    k.scale_ld = w->scale->t.size(1);
    k.bn = w->bn;
    k.bk = w->bk;
  }
  return k;
}

extern "C" df_t_tensor *df_t_new_f32(int ndim, const int64_t *shape, char *err, size_t errlen) {
  if (ndim < 1 || ndim > 8) {
    snprintf(err, errlen, "tensor rank %d out of range 1..8", ndim);
    return nullptr;
  }
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || (shape[i] > 0 && n > INT64_MAX / 4 / shape[i])) {
      snprintf(err, errlen, "tensor shape overflows");
      return nullptr;
    }
    n *= shape[i];
  }
  try {
    std::vector<int64_t> sizes(shape, shape + ndim);
    auto *h = new df_t_tensor;
    size_t bytes = (size_t)n * 4;
    if (bytes >= ((size_t)1 << 20)) {
      /* large buffers (KV caches sized for the whole context, workspaces) from anonymous
       * pages: zero by definition and touched only where written, so a cache costs memory for
       * the positions a sequence reaches, not its whole context at allocation */
      void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        delete h;
        snprintf(err, errlen, "allocating %zu bytes: %s", bytes, strerror(errno));
        return nullptr;
      }
      h->t = at::from_blob(p, sizes, [bytes](void *d) { munmap(d, bytes); },
                           at::TensorOptions().dtype(at::kFloat));
    } else {
      h->t = at::zeros(sizes, at::TensorOptions().dtype(at::kFloat));
    }
    h->dt = DF_DT_F32;
    h->owned = true;
    return h;
  } catch (const std::exception &e) {
    snprintf(err, errlen, "allocating %lld bytes: %s", (long long)(n * 4), e.what());
    return nullptr;
  }
}

extern "C" void df_t_destroy(df_t_tensor **t) {
  if (!t || !*t) return;
  delete *t;
  *t = nullptr;
}

extern "C" df_dtype df_t_dtype(const df_t_tensor *t) { return t->dt; }
extern "C" int df_t_ndim(const df_t_tensor *t) { return (int)t->t.dim(); }
extern "C" int64_t df_t_size(const df_t_tensor *t, int dim) { return t->t.size(dim); }
extern "C" int64_t df_t_numel(const df_t_tensor *t) { return t->t.numel(); }
extern "C" const void *df_t_data(const df_t_tensor *t) { return t->t.data_ptr(); }

extern "C" float *df_t_f32(df_t_tensor *t) {
  assert(t->owned && t->dt == DF_DT_F32);
  return static_cast<float *>(t->t.data_ptr());
}

static const float *cf32(const df_t_tensor *t) {
  assert(t->dt == DF_DT_F32);
  return static_cast<const float *>(t->t.data_ptr());
}

extern "C" void df_t_linear(const df_t_tensor *x, int64_t row0, int64_t rows,
                            const df_t_tensor *w, const df_t_tensor *bias, df_t_tensor *y) {
  int64_t N = w->t.size(0), K = w->t.size(1);
  assert(row_elems(x) == K && row_elems(y) == N);
  assert(row0 + rows <= x->t.size(0) && row0 + rows <= y->t.size(0));
  assert(!bias || (bias->dt == w->dt && bias->t.numel() == N));
  if (w->dt == DF_DT_F8_E4M3 || w->dt == DF_DT_F4) {
    assert(!bias);
    df_k_weight kw = df_t_kweight(w);
    df_k_linear_w(cf32(x) + row0 * K, rows, K, &kw, 0, N, df_t_f32(y) + row0 * N, N);
    return;
  }
  df_k_linear(cf32(x) + row0 * K, rows, K, K, w->t.data_ptr(), w->dt, N,
              bias ? bias->t.data_ptr() : nullptr, df_t_f32(y) + row0 * N, N);
}

// y = x @ w^T on the host kernels for any weight dtype (FP8, MXFP4 through their scales), strided
// rows (torch_path.cpp's lin is the at:: one).
static void kernel_lin(const float *x, int64_t M, int64_t ldx, const df_t_tensor *w, float *y,
                       int64_t ldy) {
  df_k_weight kw = df_t_kweight(w);
  df_k_linear_w(x, M, ldx, &kw, 0, w->t.size(0), y, ldy);
}

// A df_k_linear_multi job of x [M, K] (row stride ldx) through the whole of w, any dtype
// (FP8 with its block scales, MXFP4 with its E8M0 scales), into y [M, N] (row stride ldy).
static df_k_linear_job job_of(const float *x, int64_t M, int64_t ldx, const df_t_tensor *w,
                              const df_t_tensor *bias, float *y, int64_t ldy) {
  df_k_weight kw = df_t_kweight(w);
  bool mx = kw.dt == DF_DT_F4;
  df_k_linear_job j = {x, M, kw.K, ldx, kw.data, kw.dt, w->t.size(0),
                       bias ? bias->t.data_ptr() : nullptr, y, ldy, mx ? nullptr : kw.scale,
                       kw.scale_ld, kw.bn, kw.bk};
  if (mx) j.mx_scale = kw.mx_scale;
  return j;
}

extern "C" void df_t_linear_multi(const df_t_linear_op *ops, int n) {
  assert(n >= 0 && n <= 256);
  df_k_linear_job jobs[256];
  for (int i = 0; i < n; i++) {
    const df_t_linear_op *o = &ops[i];
    int64_t N = o->w->t.size(0), K = o->w->t.size(1);
    assert(row_elems(o->x) == K && row_elems(o->y) == N);
    assert(o->row0 + o->rows <= o->x->t.size(0) && o->row0 + o->rows <= o->y->t.size(0));
    assert(!o->bias || (o->bias->dt == o->w->dt && o->bias->t.numel() == N &&
                        o->w->dt != DF_DT_F8_E4M3 && o->w->dt != DF_DT_F4));
    jobs[i] = job_of(cf32(o->x) + o->row0 * K, o->rows, K, o->w, o->bias,
                     df_t_f32(o->y) + o->row0 * N, N);
  }
  df_k_linear_multi(jobs, n);
}

extern "C" void df_t_swiglu_ffn_groups(const df_t_tensor *x, int n, const int64_t *offsets,
                                       const df_t_tensor *const *gate,
                                       const df_t_tensor *const *up,
                                       const df_t_tensor *const *down, df_t_tensor *g,
                                       df_t_tensor *u, df_t_tensor *y) {
  df_t_glu_ffn_groups(x, n, offsets, gate, up, down, nullptr, g, u, y);
}

extern "C" void df_t_glu_ffn_groups(const df_t_tensor *x, int n, const int64_t *offsets,
                                    const df_t_tensor *const *gate, const df_t_tensor *const *up,
                                    const df_t_tensor *const *down, const df_k_act *act,
                                    df_t_tensor *g, df_t_tensor *u, df_t_tensor *y) {
  assert(n >= 0 && n <= 128);
  if (n == 0) return;
  int64_t H = row_elems(x), ldg = row_elems(g);
  assert(row_elems(y) == H && row_elems(u) == ldg && offsets[n] <= g->t.size(0));
  df_k_linear_job jobs[256], down_jobs[128];
  df_k_glu_span spans[128];
  const float *xp = cf32(x);
  float *gp = df_t_f32(g), *up_ = df_t_f32(u), *yp = df_t_f32(y);
  int n_spans = 0;
  for (int i = 0; i < n; i++) {
    int64_t r0 = offsets[i], rows = offsets[i + 1] - r0, I = gate[i]->t.size(0);
    assert(gate[i]->t.size(1) == H && I <= ldg && up[i]->t.size(0) == I);
    assert(down[i]->t.size(0) == H && down[i]->t.size(1) == I);
    jobs[2 * i] = job_of(xp + r0 * H, rows, H, gate[i], nullptr, gp + r0 * ldg, ldg);
    jobs[2 * i + 1] = job_of(xp + r0 * H, rows, H, up[i], nullptr, up_ + r0 * ldg, ldg);
    down_jobs[i] = job_of(gp + r0 * ldg, rows, ldg, down[i], nullptr, yp + r0 * H, H);
    /* consecutive groups of one width activate as one block of rows */
    if (n_spans && spans[n_spans - 1].n == I &&
        spans[n_spans - 1].g + spans[n_spans - 1].rows * ldg == gp + r0 * ldg)
      spans[n_spans - 1].rows += rows;
    else
      spans[n_spans++] = {gp + r0 * ldg, up_ + r0 * ldg, rows, I, ldg};
  }
  // gate and up, the activation, down: one parallel region (kernels.h df_k_glu_ffn_multi)
  df_k_glu_ffn_multi(jobs, 2 * n, spans, n_spans, act, down_jobs, n);
}

extern "C" void df_t_rmsnorm(const df_t_tensor *x, int64_t n_vec, const df_t_tensor *w, float eps,
                             df_t_tensor *y) {
  int64_t D = w->t.numel();
  assert(n_vec * D <= x->t.numel() && n_vec * D <= y->t.numel());
  df_k_rmsnorm(cf32(x), n_vec, D, w->t.data_ptr(), w->dt, eps, df_t_f32(y));
}

extern "C" void df_t_rope(df_t_tensor *x, int64_t rows, int64_t n_heads, const int64_t *pos,
                          const df_t_tensor *cos_t, const df_t_tensor *sin_t) {
  int64_t d = cos_t->t.size(1) * 2;
  assert(rows * n_heads * d <= x->t.numel());
  df_k_rope(df_t_f32(x), rows, n_heads, d, pos, cf32(cos_t), cf32(sin_t));
}

extern "C" void df_t_attention_rows(const df_t_tensor *q, int64_t row0, int64_t rows,
                                    int64_t pos0, int64_t n_head, const df_t_tensor *kc,
                                    const df_t_tensor *vc, float scale, df_t_tensor *out,
                                    df_t_tensor *scratch) {
  int64_t n_kv = kc->t.size(0), ctx = kc->t.size(1), d = kc->t.size(2);
  assert(pos0 + rows <= ctx && n_head % n_kv == 0);
  assert((row0 + rows) * n_head * d <= q->t.numel() && (row0 + rows) * n_head * d <= out->t.numel());
  assert(scratch->t.numel() >= (int64_t)df_k_max_threads() * ctx);
  df_k_attention(cf32(q) + row0 * n_head * d, rows, pos0, n_head, n_kv, d, ctx, cf32(kc),
                 cf32(vc), scale, df_t_f32(out) + row0 * n_head * d, df_t_f32(scratch));
}

extern "C" void df_t_attention(const df_t_tensor *q, int64_t rows, int64_t pos0, int64_t n_head,
                               const df_t_tensor *kc, const df_t_tensor *vc, float scale,
                               df_t_tensor *out, df_t_tensor *scratch) {
  df_t_attention_rows(q, 0, rows, pos0, n_head, kc, vc, scale, out, scratch);
}

extern "C" void df_t_router_topk(const df_t_tensor *logits, int64_t rows, int64_t k, bool norm,
                                 int32_t *idx, float *wts) {
  df_k_router_softmax_topk(cf32(logits), rows, row_elems(logits), k, norm, idx, wts);
}

extern "C" void df_t_swiglu_ffn(const df_t_tensor *x, int64_t row0, int64_t rows,
                                const df_t_tensor *gate_w, const df_t_tensor *up_w,
                                const df_t_tensor *down_w, df_t_tensor *g, df_t_tensor *u,
                                df_t_tensor *y) {
  df_t_glu_ffn(x, row0, rows, gate_w, up_w, down_w, nullptr, g, u, y);
}

extern "C" void df_t_glu_ffn(const df_t_tensor *x, int64_t row0, int64_t rows,
                             const df_t_tensor *gate_w, const df_t_tensor *up_w,
                             const df_t_tensor *down_w, const df_k_act *act, df_t_tensor *g,
                             df_t_tensor *u, df_t_tensor *y) {
  int64_t I = gate_w->t.size(0), H = gate_w->t.size(1);
  assert(row_elems(x) == H && row_elems(y) == H && row_elems(g) >= I && row_elems(u) >= I);
  assert(down_w->t.size(0) == H && down_w->t.size(1) == I);
  const float *xr = cf32(x) + row0 * H;
  float *gp = df_t_f32(g), *up = df_t_f32(u);
  int64_t ldg = row_elems(g);
  kernel_lin(xr, rows, H, gate_w, gp, ldg);
  kernel_lin(xr, rows, H, up_w, up, ldg);
  df_k_glu_act_rows(gp, up, rows, I, ldg, act);
  kernel_lin(gp, rows, ldg, down_w, df_t_f32(y) + row0 * H, H);
}

extern "C" void df_t_mla_attention(const df_t_tensor *q, int64_t row0, int64_t rows,
                                   int64_t pos0, int64_t n_head, int64_t dn, int64_t dr,
                                   int64_t dv, const df_t_tensor *kv_b, const df_t_tensor *ckv,
                                   const df_t_tensor *kpe, float scale, df_t_tensor *q_abs,
                                   df_t_tensor *lat, df_t_tensor *scratch, df_t_tensor *out) {
  int64_t ctx = ckv->t.size(0), L = ckv->t.size(1), dq = dn + dr;
  assert(kpe->t.size(0) == ctx && kpe->t.size(1) == dr && pos0 + rows <= ctx);
  assert(kv_b->t.size(0) == n_head * (dn + dv) && kv_b->t.size(1) == L);
  assert(row_elems(q) == n_head * dq && row_elems(out) == n_head * dv);
  assert(row0 + rows <= q->t.size(0) && row0 + rows <= out->t.size(0));
  assert(rows <= q_abs->t.size(0) && row_elems(q_abs) >= n_head * L);
  assert(rows <= lat->t.size(0) && row_elems(lat) >= n_head * L);
  assert(scratch->t.numel() >= (int64_t)df_k_max_threads() * ctx);
  df_k_weight kw = df_t_kweight(kv_b);
  const float *qr = cf32(q) + row0 * n_head * dq;
  float *qa = df_t_f32(q_abs), *la = df_t_f32(lat), *o = df_t_f32(out) + row0 * n_head * dv;
  for (int64_t h = 0; h < n_head; h++) // q_abs[h] = W_uk[h]^T q_nope[h]
    df_k_linear_t(qr + h * dq, rows, dn, n_head * dq, &kw, h * (dn + dv), 0, L, qa + h * L,
                  n_head * L);
  df_k_mla_attention(qa, qr + dn, n_head * dq, dq, rows, pos0, n_head, L, dr, ctx, cf32(ckv), cf32(kpe), scale,
                     la, df_t_f32(scratch));
  for (int64_t h = 0; h < n_head; h++) // out[h] = W_uv[h] lat[h]
    df_k_linear_w(la + h * L, rows, n_head * L, &kw, h * (dn + dv) + dn, dv, o + h * dv,
                  n_head * dv);
}

extern "C" void df_t_embed(const int32_t *ids, int64_t n, const df_t_tensor *table,
                           df_t_tensor *y) {
  int64_t H = table->t.size(1);
  assert(row_elems(y) == H && n <= y->t.size(0));
  df_k_embed(ids, n, table->t.data_ptr(), table->dt, H, df_t_f32(y));
}

extern "C" int64_t df_t_argmax(const df_t_tensor *x, int64_t row) {
  int64_t N = row_elems(x);
  const float *p = cf32(x) + row * N;
  int64_t best = 0;
  for (int64_t i = 1; i < N; i++)
    if (p[i] > p[best]) best = i;
  return best;
}

// ---- libtorch oracles -------------------------------------------------------------------

extern "C" int df_t_ref_linear(const df_t_tensor *x, int64_t rows, const df_t_tensor *w,
                               const df_t_tensor *bias, float *out, char *err, size_t errlen) {
  try {
    at::Tensor xs = x->t.narrow(0, 0, rows).reshape({rows, -1}).to(at::kDouble);
    at::Tensor wd;
    if (w->dt == DF_DT_F8_E4M3) { // e4m3 table * repeated block scales, in fp32, then double
      at::Tensor lut = at::empty({256}, at::kFloat);
      for (int b = 0; b < 256; b++) lut[b] = df_k_fp8_e4m3_to_f32((uint8_t)b);
      int64_t N = w->t.size(0), K = w->t.size(1);
      at::Tensor s = w->scale->t.repeat_interleave(w->bn, 0).repeat_interleave(w->bk, 1);
      s = s.narrow(0, 0, N).narrow(1, 0, K);
      wd = (lut.index({w->t.to(at::kLong)}) * s).to(at::kDouble);
    } else if (w->dt == DF_DT_F4) { // each weight decoded as the kernel does (exact)
      df_k_weight kw = df_t_kweight(w);
      int64_t N = w->t.size(0), K = kw.K;
      at::Tensor wf = at::empty({N, K}, at::kFloat);
      float *p = wf.data_ptr<float>();
      for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
          p[n * K + k] = df_k_mxfp4_weight(static_cast<const uint8_t *>(kw.data), kw.mx_scale,
                                           kw.scale_ld, K, n, k);
      wd = wf.to(at::kDouble);
    } else {
      wd = w->t.to(at::kDouble);
    }
    at::Tensor y = at::matmul(xs, wd.t());
    if (bias) y = y + bias->t.to(at::kDouble);
    at::Tensor yf = y.to(at::kFloat).contiguous();
    std::memcpy(out, yf.data_ptr(), (size_t)yf.numel() * sizeof(float));
    return 0;
  } catch (const std::exception &e) {
    snprintf(err, errlen, "libtorch linear: %s", e.what());
    return -1;
  }
}

extern "C" int df_t_ref_attention(const df_t_tensor *q, int64_t rows, int64_t pos0,
                                  int64_t n_head, const df_t_tensor *kc, const df_t_tensor *vc,
                                  float scale, float *out, char *err, size_t errlen) {
  try {
    int64_t n_kv = kc->t.size(0), d = kc->t.size(2), n = pos0 + rows;
    at::Tensor qs = q->t.narrow(0, 0, rows).reshape({rows, n_head, d}).to(at::kDouble);
    at::Tensor k = kc->t.narrow(1, 0, n).to(at::kDouble);  // [n_kv, n, d]
    at::Tensor v = vc->t.narrow(1, 0, n).to(at::kDouble);
    k = k.repeat_interleave(n_head / n_kv, 0);                // [n_head, n, d]
    v = v.repeat_interleave(n_head / n_kv, 0);
    at::Tensor s = at::matmul(qs.transpose(0, 1), k.transpose(1, 2)) * (double)scale; // [h, rows, n]
    at::Tensor qpos = at::arange(pos0, pos0 + rows, at::kLong).unsqueeze(1);
    at::Tensor kpos = at::arange(0, n, at::kLong).unsqueeze(0);
    s = s.masked_fill(kpos > qpos, -INFINITY);
    at::Tensor o = at::matmul(at::softmax(s, -1), v).transpose(0, 1); // [rows, h, d]
    at::Tensor of = o.to(at::kFloat).contiguous();
    std::memcpy(out, of.data_ptr(), (size_t)of.numel() * sizeof(float));
    return 0;
  } catch (const std::exception &e) {
    snprintf(err, errlen, "libtorch attention: %s", e.what());
    return -1;
  }
}

// ---- devices ----------------------------------------------------------------------------

extern "C" int df_t_device_parse(const char *s, df_t_device *out, char *err, size_t errlen) {
  df_t_device d = {DF_T_DEV_CPU, 0};
  if (!s) s = "";
  if (!strcmp(s, "cpu")) {
  } else if (!strcmp(s, "auto")) {
    d.kind = DF_T_DEV_AUTO;
  } else if (!strcmp(s, "torch-cpu")) {
    d.kind = DF_T_DEV_TORCH_CPU;
  } else if (!strcmp(s, "cuda")) {
    d.kind = DF_T_DEV_CUDA;
  } else if (!strncmp(s, "cuda:", 5) && s[5] >= '0' && s[5] <= '9') {
    char *end;
    long n = strtol(s + 5, &end, 10);
    if (*end || n < 0 || n >= 64) goto bad;
    d.kind = DF_T_DEV_CUDA;
    d.index = (int)n;
  } else {
    goto bad;
  }
  *out = d;
  return 0;
bad:
  snprintf(err, errlen, "device '%s' not understood (expected cpu, cuda, cuda:N with N from 0 "
           "to 63, auto or torch-cpu)", s);
  return -1;
}

extern "C" const char *df_t_device_name(const df_t_device *d, char *buf, size_t cap) {
  switch (d->kind) {
  case DF_T_DEV_CUDA: snprintf(buf, cap, "cuda:%d", d->index); break;
  case DF_T_DEV_AUTO: snprintf(buf, cap, "auto"); break;
  case DF_T_DEV_TORCH_CPU: snprintf(buf, cap, "torch-cpu"); break;
  default: snprintf(buf, cap, "cpu"); break;
  }
  return buf;
}

extern "C" bool df_t_cuda_available(void) {
  try {
    return torch::cuda::is_available();
  } catch (const std::exception &) {
    return false;
  }
}

extern "C" int df_t_cuda_device_count(void) {
  try {
    return (int)torch::cuda::device_count();
  } catch (const std::exception &) {
    return 0;
  }
}

extern "C" void df_t_device_resolve(const df_t_device *want, df_t_device *got, char *note,
                                    size_t cap) {
  if (note && cap) note[0] = 0;
  *got = *want;
  if (want->kind == DF_T_DEV_AUTO) {
    got->index = 0;
    got->kind = df_t_cuda_available() ? DF_T_DEV_CUDA : DF_T_DEV_CPU;
    return; // auto asked for whatever is there: nothing to report
  }
  if (want->kind != DF_T_DEV_CUDA) return;
  int n = df_t_cuda_available() ? df_t_cuda_device_count() : 0;
  if (n == 0) {
    got->kind = DF_T_DEV_CPU;
    got->index = 0;
    snprintf(note, cap, "--device cuda:%d: this build's libtorch has no usable CUDA (a "
             "CPU-only libtorch, or no driver/device); running on the CPU", want->index);
  } else if (want->index >= n) {
    got->kind = DF_T_DEV_CPU;
    got->index = 0;
    snprintf(note, cap, "--device cuda:%d: only %d CUDA device%s found; running on the CPU",
             want->index, n, n == 1 ? "" : "s");
  }
}

at::Device at_device(const df_t_device *d) {
  if (d && d->kind == DF_T_DEV_CUDA) return at::Device(at::kCUDA, (c10::DeviceIndex)d->index);
  return at::Device(at::kCPU);
}

extern "C" df_t_tensor *df_t_new_f32_on(const df_t_device *dev, int ndim, const int64_t *shape,
                                        char *err, size_t errlen) {
  if (!dev || dev->kind != DF_T_DEV_CUDA) return df_t_new_f32(ndim, shape, err, errlen);
  if (ndim < 1 || ndim > 8) {
    snprintf(err, errlen, "tensor rank %d out of range 1..8", ndim);
    return nullptr;
  }
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  try {
    std::vector<int64_t> sizes(shape, shape + ndim);
    auto *h = new df_t_tensor;
    h->t = at::zeros(sizes, at::TensorOptions().dtype(at::kFloat).device(at_device(dev)));
    h->dt = DF_DT_F32;
    h->owned = true;
    return h;
  } catch (const std::exception &e) {
    char nm[32];
    snprintf(err, errlen, "allocating %lld bytes on %s: %s", (long long)(n * 4),
             df_t_device_name(dev, nm, sizeof nm), e.what());
    return nullptr;
  }
}
