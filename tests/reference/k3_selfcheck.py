#!/usr/bin/python3
"""tests/reference/k3_selfcheck.py — the Kimi K3 reference (kimi_k3_ref.py) and generator
(kimi_k3_ckpt.py) check themselves; the ctest `reference_kimi_k3_selfcheck`.

Checks, each printed as one PASS/FAIL line:
  * MXFP4 decoding: the real-checkpoint test vector of K3.md §4 (layer 1, expert 0, w1, row 0,
    columns 0..15 with scale byte 121) from its packed bytes, -0.0 kept; low nibble = even
    column; every code x every exponent of a generated tensor decodes as
    (-1)^b3 T[c & 7] 2^(s-127); a 255 scale is refused;
  * every K3 fixture: routed experts stored only as U8 weight_packed [N, K/2] +
    weight_scale [N, K/32] (no .weight), the six F32 kinds F32 and everything else BF16,
    layer 0 carries self_attention_res_*, vision_tower. / mm_projector. tensors present;
    scale exponents span the preset's range; codes 8, 7 and 15 occur; experts are stored out
    of id order (the sharded fixture's over >= 3 files) and each expert's six tensors sit in
    one file, adjacent;
  * the correction bias changes the chosen experts on some tokens of every fixture;
  * the dead weights: layer 0's self_attention_res_* and the A_log zero padding written over,
    and the vision tensors written over with NaN, give bitwise the same logits (layer 1's
    self_attention_res_proj written over does not);
  * SiTU switches: activation_situ_beta null == 1.0 written out, bitwise; a null
    activation_situ_linear_beta differs from 25.0;
  * greedy --no-cache (recompute) == cached; fp32-native (float32 arithmetic) within 1e-3 of
    the float64-evaluated fp32 mode on the top-5 logits, same greedy ids;
  * the header-only real folder (--header-only --no-extend): 497,220 tensors in 96 shards,
    total_size 1,560,860,324,864, 82,432 experts x 6 + 2,460 text + 168 vision; with
    --header-only-dir DIR, the folder `kimi_k3_ckpt.py --header-only --out DIR` wrote is
    checked instead of writing one (ctest: the fixture k3_real's, tests/kimi_k3.cmake).
Writes only under a temporary folder. Exit status 0 when everything passes.

Usage: k3_selfcheck.py [--fixtures DIR] [--skip-header-only | --header-only-dir DIR]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kimi_k3_ckpt as k3c  # noqa: E402
import kimi_k3_ref as kr  # noqa: E402
import qwen3_ref as qr  # noqa: E402
import safetensors_io as st  # noqa: E402

PRESETS = ["tiny-k3", "tiny-k3-unpadded", "tiny-k3-deep", "tiny-k3-sharded"]
F32_KINDS = ("_conv1d.weight", ".A_log", ".dt_bias", "o_norm.weight", "e_score_correction_bias")
failures = []


def report(ok, what, detail=""):
    print("%s  %s%s" % ("PASS" if ok else "FAIL", what, (": " + detail) if detail else ""), flush=True)
    if not ok:
        failures.append(what)


def check_mxfp4():
    want = [0.0625, 0.0078125, -0.0078125, -0.0234375, -0.0625, -0.03125, 0.0234375, 0.015625,
            0.046875, -0.0, -0.0234375, -0.015625, -0.0234375, -0.0078125, 0.015625, -0.015625]
    packed = np.array([[0x16, 0xB9, 0xCE, 0x23, 0x85, 0xAB, 0x9B, 0xA2] + [0] * 8], dtype=np.uint8)
    scale = np.array([[121]], dtype=np.uint8)
    got = k3c.decode_mxfp4(packed, scale)[0, :16]
    ok = all(float(g) == w and np.signbit(g) == np.signbit(w) for g, w in zip(got, want))
    report(ok, "MXFP4: K3.md §4 real-weight vector (scale 121, low nibble = even column, -0.0 kept)",
           "" if ok else "got %s" % list(got))
    # exhaustive: every code at every exponent of a generated tensor
    p, s = k3c.draw_mxfp4(1, "x", 64, 128, -20, -1, 3.0)
    d = k3c.decode_mxfp4(p, s)
    codes = np.empty((64, 128), dtype=np.int64)
    codes[:, 0::2], codes[:, 1::2] = p & 15, p >> 4
    e = np.repeat(s.astype(np.int64) - 127, 32, axis=1)
    ref = np.array([(-1.0 if c & 8 else 1.0) * k3c.MX_T[c & 7] * 2.0 ** x for c, x in zip(codes.ravel(), e.ravel())])
    ok = np.array_equal(d.astype(np.float64).ravel(), ref) and np.array_equal(np.signbit(d.ravel()), codes.ravel() >= 8)
    report(ok and set(codes.ravel()) == set(range(16)) and e.min() == -20 and e.max() == -1,
           "MXFP4: 64 x 128 generated codes x exponents 2^-20..2^-1 decode exactly")
    try:
        k3c.decode_mxfp4(packed, np.array([[255]], dtype=np.uint8))
        report(False, "MXFP4: scale byte 255 refused")
    except ValueError:
        report(True, "MXFP4: scale byte 255 refused")


def check_layout(fx, name):
    ck = st.Checkpoint(os.path.join(fx, name))
    p = k3c.PRESETS[name]
    c, kn = p["config"], p["knobs"]
    bad = []
    experts = {}
    for t in ck.names:
        dt = ck.dtype(t)
        if t.startswith(("vision_tower.", "mm_projector.")):
            continue
        if ".experts." in t:
            if not t.endswith((".weight_packed", ".weight_scale")) or dt != "U8":
                bad.append(t)
            key = t.split(".w")[0]
            experts.setdefault(key, []).append(t)
        elif t.endswith(F32_KINDS) != (dt == "F32") or dt not in ("F32", "BF16"):
            bad.append(t)
    n_moe = c["num_hidden_layers"] - 1
    ok = not bad and len(experts) == n_moe * c["num_experts"] and all(len(v) == 6 for v in experts.values())
    report(ok, "%s: experts only as U8 MXFP4 pairs (6 per expert), six F32 kinds, else BF16" % name,
           "bad: %s" % bad[:5] if bad else "")
    need = ["language_model.model.layers.0.self_attention_res_norm.weight",
            "language_model.model.layers.0.self_attention_res_proj.weight",
            "language_model.model.output_attn_res_proj.weight"]
    has_vis = any(t.startswith("vision_tower.") for t in ck.names) and any(t.startswith("mm_projector.") for t in ck.names)
    report(all(t in ck for t in need) and has_vis, "%s: layer-0 self_attention_res_*, output_attn_res_*, vision dummies" % name)
    # codes and exponents
    allc, alle = set(), set()
    for key in experts:
        for w in ("w1", "w2", "w3"):
            pk = np.asarray(ck.array("%s.%s.weight_packed" % (key, w)))
            sc = np.asarray(ck.array("%s.%s.weight_scale" % (key, w))).astype(np.int64) - 127
            allc |= set(np.unique(pk & 15).tolist()) | set(np.unique(pk >> 4).tolist())
            alle |= set(np.unique(sc).tolist())
    report({7, 8, 15} <= allc and min(alle) == kn["mx_lo"] and max(alle) == kn["mx_hi"],
           "%s: codes 7, 8, 15 present; scale exponents span 2^%d..2^%d" % (name, kn["mx_lo"], kn["mx_hi"]))
    # storage order: the six tensors of an expert adjacent in one file; ids not in order
    order_ok, ids_sorted_everywhere = True, True
    files = {}
    for key, ts in experts.items():
        fs = {ck.where[t] for t in ts}
        if len(fs) != 1:
            order_ok = False
            continue
        f = fs.pop()
        spans = sorted(ck.files[f].tensors[t][2:] for t in ts)
        if any(spans[i][1] != spans[i + 1][0] for i in range(5)):
            order_ok = False
        files.setdefault(f, []).append((spans[0][0], key))
    seq = []
    for f in sorted(files):
        seq += [k for _, k in sorted(files[f])]
    ids_sorted_everywhere = seq == sorted(seq, key=lambda k: (int(k.split(".")[3]), int(k.split(".")[-1])))
    spread = len(files) >= min(3, p["shards"])  # a sharded preset: experts in >= 3 files
    report(order_ok and not ids_sorted_everywhere and spread,
           "%s: each expert's six tensors adjacent in one file, experts not in id order (%d file(s))"
           % (name, len(files)))


def logits(d, ids, dtype="fp32"):
    with torch.no_grad():
        return kr.Model(d, dtype).forward(ids)


def patched_copy(src, dst, fill):
    """Copy the single-file fixture src to dst; fill(name, float32 array) -> new array or None."""
    os.makedirs(dst, exist_ok=True)
    for f in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(src, f), dst)
    ck = st.Checkpoint(src)
    specs = []
    for t in sorted(ck.names, key=lambda t: ck.files[ck.where[t]].tensors[t][2]):
        a = np.array(ck.array(t))
        new = fill(t, a)
        specs.append(st.TensorSpec(t, ck.dtype(t), ck.shape(t), data=a if new is None else new))
    st.write_file(os.path.join(dst, st.SINGLE_NAME), specs, {"format": "pt"})


def check_dead_weights(fx, tmp):
    src = os.path.join(fx, "tiny-k3")
    ids = [(i * 37 + 11) % 512 for i in range(24)]
    base = logits(src, ids)
    H = k3c.PRESETS["tiny-k3"]["config"]["linear_attn_config"]["num_heads"]

    def dead(t, a):
        if ".layers.0.self_attention_res_" in t:
            return np.full_like(a, 0x42C8)  # bf16 100.0
        if t.endswith(".A_log"):
            b = a.copy()
            b[H:] = 3.0
            return b
        if t.startswith(("vision_tower.", "mm_projector.")):
            return np.full_like(a, 0x7FC0)  # NaN
        return None
    patched_copy(src, os.path.join(tmp, "dead"), dead)
    report(torch.equal(base, logits(os.path.join(tmp, "dead"), ids)),
           "tiny-k3: layer-0 self_attention_res_*, A_log padding, vision tensors unused (bitwise)")

    def live(t, a):
        return np.full_like(a, 0x42C8) if ".layers.1.self_attention_res_proj" in t else None
    patched_copy(src, os.path.join(tmp, "live"), live)
    report(not torch.equal(base, logits(os.path.join(tmp, "live"), ids)),
           "tiny-k3: layer-1 self_attention_res_proj is used")


def check_situ(fx, tmp):
    # tiny-k3-deep has activation_situ_beta null
    src = os.path.join(fx, "tiny-k3-deep")
    ids = [(i * 37 + 5) % 512 for i in range(12)]
    base = logits(src, ids)
    d = os.path.join(tmp, "situ1")
    shutil.copytree(src, d)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["text_config"]["activation_situ_beta"] = 1.0
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    report(torch.equal(base, logits(d, ids)), "SiTU: activation_situ_beta null == 1.0 (bitwise)")
    src = os.path.join(fx, "tiny-k3-unpadded")  # activation_situ_linear_beta null
    base = logits(src, ids)
    d = os.path.join(tmp, "situ2")
    shutil.copytree(src, d)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["text_config"]["activation_situ_linear_beta"] = 25.0
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    report(not torch.equal(base, logits(d, ids)), "SiTU: null activation_situ_linear_beta (identity) != 25.0")


def check_modes(fx):
    for name in PRESETS:
        d = os.path.join(fx, name)
        with open(os.path.join(d, "golden.json")) as f:
            g = json.load(f)
        m = kr.Model(d)
        prompt = g["prompt_ids"][:24]
        with torch.no_grad():
            a_ids, a_pl, a_st = qr.generate(m, prompt, 10, use_cache=True)
            b_ids, b_pl, b_st = qr.generate(m, prompt, 10, use_cache=False)
            mn = kr.Model(d, "fp32-native")
            n_ids, n_pl, n_st = qr.generate(mn, prompt, 10)
        ds = float((torch.stack(a_st) - torch.stack(b_st)).abs().max())
        report(a_ids == b_ids and ds <= 1e-9, "%s: greedy --no-cache == cached" % name, "step logits %.2e" % ds)
        rows = torch.cat([a_pl, torch.stack(a_st)])
        nrows = torch.cat([n_pl, torch.stack(n_st)])
        top = torch.topk(rows, 5, dim=-1).indices
        d5 = float((torch.gather(rows, 1, top) - torch.gather(nrows, 1, top)).abs().max())
        report(n_ids == a_ids and d5 <= 1e-3, "%s: float32 arithmetic within 1e-3 of the float64 oracle (top-5)" % name,
               "%.2e, all logits %.2e" % (d5, float((rows - nrows).abs().max())))
        report(m.stats["bias_changed_selection"] > 0, "%s: the correction bias changes the chosen experts" % name,
               "%d of %d token-layers" % (m.stats["bias_changed_selection"], m.stats["moe_token_layers"]))


def check_header_only(tmp, made=None):
    """made: a folder kimi_k3_ckpt.py --header-only already wrote (its config, tensor count and
    total size then come from its config.json and index), else one is written under tmp."""
    if made:
        d = made
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(d, st.INDEX_NAME)) as f:
            index = json.load(f)
        n, total = len(index["weight_map"]), index["metadata"]["total_size"]
    else:
        d = os.path.join(tmp, "real")
        cfg, n, total = k3c.write_header_only(d, extend=False)
    with open(os.path.join(d, st.INDEX_NAME)) as f:
        wm = json.load(f)["weight_map"]
    shards = sorted(set(wm.values()))
    n_exp = sum(1 for t in wm if ".experts." in t)
    n_vis = sum(1 for t in wm if t.startswith(("vision_tower.", "mm_projector.")))
    tc = cfg["text_config"]
    ok = (n == 497220 and total == 1560860324864 and len(shards) == 96 and n_exp == 82432 * 6
          and n_vis == 168 and len(wm) - n_exp - n_vis == 2460
          and len(tc["linear_attn_config"]["kda_layers"]) == 69
          and len(tc["linear_attn_config"]["full_attn_layers"]) == 24
          and tc["quantization_config"]["format"] == "mxfp4-pack-quantized")
    report(ok, "header-only real K3: 497,220 tensors / 96 shards / 1,560,860,324,864 B (82,432 x 6 + 2,460 + 168)",
           "%d tensors, %d B, %d shards, %d expert tensors, %d vision%s" % (
               n, total, len(shards), n_exp, n_vis, " (%s)" % made if made else ""))
    if not made:
        shutil.rmtree(d, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Self-check of the Kimi K3 reference and generator.")
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(HERE), "fixtures"))
    ap.add_argument("--skip-header-only", action="store_true")
    ap.add_argument("--header-only-dir", help="check this header-only folder instead of writing one")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="df-k3-") as tmp:
        check_mxfp4()
        for name in PRESETS:
            check_layout(a.fixtures, name)
        check_dead_weights(a.fixtures, tmp)
        check_situ(a.fixtures, tmp)
        check_modes(a.fixtures)
        if not a.skip_header_only:
            check_header_only(tmp, a.header_only_dir)
    print("%s: %d failure(s), %.1f s" % ("FAILED" if failures else "OK", len(failures), time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
