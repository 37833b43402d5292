#!/usr/bin/python3
"""Makes a Q8_0 copy of the bundled demo model, the one llama.cpp's `llama-quantize ... Q8_0`
would make if it could (needs only python3-numpy):

    /usr/bin/python3 assets/train/quantize_demo_model.py OUT.gguf [--model assets/models/kvscope-demo.gguf]

llama.cpp's Q8_0 blocks are 32 values along a row, and the demo model's FFN width (688) is not
a multiple of 32, so llama-quantize refuses its ffn_down. This script first widens the FFN to the
next multiple of 32 (704) with hidden units whose gate, up and down weights are all zero. Such a
unit computes silu(0) * 0 = 0 and adds exactly 0 to every output, so the widened model is the same
function, bit for bit in float32 (x + 0 == x). It then quantizes every matrix (token embeddings
included, as llama-quantize does; norms stay F32) with llama.cpp's reference Q8_0 rounding and
records the file type (7, MOSTLY_Q8_0) as llama-quantize does.

`--f32-padded OUT.gguf` writes the widened float32 model instead: `llama-quantize` run on that file
gives tensors byte-identical to this script's (assets/train/LLAMA_CPP_NOTES.md shows the check).

The training script's export keeps the FFN width of the trained model; a future retrain at a
width that is a multiple of 32 makes the widening a no-op.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_io  # noqa: E402

MOSTLY_Q8_0 = 7  # llama_ftype
QUANTIZATION_VERSION = 2  # ggml's GGML_QNT_VERSION, which llama-quantize writes


def widen_ffn(tensors, width):
    """Zero hidden units appended to every layer's FFN so that its width is `width`."""
    out = {}
    for name, a in tensors.items():
        if name.endswith((".ffn_gate.weight", ".ffn_up.weight")):  # [hidden][dim]
            a = np.concatenate([a, np.zeros((width - a.shape[0], a.shape[1]), np.float32)], axis=0)
        elif name.endswith(".ffn_down.weight"):  # [dim][hidden]
            a = np.concatenate([a, np.zeros((a.shape[0], width - a.shape[1]), np.float32)], axis=1)
        out[name] = a
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the GGUF to write (refused if it exists, unless --force)")
    ap.add_argument("--model", default=os.path.join(os.path.dirname(HERE), "models", "kvscope-demo.gguf"))
    ap.add_argument("--f32-padded", action="store_true", help="write the widened float32 model, not Q8_0")
    ap.add_argument("--force", action="store_true", help="replace OUT if it exists")
    args = ap.parse_args()
    if os.path.exists(args.out) and not args.force:
        sys.exit("quantize_demo_model: %s exists (pass --force to replace it)" % args.out)

    kvs = []
    meta, tensors = gguf_io.read_gguf(args.model, kvs)
    hidden = meta["llama.feed_forward_length"]
    width = -(-hidden // gguf_io.Q8_0_BLOCK) * gguf_io.Q8_0_BLOCK
    tensors = widen_ffn(tensors, width)

    G = gguf_io
    kvs = [(k, t, v) for k, t, v in kvs if k not in ("general.file_type", "general.quantization_version")]
    kvs = [(k, t, width if k == "llama.feed_forward_length" else v) for k, t, v in kvs]
    if not args.f32_padded:
        kvs.append(("general.quantization_version", G.U32, QUANTIZATION_VERSION))
        kvs.append(("general.file_type", G.U32, MOSTLY_Q8_0))
    quantize = not args.f32_padded
    out = [(name, a, G.GGML_Q8_0 if quantize and a.ndim == 2 else G.GGML_F32) for name, a in tensors.items()]
    G.write_gguf(args.out, kvs, out)
    print("%s: FFN %d -> %d, %d tensors, %s, %d bytes" % (args.out, hidden, width, len(out),
                                                          "F32" if args.f32_padded else "Q8_0",
                                                          os.path.getsize(args.out)))


if __name__ == "__main__":
    main()
