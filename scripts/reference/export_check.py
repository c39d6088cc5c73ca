#!/usr/bin/env python3
"""A lockstep-export file in PyTorch: load it into the reference module and evaluate it.

    python3 scripts/reference/export_check.py model.safetensors --model cnn --data fmnist.h5
    python3 scripts/reference/export_check.py model.safetensors --model gpt:tiny --data corpus.h5

Reads the safetensors file with a strict reader of its own (8-byte little-endian header length,
JSON header, F32 tensors whose byte ranges must tile the data exactly), and, where the
`safetensors` package imports, with it as well (the two must agree bit for bit); builds the
reference module (--model cnn: cnn_torch.Cnn; --model mlp: mlp_torch.Mlp, its widths from the
file; --model gpt...: gpt_torch.Gpt from the spec), loads
the tensors with load_state_dict(strict=True) (every name and shape must match), and evaluates the
test split of --data on one thread in float32. Prints the keys lockstep-train prints at the end of
a run (and with --eval-only): test_loss=, test_accuracy=, and for the GPT test_bits_per_byte=, with
four decimals. --format-only stops after reading (numpy alone, e.g. in a venv without torch).
Exit 0, or 1 with a message.
"""
import argparse
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def read_safetensors(path):
    """{name: numpy float32 array}, metadata; raises ValueError on anything malformed."""
    import numpy as np
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} runs past the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    spans, tensors = [], {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise ValueError(f"{name}: dtype {t['dtype']}, expected F32")
        begin, end = t["data_offsets"]
        count = math.prod(t["shape"])
        if end - begin != 4 * count:
            raise ValueError(f"{name}: {end - begin} bytes for shape {t['shape']}")
        spans.append((begin, end, name))
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(t["shape"]).copy()
    spans.sort()
    at = 0
    for begin, end, name in spans:
        if begin != at:
            raise ValueError(f"{name}: starts at byte {begin}, expected {at} (gap or overlap)")
        at = end
    if at != len(data):
        raise ValueError(f"{len(data) - at} bytes after the last tensor")
    return tensors, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--model", help="cnn, mlp (any dense/relu stack: linear, mlp:...), or a gpt "
                                    "spec as lockstep-train's --model")
    ap.add_argument("--data", help="the Lockstep HDF5 file whose test split to use")
    ap.add_argument("--format-only", action="store_true",
                    help="only read the file with both readers (needs numpy, not torch)")
    a = ap.parse_args()
    if not a.format_only and not (a.model and a.data):
        ap.error("--model and --data are needed (or --format-only)")
    import numpy as np
    try:
        tensors, meta = read_safetensors(a.file)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        sys.exit(f"export_check: {a.file}: {e}")
    try:
        from safetensors.numpy import load_file
    except ImportError:
        print("safetensors package: not importable here; own reader only")
    else:
        theirs = load_file(a.file)
        if sorted(theirs) != sorted(tensors) or any(
                not np.array_equal(theirs[k], tensors[k]) for k in tensors):
            sys.exit("export_check: the safetensors package reads other tensors than our reader")
        print(f"safetensors package: the same {len(theirs)} tensors")
    if a.format_only:
        return
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    state = {k: torch.from_numpy(v) for k, v in tensors.items()}
    print(f"metadata: {meta}")
    import h5py
    with torch.no_grad():
        if a.model == "cnn":
            import common
            from cnn_torch import Cnn
            _, _, x, y, classes = common.load(a.data, 0)
            model = Cnn(x.shape[3], classes)
            model.load_state_dict(state, strict=True)
            logits = model(torch.from_numpy(x))
            target = torch.from_numpy(y.astype(np.int64))
            loss = F.cross_entropy(logits, target).item()
            accuracy = (logits.argmax(1) == target).double().mean().item()
            print(f"test_loss={loss:.4f}\ntest_accuracy={accuracy:.4f}")
        elif a.model == "mlp":
            from mlp_torch import Mlp
            model = Mlp.from_state(state)
            model.load_state_dict(state, strict=True)
            with h5py.File(a.data, "r") as f:
                regression = "images" not in f["test"]
            if regression:
                with h5py.File(a.data, "r") as f:
                    x = torch.from_numpy(f["test"]["x"][...].astype(np.float32))
                    y = f["test"]["y"][...].astype(np.float64).reshape(x.shape[0], -1)
                p = model(x).double().numpy()
                mse = float(np.mean((p - y) ** 2))
                print(f"test_mse={mse:.6f}\ntest_loss={mse:.6f}")
            else:
                import common
                _, _, x, y, classes = common.load(a.data, 0)
                logits = model(torch.from_numpy(x))
                target = torch.from_numpy(y.astype(np.int64))
                loss = F.cross_entropy(logits, target).item()
                accuracy = (logits.argmax(1) == target).double().mean().item()
                print(f"test_loss={loss:.4f}\ntest_accuracy={accuracy:.4f}")
        else:
            from gpt_torch import Gpt
            model = Gpt.from_spec(a.model)
            model.load_state_dict(state, strict=True)
            with h5py.File(a.data, "r") as f:
                rows = torch.from_numpy(f["test"]["tokens"][...].astype(np.int64))
            logits = model(rows[:, :-1])
            target = rows[:, 1:]
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1)).item()
            accuracy = (logits.argmax(-1) == target).double().mean().item()
            print(f"test_bits_per_byte={loss / math.log(2):.4f}\ntest_loss={loss:.4f}\n"
                  f"test_accuracy={accuracy:.4f}")


if __name__ == "__main__":
    main()
