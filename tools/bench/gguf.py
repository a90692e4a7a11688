#!/usr/bin/python3
"""tools/bench/gguf.py — write a bf16 Qwen3-MoE / Qwen3 checkpoint as a GGUF file, unquantized,
so llama.cpp (the bench's speed peer) runs the very weights Deltafin runs.

  gguf.py --model DIR --out FILE.gguf

Input: a Hugging Face folder (config.json, *.safetensors of BF16 tensors, optional
tokenizer.json), model_type qwen3_moe or qwen3. Output: GGUF version 3 (the layout llama.cpp's
gguf-py writes: little-endian header, key/values, tensor infos, data aligned to 32 bytes), with
llama.cpp's tensor names (architecture "qwen3moe" / "qwen3"). Every matrix keeps its stored BF16
bytes; norms and the router are written as F32, as llama.cpp's own converter does (both exact:
BF16 -> F32 widens). A tied model gets no output.weight (llama.cpp then uses token_embd).
Expert matrices are stacked [experts, rows, cols] in expert order.

Tokenizer: a tokenizer.json with a byte-level BPE model becomes llama.cpp's "gpt2" vocabulary
with the "qwen2" pre-tokenizer (Qwen2's split regex) or the "gpt2" one (GPT-2's byte level)
(ids, merges, added tokens; ids with no token become "[PADn]", unused); another tokenizer.json
is refused; a folder without one (the bench's random checkpoints, which run on ids) gets
a placeholder SentencePiece-style vocabulary of vocab_size entries (byte tokens and "wN"
pieces), enough for llama.cpp to load and time the model on token ids.

Every tensor's shape is checked against config.json, and a checkpoint with tensors it has no
place for (biases, say) is refused. Writes FILE.gguf.tmp and renames it into place when
complete (an existing FILE.gguf is replaced; an error or an interrupt removes the .tmp).
Exit status 2 with a message naming the file and field on a checkpoint it cannot convert.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
import safetensors_io as sio  # noqa: E402

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGN = 32
# GGUF metadata value types
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
# ggml tensor types
G_F32, G_BF16 = 0, 30
FILE_TYPE_MOSTLY_BF16 = 32
# llama.cpp token types
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_USER, TOK_UNUSED, TOK_BYTE = 1, 2, 3, 4, 5, 6


class ConvertError(Exception):
    pass


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v):
    if vtype == T_STR:
        return _str(v)
    if vtype == T_BOOL:
        return struct.pack("<?", bool(v))
    fmt = {T_U32: "<I", T_I32: "<i", T_F32: "<f", T_U64: "<Q"}[vtype]
    return struct.pack(fmt, v)


def kv_bytes(key, vtype, v):
    """One key/value; vtype (T_ARR, elem_type) for arrays."""
    out = _str(key)
    if isinstance(vtype, tuple):
        et = vtype[1]
        out += struct.pack("<IIQ", T_ARR, et, len(v))
        if et == T_STR:
            out += b"".join(_str(s) for s in v)
        elif et == T_I32:
            out += np.asarray(v, dtype="<i4").tobytes()
        elif et == T_F32:
            out += np.asarray(v, dtype="<f4").tobytes()
        else:
            raise ValueError("array element type %d" % et)
        return out
    return out + struct.pack("<I", vtype) + _value(vtype, v)


def cfg_int(cfg, key, path, default=None):
    v = cfg.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ConvertError("%s: %s must be a positive integer (got %r)" % (path, key, v))
    return v


def cfg_float(cfg, key, path, default):
    v = cfg.get(key, default)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
        raise ConvertError("%s: %s must be a positive number (got %r)" % (path, key, v))
    return float(v)


def load_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            v = json.load(f)
    except (OSError, ValueError) as e:
        raise ConvertError("%s: cannot read %s: %s" % (path, what, e))
    if not isinstance(v, dict):
        raise ConvertError("%s: %s is not a JSON object" % (path, what))
    return v


# the pre-tokenizers llama.cpp names (tokenizer.ggml.pre) that this writer recognises
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


def pre_name(pre, path):
    """llama.cpp's pre-tokenizer name for tokenizer.json's pre_tokenizer: Qwen2's split regex
    then byte level -> "qwen2"; GPT-2's byte level with its own regex -> "gpt2"."""
    if isinstance(pre, dict) and pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt2"
    if isinstance(pre, dict) and pre.get("type") == "Sequence":
        ps = pre.get("pretokenizers") or []
        if (len(ps) == 2 and ps[0].get("type") == "Split" and
                (ps[0].get("pattern") or {}).get("Regex") == QWEN2_SPLIT and
                ps[1].get("type") == "ByteLevel" and not ps[1].get("use_regex", True)):
            return "qwen2"
    raise ConvertError("%s: pre_tokenizer %s: not Qwen2's split + byte level nor GPT-2's byte level, the "
                       "two this writer maps to llama.cpp" % (path, json.dumps(pre)[:120]))


def first_id(v):
    if isinstance(v, list):
        v = v[0] if v else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def bpe_vocab(tok_path, V):
    """(tokens, types, merges, pre) from a byte-level BPE tokenizer.json, padded to V ids."""
    tj = load_json(tok_path, "tokenizer.json")
    model = tj.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ConvertError("%s: model.type %r: this writer converts byte-level BPE vocabularies" % (
            tok_path, model.get("type")))
    pre = pre_name(tj.get("pre_tokenizer"), tok_path)
    tokens = [None] * V
    types = [TOK_UNUSED] * V
    for s, i in model["vocab"].items():
        if 0 <= i < V:
            tokens[i], types[i] = s, TOK_NORMAL
    for t in tj.get("added_tokens") or []:
        i = t.get("id")
        if isinstance(i, int) and 0 <= i < V:
            tokens[i] = t["content"]
            types[i] = TOK_CONTROL if t.get("special") else TOK_USER
    for i in range(V):
        if tokens[i] is None:
            tokens[i] = "[PAD%d]" % i
    merges = []
    for m in model.get("merges") or []:
        merges.append(m if isinstance(m, str) else " ".join(m))
    return tokens, types, merges, pre


def placeholder_vocab(V):
    """A SentencePiece-style vocabulary of V entries: <unk>, <s>, </s>, the 256 byte tokens."""
    if V < 259 + 1:
        raise ConvertError("vocab_size %d: a placeholder vocabulary needs at least 260 ids" % V)
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [TOK_UNKNOWN, TOK_CONTROL, TOK_CONTROL] + [TOK_BYTE] * 256
    tokens += ["w%d" % i for i in range(V - len(tokens))]
    types += [TOK_NORMAL] * (V - len(types))
    scores = [0.0] * 259 + [-float(i) for i in range(V - 259)]
    return tokens, types, scores


class Tensor:
    def __init__(self, name, shape, gtype, parts):
        self.name, self.shape, self.gtype, self.parts = name, shape, gtype, parts  # parts: arrays

    def nbytes(self):
        return sum(p.nbytes for p in self.parts)


def convert(model_dir, out_path):
    cfg_path = os.path.join(model_dir, "config.json")
    cfg = load_json(cfg_path, "config.json")
    mt = cfg.get("model_type")
    if mt not in ("qwen3_moe", "qwen3"):
        raise ConvertError("%s: model_type %r: this writer converts qwen3_moe and qwen3" % (cfg_path, mt))
    arch = "qwen3moe" if mt == "qwen3_moe" else "qwen3"
    ck = sio.Checkpoint(model_dir)
    H = cfg_int(cfg, "hidden_size", cfg_path)
    L = cfg_int(cfg, "num_hidden_layers", cfg_path)
    V = cfg_int(cfg, "vocab_size", cfg_path)
    nh = cfg_int(cfg, "num_attention_heads", cfg_path)
    nkv = cfg_int(cfg, "num_key_value_heads", cfg_path)
    if cfg.get("head_dim") is None and H % nh:
        raise ConvertError("%s: no head_dim, and hidden_size %d is not a multiple of num_attention_heads %d"
                           % (cfg_path, H, nh))
    hd = cfg_int(cfg, "head_dim", cfg_path) if cfg.get("head_dim") is not None else H // nh
    if nh % nkv:
        raise ConvertError("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d"
                           % (cfg_path, nh, nkv))
    ctx = cfg_int(cfg, "max_position_embeddings", cfg_path, 4096)
    theta = cfg_float(cfg, "rope_theta", cfg_path, 1e6)
    eps = cfg_float(cfg, "rms_norm_eps", cfg_path, 1e-6)
    for key in ("rope_scaling", "attention_bias", "use_sliding_window"):
        if cfg.get(key):
            raise ConvertError("%s: %s is set (%s): this writer converts plain RoPE attention without biases or "
                               "sliding windows" % (cfg_path, key, json.dumps(cfg[key])[:60]))
    moe = arch == "qwen3moe"
    I = cfg_int(cfg, "intermediate_size", cfg_path) if not moe else 0
    if moe:
        E = cfg_int(cfg, "num_experts", cfg_path)
        K = cfg_int(cfg, "num_experts_per_tok", cfg_path)
        FE = cfg_int(cfg, "moe_intermediate_size", cfg_path)
        if K > E:
            raise ConvertError("%s: num_experts_per_tok %d exceeds num_experts %d" % (cfg_path, K, E))
        if cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1:
            raise ConvertError("%s: dense layers among MoE layers (mlp_only_layers / decoder_sparse_step): "
                               "llama.cpp's qwen3moe has MoE on every layer" % cfg_path)
        if cfg.get("norm_topk_prob") is False:
            raise ConvertError("%s: norm_topk_prob false: llama.cpp's qwen3moe renormalises the top-k" % cfg_path)

    used = set()

    def arr(name, f32=False, shape=None):
        if name not in ck:
            raise ConvertError("%s: tensor %s is missing" % (model_dir, name))
        if shape is not None and ck.shape(name) != list(shape):
            raise ConvertError("%s: tensor %s has shape %s; config.json implies %s" % (
                model_dir, name, ck.shape(name), list(shape)))
        used.add(name)
        a = ck.array(name)
        dt = ck.dtype(name)
        if f32:
            return np.ascontiguousarray(sio.to_float32(dt, a), dtype="<f4")
        if dt != "BF16":
            raise ConvertError("%s: tensor %s is %s; the bench's peer gets BF16 matrices" % (model_dir, name, dt))
        return a

    tensors = []

    def add(gname, hf, shape, f32=False):
        a = arr(hf, f32, shape)
        tensors.append(Tensor(gname, list(a.shape), G_F32 if f32 else G_BF16, [a]))

    p = "model."
    add("token_embd.weight", p + "embed_tokens.weight", (V, H))
    add("output_norm.weight", p + "norm.weight", (H,), True)
    if not cfg.get("tie_word_embeddings", False):
        add("output.weight", "lm_head.weight", (V, H))
    for i in range(L):
        lp = "%slayers.%d." % (p, i)
        b = "blk.%d." % i
        add(b + "attn_norm.weight", lp + "input_layernorm.weight", (H,), True)
        add(b + "attn_q.weight", lp + "self_attn.q_proj.weight", (nh * hd, H))
        add(b + "attn_k.weight", lp + "self_attn.k_proj.weight", (nkv * hd, H))
        add(b + "attn_v.weight", lp + "self_attn.v_proj.weight", (nkv * hd, H))
        add(b + "attn_output.weight", lp + "self_attn.o_proj.weight", (H, nh * hd))
        add(b + "attn_q_norm.weight", lp + "self_attn.q_norm.weight", (hd,), True)
        add(b + "attn_k_norm.weight", lp + "self_attn.k_norm.weight", (hd,), True)
        add(b + "ffn_norm.weight", lp + "post_attention_layernorm.weight", (H,), True)
        if moe:
            add(b + "ffn_gate_inp.weight", lp + "mlp.gate.weight", (E, H), True)
            for g, h, shp in (("gate", "gate_proj", (FE, H)), ("up", "up_proj", (FE, H)),
                              ("down", "down_proj", (H, FE))):
                parts = [arr("%smlp.experts.%d.%s.weight" % (lp, e, h), shape=shp) for e in range(E)]
                tensors.append(Tensor(b + "ffn_%s_exps.weight" % g, [E] + list(shp), G_BF16, parts))
        else:
            for g, h, shp in (("gate", "gate_proj", (I, H)), ("up", "up_proj", (I, H)), ("down", "down_proj", (H, I))):
                add(b + "ffn_%s.weight" % g, lp + "mlp.%s.weight" % h, shp)
    unused = sorted(set(ck.names) - used)
    if unused:
        raise ConvertError("%s: %d tensor(s) this writer has no place for, first %s (a variant of the family it "
                           "does not convert)" % (model_dir, len(unused), unused[0]))

    kv = [("general.architecture", T_STR, arch),
          ("general.name", T_STR, os.path.basename(os.path.abspath(model_dir))),
          ("general.file_type", T_U32, FILE_TYPE_MOSTLY_BF16),
          ("general.alignment", T_U32, ALIGN),
          (arch + ".block_count", T_U32, L),
          (arch + ".context_length", T_U32, ctx),
          (arch + ".embedding_length", T_U32, H),
          (arch + ".feed_forward_length", T_U32, I if not moe else
           (cfg["intermediate_size"] if isinstance(cfg.get("intermediate_size"), int) else 0)),
          (arch + ".attention.head_count", T_U32, nh),
          (arch + ".attention.head_count_kv", T_U32, nkv),
          (arch + ".attention.key_length", T_U32, hd),
          (arch + ".attention.value_length", T_U32, hd),
          (arch + ".rope.freq_base", T_F32, theta),
          (arch + ".attention.layer_norm_rms_epsilon", T_F32, eps)]
    if moe:
        kv += [(arch + ".expert_count", T_U32, E), (arch + ".expert_used_count", T_U32, K),
               (arch + ".expert_feed_forward_length", T_U32, FE)]
    tok_json = os.path.join(model_dir, "tokenizer.json")
    bpe = bpe_vocab(tok_json, V) if os.path.exists(tok_json) else None
    bos, eos = first_id(cfg.get("bos_token_id")), first_id(cfg.get("eos_token_id"))
    if bpe:
        tokens, types, merges, pre = bpe
        kv += [("tokenizer.ggml.model", T_STR, "gpt2"), ("tokenizer.ggml.pre", T_STR, pre),
               ("tokenizer.ggml.tokens", (T_ARR, T_STR), tokens),
               ("tokenizer.ggml.token_type", (T_ARR, T_I32), types),
               ("tokenizer.ggml.merges", (T_ARR, T_STR), merges),
               ("tokenizer.ggml.add_bos_token", T_BOOL, False)]
        if bos is not None and 0 <= bos < V:
            kv.append(("tokenizer.ggml.bos_token_id", T_U32, bos))
        if eos is not None and 0 <= eos < V:
            kv.append(("tokenizer.ggml.eos_token_id", T_U32, eos))
    else:
        tokens, types, scores = placeholder_vocab(V)
        kv += [("tokenizer.ggml.model", T_STR, "llama"),
               ("tokenizer.ggml.tokens", (T_ARR, T_STR), tokens),
               ("tokenizer.ggml.scores", (T_ARR, T_F32), scores),
               ("tokenizer.ggml.token_type", (T_ARR, T_I32), types),
               ("tokenizer.ggml.unknown_token_id", T_U32, 0),
               ("tokenizer.ggml.bos_token_id", T_U32, 1),
               ("tokenizer.ggml.eos_token_id", T_U32, 2),
               ("tokenizer.ggml.add_bos_token", T_BOOL, False)]

    head = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kv))
    head += b"".join(kv_bytes(k, t, v) for k, t, v in kv)
    off = 0
    for t in tensors:
        dims = list(reversed(t.shape))  # ggml: ne[0] is the innermost (row) dimension
        head += _str(t.name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        head += struct.pack("<IQ", t.gtype, off)
        t.offset = off
        off += (t.nbytes() + ALIGN - 1) // ALIGN * ALIGN
    if os.path.isdir(out_path):
        raise ConvertError("%s: is a folder; --out names the GGUF file to write" % out_path)
    tmp = out_path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(head)
            f.write(b"\0" * ((-len(head)) % ALIGN))
            for t in tensors:
                for a in t.parts:
                    f.write(memoryview(np.ascontiguousarray(a)).cast("B"))
                f.write(b"\0" * ((-t.nbytes()) % ALIGN))
        os.replace(tmp, out_path)
    except OSError as e:
        raise ConvertError("%s: cannot write: %s" % (out_path, e.strerror or e))
    finally:  # an error or an interrupt leaves no partial file
        if os.path.exists(tmp):
            os.unlink(tmp)
    return len(tensors), off


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint folder (qwen3_moe or qwen3, BF16)")
    ap.add_argument("--out", required=True, help="GGUF file to write")
    a = ap.parse_args(argv)
    try:
        n, size = convert(a.model, a.out)
    except (ConvertError, sio.SafetensorsError, OSError, json.JSONDecodeError) as e:
        print("gguf.py: %s" % e, file=sys.stderr)
        return 2
    print("gguf.py: wrote %s (%d tensors, %.1f MB of data)" % (a.out, n, size / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
