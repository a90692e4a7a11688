#!/usr/bin/python3
"""tests/reference/selfcheck.py — the reference checks itself and the committed fixtures.

Owns: the ctest `reference_selfcheck`. Checks, each printed as one PASS/FAIL line:
  * float32 -> bf16 conversion equals torch's .to(torch.bfloat16) (ties to even, NaN, inf,
    subnormals, overflow);
  * safetensors writer -> reader round trip is exact (BF16/F16/F32, scalar and empty tensors,
    single file and 3 shards + index), rewriting what was read gives the same bytes, and
    malformed files are refused;
  * for every tests/fixtures/tiny-*/golden.json: regenerating the checkpoint with
    make_checkpoint.py reproduces the committed files byte for byte (sha256); the fp32
    reference reproduces golden_logits.f32, golden_step_logits.f32 and greedy_ids;
  * the KV-cached path (one token at a time, and chunked prefill) equals the full-sequence
    path within 2e-4 on every fixture and on extra generated shapes (attention_bias, linear
    RoPE, F16 and F32 storage; a deepseek_v3 with FP8 128x128 blocks and plain RoPE);
  * fixtures of every family (qwen3_ref.py, deepseek_ref.py, kimi_linear_ref.py by model_type);
  * Kimi Linear: the --no-cache greedy path equals the cached one; the KDA recurrence equals
    the float64 matrix form S = (I - beta k k^T) Diag(exp g) S + beta k v^T; the two decay-gate
    forms give different logits; a zero-padded A_log [>= H], an unpadded [H] and the 48B
    [1, 1, H, 1] layout with the same first H values give bitwise equal logits, and so do the
    kimi_k3 wrapper (text_config + language_model. prefix) and the bare kimi_linear folder;
    the conv windows, recurrent state and K/V after a prefill equal those after the same
    tokens one at a time; kimi_linear_ckpt.py --header-only writes a consistent header-only
    copy of the real Kimi-Linear-48B-A3B folder.
Writes only under a temporary folder. Exit status 0 when everything passes.

Usage: selfcheck.py [--fixtures DIR]   (default: tests/fixtures next to this folder)
"""

import argparse
import copy
import glob
import json
import os
import struct
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deepseek_ckpt as dc  # noqa: E402
import deepseek_ref as dr  # noqa: E402
import kimi_linear_ckpt as klc  # noqa: E402
import kimi_linear_ref as klr  # noqa: E402
import make_checkpoint as mc  # noqa: E402
import qwen3_ref as qr  # noqa: E402
import safetensors_io as st  # noqa: E402

CACHE_TOL = 2e-4   # cached vs full-sequence logits (fp32 matmul shapes differ)
GOLDEN_TOL = 1e-4  # recomputed vs committed golden logits (other CPU / BLAS)

failures = []


def report(ok, what, detail=""):
    print("%s  %s%s" % ("PASS" if ok else "FAIL", what, (": " + detail) if detail else ""), flush=True)
    if not ok:
        failures.append(what)


# ---------------------------------------------------------------------------------------------


def check_bf16():
    rng = np.random.default_rng(7)
    x = np.concatenate([
        rng.standard_normal(10000).astype(np.float32) * np.float32(1e3),
        np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.4028235e38, -3.4028235e38,
                  1e-40, -1e-40, 1.0039062, 1.0117188, 1.00390625, 1.01171875], dtype=np.float32),
        # exact halfway cases: low 16 bits 0x8000, even and odd kept bit
        (np.arange(0x3F800000, 0x3F800000 + 0x40000, 0x8000, dtype=np.uint32)).view(np.float32),
    ])
    ours = st.f32_to_bf16(x)
    ref = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    nan = np.isnan(x)
    same = np.array_equal(ours[~nan], ref[~nan]) and np.all((ours[nan] & 0x7FFF) > 0x7F80)
    back = st.bf16_to_f32(ours[~nan])
    exact = np.array_equal(back, torch.from_numpy(x[~nan]).to(torch.bfloat16).float().numpy())
    report(same and exact, "bf16 conversion matches torch (RNE, specials)")


def check_safetensors(tmp):
    rng = np.random.default_rng(11)
    tensors = []
    for i, (dt, shape) in enumerate([("BF16", [7, 5]), ("F32", [3]), ("F16", [2, 3, 4]), ("BF16", []),
                                     ("F32", [0, 3]), ("BF16", [1]), ("F16", [5]), ("F32", [4, 4])]):
        n = int(np.prod(shape))
        if dt == "BF16":
            a = rng.integers(0, 65536, n, dtype=np.uint16)
        elif dt == "F16":
            a = rng.standard_normal(n).astype(np.float16)
        else:
            a = rng.standard_normal(n).astype(np.float32)
        tensors.append(("t.%d.%s" % (i, dt.lower()), dt, shape, a.reshape(shape)))
    for shards in (1, 3):
        d = os.path.join(tmp, "st%d" % shards)
        specs = [st.TensorSpec(n, dt, sh, data=a) for n, dt, sh, a in tensors]
        files = st.save_checkpoint(d, specs, n_shards=shards)
        ck = st.Checkpoint(d)
        ok = ck.names == sorted(n for n, _, _, _ in tensors)
        for n, dt, sh, a in tensors:
            b = ck.array(n)
            ok = ok and ck.dtype(n) == dt and ck.shape(n) == sh and b.dtype == a.dtype \
                and np.array_equal(b.reshape(-1).view(np.uint8), np.ascontiguousarray(a).reshape(-1).view(np.uint8))
        # rewrite what was read: same bytes
        d2 = os.path.join(tmp, "st%d-again" % shards)
        specs2 = [st.TensorSpec(n, dt, sh, data=np.array(ck.array(n))) for n, dt, sh, _ in tensors]
        files2 = st.save_checkpoint(d2, specs2, n_shards=shards)
        ok = ok and files == files2 and all(
            st.sha256_file(os.path.join(d, f)) == st.sha256_file(os.path.join(d2, f)) for f in files)
        if shards > 1:
            with open(os.path.join(d, st.INDEX_NAME)) as f:
                idx = json.load(f)
            ok = ok and idx["metadata"]["total_size"] == sum(a.nbytes for _, _, _, a in tensors) \
                and len(set(idx["weight_map"].values())) == shards
        report(ok, "safetensors round trip, %d file(s)" % shards)

    # malformed files are refused
    good = os.path.join(tmp, "st1", st.SINGLE_NAME)
    raw = open(good, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    cases = {
        "short file": raw[:5],
        "header past end": struct.pack("<Q", len(raw)) + raw[8:],
        "bad json": raw[:8] + b"{" * n + raw[8 + n:],
        "truncated data": raw[:-3],
    }
    bad = dict(head)
    first = sorted((k for k in bad if k != "__metadata__"), key=lambda k: bad[k]["data_offsets"][0])[0]
    bad[first] = dict(bad[first], shape=[999])
    text = json.dumps(bad).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    cases["shape/offset mismatch"] = struct.pack("<Q", len(text)) + text + raw[8 + n:]
    refused = []
    for name, blob in cases.items():
        p = os.path.join(tmp, "bad.safetensors")
        with open(p, "wb") as f:
            f.write(blob)
        try:
            st.StFile(p)
        except st.SafetensorsError:
            refused.append(name)
    report(len(refused) == len(cases), "safetensors reader refuses malformed files",
           "accepted: %s" % sorted(set(cases) - set(refused)) if len(refused) != len(cases) else "")


# ---------------------------------------------------------------------------------------------


def cache_vs_full(model, ids, label):
    """Max |cached - full| over all positions for token-by-token and chunked prefill."""
    with torch.no_grad():
        full = model.forward(ids)
        cache = model.new_cache()
        one = torch.cat([model.forward([t], cache) for t in ids])
        cache = model.new_cache()
        chunks, i, sizes = [], 0, [13, 1, 7, 29]
        while i < len(ids):
            n = sizes[len(chunks) % len(sizes)]
            chunks.append(model.forward(ids[i:i + n], cache))
            i += n
        chunked = torch.cat(chunks)
    d1 = float((one - full).abs().max())
    d2 = float((chunked - full).abs().max())
    same_argmax = bool(torch.equal(one.argmax(-1), full.argmax(-1)))
    report(d1 <= CACHE_TOL and d2 <= CACHE_TOL and same_argmax,
           "%s: KV-cached == full sequence" % label, "token-by-token %.2e, chunked %.2e" % (d1, d2))


def check_fixture(gpath, tmp):
    fdir = os.path.dirname(gpath)
    name = os.path.basename(fdir)
    with open(gpath) as f:
        g = json.load(f)

    # 1. the checkpoint regenerates byte for byte
    regen = os.path.join(tmp, "regen-" + name)
    _, files, _ = mc.write_preset(g["model"], regen)
    committed = sorted(f for f in os.listdir(fdir)
                       if f.endswith(".safetensors") or f in ("config.json", "generation_config.json", st.INDEX_NAME))
    diffs = [f for f in files if not os.path.exists(os.path.join(fdir, f))
             or st.sha256_file(os.path.join(fdir, f)) != st.sha256_file(os.path.join(regen, f))]
    report(not diffs and sorted(files) == committed, "%s: checkpoint regenerates byte for byte" % name,
           "differs: %s" % (diffs or sorted(set(committed) ^ set(files))) if diffs or sorted(files) != committed else "")

    # 2. the reference reproduces the goldens
    model = dr.model_for(fdir, "fp32")
    V = model.cfg.vocab_size
    gl = np.fromfile(os.path.join(fdir, g["logits_file"]), dtype="<f4")
    ok_shape = gl.size == g["logits_shape"][0] * g["logits_shape"][1] and g["logits_shape"][1] == V \
        and g["logits_shape"][0] == len(g["prompt_ids"])
    with torch.no_grad():
        ids, pl, steps = qr.generate(model, g["prompt_ids"], len(g["greedy_ids"]))
    d = float(np.abs(pl.numpy() - gl.reshape(-1, V)).max()) if ok_shape else float("inf")
    report(ok_shape and d <= GOLDEN_TOL, "%s: fp32 prompt logits == %s" % (name, g["logits_file"]), "max |diff| %.2e" % d)
    report(ids == g["greedy_ids"], "%s: greedy ids == golden" % name)
    if "step_logits_file" in g:
        sl = np.fromfile(os.path.join(fdir, g["step_logits_file"]), dtype="<f4").reshape(-1, V)
        ds = float(np.abs(torch.stack(steps).numpy() - sl).max()) if sl.shape[0] == len(steps) else float("inf")
        report(ds <= GOLDEN_TOL, "%s: fp32 step logits == %s" % (name, g["step_logits_file"]), "max |diff| %.2e" % ds)

    # 3. cached == full over prompt + continuation
    cache_vs_full(model, g["prompt_ids"] + g["greedy_ids"][:-1], name)


def check_extra_shapes(tmp):
    base = mc.preset_args("tiny-moe-sparse")["config"]
    extras = {
        "attention_bias+linear-rope+f32": (dict(base, attention_bias=True, num_hidden_layers=2,
                                                rope_scaling={"rope_type": "linear", "factor": 2.0}), "F32"),
        "dense+f16+mha": (dict(mc.preset_args("tiny-dense")["config"], num_key_value_heads=4,
                               rope_scaling=None, head_dim=16), "F16"),
        "moe-top1+tied+gqa4": (dict(base, num_experts=4, num_experts_per_tok=1, num_hidden_layers=2,
                                    num_key_value_heads=1, tie_word_embeddings=True), "BF16"),
    }
    rng = np.random.default_rng(5)
    # deepseek_v3: q_a/q_b + FP8 with 128x128 blocks over a partial block, non-interleaved RoPE,
    # plain RoPE (no mscale), moe_layer_freq 2
    ds = dict(mc.preset_args("tiny-ds-fp8")["config"], model_type="deepseek_v3", fp8_block=[128, 128],
              rope_scaling=None, rope_interleave=False, moe_layer_freq=2, num_hidden_layers=4,
              n_group=2, topk_group=1)
    d = os.path.join(tmp, "extra-deepseek")
    dc.write_checkpoint(d, ds, 78, 1)
    model = dr.model_for(d, "fp32")
    report(model.cfg.is_moe == [False, False, True, False] and not model.cfg.rope_interleave,
           "deepseek extra: layer map and rope_interleave false read")
    cache_vs_full(model, [int(x) for x in rng.integers(0, ds["vocab_size"], 40)], "deepseek+fp8-128+q_lora")
    for label, (cfg, dtype) in extras.items():
        d = os.path.join(tmp, "extra-" + label.replace("+", "-"))
        mc.write_checkpoint(d, cfg, 77, 1, dtype)
        model = qr.Model(d, "fp32")
        ids = [int(x) for x in rng.integers(0, cfg["vocab_size"], 40)]
        cache_vs_full(model, ids, label)


def _kl_logits(d, ids):
    with torch.no_grad():
        return klr.Model(d, "fp32").forward(ids)


def check_kimi_linear(tmp, fixtures):
    rng = np.random.default_rng(9)
    ids = [int(x) for x in rng.integers(0, 510, 24)]

    # greedy --no-cache path == cached path (ids and step logits)
    fx = os.path.join(fixtures, "tiny-kl-48b")
    if os.path.exists(os.path.join(fx, "golden.json")):
        m = klr.Model(fx, "fp32")
        with open(os.path.join(fx, "golden.json")) as f:
            g = json.load(f)
        with torch.no_grad():
            a_ids, a_pl, a_st = qr.generate(m, g["prompt_ids"][:32], 12, use_cache=True)
            b_ids, b_pl, b_st = qr.generate(m, g["prompt_ids"][:32], 12, use_cache=False)
        d = float((torch.stack(a_st) - torch.stack(b_st)).abs().max())
        report(a_ids == b_ids and d <= CACHE_TOL, "kimi_linear: greedy --no-cache == cached", "step logits %.2e" % d)

    # the recurrence against the float64 matrix form
    T, H, Dk, Dv = 9, 3, 8, 6
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(T, H, Dk, generator=gen)
    k = torch.randn(T, H, Dk, generator=gen)
    q = q / q.norm(dim=-1, keepdim=True) * Dk ** -0.5
    k = k / k.norm(dim=-1, keepdim=True)
    v = torch.randn(T, H, Dv, generator=gen)
    g = -torch.rand(T, H, Dk, generator=gen) * 2
    beta = torch.rand(T, H, generator=gen)
    S0 = torch.randn(H, Dk, Dv, generator=gen) * 0.1
    o, S = klr.kda_recurrence(q, k, v, g, beta, S0.clone())
    Sd = S0.double()
    od = []
    for t in range(T):
        rows = []
        for h in range(H):
            kk = k[t, h].double()
            A = (torch.eye(Dk, dtype=torch.float64) - beta[t, h].double() * torch.outer(kk, kk)) \
                @ torch.diag(torch.exp(g[t, h].double()))
            Sd[h] = A @ Sd[h] + beta[t, h].double() * torch.outer(kk, v[t, h].double())
            rows.append(Sd[h].t() @ q[t, h].double())
        od.append(torch.stack(rows))
    d = max(float((o.double() - torch.stack(od)).abs().max()), float((S.double() - Sd).abs().max()))
    report(d <= 1e-5, "kimi_linear: KDA recurrence == float64 matrix form", "max |diff| %.2e" % d)

    # prefill of n tokens leaves the state that n single steps leave (conv windows, S, K/V)
    p = mc.preset_args("tiny-kl-mixed")
    d0 = os.path.join(tmp, "kl-mixed")
    klc.write_checkpoint(d0, p["config"], p["seed"], 1, p["knobs"])
    m = klr.Model(d0, "fp32")
    with torch.no_grad():
        c1, c2 = m.new_cache(), m.new_cache()
        m.forward(ids, c1)
        for t in ids:
            m.forward([t], c2)
    ds = 0.0
    for li in range(m.cfg.num_hidden_layers):
        if m.cfg.is_kda[li]:
            ds = max(ds, float((c1.state[li] - c2.state[li]).abs().max()))
            ds = max(ds, max(float((a - b).abs().max()) for a, b in zip(c1.conv[li], c2.conv[li])))
        else:
            ds = max(ds, float((c1.k[li] - c2.k[li]).abs().max()), float((c1.v[li] - c2.v[li]).abs().max()))
    report(ds <= CACHE_TOL, "kimi_linear: prefill state == single-step state", "max |diff| %.2e" % ds)

    # the two decay-gate forms differ (same weights, gate_lower_bound toggled)
    base = mc.preset_args("tiny-kl-48b")
    da = os.path.join(tmp, "kl-softplus")
    klc.write_checkpoint(da, base["config"], base["seed"], 1, base["knobs"])
    cfg_lb = copy.deepcopy(base["config"])
    cfg_lb["linear_attn_config"]["gate_lower_bound"] = -5.0
    db = os.path.join(tmp, "kl-lowerbound")
    klc.write_checkpoint(db, cfg_lb, base["seed"], 1, base["knobs"])
    la, lb = _kl_logits(da, ids), _kl_logits(db, ids)
    mb = klr.Model(db, "fp32")
    report(mb.cfg.gate_lower_bound == -5.0 and float((la - lb).abs().max()) > 1e-2,
           "kimi_linear: softplus and lower-bound decay gates differ", "max |diff| %.3g" % float((la - lb).abs().max()))

    # A_log layouts: [1,1,H,1] (48B) == [H] and zero padded [>= H] == [H] (K3), bitwise
    dflat = os.path.join(tmp, "kl-48b-flat")
    klc.write_checkpoint(dflat, base["config"], base["seed"], 1, dict(base["knobs"], a_log_layout="flat"))
    ok48 = torch.equal(la, _kl_logits(dflat, ids))
    k3 = mc.preset_args("tiny-kl-k3gate")
    dpad = os.path.join(tmp, "kl-k3-pad")
    dunp = os.path.join(tmp, "kl-k3-unpadded")
    dbare = os.path.join(tmp, "kl-k3-bare")
    klc.write_checkpoint(dpad, k3["config"], k3["seed"], 1, k3["knobs"])
    klc.write_checkpoint(dunp, k3["config"], k3["seed"], 1, dict(k3["knobs"], a_log_pad=0))
    klc.write_checkpoint(dbare, k3["config"], k3["seed"], 1, dict(k3["knobs"], wrapper=False))
    ck_pad, ck_unp = st.Checkpoint(dpad), st.Checkpoint(dunp)
    name = "language_model.model.layers.0.self_attn.A_log"
    H = k3["config"]["linear_attn_config"]["num_heads"]
    shapes_ok = ck_pad.shape(name) == [k3["knobs"]["a_log_pad"]] and ck_unp.shape(name) == [H] \
        and not ck_pad.float32(name)[H:].any() and ck_pad.float32(name)[:H].any()
    lpad = _kl_logits(dpad, ids)
    okpad = shapes_ok and torch.equal(lpad, _kl_logits(dunp, ids))
    report(ok48 and okpad, "kimi_linear: A_log [1,1,H,1] == [H] == zero-padded [>= H], bitwise",
           "48b %s, padded %s" % (ok48, okpad))
    bare = klr.Model(dbare, "fp32")
    report(bare.cfg.prefix == "" and klr.Model(dpad, "fp32").cfg.prefix == "language_model."
           and torch.equal(lpad, _kl_logits(dbare, ids)),
           "kimi_linear: kimi_k3 wrapper == bare kimi_linear folder, bitwise")

    # header-only copy of the real 48B folder: headers consistent with the index and shapes
    dh = os.path.join(tmp, "kl-48b-headers")
    cfg, n, total = klc.write_header_only(dh, 20)
    with open(os.path.join(dh, st.INDEX_NAME)) as f:
        idx = json.load(f)
    heads = {}
    ok = idx["metadata"]["total_size"] == total and len(idx["weight_map"]) == n
    for fname in sorted(set(idx["weight_map"].values())):
        raw = open(os.path.join(dh, fname), "rb").read()
        (hn,) = struct.unpack("<Q", raw[:8])
        ok = ok and len(raw) == 8 + hn
        h = json.loads(raw[8:])
        h.pop("__metadata__", None)
        end = 0
        for name, info in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            ok = ok and info["data_offsets"][0] == end and idx["weight_map"].get(name) == fname
            end = info["data_offsets"][1]
            heads[name] = info
    want = {"model.layers.0.self_attn.A_log": ("F32", [1, 1, 32, 1]),
            "model.layers.0.self_attn.q_proj.weight": ("BF16", [4096, 2304]),
            "model.layers.0.self_attn.q_conv1d.weight": ("BF16", [4096, 1, 4]),
            "model.layers.0.mlp.gate_proj.weight": ("BF16", [9216, 2304]),
            "model.layers.3.self_attn.q_proj.weight": ("BF16", [32 * 192, 2304]),
            "model.layers.3.self_attn.kv_a_proj_with_mqa.weight": ("BF16", [576, 2304]),
            "model.layers.26.self_attn.kv_b_proj.weight": ("BF16", [32 * 256, 512]),
            "model.layers.26.block_sparse_moe.experts.255.w2.weight": ("BF16", [2304, 1024]),
            "model.layers.1.block_sparse_moe.gate.e_score_correction_bias": ("F32", [256]),
            "lm_head.weight": ("BF16", [163840, 2304])}
    for name, (dt, shape) in want.items():
        ok = ok and name in heads and heads[name]["dtype"] == dt and heads[name]["shape"] == shape
    kda = sum(1 for i in range(27) if "model.layers.%d.self_attn.A_log" % i in heads)
    report(ok and kda == 20 and cfg["model_type"] == "kimi_linear",
           "kimi_linear: header-only Kimi-Linear-48B-A3B folder", "%d tensors, %.2f GB described" % (n, total / 1e9))


def main(argv=None):
    ap = argparse.ArgumentParser(description="Self-check of the reference implementation and fixtures.")
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(HERE), "fixtures"))
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="df-ref-") as tmp:
        check_bf16()
        check_safetensors(tmp)
        goldens = sorted(glob.glob(os.path.join(a.fixtures, "tiny-*", "golden.json")))
        report(len(goldens) > 0, "fixtures found under %s" % a.fixtures, "%d" % len(goldens))
        for gpath in goldens:
            check_fixture(gpath, tmp)
        check_extra_shapes(tmp)
        check_kimi_linear(tmp, a.fixtures)
    print("%s: %d failure(s), %.1f s" % ("FAILED" if failures else "OK", len(failures), time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
