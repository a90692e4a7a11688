#!/usr/bin/python3
"""tests/gguf_writer.py — the bench's GGUF writer (tools/bench/gguf.py) writes the checkpoint's
own bytes under llama.cpp's names, shapes and keys.

Converts tiny-moe-tied (qwen3_moe, tied, no tokenizer.json: the placeholder vocabulary) and the
bundled demo target (qwen3_moe with Qwen's tokenizer.json: the "gpt2"/"qwen2" vocabulary) and
reads each file back with this test's own GGUF parser: magic and version; every key the
qwen3moe loader reads equal to config.json's value; one tensor per llama.cpp name with dims
the reverse of the Hugging Face shape (experts stacked [experts, rows, cols]); every matrix's
data byte-for-byte the stored BF16 bytes, every norm/router the F32 widening of them; offsets
aligned to general.alignment; vocabulary ids, types and merges from tokenizer.json. Refusals:
dense layers among MoE layers, rope_scaling, a non-Qwen family — exit status 2 naming the field.
Where the bench's peer is installed (BUILD/bench/peer, node-llama-cpp), llama.cpp's greedy ids
on the converted demo target must equal Deltafin's.

usage: gguf_writer.py BUILD_DIR WORK_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
GGUF = os.path.join(ROOT, "tools", "bench", "gguf.py")
sys.path.insert(0, os.path.join(HERE, "reference"))
import safetensors_io as sio  # noqa: E402

fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
    return cond


class Reader:
    """A GGUF v3 file: .kv {key: value}, .tensors {name: (dims, type, offset)}, .data_start."""

    def __init__(self, path):
        self.b = open(path, "rb").read()
        self.p = 0
        assert self.b[:4] == b"GGUF", "magic"
        self.p = 4
        self.version = self.u("<I")
        nt, nkv = self.u("<Q"), self.u("<Q")
        self.kv = {}
        for _ in range(nkv):
            k = self.s()
            self.kv[k] = self.val(self.u("<I"))
        self.tensors = {}
        for _ in range(nt):
            name = self.s()
            nd = self.u("<I")
            dims = [self.u("<Q") for _ in range(nd)]
            self.tensors[name] = (dims, self.u("<I"), self.u("<Q"))
        align = self.kv.get("general.alignment", 32)
        self.data_start = (self.p + align - 1) // align * align
        self.align = align

    def u(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def s(self):
        n = self.u("<Q")
        v = self.b[self.p:self.p + n].decode("utf-8")
        self.p += n
        return v

    def val(self, t):
        fmts = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
        if t == 8:
            return self.s()
        if t == 9:
            et, n = self.u("<I"), self.u("<Q")
            return [self.val(et) for _ in range(n)]
        return self.u(fmts[t])

    def data(self, name, nbytes):
        dims, t, off = self.tensors[name]
        a = self.data_start + off
        return self.b[a:a + nbytes]


def convert(model, out):
    return subprocess.run([sys.executable, GGUF, "--model", model, "--out", out], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)


def check_model(model, out, pre="qwen2"):
    label = os.path.basename(model)
    p = convert(model, out)
    if not check(p.returncode == 0, "%s: gguf.py exit %d: %s" % (label, p.returncode, p.stderr.strip())):
        return None
    check(not os.path.exists(out + ".tmp"), "%s: no temporary file left" % label)
    cfg = json.load(open(os.path.join(model, "config.json")))
    r = Reader(out)
    check(r.version == 3, "%s: GGUF version 3" % label)
    a = "qwen3moe"
    want = {"general.architecture": a, a + ".block_count": cfg["num_hidden_layers"],
            a + ".embedding_length": cfg["hidden_size"], a + ".attention.head_count": cfg["num_attention_heads"],
            a + ".attention.head_count_kv": cfg["num_key_value_heads"], a + ".attention.key_length": cfg["head_dim"],
            a + ".attention.value_length": cfg["head_dim"], a + ".expert_count": cfg["num_experts"],
            a + ".expert_used_count": cfg["num_experts_per_tok"],
            a + ".expert_feed_forward_length": cfg["moe_intermediate_size"],
            a + ".context_length": cfg["max_position_embeddings"]}
    for k, v in want.items():
        check(r.kv.get(k) == v, "%s: %s = %r, config says %r" % (label, k, r.kv.get(k), v))
    for k, v in ((a + ".rope.freq_base", cfg["rope_theta"]), (a + ".attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])):
        check(r.kv.get(k) == float(np.float32(v)), "%s: %s = %r, config says %r" % (label, k, r.kv.get(k), v))
    ck = sio.Checkpoint(model)
    # llama.cpp name -> (Hugging Face names stacked in order, F32?)
    names = {"token_embd.weight": (["model.embed_tokens.weight"], False),
             "output_norm.weight": (["model.norm.weight"], True)}
    if not cfg["tie_word_embeddings"]:
        names["output.weight"] = (["lm_head.weight"], False)
    for i in range(cfg["num_hidden_layers"]):
        lp, b = "model.layers.%d." % i, "blk.%d." % i
        for g, h, f32 in (("attn_norm", "input_layernorm", True), ("attn_q", "self_attn.q_proj", False),
                          ("attn_k", "self_attn.k_proj", False), ("attn_v", "self_attn.v_proj", False),
                          ("attn_output", "self_attn.o_proj", False), ("attn_q_norm", "self_attn.q_norm", True),
                          ("attn_k_norm", "self_attn.k_norm", True), ("ffn_norm", "post_attention_layernorm", True),
                          ("ffn_gate_inp", "mlp.gate", True)):
            names[b + g + ".weight"] = ([lp + h + ".weight"], f32)
        for g in ("gate", "up", "down"):
            names[b + "ffn_%s_exps.weight" % g] = (["%smlp.experts.%d.%s_proj.weight" % (lp, e, g)
                                                    for e in range(cfg["num_experts"])], False)
    check(set(r.tensors) == set(names), "%s: tensor names (extra %s, missing %s)" % (
        label, sorted(set(r.tensors) - set(names))[:3], sorted(set(names) - set(r.tensors))[:3]))
    for gname, (hf, f32) in names.items():
        if gname not in r.tensors:
            continue
        dims, t, off = r.tensors[gname]
        shape = ck.shape(hf[0])
        full = ([len(hf)] if len(hf) > 1 else []) + shape
        check(dims == list(reversed(full)), "%s: %s dims %s, expected the reverse of %s" % (label, gname, dims, full))
        check(off % r.align == 0, "%s: %s offset %d aligned" % (label, gname, off))
        if f32:
            check(t == 0, "%s: %s is F32" % (label, gname))
            want_b = b"".join(np.ascontiguousarray(ck.float32(n), dtype="<f4").tobytes() for n in hf)
        else:
            check(t == 30, "%s: %s is BF16" % (label, gname))
            want_b = b"".join(np.ascontiguousarray(ck.array(n)).tobytes() for n in hf)
        check(r.data(gname, len(want_b)) == want_b, "%s: %s data equals the checkpoint's bytes" % (label, gname))
    V = cfg["vocab_size"]
    toks = r.kv.get("tokenizer.ggml.tokens", [])
    types = r.kv.get("tokenizer.ggml.token_type", [])
    check(len(toks) == V and len(types) == V, "%s: %d tokens and types (vocab_size)" % (label, V))
    check(len(set(toks)) == len(toks), "%s: token strings unique" % label)
    tj_path = os.path.join(model, "tokenizer.json")
    if os.path.exists(tj_path):
        tj = json.load(open(tj_path, encoding="utf-8"))
        check(r.kv.get("tokenizer.ggml.model") == "gpt2" and r.kv.get("tokenizer.ggml.pre") == pre,
              "%s: gpt2 vocabulary, %s pre-tokenizer (got %s)" % (label, pre, r.kv.get("tokenizer.ggml.pre")))
        vocab = tj["model"]["vocab"]
        check(all(toks[i] == s for s, i in vocab.items()), "%s: ids of tokenizer.json's vocab" % label)
        for t in tj["added_tokens"]:
            check(toks[t["id"]] == t["content"] and types[t["id"]] == (3 if t["special"] else 4),
                  "%s: added token %d %r" % (label, t["id"], t["content"]))
        merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
        check(r.kv.get("tokenizer.ggml.merges") == merges, "%s: merges in order" % label)
        check(r.kv.get("tokenizer.ggml.eos_token_id") == cfg["eos_token_id"], "%s: eos id" % label)
    else:
        check(r.kv.get("tokenizer.ggml.model") == "llama", "%s: placeholder vocabulary" % label)
        check(toks[3:259] == ["<0x%02X>" % i for i in range(256)] and set(types[3:259]) == {6},
              "%s: the 256 byte tokens" % label)
    return r


def refused(work, name, edit, field):
    src = os.path.join(ROOT, "tests", "fixtures", "tiny-moe-tied")
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    cfg = json.load(open(os.path.join(d, "config.json")))
    edit(cfg)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    out = os.path.join(work, name + ".gguf")
    p = convert(d, out)
    check(p.returncode == 2 and field in p.stderr and "config.json" in p.stderr,
          "%s: exit 2 naming %s (got %d: %s)" % (name, field, p.returncode, p.stderr.strip()))
    check(not os.path.exists(out) and not os.path.exists(out + ".tmp"), "%s: nothing written" % name)


def main():
    build, work = sys.argv[1:3]
    os.makedirs(work, exist_ok=True)
    check_model(os.path.join(ROOT, "tests", "fixtures", "tiny-moe-tied"), os.path.join(work, "tiny.gguf"))
    demo = os.path.join(ROOT, "models", "demo-moe")
    demo_gguf = os.path.join(work, "demo.gguf")
    check_model(demo, demo_gguf)
    xd = os.path.join(work, "xdraft.gguf")  # qwen3 dense with GPT-2's tokenizer
    if check(convert(os.path.join(ROOT, "models", "demo-xdraft"), xd).returncode == 0, "demo-xdraft converts"):
        r = Reader(xd)
        check(r.kv.get("general.architecture") == "qwen3" and r.kv.get("tokenizer.ggml.pre") == "gpt2",
              "demo-xdraft: qwen3 with the gpt2 pre-tokenizer (got %s, %s)" % (
                  r.kv.get("general.architecture"), r.kv.get("tokenizer.ggml.pre")))
        check("blk.0.ffn_gate.weight" in r.tensors and "blk.0.ffn_gate_inp.weight" not in r.tensors,
              "demo-xdraft: dense FFN tensors")
    refused(work, "dense-layer", lambda c: c.update(mlp_only_layers=[0]), "mlp_only_layers")
    refused(work, "yarn", lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "rope_scaling")
    refused(work, "family", lambda c: c.update(model_type="deepseek_v3"), "model_type")
    refused(work, "top-k", lambda c: c.update(num_experts_per_tok=c["num_experts"] + 1), "num_experts_per_tok")
    refused(work, "bias", lambda c: c.update(attention_bias=True), "attention_bias")
    refused(work, "head-dim-type", lambda c: c.update(head_dim="16"), "head_dim")
    refused(work, "eps-null", lambda c: c.update(rms_norm_eps=None), "rms_norm_eps")
    refused(work, "shape", lambda c: c.update(head_dim=c["head_dim"] * 2), "config.json implies")
    peer = os.path.join(build, "bench", "peer")
    if os.path.exists(os.path.join(peer, "node_modules", "node-llama-cpp")) and shutil.which("node") \
            and os.path.exists(demo_gguf):
        ids = "39572,11,13498,13,220,24,1177,54271,23594,315,13224,594"
        p = subprocess.run(["node", os.path.join(ROOT, "tools", "bench", "llama_peer.mjs"), "--nlc", peer,
                            "--model", demo_gguf, "--prefill", "0", "--decode", "0", "--vocab", "151936",
                            "--ids", ids, "--greedy", "16"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=300)
        q = subprocess.run([os.path.join(build, "coordinator", "deltafin"), "run", "--model", demo, "--prompt-ids",
                            ids, "--max-new", "16", "--temperature", "0", "--no-draft"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=300)
        if check(p.returncode == 0 and q.returncode == 0, "peer and deltafin ran: %s %s" % (p.stderr[-300:], q.stderr[-300:])):
            theirs = json.loads(p.stdout)["greedy"]
            mine = [int(x) for x in q.stdout.split()]
            check(theirs == mine, "llama.cpp's greedy ids on the GGUF %s equal Deltafin's %s" % (theirs, mine))
            print("peer: llama.cpp (node-llama-cpp) greedy ids equal Deltafin's: %s" % mine)
    else:
        print("peer: not installed in %s (tools/bench/run.sh installs it); the greedy-id comparison is left out" % peer)
    for f in fails:
        print("FAIL " + f)
    print("gguf writer: %s" % ("ok" if not fails else "%d failure(s)" % len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
