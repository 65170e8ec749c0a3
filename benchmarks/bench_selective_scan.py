"""Mamba-1's CPU selective scan: the compiled loop against the torch scan, and its build time.

    python benchmarks/bench_selective_scan.py [--rounds 7] [--threads 1]

Setting (bench_adapters' mamba): batch 32, L 64, d_inner 128, d_state 16, float32, with D,
z and softplus, as ``Mamba`` calls ``selective_scan_fn``.  Prints the seconds one build of
``selective_scan.cpp`` takes in an empty directory, then ms of forward + backward of each
scan, the two timed in turn in every round (a shared machine's slow spell hits both), with
the median over rounds of the torch scan's time over the compiled one's.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from recallbench.adapters.cpu import selective_scan_compiled as sc
from recallbench.adapters.cpu.selective_scan_fused import selective_scan_cpu


def inputs(b=32, d=128, n=16, L=64):
    g = torch.Generator().manual_seed(0)
    u, delta, z = (torch.randn(b, d, L, generator=g) for _ in range(3))
    A = -torch.rand(d, n, generator=g) * 16
    B, C = (torch.randn(b, n, L, generator=g) for _ in range(2))
    D, bias = torch.randn(d, generator=g), torch.linspace(-4, 1, d)
    return [t.requires_grad_() for t in (u, delta, A, B, C, D, z, bias)]


def step(ts) -> None:
    out = selective_scan_cpu(*ts[:7], delta_bias=ts[7], delta_softplus=True)
    out.square().sum().backward()


original = sc.library  # the torch scan is timed with sc.library answering None


def timed(ts, compiled: bool, reps: int = 3) -> float:
    loaded = original()
    sc.library = (lambda: loaded) if compiled else (lambda: None)
    try:
        start = time.perf_counter()
        for _ in range(reps):
            step(ts)
        return (time.perf_counter() - start) / reps * 1e3
    finally:
        sc.library = original


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_selective_scan.py", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.threads < 1:
        ap.exit(2, f"{ap.prog}: --rounds and --threads must be >= 1\n")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        try:
            sc.build(Path(tmp))
        except Exception as exc:  # noqa: BLE001 - report, there is nothing to compare
            print(f"build failed: {type(exc).__name__}: {str(exc)[:200]}")
            return 1
        print(f"build of selective_scan.cpp ({sc.compiler()}): {time.perf_counter() - start:.2f} s")
    if sc.library() is None:
        print("the compiled scan does not load here")
        return 1
    ts = inputs()
    for compiled in (True, False):  # warm-up
        timed(ts, compiled, 1)
    rows = [(timed(ts, True), timed(ts, False)) for _ in range(args.rounds)]
    fast, slow = (statistics.median(r[i] for r in rows) for i in (0, 1))
    ratio = statistics.median(s / f for f, s in rows)
    print(f"B=32 L=64 d_inner=128 d_state=16, {args.threads} thread(s), median of {args.rounds} rounds")
    print(f"compiled scan  {fast:7.2f} ms fwd+bwd")
    print(f"torch scan     {slow:7.2f} ms fwd+bwd   ({ratio:.1f}x the compiled scan's time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
