"""tools/train/qwen3_model.py — trainable Qwen3 / Qwen3-MoE (torch.nn) for the demo models.

Owns: the training-time model, written op for op after tests/reference/qwen3_ref.py (fp32
mode) so that a checkpoint saved from it decodes to the same greedy ids there and in the C
engine; the Qwen3-MoE load-balancing loss; conversion to and from the Hugging Face tensor
names. Does not own: data, optimisation or file writing (train.py, export.py).

Semantics (transformers modeling_qwen3_moe.py / modeling_qwen3.py):
  RMSNorm(x) = w * (x * rsqrt(mean(x^2) + eps)); q_norm/k_norm on each head's head_dim
  slice before RoPE; RoPE with rotate_half pairing (i, i + d/2), inv_freq =
  1 / theta^(arange(0, d, 2) / d); causal GQA attention (query head h reads kv head
  h // (n_head / n_head_kv)), scale head_dim^-0.5, fp32 softmax; MoE router
  p = softmax(gate(x)), top-k (descending, lower index first on ties), p_k /= sum(p_k) when
  norm_topk_prob, out = sum over slots in router order of p_k * down(silu(gate(x)) * up(x));
  logits = norm(x) @ embed^T (tie_word_embeddings: true).

Compact vocabulary. The checkpoint keeps the real Qwen3 vocabulary (151936 rows), but only
tokens seen in the training text get a trainable row; every other row of the tied embedding
is zero and never touched, so its logit is exactly 0. The model therefore holds
`embed` [n_active, hidden] for the sorted ids `active_ids`, and the full-vocabulary
log-softmax is computed exactly from the compact logits plus one term for the
(vocab_size - n_active) zero logits: logsumexp(full) = logsumexp(compact, log(n_zero)).
An input token without a row (seen only in held-out text) embeds to the zero vector, as it
does in the checkpoint.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Shape:
    """The Hugging Face config keys the model reads (qwen3_moe or qwen3)."""

    def __init__(self, cfg):
        self.model_type = cfg["model_type"]
        self.vocab_size = int(cfg["vocab_size"])
        self.hidden = int(cfg["hidden_size"])
        self.layers = int(cfg["num_hidden_layers"])
        self.n_head = int(cfg["num_attention_heads"])
        self.n_kv = int(cfg["num_key_value_heads"])
        self.head_dim = int(cfg["head_dim"])
        self.inter = int(cfg["intermediate_size"])
        self.eps = float(cfg["rms_norm_eps"])
        self.theta = float(cfg["rope_theta"])
        assert cfg.get("rope_scaling") is None and cfg.get("tie_word_embeddings") is True
        assert not cfg.get("attention_bias", False)
        moe = self.model_type == "qwen3_moe"
        self.n_exp = int(cfg["num_experts"]) if moe else 0
        self.top_k = int(cfg["num_experts_per_tok"]) if moe else 0
        self.moe_inter = int(cfg["moe_intermediate_size"]) if moe else 0
        self.norm_topk = bool(cfg["norm_topk_prob"]) if moe else False
        step = int(cfg.get("decoder_sparse_step", 1)) if moe else 1
        only = list(cfg.get("mlp_only_layers") or []) if moe else []
        self.is_moe = [moe and self.n_exp > 0 and i not in only and (i + 1) % step == 0
                       for i in range(self.layers)]


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, s, std, out_std):
        super().__init__()
        H, hd = s.hidden, s.head_dim
        self.s = s
        self.q = nn.Parameter(torch.randn(s.n_head * hd, H) * std)
        self.k = nn.Parameter(torch.randn(s.n_kv * hd, H) * std)
        self.v = nn.Parameter(torch.randn(s.n_kv * hd, H) * std)
        self.o = nn.Parameter(torch.randn(H, s.n_head * hd) * out_std)
        self.q_norm = nn.Parameter(torch.ones(hd))
        self.k_norm = nn.Parameter(torch.ones(hd))

    def forward(self, x, cos, sin, mask):
        # x [B, T, H]; cos/sin [T, hd]; mask [T, T] bool (True = masked)
        s = self.s
        B, T, _ = x.shape
        nh, kv, hd = s.n_head, s.n_kv, s.head_dim
        q = (x @ self.q.t()).view(B, T, nh, hd)
        k = (x @ self.k.t()).view(B, T, kv, hd)
        v = (x @ self.v.t()).view(B, T, kv, hd)
        q = rms_norm(q, self.q_norm, s.eps).transpose(1, 2)  # [B, nh, T, hd]
        k = rms_norm(k, self.k_norm, s.eps).transpose(1, 2)  # [B, kv, T, hd]
        v = v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = nh // kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-1, -2)) * (hd ** -0.5)
        scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        out = (probs @ v).transpose(1, 2).reshape(B, T, nh * hd)
        return out @ self.o.t()


class DenseMLP(nn.Module):
    def __init__(self, H, inter, std, out_std):
        super().__init__()
        self.gate = nn.Parameter(torch.randn(inter, H) * std)
        self.up = nn.Parameter(torch.randn(inter, H) * std)
        self.down = nn.Parameter(torch.randn(H, inter) * out_std)

    def forward(self, x):
        return (F.silu(x @ self.gate.t()) * (x @ self.up.t())) @ self.down.t()


class MoE(nn.Module):
    """Softmax router, top-k, optional renormalisation, SwiGLU experts; outputs of the k
    slots are added in router order (descending weight), as the reference does."""

    def __init__(self, s, std, out_std, router_std):
        super().__init__()
        E, I, H = s.n_exp, s.moe_inter, s.hidden
        self.s = s
        self.router = nn.Parameter(torch.randn(E, H) * router_std)
        self.gate = nn.Parameter(torch.randn(E, I, H) * std)
        self.up = nn.Parameter(torch.randn(E, I, H) * std)
        self.down = nn.Parameter(torch.randn(E, H, I) * out_std)

    def forward(self, x):
        # x [N, H] -> (out [N, H], router logits [N, E], chosen experts [N, k])
        s = self.s
        N = x.shape[0]
        E, K = s.n_exp, s.top_k
        logits = x @ self.router.t()
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        order = torch.sort(probs, dim=-1, descending=True, stable=True).indices
        sel = order[:, :K]
        w = torch.gather(probs, 1, sel)
        if s.norm_topk:
            w = w / w.sum(dim=-1, keepdim=True)
        flat = sel.reshape(-1)  # slot j of token t at t * K + j
        idx = torch.sort(flat, stable=True).indices
        counts = torch.bincount(flat, minlength=E).tolist()
        wflat = w.reshape(-1)
        parts = []
        start = 0
        gates, ups, downs = self.gate.unbind(0), self.up.unbind(0), self.down.unbind(0)
        for e in range(E):
            n = counts[e]
            if n == 0:
                continue
            pick = idx[start:start + n]
            start += n
            xe = x[pick // K]
            ye = (F.silu(xe @ gates[e].t()) * (xe @ ups[e].t())) @ downs[e].t()
            parts.append(ye * wflat[pick][:, None])
        y = x.new_zeros(N * K, s.hidden).index_copy(0, idx, torch.cat(parts, 0)).view(N, K, s.hidden)
        acc = y[:, 0]
        for j in range(1, K):
            acc = acc + y[:, j]
        return acc, logits, sel


class Layer(nn.Module):
    def __init__(self, s, i, std, out_std, router_std):
        super().__init__()
        H = s.hidden
        self.s = s
        self.moe = s.is_moe[i]
        self.in_norm = nn.Parameter(torch.ones(H))
        self.post_norm = nn.Parameter(torch.ones(H))
        self.attn = Attention(s, std, out_std)
        if self.moe:
            self.mlp = MoE(s, std, out_std, router_std)
        else:
            self.mlp = DenseMLP(H, s.inter, std, out_std)

    def forward(self, x, cos, sin, mask, router_out):
        s = self.s
        x = x + self.attn(rms_norm(x, self.in_norm, s.eps), cos, sin, mask)
        h = rms_norm(x, self.post_norm, s.eps)
        if self.moe:
            B, T, H = h.shape
            m, logits, sel = self.mlp(h.reshape(B * T, H))
            router_out.append((logits, sel))
            m = m.view(B, T, H)
        else:
            m = self.mlp(h)
        return x + m


class Qwen3LM(nn.Module):
    def __init__(self, cfg, active_ids, embed=None, seed_std=0.02):
        """cfg: Hugging Face config dict; active_ids: sorted int64 tensor of the token ids
        that own an embedding row; embed: optional [n_active, H] initial rows (a draft takes
        its target's table and freezes it)."""
        super().__init__()
        s = Shape(cfg)
        self.s = s
        H = s.hidden
        self.register_buffer("active_ids", active_ids.clone().long(), persistent=False)
        lookup = torch.full((s.vocab_size,), len(active_ids), dtype=torch.long)
        lookup[active_ids] = torch.arange(len(active_ids))
        self.register_buffer("lookup", lookup, persistent=False)  # full id -> row (n_active = zero row)
        std = seed_std
        out_std = seed_std / math.sqrt(2 * s.layers)
        if embed is None:
            self.embed = nn.Parameter(torch.randn(len(active_ids), H) * std)
        else:
            self.embed = nn.Parameter(embed.detach().clone())
        self.layers = nn.ModuleList(Layer(s, i, std, out_std, std) for i in range(s.layers))
        self.norm = nn.Parameter(torch.ones(H))
        inv = 1.0 / (s.theta ** (torch.arange(0, s.head_dim, 2, dtype=torch.int64).to(dtype=torch.float) / s.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)
        self.log_zero_rows = math.log(s.vocab_size - len(active_ids))

    def n_params(self, include_embed=False):
        return sum(p.numel() for n, p in self.named_parameters() if include_embed or n != "embed")

    def hidden(self, ids):
        """ids [B, T] full vocabulary ids (a fresh sequence each) -> (final normed hidden
        [B, T, H], router outputs per MoE layer [(logits [B*T, E], chosen [B*T, k])])."""
        s = self.s
        B, T = ids.shape
        rows = self.lookup[ids]
        table = torch.cat((self.embed, self.embed.new_zeros(1, s.hidden)), 0)
        x = table[rows]
        pos = torch.arange(T)
        freqs = pos.to(torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.arange(T)[None, :] > torch.arange(T)[:, None]
        router = []
        for layer in self.layers:
            x = layer(x, cos, sin, mask, router)
        return rms_norm(x, self.norm, s.eps), router

    def compact_logits(self, h):
        return h @ self.embed.t()

    def full_logits(self, ids):
        """ids [T] -> float32 logits [T, vocab_size] over the real vocabulary."""
        h, _ = self.hidden(ids[None])
        c = self.compact_logits(h[0])
        out = c.new_zeros(c.shape[0], self.s.vocab_size)
        out[:, self.active_ids] = c
        return out

    def nll(self, h, targets, chunk=224):
        """Exact full-vocabulary negative log-likelihood per position: h [N, H], targets [N]
        full ids -> [N]. Chunked so the [N, n_active] logits never exist at once."""
        out = []
        n_active = self.embed.shape[0]
        for a in range(0, h.shape[0], chunk):
            c = self.compact_logits(h[a:a + chunk])
            t = self.lookup[targets[a:a + chunk]]
            lse = torch.logaddexp(torch.logsumexp(c, dim=1), c.new_tensor(self.log_zero_rows))
            seen = t < n_active
            tl = torch.gather(c, 1, t.clamp(max=n_active - 1)[:, None])[:, 0]
            tl = torch.where(seen, tl, torch.zeros_like(tl))
            out.append(lse - tl)
        return torch.cat(out)


class _TiedCrossEntropy(torch.autograd.Function):
    """Per-position full-vocabulary NLL of targets that all own a row: h [N, H],
    table [n_active, H], rows [N] (compact indices), log_zero = log(vocab - n_active).
    Equal to the generic path of Qwen3LM.nll; it only saves memory passes over the
    [N, n_active] logits (backward turns the saved logits into softmax in place)."""

    @staticmethod
    def forward(ctx, h, table, rows, log_zero):
        logits = h @ table.t()
        lse = torch.logaddexp(torch.logsumexp(logits, dim=1), logits.new_tensor(log_zero))
        nll = lse - torch.gather(logits, 1, rows[:, None])[:, 0]
        ctx.save_for_backward(h, table, rows, logits, lse)
        return nll

    @staticmethod
    def backward(ctx, grad):
        h, table, rows, logits, lse = ctx.saved_tensors
        p = logits  # not used again: reuse its memory
        p.sub_(lse[:, None]).exp_()
        p[torch.arange(p.shape[0]), rows] -= 1.0
        p.mul_(grad[:, None])
        gh = p @ table if ctx.needs_input_grad[0] else None
        gt = p.t() @ h if ctx.needs_input_grad[1] else None
        return gh, gt, None, None


# Rows per logits chunk: [224, ~34k] fp32 stays under glibc's largest mmap threshold (32 MiB),
# so the buffers are reused from the heap instead of being mapped and zeroed on every step.
CHUNK_ROWS = 224


def tied_cross_entropy(model, h, targets):
    """Training loss path: targets [N] full ids, every one with a row -> NLL [N]."""
    rows = model.lookup[targets]
    assert int(rows.max()) < model.embed.shape[0], "training target without an embedding row"
    return torch.cat([_TiedCrossEntropy.apply(h[a:a + CHUNK_ROWS], model.embed, rows[a:a + CHUNK_ROWS],
                                              model.log_zero_rows)
                      for a in range(0, h.shape[0], CHUNK_ROWS)])


def distillation_loss(student, h, teacher, th):
    """Soft cross-entropy of the student against the teacher's full-vocabulary next-token
    distribution (knowledge distillation at temperature 1, Hinton et al. 2015), per position:
    h [N, H] student hidden, th [N, H] teacher hidden (no grad) -> [N].

    Both models share the same tied table rows (the draft's frozen copy of the target's), so
    every token without a row has logit 0 in both. With P the teacher's and Q the student's
    distribution over all vocab_size tokens, CE(P, Q) = -sum_i P_i log Q_i
    = lse_Q - sum_{rows} p_i * l_i (the zero-logit tokens add P_zero * 0), where
    lse_Q = logaddexp(logsumexp(rows), log(vocab - n_active)) and p_i are the teacher's
    probabilities of the rows; KL(P || Q) differs from it by the teacher's entropy only."""
    out = []
    for a in range(0, h.shape[0], CHUNK_ROWS):
        with torch.no_grad():
            lt = th[a:a + CHUNK_ROWS] @ teacher.embed.t()
            lse_t = torch.logaddexp(torch.logsumexp(lt, dim=1), lt.new_tensor(teacher.log_zero_rows))
            pt = (lt - lse_t[:, None]).exp_()
        ls = h[a:a + CHUNK_ROWS] @ student.embed.t()
        lse_s = torch.logaddexp(torch.logsumexp(ls, dim=1), ls.new_tensor(student.log_zero_rows))
        out.append(lse_s - (pt * ls).sum(dim=1))
    return torch.cat(out)


def tune_malloc():
    """Keep freed buffers up to 32 MiB in the heap (glibc): M_MMAP_THRESHOLD 32 MiB,
    M_TRIM_THRESHOLD 1 GiB. Speed only; no effect on results."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 * 1024 * 1024)
        libc.mallopt(-1, 1024 * 1024 * 1024)
    except OSError:
        pass


def load_balancing_loss(router, n_exp, top_k):
    """transformers' load_balancing_loss_func (Qwen3-MoE) on the router outputs given:
    E * sum_e sum_slot (fraction of tokens whose slot picks e) * (mean router prob of e);
    top_k when balanced. transformers passes every MoE layer's logits at once (concatenated
    over tokens); train.py applies it to each layer separately (per_layer_balancing_loss)."""
    if not router:
        return torch.zeros(())
    logits = torch.cat([r[0] for r in router], 0)
    sel = torch.cat([r[1] for r in router], 0)
    probs = torch.softmax(logits, dim=-1)
    mask = F.one_hot(sel, n_exp).float()  # [N, k, E]
    tokens_per_expert = mask.mean(0)  # [k, E]
    prob_per_expert = probs.mean(0)  # [E]
    return (tokens_per_expert * prob_per_expert[None, :]).sum() * n_exp


def per_layer_balancing_loss(router, n_exp, top_k):
    """[n_moe_layers] load_balancing_loss of each MoE layer on its own. Concatenating the
    layers lets each layer collapse onto its own few experts while the pooled statistics
    still look balanced; one term per layer balances every layer."""
    return torch.stack([load_balancing_loss([r], n_exp, top_k) for r in router])


# ---------------------------------------------------------------------------------------------
# Hugging Face tensor names


def hf_tensors(model):
    """{name: float32 tensor} in Hugging Face layout, embed_tokens as the full [V, H] table."""
    s = model.s
    out = {}
    full = torch.zeros(s.vocab_size, s.hidden)
    full[model.active_ids] = model.embed.detach()
    out["model.embed_tokens.weight"] = full
    for i, L in enumerate(model.layers):
        p = "model.layers.%d." % i
        out[p + "input_layernorm.weight"] = L.in_norm
        out[p + "self_attn.q_proj.weight"] = L.attn.q
        out[p + "self_attn.k_proj.weight"] = L.attn.k
        out[p + "self_attn.v_proj.weight"] = L.attn.v
        out[p + "self_attn.o_proj.weight"] = L.attn.o
        out[p + "self_attn.q_norm.weight"] = L.attn.q_norm
        out[p + "self_attn.k_norm.weight"] = L.attn.k_norm
        out[p + "post_attention_layernorm.weight"] = L.post_norm
        if L.moe:
            out[p + "mlp.gate.weight"] = L.mlp.router
            for e in range(s.n_exp):
                q = p + "mlp.experts.%d." % e
                out[q + "gate_proj.weight"] = L.mlp.gate[e]
                out[q + "up_proj.weight"] = L.mlp.up[e]
                out[q + "down_proj.weight"] = L.mlp.down[e]
        else:
            out[p + "mlp.gate_proj.weight"] = L.mlp.gate
            out[p + "mlp.up_proj.weight"] = L.mlp.up
            out[p + "mlp.down_proj.weight"] = L.mlp.down
    out["model.norm.weight"] = model.norm
    return {k: v.detach().to(torch.float32).contiguous() for k, v in out.items()}


@torch.no_grad()
def round_to_bf16_(model):
    """Round every parameter to bfloat16 in place (what the checkpoint stores)."""
    for p in model.parameters():
        p.copy_(p.to(torch.bfloat16).to(torch.float32))
