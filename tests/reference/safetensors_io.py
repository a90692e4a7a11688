"""tests/reference/safetensors_io.py — read and write safetensors checkpoints with json + numpy.

Owns: the safetensors container format (an 8-byte little-endian header length N, N bytes of
JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
padded with spaces to a multiple of 8, then the packed byte buffer), single files and
sharded folders (model.safetensors.index.json with "metadata" and "weight_map"), and the
float32 <-> bfloat16 conversions. Does not own: what the tensors mean (qwen3_ref.py) or how
they are generated (make_checkpoint.py).

BF16 is held as raw uint16 arrays (the top 16 bits of the float32); F16 as numpy float16;
F32 as numpy float32; F8_E4M3 (OCP E4M3FN: bias 7, no infinities, S.1111.111 is NaN) as raw
uint8 bytes, widened exactly through a 256-entry table (torch 1.13 has no float8 dtype). float32 -> bf16 rounds to nearest, ties to even (NaN -> 0x7FC0), which
is what torch's .to(torch.bfloat16) does.

Layout written (compatible with the reference Rust/Python safetensors writer): tensors are
packed back to back with no gaps, in the caller's order after a stable sort by element size
(largest first, so every tensor stays aligned to its element size); the header is compact
JSON with "__metadata__" first. Sharded folders are named model-0000i-of-0000n.safetensors
and the index is written like transformers' save_pretrained (indent 2, sorted keys).
"""

import hashlib
import json
import os
import struct

import numpy as np

DTYPE_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1}
NP_DTYPE = {"BF16": np.dtype("<u2"), "F16": np.dtype("<f2"), "F32": np.dtype("<f4"),
            "F8_E4M3": np.dtype("u1")}
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
MAX_HEADER = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    pass


# ---------------------------------------------------------------------------------------------
# bf16 conversions


def f32_to_bf16(x):
    """float32 array (any shape) -> uint16 bf16 bits, round to nearest even; NaN -> 0x7FC0."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    out = rounded.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def bf16_to_f32(b):
    """uint16 bf16 bits -> float32 (exact)."""
    b = np.ascontiguousarray(b, dtype=np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


_E4M3 = None


def e4m3_table():
    """float32 [256]: the exact value of every E4M3FN byte (NaN for 0x7F and 0xFF)."""
    global _E4M3
    if _E4M3 is None:
        t = np.zeros(256, dtype=np.float64)
        for b in range(256):
            e, m = (b >> 3) & 0xF, b & 7
            v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1.0 + m / 8.0) * 2.0 ** (e - 7)
            if b & 0x7F == 0x7F:
                v = float("nan")
            t[b] = -v if b & 0x80 else v
        _E4M3 = t.astype(np.float32)
    return _E4M3


def f32_to_e4m3(x):
    """float32 array -> uint8 E4M3FN bytes, round to nearest (ties to even mantissa),
    saturating at +-448 (what quantisers clip to); NaN -> 0x7F."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    pos = e4m3_table()[:127].astype(np.float64)  # codes 0..126, ascending values
    a = np.abs(x.astype(np.float64))
    hi = np.clip(np.searchsorted(pos, a), 0, 126)
    lo = np.clip(hi - 1, 0, 126)
    dlo, dhi = a - pos[lo], pos[hi] - a
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    pick = np.where(a >= pos[126], 126, pick)
    out = pick.astype(np.uint8) | np.where(np.signbit(x) & (pick > 0), 0x80, 0).astype(np.uint8)
    out[np.isnan(x)] = 0x7F
    return out


def to_float32(dtype, arr):
    """Array as stored (dtype name, numpy array) -> float32 numpy array (exact widening)."""
    if dtype == "F8_E4M3":
        return e4m3_table()[np.asarray(arr, dtype=np.uint8)]
    if dtype == "BF16":
        return bf16_to_f32(arr)
    if dtype == "F16":
        return arr.astype(np.float32)
    if dtype == "F32":
        return np.asarray(arr, dtype=np.float32)
    raise SafetensorsError("unsupported dtype %s" % dtype)


# ---------------------------------------------------------------------------------------------
# writing


class TensorSpec:
    """A tensor to write: name, dtype name, shape, and either `data` (a numpy array whose
    bytes are written as they are: uint16 for BF16, float16 for F16, float32 for F32) or
    `produce`, a callable returning that array when the tensor's turn comes (so large
    checkpoints are generated one tensor at a time)."""

    __slots__ = ("name", "dtype", "shape", "data", "produce")

    def __init__(self, name, dtype, shape, data=None, produce=None):
        if dtype not in DTYPE_SIZE:
            raise SafetensorsError("tensor %s: unsupported dtype %s" % (name, dtype))
        if (data is None) == (produce is None):
            raise SafetensorsError("tensor %s: give exactly one of data / produce" % name)
        self.name = name
        self.dtype = dtype
        self.shape = [int(s) for s in shape]
        self.data = data
        self.produce = produce

    @property
    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self):
        return self.numel * DTYPE_SIZE[self.dtype]

    def array(self):
        a = self.data if self.data is not None else self.produce()
        a = np.ascontiguousarray(a)
        if a.dtype != NP_DTYPE[self.dtype]:
            raise SafetensorsError("tensor %s: array dtype %s does not hold %s"
                                   % (self.name, a.dtype, self.dtype))
        if a.size != self.numel:
            raise SafetensorsError("tensor %s: %d elements, shape %s wants %d"
                                   % (self.name, a.size, self.shape, self.numel))
        return a


def _layout(specs):
    names = set()
    for s in specs:
        if s.name in names:
            raise SafetensorsError("duplicate tensor name %s" % s.name)
        if s.name == "__metadata__":
            raise SafetensorsError("tensor name __metadata__ is reserved")
        names.add(s.name)
    # Stable sort: larger elements first keeps every tensor aligned without padding.
    return sorted(specs, key=lambda s: -DTYPE_SIZE[s.dtype])


def header_bytes(specs, metadata=None):
    """(ordered specs, header bytes including the 8-byte length) for a file of `specs`."""
    ordered = _layout(specs)
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    for s in ordered:
        header[s.name] = {"dtype": s.dtype, "shape": s.shape, "data_offsets": [off, off + s.nbytes]}
        off += s.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    pad = (8 - len(text) % 8) % 8
    text += b" " * pad
    return ordered, struct.pack("<Q", len(text)) + text


def write_file(path, specs, metadata=None):
    """Write one .safetensors file atomically (path.tmp then rename). Returns total bytes."""
    ordered, head = header_bytes(specs, metadata)
    tmp = path + ".tmp"
    total = len(head)
    with open(tmp, "wb") as f:
        f.write(head)
        for s in ordered:
            a = s.array()
            f.write(a.reshape(-1).view(np.uint8))
            total += a.nbytes
    os.replace(tmp, path)
    return total


def shard_file_name(i, n):
    return "model-%05d-of-%05d.safetensors" % (i + 1, n)


def split_shards(specs, n_shards):
    """Split specs (in order) into n_shards contiguous groups of about equal byte size."""
    if n_shards < 1 or n_shards > len(specs):
        raise SafetensorsError("cannot split %d tensors into %d shards" % (len(specs), n_shards))
    total = sum(s.nbytes for s in specs)
    groups = [[] for _ in range(n_shards)]
    acc = 0
    g = 0
    for i, s in enumerate(specs):
        remaining_tensors = len(specs) - i
        remaining_groups = n_shards - g
        # move on when this group has its share, but leave one tensor for each later group
        if g < n_shards - 1 and groups[g] and (acc >= total * (g + 1) / n_shards
                                               or remaining_tensors < remaining_groups):
            g += 1
        groups[g].append(s)
        acc += s.nbytes
    if any(not gr for gr in groups):
        raise SafetensorsError("empty shard while splitting %d tensors" % len(specs))
    return groups


def save_checkpoint(dirpath, specs, n_shards=1, metadata=None):
    """Write specs into DIR as model.safetensors (n_shards == 1) or as n_shards files plus
    model.safetensors.index.json. Returns the list of file names written."""
    if metadata is None:
        metadata = {"format": "pt"}
    os.makedirs(dirpath, exist_ok=True)
    if n_shards == 1:
        write_file(os.path.join(dirpath, SINGLE_NAME), specs, metadata)
        return [SINGLE_NAME]
    groups = split_shards(specs, n_shards)
    files = []
    weight_map = {}
    total = 0
    for i, gr in enumerate(groups):
        name = shard_file_name(i, n_shards)
        write_file(os.path.join(dirpath, name), gr, metadata)
        files.append(name)
        for s in gr:
            weight_map[s.name] = name
            total += s.nbytes
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(dirpath, INDEX_NAME), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    files.append(INDEX_NAME)
    return files


# ---------------------------------------------------------------------------------------------
# reading


class StFile:
    """One opened .safetensors file: .metadata, .tensors {name: (dtype, shape, begin, end)}
    with begin/end relative to the data area, .data_start. Arrays are numpy memmaps."""

    def __init__(self, path):
        self.path = path
        size = os.path.getsize(path)
        if size < 8:
            raise SafetensorsError("%s: file shorter than 8 bytes" % path)
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > MAX_HEADER or 8 + n > size:
                raise SafetensorsError("%s: header length %d past end of file (%d bytes)" % (path, n, size))
            raw = f.read(n)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SafetensorsError("%s: invalid header JSON: %s" % (path, e))
        if not isinstance(header, dict):
            raise SafetensorsError("%s: header is not a JSON object" % path)
        self.metadata = header.pop("__metadata__", None) or {}
        self.data_start = 8 + n
        data_len = size - self.data_start
        self.tensors = {}
        spans = []
        for name, info in header.items():
            dt = info.get("dtype")
            if dt not in DTYPE_SIZE:
                raise SafetensorsError("%s: tensor %s: unsupported dtype %r" % (path, name, dt))
            shape = [int(x) for x in info["shape"]]
            b, e = (int(x) for x in info["data_offsets"])
            numel = 1
            for s in shape:
                numel *= s
            if e - b != numel * DTYPE_SIZE[dt]:
                raise SafetensorsError("%s: tensor %s: offsets [%d, %d] do not match shape %s %s"
                                       % (path, name, b, e, shape, dt))
            if b < 0 or e > data_len:
                raise SafetensorsError("%s: tensor %s: offsets outside the data area" % (path, name))
            self.tensors[name] = (dt, shape, b, e)
            spans.append((b, e, name))
        spans.sort()
        pos = 0
        for b, e, name in spans:
            if b != pos:
                raise SafetensorsError("%s: tensor %s: gap or overlap at offset %d" % (path, name, b))
            pos = e
        if pos != data_len:
            raise SafetensorsError("%s: %d trailing bytes after the last tensor" % (path, data_len - pos))
        self._mm = None

    def array(self, name):
        """Stored array (uint16 for BF16, float16, float32, uint8 for F8_E4M3), read-only memmap
        view."""
        dt, shape, b, e = self.tensors[name]
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        raw = self._mm[self.data_start + b:self.data_start + e]
        return raw.view(NP_DTYPE[dt]).reshape(shape)


class Checkpoint:
    """A checkpoint folder: DIR/model.safetensors.index.json when present, else
    DIR/model.safetensors, else the single *.safetensors file in DIR.
    .names (sorted), .dtype(name), .shape(name), .array(name), .float32(name)."""

    def __init__(self, dirpath):
        self.dir = dirpath
        self.files = {}
        self.where = {}
        index = os.path.join(dirpath, INDEX_NAME)
        if os.path.exists(index):
            with open(index) as f:
                idx = json.load(f)
            wm = idx.get("weight_map")
            if not isinstance(wm, dict):
                raise SafetensorsError("%s: no weight_map object" % index)
            for fname in sorted(set(wm.values())):
                self.files[fname] = StFile(os.path.join(dirpath, fname))
            for name, fname in wm.items():
                if name not in self.files[fname].tensors:
                    raise SafetensorsError("%s: %s maps to %s, which does not hold it" % (index, name, fname))
                self.where[name] = fname
            for fname, stf in self.files.items():
                for name in stf.tensors:
                    if self.where.get(name) != fname:
                        raise SafetensorsError("%s: tensor %s in %s is not in the weight_map (or duplicated)"
                                               % (index, name, fname))
        else:
            single = os.path.join(dirpath, SINGLE_NAME)
            if not os.path.exists(single):
                cands = sorted(p for p in os.listdir(dirpath) if p.endswith(".safetensors"))
                if len(cands) != 1:
                    raise SafetensorsError("%s: no model.safetensors.index.json and %d *.safetensors files"
                                           % (dirpath, len(cands)))
                single = os.path.join(dirpath, cands[0])
            fname = os.path.basename(single)
            self.files[fname] = StFile(single)
            for name in self.files[fname].tensors:
                self.where[name] = fname
        self.names = sorted(self.where)

    def __contains__(self, name):
        return name in self.where

    def _info(self, name):
        if name not in self.where:
            raise SafetensorsError("%s: tensor %s not found" % (self.dir, name))
        return self.files[self.where[name]].tensors[name]

    def dtype(self, name):
        return self._info(name)[0]

    def shape(self, name):
        return list(self._info(name)[1])

    def array(self, name):
        self._info(name)
        return self.files[self.where[name]].array(name)

    def float32(self, name):
        return to_float32(self.dtype(name), self.array(name))


def sha256_file(path, bufsize=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(bufsize)
            if not b:
                break
            h.update(b)
    return h.hexdigest()
