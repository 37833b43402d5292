"""A small GGUF v3 writer and reader for the demo model (written for kvscope from the GGUF spec).

Layout: "GGUF", u32 version, u64 tensor count, u64 key/value count, the key/values, the tensor
infos (name, u32 n_dims, u64 dims fastest-first, u32 ggml type, u64 offset into the data
section), zero padding to the alignment, then the tensor data, each tensor padded to the
alignment. Little-endian throughout.
"""
import os
import struct

import numpy as np

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
Q8_0_BLOCK = 32  # values per Q8_0 block: an fp16 scale, then 32 int8 codes (34 bytes)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
           U64: "<Q", I64: "<q", F64: "<d"}


def _str(x):
    b = x.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v):
    if vtype == STR:
        return _str(v)
    if vtype == ARR:
        etype, items = v
        if etype == STR:
            body = b"".join(_str(x) for x in items)
        else:
            body = np.asarray(items, dtype=np.dtype(_SCALAR[etype])).tobytes()
        return struct.pack("<IQ", etype, len(items)) + body
    return struct.pack(_SCALAR[vtype], int(v) if vtype not in (F32, F64) else float(v))


def quantize_q8_0(a):
    """Q8_0 blocks of a float32 array whose last dimension is a multiple of 32, with the rounding of
    llama.cpp's reference quantizer (quantize_row_q8_0_ref, which llama-quantize uses): scale
    d = max|x| / 127 in float32, stored as fp16 (round to nearest even); codes round(x * (1/d)),
    halves away from zero; an all-zero block has d = 0 and codes 0."""
    x = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, Q8_0_BLOCK)
    d = np.abs(x).max(axis=1) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (x * inv[:, None]).astype(np.float64)  # float32 products, exact in float64
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)
    blocks = np.empty(x.shape[0], dtype=[("d", "<f2"), ("qs", "i1", (Q8_0_BLOCK,))])
    blocks["d"] = d.astype(np.float16)
    blocks["qs"] = q
    return blocks.tobytes()


def dequantize_q8_0(raw, n):
    blocks = np.frombuffer(raw, dtype=[("d", "<f2"), ("qs", "i1", (Q8_0_BLOCK,))], count=n // Q8_0_BLOCK)
    return (blocks["d"].astype(np.float32)[:, None] * blocks["qs"].astype(np.float32)).reshape(-1)


def _encode(arr, gtype):
    if gtype == GGML_Q8_0:
        return quantize_q8_0(arr)
    return np.ascontiguousarray(arr, dtype="<f4" if gtype == GGML_F32 else "<f2").tobytes()


def write_gguf(path, kvs, tensors, alignment=32):
    """kvs: list of (key, vtype, value); for ARR the value is (element type, list).
    tensors: list of (name, numpy array in row-major [out][in] order, ggml type F32, F16 or Q8_0).
    GGUF lists dims fastest-varying first, so a numpy array of shape (rows, cols) is (cols, rows).
    The file is written to path + ".part" and renamed, so a failed run leaves no half file."""
    head = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kvs))]
    for key, vtype, v in kvs:
        head.append(_str(key) + struct.pack("<I", vtype) + _value(vtype, v))
    blobs, offset = [], 0
    for name, arr, gtype in tensors:
        data = _encode(arr, gtype)
        dims = list(reversed(arr.shape))
        head.append(_str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
                    + struct.pack("<IQ", gtype, offset))
        pad = (-len(data)) % alignment
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    header = b"".join(head)
    header += b"\0" * ((-len(header)) % alignment)
    with open(path + ".part", "wb") as f:
        f.write(header)
        for b in blobs:
            f.write(b)
    os.replace(path + ".part", path)


def read_gguf(path, typed_kvs=None):
    """Returns (metadata dict, {tensor name: numpy array shaped [out][in]}). F32, F16 and Q8_0
    tensors (Q8_0 dequantized). When typed_kvs is a list, it receives every key/value as
    (key, vtype, value) in file order, in the form write_gguf takes."""
    buf = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def rstr():
        nonlocal pos
        n = take("<Q")
        s = buf[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def rval(t):
        if t == STR:
            return rstr()
        if t == ARR:
            et, n = take("<IQ")
            return [rval(et) for _ in range(n)]
        return take(_SCALAR[t]) if t != BOOL else bool(take("<B"))

    def rtyped(t):
        if t != ARR:
            return rval(t)
        et, n = take("<IQ")
        return (et, [rval(et) for _ in range(n)])

    assert buf[:4] == b"GGUF", "not a GGUF file"
    pos = 4
    version, n_tensors, n_kv = take("<IQQ")
    meta = {"GGUF.version": version}
    for _ in range(n_kv):
        key = rstr()
        t = take("<I")
        v = rtyped(t)
        meta[key] = v[1] if t == ARR else v
        if typed_kvs is not None:
            typed_kvs.append((key, t, v))
    infos = []
    for _ in range(n_tensors):
        name = rstr()
        nd = take("<I")
        dims = [take("<Q") for _ in range(nd)]
        gtype, off = take("<IQ")
        infos.append((name, dims, gtype, off))
    align = meta.get("general.alignment", 32)
    data_start = pos + (-pos) % align
    tensors = {}
    for name, dims, gtype, off in infos:
        n = int(np.prod(dims))
        if gtype == GGML_Q8_0:
            raw = buf[data_start + off:data_start + off + n // Q8_0_BLOCK * 34]
            a = dequantize_q8_0(raw, n)
        else:
            a = np.frombuffer(buf, dtype={GGML_F32: "<f4", GGML_F16: "<f2"}[gtype], count=n,
                              offset=data_start + off)
        tensors[name] = a.reshape(list(reversed(dims))).astype(np.float32)
    return meta, tensors
