"""A small GGUF v3 writer and reader for the demo model (written for kvscope from the GGUF spec).

Layout: "GGUF", u32 version, u64 tensor count, u64 key/value count, the key/values, the tensor
infos (name, u32 n_dims, u64 dims fastest-first, u32 ggml type, u64 offset into the data
section), zero padding to the alignment, then the tensor data, each tensor padded to the
alignment. Little-endian throughout.
"""
import struct

import numpy as np

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
GGML_F32, GGML_F16 = 0, 1
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


def write_gguf(path, kvs, tensors, alignment=32):
    """kvs: list of (key, vtype, value); for ARR the value is (element type, list).
    tensors: list of (name, numpy array in row-major [out][in] order, ggml type F32 or F16).
    GGUF lists dims fastest-varying first, so a numpy array of shape (rows, cols) is (cols, rows)."""
    head = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kvs))]
    for key, vtype, v in kvs:
        head.append(_str(key) + struct.pack("<I", vtype) + _value(vtype, v))
    blobs, offset = [], 0
    for name, arr, gtype in tensors:
        data = np.ascontiguousarray(arr, dtype="<f4" if gtype == GGML_F32 else "<f2").tobytes()
        dims = list(reversed(arr.shape))
        head.append(_str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
                    + struct.pack("<IQ", gtype, offset))
        pad = (-len(data)) % alignment
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    header = b"".join(head)
    header += b"\0" * ((-len(header)) % alignment)
    with open(path, "wb") as f:
        f.write(header)
        for b in blobs:
            f.write(b)


def read_gguf(path):
    """Returns (metadata dict, {tensor name: numpy array shaped [out][in]})."""
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

    assert buf[:4] == b"GGUF", "not a GGUF file"
    pos = 4
    version, n_tensors, n_kv = take("<IQQ")
    meta = {"GGUF.version": version}
    for _ in range(n_kv):
        key = rstr()
        meta[key] = rval(take("<I"))
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
        dt = {GGML_F32: "<f4", GGML_F16: "<f2"}[gtype]
        n = int(np.prod(dims))
        a = np.frombuffer(buf, dtype=dt, count=n, offset=data_start + off)
        tensors[name] = a.reshape(list(reversed(dims))).astype(np.float32)
    return meta, tensors
