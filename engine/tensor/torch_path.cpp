// engine/tensor/torch_path.cpp — the torch compute path and the df-node device experts.
//
// Owns: df_tm_* (the qwen3 / qwen3_moe and deepseek_v3 / kimi_k2 forward in at:: operators on
// a CUDA or CPU at::Device: the model's weights uploaded once in their stored dtype, widened
// to fp32 per op) and df_tx_* (routed experts a df-node holds on a device within a byte
// budget, the rest run on the host kernels). Does not own: the df_t_tensor handle, the CPU
// ops, the oracles and device parsing/resolution (engine/tensor/torch_shim.cpp, used here
// through torch_internal.hpp and torch_shim.h; nothing there uses this file), the model's
// configuration, buffer planning and which experts go on the device (engine/model.c with
// engine/device/admission.c), the pinned uploader (engine/device/cuda_rt.c).
//
// Portability: the libtorch 1.13 / 2.x common API as in torch_shim.cpp. RMSNorm and attention
// are spelled in ATen operators (1.13 has neither at::rms_norm nor
// scaled_dot_product_attention); no CUDA header, so a CPU-only libtorch compiles this file
// unchanged; setAllowTF32CuBLAS exists in both (2.9 adds a finer-grained precision API and
// keeps it).
extern "C" {
#include "engine/experts/expert_backend.h"
#include "engine/kv_cache.h"
}
#include "engine/tensor/torch_internal.hpp"
#include "engine/tensor/torch_shim.h"
#include "engine/device/cuda_rt.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

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
  // group (row, choice) pairs by expert id ascending, rows ascending (engine/layers/moe.c)
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
    df_expert_request req = {(int)l, (int)h_exp.size(), h_exp.data(), h_off.data(), xs, ys,
                             nullptr, nullptr, nullptr};
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

// DeepseekV3Attention in the absorbed form of engine/layers/mla.c (mla_forward +
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
