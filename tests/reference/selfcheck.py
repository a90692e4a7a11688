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
  * fixtures of both families (qwen3_ref.py, deepseek_ref.py by model_type).
Writes only under a temporary folder. Exit status 0 when everything passes.

Usage: selfcheck.py [--fixtures DIR]   (default: tests/fixtures next to this folder)
"""

import argparse
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
    print("%s: %d failure(s), %.1f s" % ("FAILED" if failures else "OK", len(failures), time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
