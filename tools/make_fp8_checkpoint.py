#!/usr/bin/env python3
"""Writes an FP8 copy of a float Llama-family checkpoint in one of the layouts FP8 models are
published in, and optionally its exact reference: the same model with every projection weight
replaced by its dequantized values in float32.

Layouts (quantization_config as the publishers write it):
  tensor, channel, block  llm-compressor's compressed-tensors, format "float-quantized":
                          <proj>.weight F8_E4M3 and <proj>.weight_scale F32, of shape [1]
                          (per tensor), [out, 1] (per output channel) or
                          [ceil(out / bn), ceil(in / bk)] (per block, "block_structure").
  fine-grained            transformers' FP8 (quant_method "fp8", "weight_block_size"):
                          <proj>.weight F8_E4M3 and <proj>.weight_scale_inv F32 per block.
In every layout the scale is max |w| / 448 over its tensor, row or block, the weight is
w / scale rounded to the nearest e4m3 value (ties to even, saturating at 448), and the
dequantized weight is q * scale (one float32 product). lm_head and the embedding stay as
they are ("ignore": ["lm_head"]), as llm-compressor's FP8 recipes leave them.

Pure Python (no torch), so it runs wherever the tests run:
    python3 tools/make_fp8_checkpoint.py SRC DST --layout channel [--block 128 128] [--dequantized REF]
"""
import argparse
import bisect
import json
import math
import re
import shutil
import struct
from pathlib import Path

PROJ = re.compile(r"^model\.layers\.\d+\.(self_attn|mlp)\.[a-z_]+_proj\.weight$")
E4M3_MAX = 448.0


def e4m3_value(code):
    """The value of a non-negative e4m3 (OCP "fn") code 0..126."""
    e, m = code >> 3, code & 7
    return m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)


E4M3 = [e4m3_value(c) for c in range(127)]  # increasing with the code


def to_e4m3(v):
    """v rounded to the nearest e4m3 code, ties to the even code, saturating at 448."""
    sign = 0x80 if v < 0 or (v == 0 and math.copysign(1, v) < 0) else 0
    a = min(abs(v), E4M3_MAX)
    i = bisect.bisect_left(E4M3, a)
    if i == len(E4M3):
        code = 126
    elif E4M3[i] == a or i == 0:
        code = i
    else:
        lo, hi = E4M3[i - 1], E4M3[i]
        code = i - 1 if a - lo < hi - a or (a - lo == hi - a and (i - 1) % 2 == 0) else i
    return sign | code


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def read_safetensors(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[b:e])
    return out


def as_floats(dtype, raw):
    if dtype == "F32":
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    if dtype == "BF16":
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack(f"<{len(raw) // 2}H", raw)]
    if dtype == "F16":
        return list(struct.unpack(f"<{len(raw) // 2}e", raw))
    raise SystemExit(f"unsupported dtype {dtype}")


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def quantize(w, rows, cols, layout, bn, bk):
    """(e4m3 bytes, scales, scale shape, dequantized float32 values) of one [rows, cols] weight."""
    if layout == "tensor":
        groups, shape = [[(r, c) for r in range(rows) for c in range(cols)]], [1]
    elif layout == "channel":
        groups, shape = [[(r, c) for c in range(cols)] for r in range(rows)], [rows, 1]
    else:
        nb, kb = -(-rows // bn), -(-cols // bk)
        groups = [[(r, c) for r in range(i * bn, min(rows, (i + 1) * bn)) for c in range(j * bk, min(cols, (j + 1) * bk))]
                  for i in range(nb) for j in range(kb)]
        shape = [nb, kb]
    q, deq, scales = bytearray(rows * cols), [0.0] * (rows * cols), []
    for g in groups:
        s = f32(max(abs(w[r * cols + c]) for r, c in g) / E4M3_MAX)
        scales.append(s)
        for r, c in g:
            code = to_e4m3(w[r * cols + c] / s) if s > 0 else 0
            q[r * cols + c] = code
            deq[r * cols + c] = f32(math.copysign(E4M3[code & 0x7F], -1 if code & 0x80 else 1) * s)
    return bytes(q), scales, shape, deq


def quantization_config(layout, bn, bk):
    if layout == "fine-grained":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [bn, bk],
                "modules_to_not_convert": ["lm_head"]}
    weights = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False, "strategy": layout,
               "block_structure": [bn, bk] if layout == "block" else None}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                                                "dynamic": True, "symmetric": True}}}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--layout", required=True, choices=["tensor", "channel", "block", "fine-grained"])
    ap.add_argument("--block", type=int, nargs=2, default=[128, 128], metavar=("N", "K"))
    ap.add_argument("--dequantized", type=Path, help="also write the dequantized float32 reference here")
    args = ap.parse_args()
    bn, bk = args.block
    scale_name = "weight_scale_inv" if args.layout == "fine-grained" else "weight_scale"
    layout = "block" if args.layout == "fine-grained" else args.layout

    tensors = {}
    for f in sorted(args.src.glob("*.safetensors")):
        tensors.update(read_safetensors(f))
    fp8, ref = {}, {}
    for name, (dtype, shape, raw) in sorted(tensors.items()):
        if not PROJ.match(name):
            fp8[name] = ref[name] = (dtype, shape, raw)
            continue
        rows, cols = shape
        q, scales, sshape, deq = quantize(as_floats(dtype, raw), rows, cols, layout, bn, bk)
        fp8[name] = ("F8_E4M3", shape, q)
        fp8[name[:-len("weight")] + scale_name] = ("F32", sshape, struct.pack(f"<{len(scales)}f", *scales))
        ref[name] = ("F32", shape, struct.pack(f"<{len(deq)}f", *deq))

    for out, weights, quantized in ((args.dst, fp8, True), (args.dequantized, ref, False)):
        if out is None:
            continue
        out.mkdir(parents=True, exist_ok=True)
        for f in args.src.iterdir():
            if f.is_file() and f.suffix != ".safetensors" and f.name != "model.safetensors.index.json":
                shutil.copy(f, out / f.name)
        if quantized:
            config = json.loads((args.src / "config.json").read_text())
            config["quantization_config"] = quantization_config(args.layout, bn, bk)
            (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        write_safetensors(out / "model.safetensors", weights)


if __name__ == "__main__":
    main()
