#!/usr/bin/python3
"""tests/reference/dspark_selfcheck.py — the DSpark drafter reference (dspark_ref.py) and its
checkpoint maker (dspark_ckpt.py) check themselves. Not registered in CMake; run by hand.

Drafters are generated under a temporary folder for three committed targets:
tests/fixtures/tiny-moe-tied (qwen3_moe, tied lm_head), tiny-ds-fp8 (kimi_k2, FP8 blocks,
q_lora) and tiny-ds-bf16 (deepseek_v3, untied) — with q_lora 32 / null, YaRN on (mscale_all_dim 1 and 0.8) / off.
Checks, each printed as one PASS/FAIL line:
  (a) no causal mask inside the block: replacing the last mask row by another token changes
      row 0's output; the same replacement under a causal mask leaves row 0 bitwise unchanged
      (so the check can tell the two apart);
  (b) fp64 and fp32 modes agree: max |dz| / max |z| <= 1e-5 on the final logits, same
      proposals, ctx rows and confidence close;
  (c) RoPE: the interleaved pair rotation equals deepseek_ref.Model.rope (HF DeepSeek-V3's
      de-interleave + rotate_half, float32) bitwise after de-interleaving, and a float64
      permute + rotate_half form bitwise; q.k through both forms equal;
  (d) determinism: the same seed writes the same bytes, another seed other bytes; two runs
      give bitwise the same logits and proposals;
  (e) the capture rows equal the target's own residual stream after those layers, bitwise,
      from an independent layer loop over the target reference's methods; the last layer's
      capture through the target's final norm and lm_head gives the target's logits bitwise;
  (f) MLA: the expanded form of dspark_ref equals the absorbed latent form (scores
      q_nope W_UK . c_kv + q_pe . k_pe, output (p @ c_kv) W_UV) to 1e-10 relative in float64;
  (g) Markov head: z_k - raw_k == markov_w2 @ markov_w1[prev_k] with prev chained through the
      proposals; with markov_w2 zeroed the proposals are the raw argmaxes.
Exit status 0 when everything passes. Runtime about 3 s (most of it importing torch).

Usage: dspark_selfcheck.py [--fixtures DIR]
"""

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deepseek_ref as dr  # noqa: E402
import dspark_ckpt as dc  # noqa: E402
import dspark_ref as dsr  # noqa: E402
import qwen3_ref as qr  # noqa: E402

failures = []


def report(ok, what, detail=""):
    print("%s  %s%s" % ("PASS" if ok else "FAIL", what, (": " + detail) if detail else ""), flush=True)
    if not ok:
        failures.append(what)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def make(target, out, *extra):
    a = dc.parser().parse_args(["--target", target, "--out", out] + list(extra))
    dc.write(target, out, a)
    return out


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


CASES = [
    # (fixture, ckpt args, context ids, anchor)
    ("tiny-moe-tied", ["--seed", "11"], [5, 17, 99, 250, 3, 77], 42),
    ("tiny-ds-fp8", ["--seed", "12", "--q-lora", "0", "--capture", "0,2", "--block", "5",
                     "--mscale-all-dim", "0.8"], [300, 12, 7, 480, 91], 9),
    ("tiny-ds-bf16", ["--seed", "13", "--yarn", "false", "--layers", "3", "--mask-id", "500"], [1, 2, 3, 4, 5, 6, 7, 8, 9], 100),
]


def check_capture(name, target, d, ids):
    """(e): independent layer loop over the target's own methods."""
    layer_ids = d.cfg.target_layer_ids
    cap, logits = dsr.capture_hidden(target, ids, layer_ids)
    m = target
    x = m.embed[torch.tensor(ids)]
    pos = torch.arange(len(ids))
    outs = []
    for li, Lw in enumerate(m.layers):
        h = m.rmsnorm(x, Lw["in_norm"])
        x = m.R(x + m.attention(Lw, li, h, pos, None))
        h = m.rmsnorm(x, Lw["post_norm"])
        x = m.R(x + (m.moe(Lw, h) if m.cfg.is_moe[li] else m.swiglu(h, *Lw["mlp"])))
        outs.append(x)
    ref = torch.cat([outs[i] for i in layer_ids], dim=-1)
    ok = cap.dtype == torch.float32 and torch.equal(cap, ref)
    last, _ = dsr.capture_hidden(target, ids, [len(m.layers) - 1])
    ok2 = torch.equal(m.linear(m.rmsnorm(last, m.norm), m.lm_head), logits)
    report(ok and ok2, "(e) %s: capture rows == target residual stream after layers %s" % (name, layer_ids),
           "shape %s" % list(cap.shape))
    return cap


def check_rope(name, d):
    """(c) interleaved rotation vs DeepSeek-V3's de-interleave + rotate_half."""
    c = d.cfg
    drp = c.qk_rope_head_dim
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 11, drp, generator=g, dtype=torch.float64)
    y = torch.randn(3, 11, drp, generator=g, dtype=torch.float64)
    pos = torch.arange(2, 13)
    shim = type("Shim", (), {})()
    shim.cfg = type("C", (), {"rope_interleave": True})()
    shim.inv_freq, shim.attn_factor, shim.R = d.inv_freq, d.attn_factor, qr._ident
    ok = True
    d32 = dsr.Drafter.__new__(dsr.Drafter)
    d32.mode, d32.inv_freq, d32.attn_factor = "fp32", d.inv_freq, d.attn_factor
    x32 = x.float()
    mine32 = d32.rope(x32, pos)
    hf32 = dr.Model.rope(shim, x32, pos)  # deepseek_ref's own code, fp32
    ok &= torch.equal(dr.deinterleave(mine32), hf32)
    # float64: permute + rotate_half with the fp64 tables
    cos, sin = d.rope_cos_sin(pos)
    cos2, sin2 = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    xd = dr.deinterleave(x)
    hf64 = xd * cos2 + qr.rotate_half(xd) * sin2
    mine64 = d.rope(x, pos)
    ok &= torch.equal(dr.deinterleave(mine64), hf64)
    yd = dr.deinterleave(y)
    dots_mine = (mine64 * d.rope(y, pos)).sum(-1)
    dots_hf = (hf64 * (yd * cos2 + qr.rotate_half(yd) * sin2)).sum(-1)
    dot_err = float((dots_mine - dots_hf).abs().max())
    report(ok and dot_err < 1e-12, "(c) %s: interleaved RoPE == DeepSeek de-interleave + rotate_half" % name,
           "fp32 and fp64 bitwise, cos/sin factor %.6g, softmax scale %.6g, q.k max diff %.1e"
           % (d.attn_factor, d.cfg.scaling, dot_err))


def absorbed_block(d, caches, L, block_ids):
    """Block rows through the drafter with MLA in the absorbed (latent) form, float64."""
    c = d.cfg
    nh, dn, drp, dv, KL = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
    h = d.embed[torch.tensor(block_ids)]
    T = len(block_ids)
    pos = torch.arange(L, L + T)
    for Lw, cache in zip(d.layers, caches):
        a = d.rmsnorm(h, Lw["in_norm"])
        if c.q_lora_rank:
            q = d.rmsnorm(a @ Lw["q_a"].t(), Lw["q_a_norm"]) @ Lw["q_b"].t()
        else:
            q = a @ Lw["q"].t()
        q = q.view(T, nh, dn + drp).transpose(0, 1)
        q_nope, q_pe = q[..., :dn], d.rope(q[..., dn:], pos)
        ckv_b, kpe_b = d.latent(Lw, a, pos)
        ckv, kpe = torch.cat((cache[0], ckv_b)), torch.cat((cache[1], kpe_b))
        wkv = Lw["kv_b"].view(nh, dn + dv, KL)
        w_uk, w_uv = wkv[:, :dn, :], wkv[:, dn:, :]  # [nh, dn, KL], [nh, dv, KL]
        q_lat = q_nope @ w_uk  # [nh, T, KL]
        scores = (q_lat @ ckv.t() + q_pe @ kpe.t()) * c.scaling
        p = torch.softmax(scores, -1)
        o = (p @ ckv) @ w_uv.transpose(1, 2)  # [nh, T, dv]
        h = h + o.transpose(0, 1).reshape(T, nh * dv) @ Lw["o"].t()
        h = h + d.swiglu(d.rmsnorm(h, Lw["post_norm"]), *Lw["mlp"])
    return d.rmsnorm(h, d.final_norm)


def run_case(fixtures, tmp, fixture, args, ids, anchor):
    tdir = os.path.join(fixtures, fixture)
    ddir = make(tdir, os.path.join(tmp, fixture), *args)
    target = dsr.load_target(tdir)
    d64 = dsr.Drafter(ddir, target, "fp64")
    d32 = dsr.Drafter(ddir, target, "fp32")
    c = d64.cfg
    with torch.no_grad():
        cap = check_capture(fixture, target, d64, ids)
        r64 = d64.draft(ids, anchor, capture=cap)
        r32 = d32.draft(ids, anchor, capture=cap)
        L, r = r64["L"], len(r64["block_ids"])

        # (a) no causal mask inside the block
        alt = list(r64["block_ids"])
        alt[-1] = ids[0]
        h_alt = d64.block(r64["caches"], L, alt)
        h_c = d64.block(r64["caches"], L, r64["block_ids"], causal=True)
        h_c_alt = d64.block(r64["caches"], L, alt, causal=True)
        moved = float((h_alt[0] - r64["hidden"][0]).abs().max())
        report(moved > 1e-6 and torch.equal(h_c[0], h_c_alt[0]) and not torch.equal(h_c[0], r64["hidden"][0]),
               "(a) %s: row 0 sees the later block rows (no causal mask)" % fixture,
               "replacing row %d moves row 0 by %.3g; causal: unchanged" % (r - 1, moved))

        # (b) fp64 vs fp32
        ez, ec = rel(r32["z"].double(), r64["z"]), rel(r32["ctx"].double(), r64["ctx"])
        econf = max(abs(a - b) for a, b in zip(r32["confidence"], r64["confidence"]))
        report(ez <= 1e-5 and ec <= 1e-5 and econf <= 1e-4 and r32["proposals"] == r64["proposals"],
               "(b) %s: fp32 mode == fp64 mode" % fixture,
               "logits %.1e, ctx %.1e relative, confidence %.1e; proposals %s" % (ez, ec, econf, r64["proposals"]))

        # (c) RoPE forms
        check_rope(fixture, d64)

        # (f) expanded == absorbed MLA
        ha = absorbed_block(d64, r64["caches"], L, r64["block_ids"])
        ea = rel(ha, r64["hidden"])
        report(ea <= 1e-10, "(f) %s: expanded MLA == absorbed latent MLA" % fixture, "%.1e relative" % ea)

        # (g) Markov head chain
        prev, ok = anchor, True
        for k in range(r):
            ok &= torch.allclose(r64["z"][k] - r64["raw_logits"][k], d64.markov_w2 @ d64.markov_w1[prev],
                                 rtol=0, atol=1e-12)
            ok &= r64["proposals"][k] == qr.argmax_low(r64["z"][k])
            prev = r64["proposals"][k]
        w2 = d64.markov_w2
        d64.markov_w2 = torch.zeros_like(w2)
        _, _, toks0, _ = d64.heads(r64["hidden"], anchor)
        d64.markov_w2 = w2
        raw_arg = [qr.argmax_low(x) for x in r64["raw_logits"]]
        changed = sum(int(a != b) for a, b in zip(raw_arg, r64["proposals"]))
        report(ok and toks0 == raw_arg, "(g) %s: sequential Markov head" % fixture,
               "bias moves %d of %d argmaxes" % (changed, r))

        # (d) determinism: same seed same bytes and logits, other seed other bytes
        d2 = make(tdir, os.path.join(tmp, fixture + "-again"), *args)
        args3 = [x for x in args]
        args3[args3.index("--seed") + 1] = str(int(args3[args3.index("--seed") + 1]) + 1)
        d3 = make(tdir, os.path.join(tmp, fixture + "-other"), *args3)
        f1, f2, f3 = (sha(os.path.join(p, "model.safetensors")) for p in (ddir, d2, d3))
        rb = dsr.Drafter(d2, target, "fp64").draft(ids, anchor)
        report(f1 == f2 and f1 != f3 and sha(os.path.join(ddir, "config.json")) == sha(os.path.join(d2, "config.json"))
               and torch.equal(rb["z"], r64["z"]) and rb["proposals"] == r64["proposals"],
               "(d) %s: deterministic checkpoint and proposals" % fixture,
               "q_lora %s, yarn %s, capture %s, mask %d, r %d, top2 gap min %.3g"
               % (c.q_lora_rank, bool(c.rope_scaling), c.target_layer_ids, c.mask_token_id, r,
                  min(dsr.top2_gap(x) for x in r64["z"])))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dspark_selfcheck")
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(HERE), "fixtures"))
    a = ap.parse_args(argv)
    t0 = time.time()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="dspark-selfcheck-")
    try:
        for fixture, args, ids, anchor in CASES:
            run_case(a.fixtures, tmp, fixture, args, ids, anchor)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s  dspark_selfcheck (%d failures, %.1f s)" % ("PASS" if not failures else "FAIL", len(failures), time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
