"""safetensors files without the safetensors package: the header and raw tensor bytes (Python stdlib only)."""

import json
import struct


def read(path):
    """-> (list of (name, dtype, shape, raw bytes) in file order, metadata or None)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
        base = 8 + n
        meta = hdr.pop("__metadata__", None)
        out = []
        for name, v in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            s, e = v["data_offsets"]
            f.seek(base + s)
            out.append((name, v["dtype"], v["shape"], f.read(e - s)))
    return out, meta


def write(path, tensors, meta=None):
    """tensors: list of (name, dtype, shape, raw bytes), written in that order; header padded to 8 bytes."""
    header, off = {}, 0
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    if meta:
        header["__metadata__"] = meta
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for _, _, _, raw in tensors:
            f.write(raw)
