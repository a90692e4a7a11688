// engine/torch_shim.cpp — libtorch tensors behind the C API of torch_shim.h.
//
// Owns: the df_t_tensor handle (an at::Tensor plus its dtype), op dispatch to the CPU
// kernels, and the float64 libtorch oracles used by tests. Does not own: the mmap (the
// safetensors loader does) or buffer planning (engine/model.c does).
extern "C" {
#include "engine/safetensors.h" // C header without its own extern "C" guard
}
#include "engine/torch_shim.h"

#include <ATen/ATen.h>

#include <ATen/Parallel.h>
#include <omp.h>

#include <cassert>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

extern "C" {
#include "engine/kernels.h"
}

struct df_t_tensor {
  at::Tensor t;
  df_dtype dt;
  bool owned; // memory allocated by the shim (writable)
};

static at::ScalarType to_scalar_type(df_dtype dt, bool *ok) {
  *ok = true;
  switch (dt) {
  case DF_DT_BF16: return at::kBFloat16;
  case DF_DT_F16: return at::kHalf;
  case DF_DT_F32: return at::kFloat;
  case DF_DT_I32: return at::kInt;
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
  return omp_get_max_threads();
}

extern "C" df_t_tensor *df_t_wrap(const void *data, df_dtype dt, int ndim, const int64_t *shape,
                                  char *err, size_t errlen) {
  bool ok;
  at::ScalarType st = to_scalar_type(dt, &ok);
  if (!ok) {
    snprintf(err, errlen, "dtype %s cannot be wrapped as a tensor (expected BF16, F16, F32, I32)",
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
  df_k_linear(cf32(x) + row0 * K, rows, K, K, w->t.data_ptr(), w->dt, N,
              bias ? bias->t.data_ptr() : nullptr, df_t_f32(y) + row0 * N, N);
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
  df_k_linear(xr, rows, H, H, gate_w->t.data_ptr(), gate_w->dt, I, nullptr, gp, ldg);
  df_k_linear(xr, rows, H, H, up_w->t.data_ptr(), up_w->dt, I, nullptr, up, ldg);
  for (int64_t r = 0; r < rows; r++) df_k_silu_mul(gp + r * ldg, up + r * ldg, I);
  df_k_linear(gp, rows, I, ldg, down_w->t.data_ptr(), down_w->dt, H, nullptr,
              df_t_f32(y) + row0 * H, H);
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
    at::Tensor y = at::matmul(xs, w->t.to(at::kDouble).t());
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
