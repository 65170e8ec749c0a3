"""Each adapter's CUDA path against its CPU reference path, on the same weights and inputs.

    python benchmarks/cuda_vs_cpu.py [--only NAME ...] [--device cuda] [--batch 8] [--d-model 64]
                                     [--d-state 16] [--reps 5] [--out FILE]

For every adapter available here it builds the model for the CPU (the pure-torch
references: mamba-ssm's selective_scan_ref / ssd_minimal_discrete, fla's naive ops)
and for CUDA (the fused kernels: selective scan, SSD, Triton), copies the CPU weights
into the CUDA model, runs forward and backward on the same tokens, and prints the
largest relative difference of the logits and of the gradients, and ms per
forward+backward on each device.  TF32 is switched off so float32 means float32.
With no CUDA device it says so and exits 0 (``--device cpu`` compares CPU with CPU,
a dry run of the script itself).  ``--out`` writes the table as JSON.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from recallbench.api.config import resolve
from recallbench.harness.loop import masked_loss
from recallbench.harness.model import RecallModel
from recallbench.api.registry import ADAPTERS
from selection import runnable_adapters  # benchmarks/selection.py


def build(name: str, device: str, d_model: int, d_state: int):
    cfg = resolve({"model": {"adapter": name, "d_model": d_model, "d_state": d_state}})
    torch.manual_seed(0)
    adapter = ADAPTERS.get(name)(cfg.model)
    return cfg, RecallModel(adapter, cfg.task.vocab_size, device=device).to(device)


def fwd_bwd(model, x, y):
    model.zero_grad(set_to_none=True)
    logits = model(x)
    loss = masked_loss(logits, y)
    if loss.requires_grad:
        loss.backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters()
             if p.grad is not None}
    return logits.detach().float().cpu(), grads


def timed(model, x, y, device: str, reps: int) -> float:
    fwd_bwd(model, x, y)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fwd_bwd(model, x, y)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e3


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def compare(name: str, device: str, args) -> dict:
    cfg, ref = build(name, "cpu", args.d_model, args.d_state)
    _, fast = build(name, device, args.d_model, args.d_state)
    fast.load_state_dict(ref.state_dict())
    x, y = cfg.task.sample(args.batch, torch.Generator().manual_seed(0))
    logits_ref, grads_ref = fwd_bwd(ref, x, y)
    logits_fast, grads_fast = fwd_bwd(fast, x.to(device), y.to(device))
    grad_diff = max((rel(grads_fast[n], g) for n, g in grads_ref.items()), default=0.0)
    return {"adapter": name, "logits_rel_diff": rel(logits_fast, logits_ref),
            "grad_rel_diff": grad_diff,
            "cpu_ms": timed(ref, x, y, "cpu", args.reps),
            f"{device}_ms": timed(fast, x.to(device), y.to(device), device, args.reps)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--d-state", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: nothing to compare (use --device cpu for a dry run)")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(1)
    rows = []
    for name in runnable_adapters(args.only, word="skipped"):
        try:
            row = compare(name, args.device, args)
        except Exception as exc:  # one failing path must not hide the others
            row = {"adapter": name, "error": f"{type(exc).__name__}: {exc}"}
            print(f"{name:<18} FAILED {row['error']}")
        else:
            print(f"{name:<18} logits {row['logits_rel_diff']:.2e}  grads {row['grad_rel_diff']:.2e}"
                  f"  cpu {row['cpu_ms']:8.1f} ms  {args.device} {row[f'{args.device}_ms']:8.2f} ms")
        rows.append(row)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name() if args.device.startswith("cuda")
                       else "cpu", "rows": rows}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
