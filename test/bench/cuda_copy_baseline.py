#!/usr/bin/env python3
"""The raw-copy baseline of a GPU context switch: the same bytes device -> pinned host, then back.

    cuda_copy_baseline.py --bytes N [--runs R] [--gpu G]

Prints one JSON line {"bytes": N, "d2hMs": [...], "h2dMs": [...], "totalMs": [...]}: each run copies
N bytes from a CUDA tensor into pinned host memory and back (torch, synchronized), timed with
CUDA events. This is what a switch cannot beat: the outgoing job's state out plus the
incoming one's in, over the same PCIe link, with no allocation or control work.
"""
import argparse
import json

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--bytes", type=int, required=True)
parser.add_argument("--runs", type=int, default=20)
parser.add_argument("--gpu", type=int, default=0)
opts = parser.parse_args()

device = torch.device("cuda", opts.gpu)
src = torch.empty(opts.bytes, dtype=torch.uint8, device=device)
host = torch.empty(opts.bytes, dtype=torch.uint8, pin_memory=True)
d2h, h2d = [], []
for _ in range(opts.runs + 2):  # two warm-up runs, not reported
    start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    start.record()
    host.copy_(src)
    mid.record()
    src.copy_(host)
    end.record()
    end.synchronize()
    d2h.append(start.elapsed_time(mid))
    h2d.append(mid.elapsed_time(end))
d2h, h2d = d2h[2:], h2d[2:]
print(json.dumps({"bytes": opts.bytes, "d2hMs": d2h, "h2dMs": h2d, "totalMs": [a + b for a, b in zip(d2h, h2d)]}))
