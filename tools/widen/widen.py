#!/usr/bin/env python3
"""tools/widen/widen.py — grow a trained qwen3_moe / qwen3 checkpoint into a benchmark-size
one that computes exactly the same function.

  widen.py --src models/demo-moe --out build/bench/widened [--hidden-ratio 4]
           [--moe-inter N] [--inter N] [--extra-layers N] [--shards N] [--seed S]

What changes (H -> r*H with r a power of 4; expert width I -> I'; optional extra layers):
  * the hidden size grows by zero-valued channels appended after the real ones: the
    embedding's extra columns and every extra output row of o_proj / down_proj are zero, so
    the extra channels stay exactly zero through the whole network;
  * RMSNorm over r*H channels sees mean(x^2)/r: the real channels' norm weights are divided
    by sqrt(r) and rms_norm_eps by r, both exact in binary floating point when r is a power
    of 4 (sqrt(r) a power of 2), so the real channels see bit-for-bit the same values; the
    per-head q_norm/k_norm share that eps, so q_proj and k_proj are scaled by 1/sqrt(r)
    (exact) and q_norm(q/sqrt(r)) with eps/r equals q_norm(q) with eps;
  * every expert (and dense MLP) gains inactive units: their up_proj rows are zero, so
    silu(gate) * up = 0 and down_proj's extra columns multiply zeros;
  * extra layers (appended) have zero RMSNorm weights, so their attention and FFN inputs
    are zero, their outputs are zero and the residual stream passes through unchanged;
  * everything a real channel never depends on — the extra input columns of q/k/v, the
    router, gate/up, lm_head; extra rows of gate_proj; extra columns of down_proj; the
    whole of every extra layer but its norms — holds random bf16 values, so the memory
    traffic is that of a real model of the new size.
Because the real channels occupy the first positions of every reduction and the added
terms are exact zeros, the engine's fixed-order kernels give bitwise-identical logits.
Routing and draft acceptance stay those of the trained model.
"""
import argparse
import json
import os
import shutil
import sys
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
import safetensors_io as sio  # noqa: E402

COPY_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def rand_bf16(rng, shape, std):
    a = rng.standard_normal(size=shape, dtype=np.float32) * np.float32(std)
    return sio.f32_to_bf16(a)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden-ratio", type=int, default=4, help="1, 4 or 16")
    ap.add_argument("--moe-inter", type=int, default=0, help="new expert width (>= old)")
    ap.add_argument("--inter", type=int, default=0, help="new dense MLP width (>= old)")
    ap.add_argument("--extra-layers", type=int, default=0)
    ap.add_argument("--shards", type=int, default=0, help="0: about 1 GB per file")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args(argv)
    r = a.hidden_ratio
    if r not in (1, 4, 16):
        ap.error("--hidden-ratio must be 1, 4 or 16 (a power of 4 keeps the norm rescale exact)")
    cfg = json.load(open(os.path.join(a.src, "config.json")))
    if cfg.get("model_type") not in ("qwen3_moe", "qwen3"):
        ap.error("%s/config.json: model_type %r (expected qwen3_moe or qwen3)"
                 % (a.src, cfg.get("model_type")))
    ck = sio.Checkpoint(a.src)
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    Hn = H * r
    heads = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or H // heads
    moe = cfg["model_type"] == "qwen3_moe"
    I_moe = cfg.get("moe_intermediate_size", 0) if moe else 0
    I_moe_n = max(a.moe_inter, I_moe)
    I_d = cfg.get("intermediate_size", 0)
    I_d_n = max(a.inter, I_d)
    E = cfg.get("num_experts", 0) if moe else 0
    step = cfg.get("decoder_sparse_step", 1) or 1
    mlp_only = set(cfg.get("mlp_only_layers", []) or [])
    Ln = L + a.extra_layers
    tied = cfg.get("tie_word_embeddings", False)
    eps = float(np.float32(cfg.get("rms_norm_eps", 1e-6)) / np.float32(r))
    norm_scale = np.float32(1.0 / np.sqrt(r))  # a power of 2: exact in bf16
    rng_seed = a.seed

    def is_moe(i):
        return moe and E > 0 and i not in mlp_only and (i + 1) % step == 0

    def rng_for(name):
        return np.random.default_rng([rng_seed, zlib.crc32(name.encode())])

    def grow(name, new_shape, real_fn, fill):
        """A tensor of new_shape: `fill` ('zero'|'rand') everywhere, then the old tensor
        (transformed by real_fn) in its top-left block."""
        def produce():
            if fill == "zero":
                out = np.zeros(new_shape, dtype=np.uint16)
            else:
                fan_in = new_shape[-1]
                out = rand_bf16(rng_for(name), new_shape, 1.0 / np.sqrt(fan_in))
            old = ck.array(name)
            old = real_fn(old) if real_fn else old
            out[tuple(slice(0, s) for s in old.shape)] = old
            return out
        return produce

    def scaled_norm(old):
        return sio.f32_to_bf16(sio.bf16_to_f32(old) * norm_scale)

    specs = []

    def add(name, shape, produce):
        specs.append(sio.TensorSpec(name, "BF16", shape, produce=produce))

    for name in ("model.embed_tokens.weight",):
        if ck.dtype(name) != "BF16":
            ap.error("%s: tensor %s is %s; only BF16 checkpoints are widened" % (a.src, name, ck.dtype(name)))
    V = ck.shape("model.embed_tokens.weight")[0]
    add("model.embed_tokens.weight", [V, Hn], grow("model.embed_tokens.weight", [V, Hn], None, "zero"))
    if not tied:
        add("lm_head.weight", [V, Hn], grow("lm_head.weight", [V, Hn], None, "rand"))
    add("model.norm.weight", [Hn], grow("model.norm.weight", [Hn], scaled_norm, "rand"))

    for i in range(L):
        p = "model.layers.%d." % i
        add(p + "input_layernorm.weight", [Hn], grow(p + "input_layernorm.weight", [Hn], scaled_norm, "rand"))
        add(p + "post_attention_layernorm.weight", [Hn],
            grow(p + "post_attention_layernorm.weight", [Hn], scaled_norm, "rand"))
        for t in ("q", "k", "v"):
            # q_norm/k_norm share rms_norm_eps, now divided by r: q and k are scaled by
            # 1/sqrt(r) (exact) so their per-head RMSNorm output is unchanged.
            fix = scaled_norm if t in ("q", "k") else None
            n = p + "self_attn.%s_proj.weight" % t
            out_dim = ck.shape(n)[0]
            add(n, [out_dim, Hn], grow(n, [out_dim, Hn], fix, "rand"))
            if (p + "self_attn.%s_proj.bias" % t) in ck:
                b = p + "self_attn.%s_proj.bias" % t
                add(b, ck.shape(b), grow(b, ck.shape(b), fix, "zero"))
        n = p + "self_attn.o_proj.weight"
        add(n, [Hn, heads * hd], grow(n, [Hn, heads * hd], None, "zero"))
        if (p + "self_attn.o_proj.bias") in ck:
            add(p + "self_attn.o_proj.bias", [Hn], grow(p + "self_attn.o_proj.bias", [Hn], None, "zero"))
        for t in ("q_norm", "k_norm"):
            n = p + "self_attn.%s.weight" % t
            add(n, [hd], grow(n, [hd], None, "zero"))
        if is_moe(i):
            n = p + "mlp.gate.weight"
            add(n, [E, Hn], grow(n, [E, Hn], None, "rand"))
            for e in range(E):
                q = p + "mlp.experts.%d." % e
                add(q + "gate_proj.weight", [I_moe_n, Hn], grow(q + "gate_proj.weight", [I_moe_n, Hn], None, "rand"))
                add(q + "up_proj.weight", [I_moe_n, Hn], grow_up(ck, q + "up_proj.weight", [I_moe_n, Hn], I_moe, rng_for))
                add(q + "down_proj.weight", [Hn, I_moe_n], grow_down(ck, q + "down_proj.weight", [Hn, I_moe_n], H, rng_for))
        else:
            q = p + "mlp."
            add(q + "gate_proj.weight", [I_d_n, Hn], grow(q + "gate_proj.weight", [I_d_n, Hn], None, "rand"))
            add(q + "up_proj.weight", [I_d_n, Hn], grow_up(ck, q + "up_proj.weight", [I_d_n, Hn], I_d, rng_for))
            add(q + "down_proj.weight", [Hn, I_d_n], grow_down(ck, q + "down_proj.weight", [Hn, I_d_n], H, rng_for))

    kvh = cfg.get("num_key_value_heads", heads)
    for i in range(L, Ln):
        p = "model.layers.%d." % i
        for nrm in ("input_layernorm", "post_attention_layernorm"):
            add(p + nrm + ".weight", [Hn], lambda: np.zeros([Hn], dtype=np.uint16))
        shapes = {"q_proj": [heads * hd, Hn], "k_proj": [kvh * hd, Hn], "v_proj": [kvh * hd, Hn],
                  "o_proj": [Hn, heads * hd]}
        for t, shp in shapes.items():
            add(p + "self_attn.%s.weight" % t, shp, rand_producer(rng_for, p + t, shp))
        for t in ("q_norm", "k_norm"):
            add(p + "self_attn.%s.weight" % t, [hd], rand_producer(rng_for, p + t, [hd]))
        if moe and E > 0 and (i + 1) % step == 0:
            add(p + "mlp.gate.weight", [E, Hn], rand_producer(rng_for, p + "gate", [E, Hn]))
            for e in range(E):
                q = p + "mlp.experts.%d." % e
                for t, shp in (("gate_proj", [I_moe_n, Hn]), ("up_proj", [I_moe_n, Hn]),
                               ("down_proj", [Hn, I_moe_n])):
                    add(q + t + ".weight", shp, rand_producer(rng_for, q + t, shp))
        else:
            for t, shp in (("gate_proj", [I_d_n, Hn]), ("up_proj", [I_d_n, Hn]), ("down_proj", [Hn, I_d_n])):
                add(p + "mlp." + t + ".weight", shp, rand_producer(rng_for, p + t, shp))

    total = sum(s.nbytes for s in specs)
    shards = a.shards or max(1, int(round(total / 1e9)))
    tmp = a.out + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    t0 = time.time()
    sio.save_checkpoint(tmp, specs, n_shards=shards)
    ncfg = dict(cfg)
    ncfg.update({"hidden_size": Hn, "head_dim": hd, "num_hidden_layers": Ln, "rms_norm_eps": eps})
    if moe:
        ncfg["moe_intermediate_size"] = I_moe_n
    if I_d:
        ncfg["intermediate_size"] = I_d_n
    if "max_window_layers" in ncfg:
        ncfg["max_window_layers"] = Ln
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(ncfg, f, indent=2, sort_keys=True)
        f.write("\n")
    for fn in COPY_FILES:
        if os.path.exists(os.path.join(a.src, fn)):
            shutil.copy(os.path.join(a.src, fn), tmp)
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)
    print("widened %s -> %s: hidden %d -> %d, expert width %d -> %d, layers %d -> %d, "
          "%.2f GB in %d file(s), %.1f s" % (a.src, a.out, H, Hn, I_moe, I_moe_n, L, Ln,
                                           total / 1e9, shards, time.time() - t0))
    return 0


def grow_up(ck, name, new_shape, I_old, rng_for):
    """up_proj: real block copied, extra input columns random, extra unit rows ZERO."""
    def produce():
        fan_in = new_shape[1]
        out = rand_bf16(rng_for(name), new_shape, 1.0 / np.sqrt(fan_in))
        out[I_old:, :] = 0
        old = ck.array(name)
        out[:old.shape[0], :old.shape[1]] = old
        return out
    return produce


def grow_down(ck, name, new_shape, H_old, rng_for):
    """down_proj: real block copied, extra unit columns random, extra channel rows ZERO."""
    def produce():
        fan_in = new_shape[1]
        out = rand_bf16(rng_for(name), new_shape, 1.0 / np.sqrt(fan_in))
        out[H_old:, :] = 0
        old = ck.array(name)
        out[:old.shape[0], :old.shape[1]] = old
        return out
    return produce


def rand_producer(rng_for, name, shape):
    return lambda: rand_bf16(rng_for(name), shape, 1.0 / np.sqrt(shape[-1]))


if __name__ == "__main__":
    sys.exit(main())
