// engine/tensor/torch_shim.cpp — libtorch tensors behind the C API of torch_shim.h.
//
// Owns: the df_t_tensor handle (an at::Tensor plus its dtype and, for FP8 weights, its
// block scales), op dispatch to the CPU kernels, device selection, the torch compute path
// (df_tm_*: the qwen3 / qwen3_moe and deepseek_v3 / kimi_k2 forward in at:: operators on a
// CUDA or CPU at::Device)
// and the float64 libtorch oracles used by tests. Does not own: the mmap (the safetensors
// loader does), buffer planning and admission (engine/model.c, engine/device/admission.c), direct
// CUDA runtime calls (engine/device/cuda_rt.c).
//
// Portability: written against the libtorch API common to 1.13 (Debian's libtorch-dev) and
// 2.x (PyTorch wheels): ATen operators only (no at::rms_norm, no scaled_dot_product_attention,
// both absent from 1.13), no c10::optional spelled out (an alias of std::optional in 2.x),
// torch::cuda::is_available / device_count from <torch/cuda.h> (stable since 1.0), and no
// CUDA header: a CPU-only libtorch compiles this file unchanged. setAllowTF32CuBLAS exists in
// both (2.9 adds a finer-grained precision API and keeps it).
extern "C" {
#include "engine/safetensors.h" // C headers without their own extern "C" guard
#include "engine/experts/expert_backend.h"
#include "engine/kv_cache.h"
}
#include "engine/tensor/torch_shim.h"
#include "engine/device/cuda_rt.h"

#include <ATen/ATen.h>

#include <ATen/Parallel.h>
#include <omp.h>
#include <torch/cuda.h>

#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <mutex>
#include <unordered_map>
#include <vector>

extern "C" {
#include "engine/kernels/kernels.h"
}

struct df_t_tensor {
  at::Tensor t;
  df_dtype dt;
  bool owned; // memory allocated by the shim (writable)
  // F8_E4M3 weights: block scales [ceil(N/bn), ceil(K/bk)] F32 (not owned), else null
  const df_t_tensor *scale = nullptr;
  int64_t bn = 0, bk = 0;
};

static at::ScalarType to_scalar_type(df_dtype dt, bool *ok) {
  *ok = true;
  switch (dt) {
  case DF_DT_BF16: return at::kBFloat16;
  case DF_DT_F16: return at::kHalf;
  case DF_DT_F32: return at::kFloat;
  case DF_DT_I32: return at::kInt;
  case DF_DT_F8_E4M3: return at::kByte; // raw bytes; libtorch 1.13 has no float8 type
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
    snprintf(err, errlen,
             "dtype %s cannot be wrapped as a tensor (expected BF16, F16, F32, I32, F8_E4M3)",
             df_dtype_name(dt));
    return nullptr;
  }
  if (ndim < 1 || ndim > 8) {
    snprintf(err, errlen, "tensor rank %d out of range 1..8", ndim);
    return nullptr;
  }
  try {
    std::vector<int64_t> sizes(shape, shape + ndim);
    auto *h = new df_t_tensor;
    // from_blob never copies nor frees; the tensor is only read through const paths.
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

extern "C" const df_t_tensor *df_t_block_scale(const df_t_tensor *w, int64_t *block_n,
                                               int64_t *block_k) {
  if (block_n) *block_n = w->bn;
  if (block_k) *block_k = w->bk;
  return w->scale;
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
    h->t = at::zeros(sizes, at::TensorOptions().dtype(at::kFloat));
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

// Elements per row of a tensor viewed as [rows, row_elems].
static int64_t row_elems(const df_t_tensor *t) { return t->t.numel() / t->t.size(0); }

extern "C" void df_t_linear(const df_t_tensor *x, int64_t row0, int64_t rows,
                            const df_t_tensor *w, const df_t_tensor *bias, df_t_tensor *y) {
  int64_t N = w->t.size(0), K = w->t.size(1);
  assert(row_elems(x) == K && row_elems(y) == N);
  assert(row0 + rows <= x->t.size(0) && row0 + rows <= y->t.size(0));
  assert(!bias || (bias->dt == w->dt && bias->t.numel() == N));
  if (w->dt == DF_DT_F8_E4M3) {
    assert(!bias);
    df_k_weight kw = df_t_kweight(w);
    df_k_linear_w(cf32(x) + row0 * K, rows, K, &kw, 0, N, df_t_f32(y) + row0 * N, N);
    return;
  }
  df_k_linear(cf32(x) + row0 * K, rows, K, K, w->t.data_ptr(), w->dt, N,
              bias ? bias->t.data_ptr() : nullptr, df_t_f32(y) + row0 * N, N);
}

// y = x @ w^T for any weight dtype (FP8 through its scales), strided rows.
static void lin(const float *x, int64_t M, int64_t ldx, const df_t_tensor *w, float *y,
                int64_t ldy) {
  df_k_weight kw = df_t_kweight(w);
  df_k_linear_w(x, M, ldx, &kw, 0, w->t.size(0), y, ldy);
}

// A df_k_linear_multi job of x [M, K] (row stride ldx) through the whole of w, any dtype
// (FP8 with its block scales), into y [M, N] (row stride ldy).
static df_k_linear_job job_of(const float *x, int64_t M, int64_t ldx, const df_t_tensor *w,
                              const df_t_tensor *bias, float *y, int64_t ldy) {
  df_k_weight kw = df_t_kweight(w);
  df_k_linear_job j = {x, M, kw.K, ldx, kw.data, kw.dt, w->t.size(0),
                       bias ? bias->t.data_ptr() : nullptr, y, ldy, kw.scale, kw.scale_ld,
                       kw.bn, kw.bk};
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
                        o->w->dt != DF_DT_F8_E4M3));
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
  assert(n >= 0 && n <= 128);
  if (n == 0) return;
  int64_t H = row_elems(x), ldg = row_elems(g);
  assert(row_elems(y) == H && row_elems(u) == ldg && offsets[n] <= g->t.size(0));
  df_k_linear_job jobs[256];
  const float *xp = cf32(x);
  float *gp = df_t_f32(g), *up_ = df_t_f32(u), *yp = df_t_f32(y);
  for (int i = 0; i < n; i++) {
    int64_t r0 = offsets[i], rows = offsets[i + 1] - r0, I = gate[i]->t.size(0);
    assert(gate[i]->t.size(1) == H && I <= ldg && up[i]->t.size(0) == I);
    assert(down[i]->t.size(0) == H && down[i]->t.size(1) == I);
    jobs[2 * i] = job_of(xp + r0 * H, rows, H, gate[i], nullptr, gp + r0 * ldg, ldg);
    jobs[2 * i + 1] = job_of(xp + r0 * H, rows, H, up[i], nullptr, up_ + r0 * ldg, ldg);
  }
  df_k_linear_multi(jobs, 2 * n);
  for (int i = 0; i < n; i++) {
    int64_t I = gate[i]->t.size(0);
    for (int64_t r = offsets[i]; r < offsets[i + 1]; r++)
      df_k_silu_mul(gp + r * ldg, up_ + r * ldg, I);
  }
  for (int i = 0; i < n; i++) {
    int64_t r0 = offsets[i], rows = offsets[i + 1] - r0;
    jobs[i] = job_of(gp + r0 * ldg, rows, ldg, down[i], nullptr, yp + r0 * H, H);
  }
  df_k_linear_multi(jobs, n);
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
  int64_t I = gate_w->t.size(0), H = gate_w->t.size(1);
  assert(row_elems(x) == H && row_elems(y) == H && row_elems(g) >= I && row_elems(u) >= I);
  assert(down_w->t.size(0) == H && down_w->t.size(1) == I);
  const float *xr = cf32(x) + row0 * H;
  float *gp = df_t_f32(g), *up = df_t_f32(u);
  int64_t ldg = row_elems(g);
  lin(xr, rows, H, gate_w, gp, ldg);
  lin(xr, rows, H, up_w, up, ldg);
  for (int64_t r = 0; r < rows; r++) df_k_silu_mul(gp + r * ldg, up + r * ldg, I);
  lin(gp, rows, ldg, down_w, df_t_f32(y) + row0 * H, H);
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

static at::Device at_device(const df_t_device *d) {
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

// ---- the torch compute path -------------------------------------------------------------

namespace {

// A weight on the device as stored: BF16/F16/F32, or F8_E4M3 bytes with their F32 block
// scales (DeepSeek-V3 / Kimi K2 `weight_scale_inv`).
struct dw {
  at::Tensor w, scale; // scale undefined unless FP8
  int64_t bn = 0, bk = 0;
  bool defined() const { return w.defined(); }
};

struct tm_layer {
  at::Tensor in_norm, post_norm, qb, kb, vb, ob, q_norm, k_norm, q_a_norm, kv_a_norm,
      router_bias;
  dw q, k, v, o, router, mlp_gate, mlp_up, mlp_down, q_a, q_b, kv_a, kv_b, sh_gate, sh_up,
      sh_down;
  std::vector<dw> gate, up, down; // [E]; undefined = served from host memory
};

// [256] fp32 on `dev`: the exact value of each E4M3FN byte (kernels.h df_k_fp8_e4m3_to_f32).
at::Tensor e4m3_table(const at::Device &dev) {
  static std::mutex mu;
  static std::vector<std::pair<at::Device, at::Tensor>> tables;
  std::lock_guard<std::mutex> lock(mu);
  for (auto &t : tables)
    if (t.first == dev) return t.second;
  at::Tensor lut = at::empty({256}, at::kFloat);
  float *lp = lut.data_ptr<float>();
  for (int b = 0; b < 256; b++) lp[b] = df_k_fp8_e4m3_to_f32((uint8_t)b);
  tables.emplace_back(dev, lut.to(dev));
  return tables.back().second;
}

// The weight in fp32 for one op. FP8: e4m3(w[n, k]) * scale[n / bn, k / bk], the exact
// product rounded once to fp32 — the value df_k_fp8_weight gives the CPU kernels.
at::Tensor widen(const dw &t) {
  if (!t.scale.defined()) return t.w.scalar_type() == at::kFloat ? t.w : t.w.to(at::kFloat);
  int64_t N = t.w.size(0), K = t.w.size(1);
  at::Tensor v =
      e4m3_table(t.w.device()).index_select(0, t.w.reshape({-1}).to(at::kInt)).view({N, K});
  at::Tensor s = t.scale.repeat_interleave(t.bn, 0).repeat_interleave(t.bk, 1);
  return v * s.narrow(0, 0, N).narrow(1, 0, K);
}

// y = x @ w^T (+ b), w widened to fp32 for this op (weights stay stored-dtype on the device).
at::Tensor lin(const at::Tensor &x, const at::Tensor &w, const at::Tensor &b = at::Tensor()) {
  at::Tensor wf = w.scalar_type() == at::kFloat ? w : w.to(at::kFloat);
  if (b.defined()) return at::linear(x, wf, b.to(at::kFloat));
  return at::linear(x, wf);
}
at::Tensor lin(const at::Tensor &x, const dw &w, const at::Tensor &b = at::Tensor()) {
  return lin(x, widen(w), b);
}

// Qwen3RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * w (fp32 throughout).
at::Tensor rms(const at::Tensor &x, const at::Tensor &w, double eps) {
  at::Tensor var = x.pow(2).mean(-1, /*keepdim=*/true);
  return x * at::rsqrt(var + eps) * w.to(at::kFloat);
}

// apply_rotary_pos_emb with rotate_half: x [R, heads, d], c/s [R, 1, d/2].
at::Tensor rope(const at::Tensor &x, const at::Tensor &c, const at::Tensor &s) {
  int64_t h2 = x.size(2) / 2;
  at::Tensor x1 = x.narrow(2, 0, h2), x2 = x.narrow(2, h2, h2);
  return at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, 2);
}

// Qwen3MoeMLP / DeepseekV3MLP: down(silu(gate(x)) * up(x)).
at::Tensor swiglu(const at::Tensor &x, const dw &g, const dw &u, const dw &d) {
  return lin(at::silu(lin(x, g)) * lin(x, u), d);
}

bool stored_ok(const df_t_tensor *h) {
  return h->dt == DF_DT_BF16 || h->dt == DF_DT_F16 || h->dt == DF_DT_F32;
}

} // namespace

struct df_tm {
  df_tm_desc d;          // copy; its pointers are borrowed
  at::Device dev = at::Device(at::kCPU);
  bool on_cpu = true;    // TORCH_CPU: host tensors used in place
  df_cuda_uploader *up = nullptr;
  uint64_t bytes = 0;    // uploaded
  at::Tensor embed, final_norm, lm_head, cos, sin;
  std::vector<tm_layer> layers;
};

static at::Tensor upload(df_tm *tm, const df_t_tensor *h) {
  if (!h) return at::Tensor();
  if (!stored_ok(h) && h->dt != DF_DT_F8_E4M3)
    throw std::runtime_error(std::string("weight dtype ") + df_dtype_name(h->dt) +
                             " is not on the torch path (BF16, F16, F32, F8_E4M3)");
  if (tm->on_cpu) return h->t;
  size_t nb = (size_t)h->t.numel() * (size_t)h->t.element_size();
  tm->bytes += nb;
  if (tm->up) {
    at::Tensor t = at::empty(h->t.sizes(), h->t.options().device(tm->dev));
    char err[256];
    if (df_cuda_upload(tm->up, t.data_ptr(), h->t.data_ptr(), nb, err, sizeof err) != 0)
      throw std::runtime_error(err);
    return t;
  }
  return h->t.to(tm->dev);
}

// A linear weight: FP8 ones with their block scales.
static dw upload_w(df_tm *tm, const df_t_tensor *h) {
  dw r;
  if (!h) return r;
  if (h->dt == DF_DT_F8_E4M3 && (!h->scale || h->t.dim() != 2))
    throw std::runtime_error("an F8_E4M3 weight without block scales");
  r.w = upload(tm, h);
  if (h->dt == DF_DT_F8_E4M3) {
    r.scale = upload(tm, h->scale);
    r.bn = h->bn;
    r.bk = h->bk;
  }
  return r;
}

extern "C" df_tm *df_tm_new(const df_tm_desc *d, const df_t_device *dev, char *err,
                            size_t errlen) {
  df_tm *tm = nullptr;
  char nm[32];
  try {
    tm = new df_tm;
    tm->d = *d;
    tm->dev = at_device(dev);
    tm->on_cpu = dev->kind != DF_T_DEV_CUDA;
    if (!tm->on_cpu) {
      at::globalContext().setAllowTF32CuBLAS(false); // fp32 GEMMs in fp32 (DESIGN.md §4)
      if (df_cuda_compiled()) {
        char cerr[256];
        tm->up = df_cuda_uploader_new(dev->index, 0, cerr, sizeof cerr);
        if (!tm->up) throw std::runtime_error(std::string("pinned uploader: ") + cerr);
      }
    }
    tm->embed = upload(tm, d->embed);
    tm->final_norm = upload(tm, d->final_norm);
    tm->lm_head = d->lm_head == d->embed ? tm->embed : upload(tm, d->lm_head);
    tm->cos = upload(tm, d->rope_cos);
    tm->sin = upload(tm, d->rope_sin);
    tm->layers.resize((size_t)d->n_layers);
    for (int64_t l = 0; l < d->n_layers; l++) {
      const df_tm_layer *s = &d->layers[l];
      tm_layer &L = tm->layers[(size_t)l];
      L.in_norm = upload(tm, s->in_norm);
      L.post_norm = upload(tm, s->post_norm);
      L.q = upload_w(tm, s->q);
      L.k = upload_w(tm, s->k);
      L.v = upload_w(tm, s->v);
      L.o = upload_w(tm, s->o);
      L.q_a = upload_w(tm, s->q_a);
      L.q_a_norm = upload(tm, s->q_a_norm);
      L.q_b = upload_w(tm, s->q_b);
      L.kv_a = upload_w(tm, s->kv_a);
      L.kv_a_norm = upload(tm, s->kv_a_norm);
      L.kv_b = upload_w(tm, s->kv_b);
      L.router_bias = upload(tm, s->router_bias);
      L.sh_gate = upload_w(tm, s->sh_gate);
      L.sh_up = upload_w(tm, s->sh_up);
      L.sh_down = upload_w(tm, s->sh_down);
      L.qb = upload(tm, s->qb);
      L.kb = upload(tm, s->kb);
      L.vb = upload(tm, s->vb);
      L.ob = upload(tm, s->ob);
      L.q_norm = upload(tm, s->q_norm);
      L.k_norm = upload(tm, s->k_norm);
      if (s->router) {
        L.router = upload_w(tm, s->router);
        L.gate.resize((size_t)d->n_experts);
        L.up.resize((size_t)d->n_experts);
        L.down.resize((size_t)d->n_experts);
        for (int64_t e = 0; e < d->n_experts; e++) {
          if (d->expert_on_device && !d->expert_on_device[l * d->n_experts + e]) continue;
          L.gate[(size_t)e] = upload_w(tm, s->ex_gate[e]);
          L.up[(size_t)e] = upload_w(tm, s->ex_up[e]);
          L.down[(size_t)e] = upload_w(tm, s->ex_down[e]);
        }
      } else {
        L.mlp_gate = upload_w(tm, s->mlp_gate);
        L.mlp_up = upload_w(tm, s->mlp_up);
        L.mlp_down = upload_w(tm, s->mlp_down);
      }
    }
    if (tm->up) {
      char cerr[256];
      if (df_cuda_uploader_sync(tm->up, cerr, sizeof cerr) != 0) throw std::runtime_error(cerr);
    }
    return tm;
  } catch (const std::exception &e) {
    snprintf(err, errlen, "%s: uploading the model: %s", df_t_device_name(dev, nm, sizeof nm),
             e.what());
    df_tm_destroy(&tm);
    return nullptr;
  }
}

extern "C" void df_tm_destroy(df_tm **tm) {
  if (!tm || !*tm) return;
  df_cuda_uploader_destroy(&(*tm)->up);
  delete *tm;
  *tm = nullptr;
}

extern "C" uint64_t df_tm_device_bytes(const df_tm *tm) { return tm->bytes; }

// A host vector as a device tensor (copied).
template <typename T>
static at::Tensor to_dev(const df_tm *tm, const T *p, int64_t n, at::ScalarType st) {
  return at::from_blob(const_cast<T *>(p), {n}, at::TensorOptions().dtype(st)).to(tm->dev);
}

// MoE block over xn [R, H] (fp32 on the device): the routed sum in the router's order.
static at::Tensor tm_moe(df_tm *tm, int64_t l, const at::Tensor &xn, df_expert_backend *be,
                         df_t_tensor *xs, df_t_tensor *ys, uint64_t *counts, char *err,
                         size_t errlen, bool *failed) {
  const df_tm_desc &d = tm->d;
  tm_layer &L = tm->layers[(size_t)l];
  int64_t R = xn.size(0), H = d.hidden, E = d.n_experts, k = d.top_k;
  at::Tensor logits = lin(xn, L.router).to(at::kCPU).contiguous(); // [R, E] fp32
  std::vector<int32_t> idx((size_t)(R * k));
  std::vector<float> w((size_t)(R * k));
  if (L.router_bias.defined()) { // DeepseekV3TopkRouter, on the host as on the CPU path
    at::Tensor bias = L.router_bias.to(at::kCPU).to(at::kFloat).contiguous();
    std::vector<float> work((size_t)(2 * E + 2 * d.n_group + 2));
    df_k_router_sigmoid_group(logits.data_ptr<float>(), R, E, bias.data_ptr<float>(), d.n_group,
                              d.topk_group, k, d.norm_topk, d.routed_scaling, work.data(),
                              idx.data(), w.data());
  } else {
    df_k_router_softmax_topk(logits.data_ptr<float>(), R, E, k, d.norm_topk, idx.data(),
                             w.data());
  }
  // group (row, choice) pairs by expert id ascending, rows ascending (engine/model.c)
  std::vector<int64_t> cnt((size_t)E + 1, 0), cur((size_t)E, 0), slot((size_t)(R * k)),
      src((size_t)(R * k));
  for (int64_t i = 0; i < R * k; i++) cnt[(size_t)idx[(size_t)i]]++;
  int64_t off = 0;
  for (int64_t e = 0; e < E; e++) {
    cur[(size_t)e] = off;
    off += cnt[(size_t)e];
    if (counts) counts[l * E + e] += (uint64_t)cnt[(size_t)e];
  }
  for (int64_t r = 0; r < R; r++)
    for (int64_t j = 0; j < k; j++) {
      int64_t s = cur[(size_t)idx[(size_t)(r * k + j)]]++;
      slot[(size_t)(r * k + j)] = s;
      src[(size_t)s] = r;
    }
  at::Tensor xs_d = xn.index_select(0, to_dev(tm, src.data(), R * k, at::kLong)); // [R*k, H]
  at::Tensor ys_d = at::empty({R * k, H}, xn.options());
  std::vector<int32_t> h_exp;         // host-served experts, ascending
  std::vector<int64_t> h_off{0}, h_slots; // their offsets in xs/ys, and their slots
  for (int64_t e = 0, o = 0; e < E; o += cnt[(size_t)e], e++) {
    int64_t c = cnt[(size_t)e];
    if (!c) continue;
    if (L.gate[(size_t)e].defined()) {
      ys_d.narrow(0, o, c).copy_(swiglu(xs_d.narrow(0, o, c), L.gate[(size_t)e],
                                        L.up[(size_t)e], L.down[(size_t)e]));
    } else {
      h_exp.push_back((int32_t)e);
      for (int64_t s = o; s < o + c; s++) h_slots.push_back(s);
      h_off.push_back((int64_t)h_slots.size());
    }
  }
  if (!h_exp.empty()) {
    int64_t n = (int64_t)h_slots.size();
    at::Tensor slots_d = to_dev(tm, h_slots.data(), n, at::kLong);
    xs->t.narrow(0, 0, n).copy_(xs_d.index_select(0, slots_d).to(at::kCPU));
    df_expert_request req = {(int)l, (int)h_exp.size(), h_exp.data(), h_off.data(), xs, ys};
    if (df_expert_backend_run(be, &req, err, errlen) != 0) {
      *failed = true;
      return at::Tensor();
    }
    ys_d.index_copy_(0, slots_d, ys->t.narrow(0, 0, n).to(tm->dev));
  }
  at::Tensor w_d = at::from_blob(w.data(), {R, k}, at::TensorOptions().dtype(at::kFloat))
                       .to(tm->dev);
  at::Tensor slot_d = at::from_blob(slot.data(), {R, k}, at::TensorOptions().dtype(at::kLong))
                          .to(tm->dev);
  at::Tensor out = at::zeros({R, H}, xn.options());
  for (int64_t j = 0; j < k; j++) // fp32, router order
    out = out + w_d.select(1, j).unsqueeze(1) * ys_d.index_select(0, slot_d.select(1, j));
  if (L.sh_gate.defined()) // DeepseekV3MoE: routed sum + shared experts
    out = out + swiglu(xn, L.sh_gate, L.sh_up, L.sh_down);
  return out;
}

// Softmax over the last dim of scores sc [heads, n, T] of rows at positions p0 .. p0+n-1
// against cache positions 0 .. T-1, each row masked past its own position (causal).
static at::Tensor causal_softmax(const at::Tensor &sc, int64_t p0, const at::Tensor &pos_d) {
  int64_t n = sc.size(-2), T = sc.size(-1);
  at::Tensor qp = at::arange(p0, p0 + n, pos_d.options()).unsqueeze(1);
  at::Tensor kp = at::arange(0, T, pos_d.options()).unsqueeze(0);
  return at::softmax(sc.masked_fill(kp > qp, -INFINITY), -1);
}

// transformers' apply_rotary_pos_emb_interleave's reordering of the last dim: pairs (2i, 2i+1)
// move to (i, i + d/2), i.e. the even elements, then the odd ones.
static at::Tensor deinterleave(const at::Tensor &x) {
  std::vector<int64_t> sz = x.sizes().vec(), pairs = sz;
  int64_t d = sz.back();
  pairs.back() = d / 2;
  pairs.push_back(2);
  return x.reshape(pairs).transpose(-1, -2).reshape(sz);
}

// DeepseekV3Attention in the absorbed form of engine/model_deepseek.c (df_ds_attention +
// kernels.h df_k_mla_attention): x [R, H] fp32 -> o_proj output [R, H]. The latent c_kv
// (after kv_a_layernorm) and the rotated shared RoPE key of each row go to its sequence's
// MLA cache (k[l] [ctx, L], v[l] [ctx, dr]); per head, q_abs = q_nope W_uk, scores =
// (q_abs . c_kv + q_rope . k_rope) * mla_scale over the sequence's positions <= its own,
// softmax, latent output = P c_kv, out = W_uv latent.
static at::Tensor tm_mla(df_tm *tm, int64_t l, const at::Tensor &x, const at::Tensor &c,
                         const at::Tensor &s, const int64_t *pos, const at::Tensor &pos_d,
                         const int32_t *row_seq, df_kv_cache *const *kvs) {
  const df_tm_desc &d = tm->d;
  tm_layer &L = tm->layers[(size_t)l];
  int64_t R = x.size(0), nh = d.n_head, dn = d.dn, dr = d.dr, dv = d.dv, KL = d.kv_lora_rank;
  double eps = d.eps;
  at::Tensor xn = rms(x, L.in_norm, eps);
  at::Tensor q = L.q_a.defined() ? lin(rms(lin(xn, L.q_a), L.q_a_norm, eps), L.q_b)
                                 : lin(xn, L.q);
  q = q.view({R, nh, dn + dr});
  at::Tensor qn = q.narrow(2, 0, dn), qr = q.narrow(2, dn, dr);
  at::Tensor ckv = lin(xn, L.kv_a); // [R, L + dr]
  at::Tensor lat = rms(ckv.narrow(1, 0, KL), L.kv_a_norm, eps);
  at::Tensor kr = ckv.narrow(1, KL, dr).unsqueeze(1); // [R, 1, dr]
  if (d.rope_interleave) {
    qr = deinterleave(qr);
    kr = deinterleave(kr);
  }
  qr = rope(qr, c, s);
  kr = rope(kr, c, s).squeeze(1);
  at::Tensor W = widen(L.kv_b).view({nh, dn + dv, KL});
  at::Tensor Wk = W.narrow(1, 0, dn), Wv = W.narrow(1, dn, dv); // [nh, dn, L], [nh, dv, L]
  at::Tensor att = at::empty({R, nh, dv}, x.options());
  for (int64_t r0 = 0; r0 < R;) { // per run of one sequence's rows, over its cache
    int64_t r1 = r0 + 1;
    while (r1 < R && row_seq[r1] == row_seq[r0]) r1++;
    int64_t n = r1 - r0, p0 = pos[r0], T = p0 + n;
    df_kv_cache *kv = kvs[row_seq[r0]];
    at::Tensor &cc = kv->k[l]->t, &kc = kv->v[l]->t; // [ctx, L], [ctx, dr]
    cc.narrow(0, p0, n).copy_(lat.narrow(0, r0, n));
    kc.narrow(0, p0, n).copy_(kr.narrow(0, r0, n));
    at::Tensor C = cc.narrow(0, 0, T), K = kc.narrow(0, 0, T);
    at::Tensor q_abs = at::matmul(qn.narrow(0, r0, n).transpose(0, 1), Wk);     // [nh, n, L]
    at::Tensor sc = (at::matmul(q_abs, C.t()) +
                     at::matmul(qr.narrow(0, r0, n).transpose(0, 1), K.t())) * d.mla_scale;
    at::Tensor o = at::matmul(at::matmul(causal_softmax(sc, p0, pos_d), C), Wv.transpose(1, 2));
    att.narrow(0, r0, n).copy_(o.transpose(0, 1)); // [n, nh, dv]
    r0 = r1;
  }
  return lin(att.view({R, nh * dv}), L.o);
}

extern "C" int df_tm_forward(df_tm *tm, int64_t R, const int32_t *ids, const int64_t *pos,
                             const int32_t *row_seq, df_kv_cache *const *kvs,
                             float *const *row_out, df_expert_backend *be, df_t_tensor *xs,
                             df_t_tensor *ys, uint64_t *route_counts, char *err,
                             size_t errlen) {
  const df_tm_desc &d = tm->d;
  int64_t nh = d.n_head, nkv = d.n_kv, hd = d.head_dim;
  double eps = d.eps;
  double scale = 1.0f / sqrtf((float)hd);
  try {
    at::Tensor ids_d = to_dev(tm, ids, R, at::kInt).to(at::kLong);
    at::Tensor pos_d = to_dev(tm, pos, R, at::kLong);
    at::Tensor x = tm->embed.index_select(0, ids_d).to(at::kFloat); // [R, H]
    at::Tensor c = tm->cos.index_select(0, pos_d).unsqueeze(1);     // [R, 1, hd/2]
    at::Tensor s = tm->sin.index_select(0, pos_d).unsqueeze(1);
    for (int64_t l = 0; l < d.n_layers; l++) {
      tm_layer &L = tm->layers[(size_t)l];
      at::Tensor xn;
      if (d.mla) {
        x = x + tm_mla(tm, l, x, c, s, pos, pos_d, row_seq, kvs);
      } else {
        xn = rms(x, L.in_norm, eps);
        at::Tensor q = rms(lin(xn, L.q, L.qb).view({R, nh, hd}), L.q_norm, eps);
        at::Tensor k = rms(lin(xn, L.k, L.kb).view({R, nkv, hd}), L.k_norm, eps);
        at::Tensor v = lin(xn, L.v, L.vb).view({R, nkv, hd});
        q = rope(q, c, s);
        k = rope(k, c, s);
        at::Tensor att = at::empty({R, nh, hd}, x.options());
        for (int64_t r0 = 0; r0 < R;) { // per run of one sequence's rows, over its cache
          int64_t r1 = r0 + 1;
          while (r1 < R && row_seq[r1] == row_seq[r0]) r1++;
          int64_t n = r1 - r0, p0 = pos[r0], T = p0 + n;
          df_kv_cache *kv = kvs[row_seq[r0]];
          at::Tensor &kc = kv->k[l]->t, &vc = kv->v[l]->t; // [nkv, ctx, hd]
          kc.narrow(1, p0, n).copy_(k.narrow(0, r0, n).transpose(0, 1));
          vc.narrow(1, p0, n).copy_(v.narrow(0, r0, n).transpose(0, 1));
          at::Tensor K = kc.narrow(1, 0, T), V = vc.narrow(1, 0, T);
          if (nh != nkv) {
            K = K.repeat_interleave(nh / nkv, 0);
            V = V.repeat_interleave(nh / nkv, 0);
          }
          at::Tensor qh = q.narrow(0, r0, n).transpose(0, 1);           // [nh, n, hd]
          at::Tensor sc = at::matmul(qh, K.transpose(1, 2)) * scale;    // [nh, n, T]
          att.narrow(0, r0, n).copy_(at::matmul(causal_softmax(sc, p0, pos_d), V).transpose(0, 1));
          r0 = r1;
        }
        x = x + lin(att.view({R, nh * hd}), L.o, L.ob);
      }
      xn = rms(x, L.post_norm, eps);
      if (L.router.defined()) {
        bool failed = false;
        at::Tensor y = tm_moe(tm, l, xn, be, xs, ys, route_counts, err, errlen, &failed);
        if (failed) return -1;
        x = x + y;
      } else {
        x = x + swiglu(xn, L.mlp_gate, L.mlp_up, L.mlp_down);
      }
    }
    std::vector<int64_t> want;
    for (int64_t r = 0; r < R; r++)
      if (row_out[r]) want.push_back(r);
    if (!want.empty()) {
      int64_t nl = (int64_t)want.size();
      at::Tensor xl = x.index_select(0, to_dev(tm, want.data(), nl, at::kLong));
      at::Tensor lg = lin(rms(xl, tm->final_norm, eps), tm->lm_head).to(at::kCPU).contiguous();
      const float *p = lg.data_ptr<float>();
      for (int64_t j = 0; j < nl; j++)
        std::memcpy(row_out[want[(size_t)j]], p + j * d.vocab, (size_t)d.vocab * sizeof(float));
    }
    return 0;
  } catch (const std::exception &e) {
    char nm[32];
    df_t_device dv = {tm->on_cpu ? DF_T_DEV_TORCH_CPU : DF_T_DEV_CUDA,
                      tm->on_cpu ? 0 : (int)tm->dev.index()};
    snprintf(err, errlen, "forward on %s: %s", df_t_device_name(&dv, nm, sizeof nm), e.what());
    return -1;
  }
}

// ---- routed experts on a device, for df-node ---------------------------------------------

namespace {
struct tx_expert {
  dw gate, up, down; // gate undefined: does not fit, runs on the host
};

// The bytes a weight occupies as stored (FP8: 1 per element plus its F32 scales).
uint64_t stored_bytes(const df_t_tensor *t) {
  uint64_t nb = (uint64_t)t->t.numel() * (uint64_t)t->t.element_size();
  if (t->dt == DF_DT_F8_E4M3 && t->scale) nb += (uint64_t)t->scale->t.numel() * sizeof(float);
  return nb;
}
} // namespace

struct df_tx {
  at::Device dev = at::Device(at::kCPU);
  bool on_cpu = true;
  uint64_t budget = 0, used = 0;
  int64_t held = 0;
  std::unordered_map<const df_t_tensor *, tx_expert> experts;
};

namespace {
dw tx_upload(df_tx *tx, const df_t_tensor *h) {
  dw r;
  r.w = tx->on_cpu ? h->t : h->t.to(tx->dev);
  if (h->dt == DF_DT_F8_E4M3) {
    r.scale = tx->on_cpu ? h->scale->t : h->scale->t.to(tx->dev);
    r.bn = h->bn;
    r.bk = h->bk;
  }
  return r;
}
} // namespace

extern "C" df_tx *df_tx_new(const df_t_device *dev, uint64_t budget, char *err, size_t errlen) {
  if (!dev || (dev->kind != DF_T_DEV_CUDA && dev->kind != DF_T_DEV_TORCH_CPU)) {
    snprintf(err, errlen, "df_tx_new: a CUDA or torch-cpu device is needed");
    return nullptr;
  }
  try {
    auto *tx = new df_tx;
    tx->dev = at_device(dev);
    tx->on_cpu = dev->kind != DF_T_DEV_CUDA;
    tx->budget = budget;
    if (!tx->on_cpu) at::globalContext().setAllowTF32CuBLAS(false);
    return tx;
  } catch (const std::exception &e) {
    snprintf(err, errlen, "df_tx_new: %s", e.what());
    return nullptr;
  }
}

extern "C" void df_tx_destroy(df_tx **tx) {
  if (!tx || !*tx) return;
  delete *tx;
  *tx = nullptr;
}

extern "C" void df_tx_clear(df_tx *tx) {
  tx->experts.clear();
  tx->used = 0;
  tx->held = 0;
}

extern "C" int64_t df_tx_experts(const df_tx *tx) { return tx->held; }
extern "C" uint64_t df_tx_bytes(const df_tx *tx) { return tx->used; }

extern "C" int df_tx_swiglu_ffn(df_tx *tx, const df_t_tensor *x, int64_t row0, int64_t rows,
                                const df_t_tensor *gate_w, const df_t_tensor *up_w,
                                const df_t_tensor *down_w, df_t_tensor *g, df_t_tensor *u,
                                df_t_tensor *y, char *err, size_t errlen) {
  try {
    auto it = tx->experts.find(gate_w);
    if (it == tx->experts.end()) {
      tx_expert e;
      const df_t_tensor *w[3] = {gate_w, up_w, down_w};
      uint64_t nb = 0;
      bool ok = true;
      for (const df_t_tensor *t : w) {
        ok = ok && (stored_ok(t) || (t->dt == DF_DT_F8_E4M3 && t->scale && t->t.dim() == 2));
        nb += stored_bytes(t);
      }
      if (ok && tx->used + nb <= tx->budget) {
        e.gate = tx_upload(tx, gate_w);
        e.up = tx_upload(tx, up_w);
        e.down = tx_upload(tx, down_w);
        tx->used += nb;
        tx->held++;
      }
      it = tx->experts.emplace(gate_w, e).first;
    }
    const tx_expert &e = it->second;
    if (!e.gate.w.defined()) {
      df_t_swiglu_ffn(x, row0, rows, gate_w, up_w, down_w, g, u, y);
      return 0;
    }
    int64_t H = row_elems(x);
    at::Tensor xr = x->t.view({-1, H}).narrow(0, row0, rows).to(tx->dev);
    at::Tensor yr = swiglu(xr, e.gate, e.up, e.down).to(at::kCPU);
    y->t.view({-1, H}).narrow(0, row0, rows).copy_(yr);
    return 1;
  } catch (const std::exception &ex) {
    snprintf(err, errlen, "expert on the device: %s", ex.what());
    return -1;
  }
}
