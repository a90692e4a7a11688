#!/usr/bin/env python3
"""Write the seed corpus of fuzz_codec (tests/fuzz/corpus_codec/): one valid header per op
plus a few malformed ones, msgpack encoded by hand (standard library only).

usage: make_corpus_codec.py OUT_DIR
"""
import os
import struct
import sys


def pk(o):
    if o is True:
        return b"\xc3"
    if o is False:
        return b"\xc2"
    if isinstance(o, float):
        return b"\xca" + struct.pack(">f", o)
    if isinstance(o, int):
        if 0 <= o < 128:
            return bytes([o])
        return b"\xcf" + struct.pack(">Q", o)
    if isinstance(o, str):
        b = o.encode()
        return (bytes([0xa0 | len(b)]) if len(b) < 32 else b"\xd9" + bytes([len(b)])) + b
    if isinstance(o, bytes):
        return b"\xc4" + bytes([len(o)]) + o
    if isinstance(o, list):
        return bytes([0x90 | len(o)]) + b"".join(pk(x) for x in o) if len(o) < 16 else \
            b"\xdc" + struct.pack(">H", len(o)) + b"".join(pk(x) for x in o)
    if isinstance(o, dict):
        return bytes([0x80 | len(o)]) + b"".join(pk(k) + pk(v) for k, v in o.items())
    raise TypeError(o)


def hdr(op, **kw):
    d = {"v": 2, "op": op, "id": 7}
    d.update(kw)
    return pk(d)


t = ["model.layers.1.mlp.experts.0.gate_proj.weight", "BF16", [48, 96], 9216, b"\x11" * 32]
t8 = ["model.layers.1.mlp.experts.0.gate_proj.weight", "F8_E4M3", [48, 96], 4608, b"\x22" * 32]
s8 = ["model.layers.1.mlp.experts.0.gate_proj.weight_scale_inv", "F32", [1, 1], 4, b"\x33" * 32]
tk = "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_"
p4 = [tk + "packed", "U8", [64, 48], 3072, b"\x44" * 32]
e4 = [tk + "scale", "U8", [64, 3], 192, b"\x55" * 32]
seeds = {
    "join": hdr("JOIN", name="node-a", memory=1 << 30, has_model=True, token="00" * 16),
    "assign": hdr("ASSIGN", epoch=3, hidden=96, inter=48, max_rows=64, pairs=[[1, 0]],
                  tensors=[t, t, t]),
    "assign_fp8": hdr("ASSIGN", epoch=3, hidden=96, inter=48, max_rows=64, block=[128, 128],
                      pairs=[[1, 0]], tensors=[t8, t8, t8, s8, s8, s8]),
    "join_features": hdr("JOIN", name="node-a", memory=1 << 30, has_model=False,
                         features=["act", "mx"]),
    "assign_mx": hdr("ASSIGN", epoch=3, hidden=96, inter=64, max_rows=64, act=[1, 4.0, 25.0],
                     mx=32, pairs=[[1, 0]], tensors=[p4, p4, p4, e4, e4, e4]),
    "fetch": hdr("FETCH", epoch=3, tensor=2, offset=0, length=1 << 20),
    "chunk": hdr("SHARD_CHUNK", epoch=3, tensor=2, offset=0, total=9216),
    "ready": hdr("READY", epoch=3, held=27648),
    "ffn": hdr("FFN", layer=1, experts=[0, 5, 7], rows=[1, 4, 2], cols=96, dtype="F32"),
    "result": hdr("RESULT", rows=7, cols=96, dtype="F32"),
    "ping": hdr("PING"),
    "pong": hdr("PONG"),
    "stats": hdr("STATS", held=1, served=2, rows=3, busy_us=4),
    "bye": hdr("BYE", reason="shutting down"),
    "error": hdr("ERROR", code=4, reason="bad request"),
    "bad_version": pk({"v": 1, "op": "JOIN", "id": 1}),
    "bad_array32": b"\xdd\xff\xff\xff\xff",
    "bad_nested": b"\x91" * 12 + b"\x01",
}
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
