#!/usr/bin/env python3
"""Regenerate tests/fuzz/corpus_st/: small safetensors images that seed fuzz_st_header.

Each seed is a complete file image (8-byte little-endian header length, JSON header, data).
Valid seeds cover every dtype, metadata, empty and scalar tensors, and gaps; invalid ones
reach each error path once so the fuzzer starts next to every branch.
Run: /usr/bin/python3 tests/fuzz/make_corpus_st.py
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus_st")

BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16,
        "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64,
        "F64": 64, "I64": 64, "U64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}


def image(header, data=b"", declared=None, pad=True):
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    n = len(h) if declared is None else declared
    return struct.pack("<Q", n) + h + data


def packed(tensors, metadata=None):
    """tensors: [(name, dtype, shape)] laid out back to back."""
    header, off = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape in tensors:
        numel = 1
        for d in shape:
            numel *= d
        nb = numel * BITS[dt] // 8
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}
        off += nb
    return image(header, bytes((i * 7) & 0xFF for i in range(off)))


SEEDS = {
    "valid_two_tensors": packed([("model.embed_tokens.weight", "BF16", [4, 3]),
                                 ("model.norm.weight", "F32", [3])], {"format": "pt"}),
    "valid_every_dtype": packed([(dt.lower(), dt, [8]) for dt in BITS]),
    "valid_empty_header": image({}),
    "valid_metadata_only": image({"__metadata__": {"format": "pt", "k": "v"}}),
    "valid_scalar_and_empty": packed([("s", "F32", []), ("e", "BF16", [0, 5]), ("z", "U8", [0])]),
    "valid_gap": image({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                        "b": {"dtype": "U8", "shape": [2], "data_offsets": [6, 8]}}, bytes(8)),
    "valid_eight_dims": packed([("w", "U8", [1, 2, 1, 2, 1, 2, 1, 2])]),
    "bad_unknown_dtype": image({"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}},
                               bytes(2)),
    "bad_size_mismatch": image({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}},
                               bytes(16)),
    "bad_past_end": image({"w": {"dtype": "BF16", "shape": [50], "data_offsets": [100, 200]}},
                          bytes(150)),
    "bad_overlap": image({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                          "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}},
                         bytes(16)),
    "bad_shape_overflow": image({"w": {"dtype": "U8", "shape": [4294967296, 4294967296],
                                       "data_offsets": [0, 1]}}, bytes(1)),
    "bad_header_length": image({}, declared=1000),
    "bad_json": image(b'{"a": ', pad=False),
    "bad_short": b"\x08\x00\x00",
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, blob in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
