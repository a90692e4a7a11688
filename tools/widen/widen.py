#!/usr/bin/env python3
"""tools/widen/widen.py — grow a trained qwen3_moe / qwen3 checkpoint into a benchmark-size
one that computes exactly the same function.

  widen.py --src models/demo-moe --out build/bench/widened [--hidden-ratio 4]
           [--moe-inter N] [--inter N] [--extra-layers N] [--shards N] [--seed S]
           [--dspark-src models/demo-dspark --dspark-out build/bench/widened-dspark]

--dspark-src/--dspark-out also (or only) widen a block drafter (DSpark) made for the
target by the same --hidden-ratio, so that over the widened target it proposes exactly what
it proposes over the original one (widen_dspark below says how).

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
    ap.add_argument("--src", help="the target checkpoint to widen")
    ap.add_argument("--out", help="where the widened target goes")
    ap.add_argument("--hidden-ratio", type=int, default=4, help="1, 4 or 16")
    ap.add_argument("--moe-inter", type=int, default=0, help="new expert width (>= old)")
    ap.add_argument("--inter", type=int, default=0, help="new dense MLP width (>= old)")
    ap.add_argument("--extra-layers", type=int, default=0)
    ap.add_argument("--shards", type=int, default=0, help="0: about 1 GB per file")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dspark-src", help="a block drafter (DSpark) folder trained for --src's model")
    ap.add_argument("--dspark-out", help="where the drafter widened by the same ratio goes")
    a = ap.parse_args(argv)
    if a.hidden_ratio not in (1, 4, 16):
        ap.error("--hidden-ratio must be 1, 4 or 16 (a power of 4 keeps the norm rescale exact)")
    if bool(a.src) != bool(a.out) or bool(a.dspark_src) != bool(a.dspark_out):
        ap.error("--src and --out go together, and so do --dspark-src and --dspark-out")
    if not a.src and not a.dspark_src:
        ap.error("nothing to widen: give --src/--out, --dspark-src/--dspark-out or both")
    if a.src and a.dspark_src:
        check_pair(ap, a.src, a.dspark_src)
    if a.src:
        widen_target(ap, a)
    if a.dspark_src:
        widen_dspark(ap, a)
    return 0


def widen_target(ap, a):
    r = a.hidden_ratio
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


DSPARK_ARCHS = ("K3DSparkModel", "DSparkModel")


def check_pair(ap, src, dspark_src):
    """The drafter must have been made for this target: same hidden size, capture layers in it."""
    t = json.load(open(os.path.join(src, "config.json")))
    d = json.load(open(os.path.join(dspark_src, "config.json")))
    if d.get("hidden_size") != t.get("hidden_size"):
        ap.error("%s: hidden_size %s differs from the target's %s (%s)"
                 % (dspark_src, d.get("hidden_size"), t.get("hidden_size"), src))
    bad = [i for i in d.get("target_layer_ids", []) if not 0 <= i < t.get("num_hidden_layers", 0)]
    if bad:
        ap.error("%s: target_layer_ids %s outside the target's %d layers"
                 % (dspark_src, bad, t.get("num_hidden_layers", 0)))


def widen_dspark(ap, a):
    """A block drafter (docs/SPEC.md "Block drafter (DSpark)") for the target widened by the
    same ratio, proposing exactly what the original drafter proposes over the original target.

    The captured rows of the widened target are the original rows followed by zeros (per
    capture layer: [h_i | 0]), the target's embedding rows are [e | 0] and its lm_head's extra
    columns multiply zeros. The drafter's own hidden size grows like the target's:
      * context_proj [H, C*H] -> [Hn, C*Hn]: the block of capture layer j moves to the input
        columns j*Hn .. j*Hn+H (where [h_j | 0] puts it); the other input columns (they meet
        the zeros) are random; the extra output rows are zero, so ctx has zero extra channels;
      * every RMSNorm over the hidden size (context_norm, input_layernorm,
        post_attention_layernorm, final_norm): real weights / sqrt(r), rms_norm_eps / r (the
        drafter's one eps), as the target's;
      * that eps is also q_a_layernorm's and kv_a_layernorm's, which are over the LoRA ranks
        (unchanged sizes): their inputs are scaled by 1/sqrt(r) instead — q_a_proj and the
        kv_lora_rank latent rows of kv_a_proj_with_mqa (not its RoPE-key rows) — so
        RMSNorm(x/sqrt(r)) with eps/r equals RMSNorm(x) with eps, bit for bit (powers of 2);
      * q_a_proj / q_proj, kv_a_proj_with_mqa, gate_proj, up_proj: extra input columns random;
        o_proj and down_proj: extra output rows zero (the residual's extra channels stay 0);
      * q_b_proj, kv_b_proj, the LoRA norms' weights and the Markov head are unchanged; the
        confidence head's input [final-normed row | markov_w1[prev]] keeps its weights on the
        real channels and the Markov columns (moved after the Hn hidden ones), random ones
        on the extra (zero) channels. The engine never evaluates it; the reference does.
    The real channels lead every reduction and every added product is an exact zero, so the
    engine's fixed-order kernels (8 lanes by index mod 8; H and Hn multiples of 8) give the
    same bits: the same proposals, the same acceptance."""
    r, src, out = a.hidden_ratio, a.dspark_src, a.dspark_out
    cfg = json.load(open(os.path.join(src, "config.json")))
    if not set(cfg.get("architectures") or []) & set(DSPARK_ARCHS):
        ap.error("%s/config.json: architectures %r name no block drafter (%s)"
                 % (src, cfg.get("architectures"), " or ".join(DSPARK_ARCHS)))
    for k in ("mla_use_nope", "mla_use_output_gate"):
        if cfg.get(k):
            ap.error("%s/config.json: %s is set; only the layout the engine loads is widened" % (src, k))
    ck = sio.Checkpoint(src)
    H = cfg["hidden_size"]
    Hn = H * r
    C = len(cfg["target_layer_ids"])
    L = cfg["num_hidden_layers"]
    KL = cfg["kv_lora_rank"]
    R = cfg["markov_rank"]
    # The engine's default when the key is absent is 1e-6 (dspark.c); written out explicitly.
    eps = float(np.float32(cfg.get("rms_norm_eps", 1e-6)) / np.float32(r))
    norm_scale = np.float32(1.0 / np.sqrt(r))

    def rng_for(name):
        return np.random.default_rng([a.seed, zlib.crc32(("dspark/" + name).encode())])

    def scaled(x):
        return sio.f32_to_bf16(sio.bf16_to_f32(x) * norm_scale)

    def need_bf16(name):
        if ck.dtype(name) != "BF16":
            ap.error("%s: tensor %s is %s; only BF16 drafters are widened" % (src, name, ck.dtype(name)))

    specs, done = [], set()

    def add(name, shape, produce, dtype="BF16"):
        specs.append(sio.TensorSpec(name, dtype, shape, produce=produce))
        done.add(name)

    def keep(name):
        add(name, ck.shape(name), lambda: ck.array(name), ck.dtype(name))

    def widen(name, new_shape, place, fill="rand"):
        """new_shape filled with random bf16 (fan-in scaled) or zeros, then place(out, old)
        puts the old values where they belong."""
        need_bf16(name)

        def produce():
            if fill == "zero":
                o = np.zeros(new_shape, dtype=np.uint16)
            else:
                o = rand_bf16(rng_for(name), new_shape, 1.0 / np.sqrt(new_shape[-1]))
            place(o, ck.array(name))
            return o
        add(name, new_shape, produce)

    def norm(name):  # RMSNorm over the hidden size
        widen(name, [Hn], lambda o, w: o.__setitem__(slice(0, H), scaled(w)))

    def in_cols(name, scale_rows=0):
        """[N, H] -> [N, Hn]: extra input columns random; the first scale_rows rows / sqrt(r)."""
        n = ck.shape(name)[0]

        def place(o, w):
            w = w.copy()
            if scale_rows:
                w[:scale_rows] = scaled(w[:scale_rows])
            o[:, :H] = w
        widen(name, [n, Hn], place)

    def out_rows(name):
        """[H, K] -> [Hn, K]: extra output rows zero."""
        k = ck.shape(name)[1]
        widen(name, [Hn, k], lambda o, w: o.__setitem__((slice(0, H), slice(None)), w), fill="zero")

    def ctx_proj(o, w):
        o[H:, :] = 0
        for j in range(C):
            o[:H, j * Hn:j * Hn + H] = w[:, j * H:(j + 1) * H]

    if ck.shape("context_proj.weight") != [H, C * H]:
        ap.error("%s: context_proj.weight is %s, expected [%d, %d]" % (src, ck.shape("context_proj.weight"), H, C * H))
    widen("context_proj.weight", [Hn, C * Hn], ctx_proj)
    norm("context_norm.weight")
    norm("final_norm.weight")
    for l in range(L):
        p = "layers.%d." % l
        norm(p + "input_layernorm.weight")
        norm(p + "post_attention_layernorm.weight")
        if (p + "self_attn.q_a_proj.weight") in ck:
            in_cols(p + "self_attn.q_a_proj.weight", scale_rows=ck.shape(p + "self_attn.q_a_proj.weight")[0])
            keep(p + "self_attn.q_a_layernorm.weight")
            keep(p + "self_attn.q_b_proj.weight")
        else:
            in_cols(p + "self_attn.q_proj.weight")
        in_cols(p + "self_attn.kv_a_proj_with_mqa.weight", scale_rows=KL)
        keep(p + "self_attn.kv_a_layernorm.weight")
        keep(p + "self_attn.kv_b_proj.weight")
        out_rows(p + "self_attn.o_proj.weight")
        in_cols(p + "mlp.gate_proj.weight")
        in_cols(p + "mlp.up_proj.weight")
        out_rows(p + "mlp.down_proj.weight")
    for name in ("markov_head.markov_w1.weight", "markov_head.markov_w2.weight"):
        keep(name)
    if "confidence_head.proj.weight" in ck:
        def conf(o, w):
            o[:, :H] = w[:, :H]
            o[:, Hn:] = w[:, H:]
        widen("confidence_head.proj.weight", [1, Hn + R], conf)
        if "confidence_head.proj.bias" in ck:
            keep("confidence_head.proj.bias")
    for name in ("embed_tokens.weight", "model.embed_tokens.weight"):
        if name in ck:  # the folder's duplicate of the target's table (never read): [e | 0]
            widen(name, [ck.shape(name)[0], Hn], lambda o, w: o.__setitem__((slice(None), slice(0, H)), w),
                  fill="zero")
    left = sorted(set(ck.names) - done)
    if left:
        ap.error("%s: tensors this widening does not know: %s" % (src, ", ".join(left[:8])))

    tmp = out + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    t0 = time.time()
    sio.save_checkpoint(tmp, specs, n_shards=1)
    ncfg = dict(cfg)
    ncfg.update({"hidden_size": Hn, "rms_norm_eps": eps})
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(ncfg, f, indent=2, sort_keys=True)
        f.write("\n")
    for fn in sorted(os.listdir(src)):
        if fn != "config.json" and not fn.endswith(".safetensors") and fn != "model.safetensors.index.json" \
                and os.path.isfile(os.path.join(src, fn)):
            shutil.copy(os.path.join(src, fn), tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    total = sum(s.nbytes for s in specs)
    print("widened block drafter %s -> %s: hidden %d -> %d, rms_norm_eps %g -> %g, %.1f MB, %.1f s"
          % (src, out, H, Hn, float(np.float32(cfg.get("rms_norm_eps", 1e-6))), eps, total / 1e6,
             time.time() - t0))


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
