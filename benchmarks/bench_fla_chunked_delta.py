"""Chunked delta-rule kernels against fla's recurrent references on CPU, per chunk size.

    python benchmarks/bench_fla_chunked_delta.py [--length 64] [--chunks 8 16 32 64] [--steps 20]

One kernel call + backward (gradients of every input), at the shapes the deltanet and
gated-deltanet adapters have in benchmarks/bench_adapters.py (B=32, H=1, K=d_state=16,
V=expand·d_model=128) with the flags their layers pass.  Prints ms per call for the
recurrent reference (adapters/cpu/fla_kernels.py) and for each chunk size, the ratio
reference / chunked measured in the same run, and the fastest chunk size.
"""
from __future__ import annotations

import argparse
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


def ms_per_call(run, steps: int) -> float:
    for _ in range(2):
        run()
    start = time.perf_counter()
    for _ in range(steps):
        run()
    return (time.perf_counter() - start) / steps * 1e3


def measure(kernel: str, x: dict[str, torch.Tensor], chunks: list[int], steps: int) -> None:
    def run(fn, **kw):
        def once():
            o, _ = call(kernel, fn, x, **kw)
            o.sum().backward()
        return once

    ref = ms_per_call(run(getattr(naive, kernel)), steps)
    print(f"{kernel:<17} recurrent reference {ref:8.2f} ms")
    times = {}
    for c in chunks:
        times[c] = ms_per_call(run(getattr(chunked, kernel), chunk=c), steps)
        print(f"{kernel:<17} chunk {c:<13} {times[c]:8.2f} ms  {ref / times[c]:6.2f}x faster")
    best = min(times, key=times.get)
    print(f"{kernel:<17} fastest chunk {best} ({ref / times[best]:.2f}x the reference)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--dk", type=int, default=16)
    ap.add_argument("--dv", type=int, default=128)
    ap.add_argument("--chunks", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    for flag in ("batch", "length", "dk", "dv", "steps", "threads"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag} must be >= 1")
    if min(args.chunks) < 1:
        ap.error("--chunks must all be >= 1")
    torch.set_num_threads(args.threads)
    print(f"B={args.batch} T={args.length} H=1 K={args.dk} V={args.dv}, {args.threads} thread(s), "
          f"forward + backward, {args.steps} calls each")
    x = inputs(args.batch, args.length, 1, args.dk, args.dv)
    for kernel in ("delta_rule", "gated_delta_rule"):
        measure(kernel, x, args.chunks, args.steps)


if __name__ == "__main__":
    main()
