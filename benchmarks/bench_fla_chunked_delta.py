"""Chunked delta-rule kernels against fla's recurrent references on CPU, per chunk size.

    python benchmarks/bench_fla_chunked_delta.py [--length 64] [--chunks 8 16 32 64] [--rounds 5]

One kernel call + backward (gradients of every input), at the shapes the deltanet and
gated-deltanet adapters have in benchmarks/bench_adapters.py (B=32, H=1, K=d_state=16,
V=expand·d_model=128) with the flags their layers pass.  Prints ms per call for the
recurrent reference (adapters/cpu/fla_kernels.py) and for each chunk size, the speed-up
reference / chunked (the median over rounds in which all variants are timed in turn, so
that a shared machine's load changes hit them alike), and the fastest chunk size.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from recallbench.adapters.cpu import fla_chunked_delta as chunked
from recallbench.adapters.cpu import fla_kernels as naive


def inputs(batch: int, length: int, heads: int, dk: int, dv: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=gen).requires_grad_()

    return {"q": randn(batch, length, heads, dk), "k": randn(batch, length, heads, dk),
            "v": randn(batch, length, heads, dv), "beta": randn(batch, length, heads),
            "g": randn(batch, length, heads)}


def call(kernel: str, fn, x: dict[str, torch.Tensor], **kw):
    """The flags deltanet's / gated-deltanet's layers pass (no state: training)."""
    if kernel == "delta_rule":
        return fn(x["q"], x["k"], x["v"], x["beta"].sigmoid(), use_qk_l2norm_in_kernel=True, **kw)
    heads = x["q"].shape[2]
    return fn(x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"], use_qk_l2norm_in_kernel=True,
              use_beta_sigmoid_in_kernel=True, use_gate_in_kernel=True, A_log=torch.zeros(heads),
              dt_bias=torch.zeros(heads), state_v_first=True, **kw)


def ms_per_call(run, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls * 1e3


def measure(kernel: str, x: dict[str, torch.Tensor], chunks: list[int], calls: int, rounds: int) -> None:
    """Reference and chunk sizes timed in turn within each round; medians over the rounds."""
    def run(fn, **kw):
        def once():
            o, _ = call(kernel, fn, x, **kw)
            o.sum().backward()
        once()  # warm-up
        return once

    variants = {"recurrent reference": run(getattr(naive, kernel))}
    variants.update({f"chunk {c}": run(getattr(chunked, kernel), chunk=c) for c in chunks})
    ms: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, once in variants.items():
            ms[name].append(ms_per_call(once, calls))
    ref = ms.pop("recurrent reference")
    print(f"{kernel:<17} recurrent reference {statistics.median(ref):8.2f} ms")
    speedups = {}
    for name, times in ms.items():
        speedups[name] = statistics.median(r / t for r, t in zip(ref, times))
        print(f"{kernel:<17} {name:<19} {statistics.median(times):8.2f} ms  {speedups[name]:6.2f}x faster")
    best = max(speedups, key=speedups.get)
    print(f"{kernel:<17} fastest {best} ({speedups[best]:.2f}x the reference)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--dk", type=int, default=16)
    ap.add_argument("--dv", type=int, default=128)
    ap.add_argument("--chunks", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--calls", type=int, default=4, help="calls per variant and round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    for flag in ("batch", "length", "dk", "dv", "calls", "rounds", "threads"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} must be >= 1")
    if min(args.chunks) < 1:
        ap.error("--chunks must all be >= 1")
    torch.set_num_threads(args.threads)
    print(f"B={args.batch} T={args.length} H=1 K={args.dk} V={args.dv}, {args.threads} thread(s), "
          f"forward + backward, median of {args.rounds} rounds of {args.calls} calls")
    x = inputs(args.batch, args.length, 1, args.dk, args.dv)
    for kernel in ("delta_rule", "gated_delta_rule"):
        measure(kernel, x, args.chunks, args.calls, args.rounds)


if __name__ == "__main__":
    main()
