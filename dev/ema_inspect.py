#!/usr/bin/env python3
"""ema_inspect.py CHECKPOINT...: the EMA against the raw model in amptrain checkpoints (train.ema_decay on),
one line per file: the batch-norm running variances' ratio EMA / raw (median, the largest and its
channel), the largest raw running variance, and the convolution weights' norm ratio and cosine, EMA
against raw. Reads safetensors directly (numpy only)."""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__" or info["dtype"] not in DTYPES:
                continue
            start, end = info["data_offsets"]
            f.seek(base + start)
            out[name] = np.frombuffer(f.read(end - start), DTYPES[info["dtype"]]).reshape(info["shape"])
        return out


def main():
    for path in sys.argv[1:]:
        t = read(path)
        ratios, worst, raw_max = [], (0.0, ""), 0.0
        for name, raw in t.items():
            if not name.endswith("running_var") or name.startswith(("module.", "amptrain.")):
                continue
            ema = t.get("module." + name)
            if ema is None:
                sys.exit(f"{path}: no module.{name}: was train.ema_decay on?")
            r = ema.astype(np.float64) / np.maximum(raw.astype(np.float64), 1e-30)
            ratios.append(r)
            k = int(np.argmax(r))
            if r[k] > worst[0]:
                worst = (float(r[k]), f"{name}[{k}] ema {float(ema[k]):.3g} raw {float(raw[k]):.3g}")
            raw_max = max(raw_max, float(raw.max()))
        dot = ee = rr = 0.0
        for name, raw in t.items():
            if name.endswith(".weight") and raw.ndim == 4 and "module." + name in t:
                e = t["module." + name].astype(np.float64).ravel()
                w = raw.astype(np.float64).ravel()
                dot, ee, rr = dot + e @ w, ee + e @ e, rr + w @ w
        all_r = np.concatenate(ratios)
        print(f"{path}: var EMA/raw median {np.median(all_r):.3g} max {worst[0]:.3g} ({worst[1]}); "
              f"raw var max {raw_max:.3g}; conv weights |EMA|/|raw| {np.sqrt(ee / rr):.4f} cosine {dot / np.sqrt(ee * rr):.4f}")


if __name__ == "__main__":
    main()
