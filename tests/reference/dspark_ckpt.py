#!/usr/bin/python3
"""tests/reference/dspark_ckpt.py — deterministic random DSpark block-drafter checkpoints.

Owns: the drafter folder layout of Inferact's Kimi-K3-DSpark (docs/K3.md §6.2), generalised
to any target the reference can run (qwen3 / qwen3_moe, deepseek_v3 / kimi_k2): config.json
with the published keys (plus our `block_size`) and one BF16 `model.safetensors` with the
published tensor names (no prefix). Does not own the computation (dspark_ref.py) or the
container format (safetensors_io.py). Draws use make_checkpoint.py's per-tensor streams, so
the bytes depend only on (seed, tensor name, shape, scale) and the target's embedding.

Tensors (H = target hidden, C = len(target_layer_ids), nh heads, ql q_lora, KL kv_lora,
dn/dr/dv nope/rope/v head dims, I intermediate, V = target vocab, R = markov rank):
  context_proj.weight [H, C*H]            1/sqrt(C*H)
  context_norm.weight [H]                 1 + 0.1 N
  layers.n.input_layernorm.weight, layers.n.post_attention_layernorm.weight [H]
  layers.n.self_attn.q_a_proj.weight [ql, H], q_a_layernorm.weight [ql],
      q_b_proj.weight [nh*(dn+dr), ql]    (or q_proj.weight [nh*(dn+dr), H] when --q-lora 0)
  layers.n.self_attn.kv_a_proj_with_mqa.weight [KL+dr, H], kv_a_layernorm.weight [KL],
      kv_b_proj.weight [nh*(dn+dv), KL], o_proj.weight [H, nh*dv]
  layers.n.mlp.gate_proj.weight, up_proj.weight [I, H], down_proj.weight [H, I]
  final_norm.weight [H]                   g * (1 + 0.1 N), g = logit_scale / rms_v ||lm_head_v||
                                          (rows with a non-zero norm), so the target lm_head
                                          applied to it gives logits of std ~ logit_scale
  markov_head.markov_w1.weight [V, R]     N(0, 1)
  markov_head.markov_w2.weight [V, R]     markov_scale / sqrt(R)  (bias std ~ markov_scale)
  confidence_head.proj.weight [1, H+R]    1/sqrt(H+R);  confidence_head.proj.bias [1]  N(0, 0.1^2)
  embed_tokens.weight [V, H]              the target's model.embed_tokens.weight, bytes copied
                                          (BF16 targets; other dtypes rounded to BF16) — the
                                          runtime and dspark_ref.py ignore it
Projections 1/sqrt(fan_in), o_proj / down_proj times out_gain = max(1, 4 x the per-element RMS
of the target embedding's non-zero rows) (the block rows start as target embeddings; with a tied
lm_head a row's own token would otherwise win its logits), norms 1 + 0.1 N: activations stay
O(1); logit_scale 6 and markov_scale 3 make the Markov bias move some argmaxes while the top-2
gaps of the final rows stay well above fp32 noise (0.04-2 on the selfcheck drafters, 0.29 on
models/demo-moe).

Defaults: capture layers = 3 spread over the target's layers, [1, mid, last] (all layers when
the target has < 4); mask id = vocab-1, or the highest id whose target embedding row is
non-zero when that row is zero (trained checkpoints with unused rows, e.g. models/demo-moe
-> 151643 <|endoftext|>); YaRN {factor 4, original_max_position_embeddings max_pos/4,
beta_fast 32, beta_slow 1, mscale 1, mscale_all_dim 1} on rope_theta 10000.

Usage:
  dspark_ckpt.py --target DIR --out DIR [--layers 2] [--heads 4] [--q-lora 32|0] [--kv-lora 32]
      [--nope 16] [--rope 8] [--v 16] [--inter 256] [--markov-rank 8] [--block 4]
      [--capture 1,3,5] [--mask-id ID] [--yarn true|false] [--seed S] [--eps 1e-6]
      [--rope-theta T] [--mscale-all-dim X] [--logit-scale X] [--markov-scale X] [--out-gain X]
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_checkpoint as mc  # noqa: E402
import safetensors_io as st  # noqa: E402
import kimi_k3_ckpt  # noqa: E402,F401  (registers U8, the MXFP4 pairs of a Kimi K3 target)

TARGET_TYPES = ("qwen3", "qwen3_moe", "deepseek_v3", "kimi_k2", "kimi_linear", "kimi_k3")
EMBED = "model.embed_tokens.weight"


def target_info(target_dir):
    """The target's text config and tensor-name prefix: a K3-style wrapper keeps its text model
    in "text_config" with tensors under "language_model." (only the checkpoint is made for such
    targets; dspark_ref.py does not run them, docs/K3.md §7 D1)."""
    with open(os.path.join(target_dir, "config.json")) as f:
        tc = json.load(f)
    mt = tc.get("model_type")
    if mt not in TARGET_TYPES:
        raise SystemExit("dspark_ckpt: target model_type %r not supported (%s)" % (mt, ", ".join(TARGET_TYPES)))
    if isinstance(tc.get("text_config"), dict):
        return tc["text_config"], "language_model."
    return tc, ""


def default_capture(n_layers):
    if n_layers < 4:
        return list(range(n_layers))
    return sorted(set(int(round(x)) for x in np.linspace(1, n_layers - 1, 3)))


def row_norms(a):
    a = np.asarray(a, dtype=np.float64)
    return np.sqrt((a * a).sum(axis=1))


def build(target_dir, a):
    tc, prefix = target_info(target_dir)
    EMBED = prefix + "model.embed_tokens.weight"
    ck = st.Checkpoint(target_dir)
    H, V, NL = int(tc["hidden_size"]), int(tc["vocab_size"]), int(tc["num_hidden_layers"])
    capture = default_capture(NL) if a.capture is None else [int(x) for x in a.capture.split(",") if x != ""]
    if not capture or any(i < 0 or i >= NL for i in capture):
        raise SystemExit("dspark_ckpt: --capture ids must lie in 0..%d" % (NL - 1))
    if EMBED not in ck or ck.shape(EMBED) != [V, H]:
        raise SystemExit("dspark_ckpt: target has no %s [%d, %d]" % (EMBED, V, H))
    emb_dtype = ck.dtype(EMBED)
    emb32 = np.asarray(ck.float32(EMBED), dtype=np.float32)
    emb_norms = row_norms(emb32)
    if a.mask_id is None:
        nz = np.nonzero(emb_norms > 0)[0]
        if len(nz) == 0:
            raise SystemExit("dspark_ckpt: the target embedding is all zero")
        mask_id = V - 1 if emb_norms[V - 1] > 0 else int(nz[-1])
    else:
        mask_id = int(a.mask_id)
        if not 0 <= mask_id < V:
            raise SystemExit("dspark_ckpt: --mask-id must lie in 0..%d" % (V - 1))
    tied = bool(tc.get("tie_word_embeddings", False))
    head_norms = emb_norms if tied else row_norms(ck.float32(prefix + "lm_head.weight"))
    used = head_norms[head_norms > 0]
    g = a.logit_scale / float(np.sqrt((used * used).mean()))
    # o_proj / down_proj gain: the block rows start as target embeddings; with lm_head tied (or
    # aligned) to them the row's own token would dominate its logits unless the sublayer
    # outputs (per-element RMS ~ out_gain) outweigh the embedding (per-element RMS e_rms)
    e_used = emb_norms[emb_norms > 0]
    e_rms = float(np.sqrt((e_used * e_used).mean() / H)) if len(e_used) else 0.0
    out_gain = max(1.0, 4.0 * e_rms) if a.out_gain is None else float(a.out_gain)

    nh, dn, dr, dv, KL = a.heads, a.nope, a.rope, a.v, a.kv_lora
    ql = a.q_lora if a.q_lora > 0 else None
    R, I, C = a.markov_rank, a.inter, len(capture)
    if dr % 2:
        raise SystemExit("dspark_ckpt: --rope must be even")
    max_pos = int(tc.get("max_position_embeddings") or 4096)
    rope_scaling = None
    if a.yarn:
        rope_scaling = {"type": "yarn", "factor": 4.0,
                        "original_max_position_embeddings": max(1, max_pos // 4),
                        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                        "mscale_all_dim": float(a.mscale_all_dim)}
    cfg = {
        "architectures": ["K3DSparkModel"],
        "block_size": a.block,
        "draft_vocab_size": V,
        "hidden_size": H,
        "intermediate_size": I,
        "kv_lora_rank": KL,
        "markov_head_type": "vanilla",
        "markov_rank": R,
        "mask_token_id": mask_id,
        "max_position_embeddings": max_pos,
        "mla_use_nope": False,
        "mla_use_output_gate": False,
        "num_attention_heads": nh,
        "num_hidden_layers": a.layers,
        "num_key_value_heads": nh,
        "num_target_layers": C,
        "q_lora_rank": ql,
        "qk_nope_head_dim": dn,
        "qk_rope_head_dim": dr,
        "rms_norm_eps": a.eps,
        "rope_scaling": rope_scaling,
        "rope_theta": a.rope_theta,
        "target_layer_ids": capture,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "v_head_dim": dv,
    }

    seed = a.seed
    specs = []

    def normal(name, shape, std):
        n = int(np.prod(shape))
        specs.append(st.TensorSpec(name, "BF16", shape, produce=lambda: mc.draw_normal(seed, name, n, std, "BF16")))

    def ones(name, shape, gain=1.0):
        n = int(np.prod(shape))

        def make():
            x = mc.draw_around_one(seed, name, n, 0.1, "F32")
            return st.f32_to_bf16((x * np.float32(gain)).astype(np.float32))
        specs.append(st.TensorSpec(name, "BF16", shape, produce=make))

    normal("context_proj.weight", [H, C * H], 1.0 / np.sqrt(C * H))
    ones("context_norm.weight", [H])
    for n in range(a.layers):
        p = "layers.%d." % n
        s = p + "self_attn."
        ones(p + "input_layernorm.weight", [H])
        ones(p + "post_attention_layernorm.weight", [H])
        if ql:
            normal(s + "q_a_proj.weight", [ql, H], 1.0 / np.sqrt(H))
            ones(s + "q_a_layernorm.weight", [ql])
            normal(s + "q_b_proj.weight", [nh * (dn + dr), ql], 1.0 / np.sqrt(ql))
        else:
            normal(s + "q_proj.weight", [nh * (dn + dr), H], 1.0 / np.sqrt(H))
        normal(s + "kv_a_proj_with_mqa.weight", [KL + dr, H], 1.0 / np.sqrt(H))
        ones(s + "kv_a_layernorm.weight", [KL])
        normal(s + "kv_b_proj.weight", [nh * (dn + dv), KL], 1.0 / np.sqrt(KL))
        normal(s + "o_proj.weight", [H, nh * dv], out_gain / np.sqrt(nh * dv))
        normal(p + "mlp.gate_proj.weight", [I, H], 1.0 / np.sqrt(H))
        normal(p + "mlp.up_proj.weight", [I, H], 1.0 / np.sqrt(H))
        normal(p + "mlp.down_proj.weight", [H, I], out_gain / np.sqrt(I))
    ones("final_norm.weight", [H], g)
    normal("markov_head.markov_w1.weight", [V, R], 1.0)
    normal("markov_head.markov_w2.weight", [V, R], a.markov_scale / np.sqrt(R))
    normal("confidence_head.proj.weight", [1, H + R], 1.0 / np.sqrt(H + R))
    normal("confidence_head.proj.bias", [1], 0.1)
    if emb_dtype == "BF16":
        emb_bits = np.ascontiguousarray(ck.array(EMBED), dtype=np.uint16)
    else:
        emb_bits = st.f32_to_bf16(emb32)
    specs.append(st.TensorSpec("embed_tokens.weight", "BF16", [V, H], data=emb_bits.reshape(V, H)))
    return cfg, specs


def parse_bool(s):
    if s.lower() in ("1", "true", "yes"):
        return True
    if s.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError("want true or false, got %r" % s)


def parser():
    ap = argparse.ArgumentParser(prog="dspark_ckpt", description="Random DSpark drafter checkpoint for a target folder.")
    ap.add_argument("--target", required=True, help="target model folder (qwen3/qwen3_moe/deepseek_v3/kimi_k2)")
    ap.add_argument("--out", required=True, help="drafter folder to write")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--q-lora", type=int, default=32, help="q_lora_rank; 0 = q_lora_rank null (q_proj)")
    ap.add_argument("--kv-lora", type=int, default=32)
    ap.add_argument("--nope", type=int, default=16)
    ap.add_argument("--rope", type=int, default=8)
    ap.add_argument("--v", type=int, default=16)
    ap.add_argument("--inter", type=int, default=256)
    ap.add_argument("--markov-rank", type=int, default=8)
    ap.add_argument("--block", type=int, default=4, help="block_size r (rows per proposal block)")
    ap.add_argument("--capture", help="comma-separated 0-based target layer ids (default: 3 spread)")
    ap.add_argument("--mask-id", type=int)
    ap.add_argument("--yarn", type=parse_bool, default=True)
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--eps", type=float, default=1e-6, help="rms_norm_eps")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--mscale-all-dim", type=float, default=1.0)
    ap.add_argument("--logit-scale", type=float, default=6.0)
    ap.add_argument("--markov-scale", type=float, default=3.0)
    ap.add_argument("--out-gain", type=float, help="o_proj/down_proj gain (default max(1, 4 x embedding RMS))")
    return ap


def write(target_dir, out, a):
    cfg, specs = build(target_dir, a)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        if f.endswith(".safetensors") or f == st.INDEX_NAME:
            os.remove(os.path.join(out, f))
    mc._dump_json(cfg, os.path.join(out, "config.json"))
    st.save_checkpoint(out, specs)
    return cfg, sum(s.nbytes for s in specs)


def main(argv=None):
    a = parser().parse_args(argv)
    for k in ("layers", "heads", "kv_lora", "nope", "rope", "v", "inter", "markov_rank", "block"):
        if getattr(a, k) <= 0:
            raise SystemExit("dspark_ckpt: --%s must be positive" % k.replace("_", "-"))
    cfg, nbytes = write(a.target, a.out, a)
    print("dspark_ckpt: wrote %s (%d tensor bytes; capture %s, mask %d, block %d)"
          % (a.out, nbytes, cfg["target_layer_ids"], cfg["mask_token_id"], cfg["block_size"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
