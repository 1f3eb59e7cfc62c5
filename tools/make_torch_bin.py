#!/usr/bin/env python3
"""Writes PyTorch-format (torch.save, zip) checkpoints without torch, for quiver's tests.

    tools/make_torch_bin.py adapter SRC_DIR DST_DIR   # PEFT folder: adapter_model.safetensors -> .bin twin
    tools/make_torch_bin.py seeds DIR                 # small valid and broken files (fuzz seeds, unit tests)

The layout follows what torch.save (PyTorch >= 1.6, default settings) writes:
  * a zip archive of stored entries under one folder ("archive/"), each entry's bytes aligned
    to 64 bytes by padding the local header's extra field;
  * records data.pkl, .format_version, .storage_alignment, byteorder, data/<key>, version;
  * data.pkl is pickle protocol 2: the state dict, each tensor pickled as
    torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
    collections.OrderedDict()), each storage as the persistent id
    ('storage', torch.<Float|Half|BFloat16>Storage, key, location, numel).
The torch names are stand-ins registered in sys.modules so the standard pickler writes the
same GLOBAL opcodes torch.save does; nothing here imports torch. tools/gpu/check_torch_bin.py
checks the same adapter written by real torch.save on a machine that has torch.
"""
import argparse
import collections
import io
import json
import pickle
import re
import shutil
import struct
import sys
import types
import zipfile
from pathlib import Path

ALIGN = 64
DTYPES = {"F32": ("FloatStorage", 4), "F16": ("HalfStorage", 2), "BF16": ("BFloat16Storage", 2)}


def _stand_in_modules():
    """Module objects named torch and torch._utils holding the globals torch.save pickles."""
    if "torch" in sys.modules:
        raise SystemExit("make_torch_bin.py must run without torch imported")
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")
    torch._utils = utils

    def named(mod, name, obj):
        obj.__module__, obj.__qualname__, obj.__name__ = mod.__name__, name, name
        setattr(mod, name, obj)
        return obj

    for storage, _ in DTYPES.values():
        named(torch, storage, type(storage, (), {}))
    for extra in ("LongStorage", "DoubleStorage"):  # for broken seeds only
        named(torch, extra, type(extra, (), {}))
    for fn in ("_rebuild_tensor_v2", "_rebuild_tensor", "_rebuild_parameter"):
        named(utils, fn, (lambda *a: None))
    sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
    return torch


TORCH = _stand_in_modules()


class Storage:
    def __init__(self, key, storage_type, numel, data):
        self.key, self.storage_type, self.numel, self.data = key, storage_type, numel, data


class Tensor:
    """Pickles like a torch.Tensor: a _rebuild_tensor_v2 call on a storage view."""

    def __init__(self, storage, shape, offset=0, stride=None, fn="_rebuild_tensor_v2", hooks=None):
        if stride is None:
            stride, step = [], 1
            for d in reversed(shape):
                stride.insert(0, step)
                step *= d
        self.storage, self.shape, self.offset, self.stride, self.fn = storage, tuple(shape), offset, tuple(stride), fn
        self.hooks = collections.OrderedDict() if hooks is None else hooks

    def __reduce_ex__(self, protocol):
        if self.fn == "_rebuild_tensor":
            return TORCH._utils._rebuild_tensor, (self.storage, self.offset, self.shape, self.stride)
        return TORCH._utils._rebuild_tensor_v2, (self.storage, self.offset, self.shape, self.stride, False, self.hooks)


class Parameter:
    def __init__(self, tensor):
        self.tensor = tensor

    def __reduce_ex__(self, protocol):
        return TORCH._utils._rebuild_parameter, (self.tensor, True, collections.OrderedDict())


class TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", getattr(TORCH, obj.storage_type), obj.key, "cpu", obj.numel)
        return None


def dumps(obj, protocol=2):
    buf = io.BytesIO()
    TorchPickler(buf, protocol=protocol).dump(obj)
    return buf.getvalue()


def storages_of(obj):
    """Storages reachable from a state dict, by key."""
    found = {}
    values = obj.values() if isinstance(obj, dict) else []
    for v in values:
        t = v.tensor if isinstance(v, Parameter) else v
        if isinstance(t, Tensor):
            found[t.storage.key] = t.storage
    return found


def write_zip(path, records, align=True, compress=()):
    """records: [(name, bytes)], written in order as stored entries (64-byte aligned data)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in records:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED if name in compress else zipfile.ZIP_STORED
            if align:
                # Pad the extra field (id 0x4246, as torch's writer) so the data starts on a boundary.
                start = buf.tell() + 30 + len(name.encode()) + 4
                info.extra = struct.pack("<HH", 0x4246, (-start) % ALIGN) + b"Z" * ((-start) % ALIGN)
            zf.writestr(info, data)
    Path(path).write_bytes(buf.getvalue())


def torch_save(obj, path, archive="archive", protocol=2, byteorder=b"little", align=True, compress=(),
               drop=(), pickle_bytes=None):
    prefix = archive + "/"
    records = [(prefix + "data.pkl", dumps(obj, protocol) if pickle_bytes is None else pickle_bytes),
               (prefix + ".format_version", b"1"), (prefix + ".storage_alignment", b"64"),
               (prefix + "byteorder", byteorder)]
    for key, s in sorted(storages_of(obj).items()):
        records.append((prefix + "data/" + key, s.data))
    records.append((prefix + "version", b"3\n"))
    records = [(n, d) for n, d in records if n[len(prefix):] not in drop]
    write_zip(path, records, align=align, compress={prefix + c for c in compress})


def read_safetensors(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], e["shape"], data[b:end])
    return out


def convert_adapter(src, dst):
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "adapter_config.json", dst / "adapter_config.json")
    state = {}
    tensors = read_safetensors(src / "adapter_model.safetensors")
    # PEFT's state dict is in the model's module order (safetensors files are sorted by name):
    # layer by layer, attention before MLP, projections in forward order, A before B.
    order = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

    def module_order(name):
        m = re.search(r"layers\.(\d+)\.\w+\.(\w+)\.lora_([AB])", name)
        return (int(m.group(1)), order.index(m.group(2)), m.group(3)) if m else (1 << 30, 0, name)

    for i, name in enumerate(sorted(tensors, key=module_order)):
        dtype, shape, data = tensors[name]
        storage_type, elem = DTYPES[dtype]
        state[name] = Tensor(Storage(str(i), storage_type, len(data) // elem, data), shape)
    torch_save(state, dst / "adapter_model.bin")


def overlapping_zip():
    """A zip whose second entry (local header and data) lies inside the first entry's data."""
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr(zipfile.ZipInfo("archive/b", date_time=(1980, 1, 1, 0, 0, 0)), b"inner")
    inner = inner.getvalue()
    b_central = inner[inner.index(b"PK\x01\x02"):inner.index(b"PK\x05\x06")]
    outer = io.BytesIO()
    with zipfile.ZipFile(outer, "w") as zf:
        zf.writestr(zipfile.ZipInfo("archive/a", date_time=(1980, 1, 1, 0, 0, 0)), inner[:inner.index(b"PK\x01\x02")])
    outer = outer.getvalue()
    dir_at = outer.index(b"PK\x01\x02")
    a_central = outer[dir_at:outer.index(b"PK\x05\x06")]
    b_local = 30 + len("archive/a")  # where entry a's data (b's local header) starts
    b_central = b_central[:42] + struct.pack("<I", b_local) + b_central[46:]
    central = a_central + b_central
    end = b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 2, 2, len(central), dir_at, 0)
    return outer[:dir_at] + central + end


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def make_seeds(out):
    """Small checkpoints; tests/unit/test_torch_file.cc states what each must give."""
    out.mkdir(parents=True, exist_ok=True)
    a = Storage("0", "FloatStorage", 6, f32([0.5 * i for i in range(6)]))
    b = Storage("1", "FloatStorage", 4, f32([-1.0, 2.0, -3.0, 4.0]))
    half = Storage("2", "HalfStorage", 3, struct.pack("<3H", 0x3C00, 0x4000, 0xC200))  # 1, 2, -3
    bf16 = Storage("3", "BFloat16Storage", 2, struct.pack("<2H", 0x3F80, 0xC040))     # 1, -3
    two = {"a": Tensor(a, [2, 3]), "b": Tensor(b, [4])}
    torch_save(two, out / "ok_f32.bin")
    torch_save({"h": Tensor(half, [3]), "g": Tensor(bf16, [1, 2])}, out / "ok_f16_bf16.bin")
    torch_save({"row0": Tensor(a, [3], 0), "row1": Tensor(a, [1, 3], 3)}, out / "ok_shared_storage.bin")
    torch_save(two, out / "ok_protocol4.bin", protocol=4)
    torch_save(two, out / "ok_unaligned.bin", align=False, archive="adapter_model")
    torch_save({"a": Parameter(Tensor(a, [2, 3])), "b": Tensor(b, [4], fn="_rebuild_tensor")}, out / "ok_legacy_calls.bin")
    od = collections.OrderedDict(two)
    od._metadata = collections.OrderedDict([("", {"version": 1})])  # as nn.Module.state_dict() has
    torch_save(od, out / "ok_ordered_dict.bin")

    torch_save(two, out / "bad_byteorder.bin", byteorder=b"big")
    torch_save(two, out / "bad_compressed.bin", compress=("data/0",))
    torch_save(two, out / "bad_missing_storage.bin", drop=("data/1",))
    torch_save({"a": Tensor(a, [4], 3)}, out / "bad_offset.bin")
    torch_save({"a": Tensor(a, [3, 2], 0, [1, 3])}, out / "bad_stride.bin")
    torch_save({"a": Tensor(Storage("0", "FloatStorage", 7, a.data), [6])}, out / "bad_storage_size.bin")
    torch_save({"a": Tensor(Storage("0", "LongStorage", 3, a.data), [3])}, out / "bad_storage_type.bin")
    torch_save({"outer": {"a": Tensor(a, [6])}}, out / "bad_nested.bin")
    torch_save({"a": Tensor(a, [6], hooks=collections.OrderedDict([(0, 1)]))}, out / "bad_hooks.bin")
    # A pickle that would run a shell command if a real unpickler loaded it.
    evil = b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03."
    torch_save({}, out / "bad_global.bin", pickle_bytes=evil)
    torch_save({}, out / "bad_opcode.bin", pickle_bytes=b"\x80\x02]q\x00.")  # EMPTY_LIST
    raw = bytearray((out / "ok_f32.bin").read_bytes())
    raw[raw.index(f32([0.5, 1.0]))] ^= 0x40  # inside storage 0
    (out / "bad_crc.bin").write_bytes(bytes(raw))
    (out / "bad_truncated.bin").write_bytes(raw[: len(raw) // 2])
    (out / "bad_overlap.bin").write_bytes(overlapping_zip())
    (out / "bad_legacy.bin").write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + dumps(two))
    # Bare data.pkl contents: the fuzz target also feeds its input to the unpickler directly,
    # past the zip CRCs that would reject almost every mutation of a pickle inside an archive.
    for name, obj, proto in (("f32", two, 2), ("protocol4", two, 4), ("ordered_dict", od, 2)):
        (out / ("pkl_" + name + ".pkl")).write_bytes(dumps(obj, proto))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ad = sub.add_parser("adapter")
    ad.add_argument("src", type=Path)
    ad.add_argument("dst", type=Path)
    sd = sub.add_parser("seeds")
    sd.add_argument("dir", type=Path)
    args = ap.parse_args()
    if args.cmd == "adapter":
        convert_adapter(args.src, args.dst)
    else:
        make_seeds(args.dir)


if __name__ == "__main__":
    main()
