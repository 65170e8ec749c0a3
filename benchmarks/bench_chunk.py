"""The chunk length of linear-mamba's causal linear attention at a capacity card's shapes.

    python benchmarks/bench_chunk.py [--facts 9 26 38 64] [--reps 30]

A card's cells are MQAR with L = 4·N_f in batches of 32, so its long cells (L > 64) run the
chunked form (``recallbench.adapters.linear_ops``).  Printed, measured in this run, one
thread: the forward+backward CPU time of the op (B = 32, one head) at each L for states
N × P of linear-mamba at D = 32 (P = 64; N = 4, 8, 16) and at D = 64, N = 8 (P = 128), in
the parallel form, chunks of 16, 32 and 64, and ``auto`` at the default ``chunk_size`` of
64 (the parallel form up to 64 tokens, chunks of ``chunk_length(N, P)`` beyond); then the
ratio of the former auto (the parallel form up to 64 tokens, chunks of 64 beyond) to it.  The forms give the same sums in another order (tests/test_linear_mamba.py).
"""
from __future__ import annotations

import argparse
import sys
import time

import torch


def op_ms(L: int, N: int, P: int, reps: int, **kw) -> float:
    from recallbench.adapters.linear_ops import causal_linear_attention

    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(32, 1, L, N, generator=g, requires_grad=True) for _ in range(2))
    v = torch.randn(32, 1, L, P, generator=g, requires_grad=True)
    grad = torch.randn(32, 1, L, P, generator=g)
    for _ in range(3):
        causal_linear_attention(q, k, v, **kw).backward(grad)
    best = float("inf")
    for _ in range(3):  # the best of three rounds: the machine's moment, not the op
        cpu0 = time.process_time()
        for _ in range(reps):
            causal_linear_attention(q, k, v, **kw).backward(grad)
        best = min(best, (time.process_time() - cpu0) / reps)
    return 1e3 * best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--facts", type=int, nargs="+", default=[9, 26, 38, 64])
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args(argv)
    if args.reps < 1 or min(args.facts) < 1:
        p.error("--reps and --facts must be >= 1")
    torch.set_num_threads(1)
    from recallbench.adapters.linear_ops import CHUNK_SIZE, chunk_length

    timed = {"parallel": {"form": "parallel"}, "c16": {"chunk_size": 16, "form": "chunked"},
             "c32": {"chunk_size": 32, "form": "chunked"},
             "c64": {"chunk_size": 64, "form": "chunked"}, "auto": {}}
    columns = ["parallel", "c16", "c32", "c64", "former", "auto"]
    print("causal linear attention fwd+bwd, B = 32, one head, 1 thread: CPU ms (best of 3 "
          f"rounds of {args.reps}); former = parallel up to 64 tokens, chunks of 64 beyond")
    print(f"{'N':>3} {'P':>4} {'N_f':>4} {'L':>4} " + " ".join(f"{f:>8}" for f in columns)
          + f" {'chunk':>5} {'former/auto':>11}")
    for N, P in ((4, 64), (8, 64), (16, 64), (8, 128)):
        for nf in args.facts:
            L = 4 * nf
            ms = {f: op_ms(L, N, P, args.reps, **kw) for f, kw in timed.items()}
            short = L <= CHUNK_SIZE  # the parallel form, the former auto's and the default's
            ms["former"] = ms["parallel"] if short else ms["c64"]  # the same computation
            chunk = "-" if short else chunk_length(N, P)
            print(f"{N:>3} {P:>4} {nf:>4} {L:>4} " + " ".join(f"{ms[f]:>8.2f}" for f in columns)
                  + f" {chunk:>5} {ms['former'] / ms['auto']:>11.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
