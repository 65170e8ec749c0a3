"""rwkv6's CPU training step against linear-mamba's, at Table 8 and at capacity-card cells.

    python benchmarks/bench_rwkv6.py [--steps 5] [--rounds 5] [--clock cpu|wall]
                                     [--facts 9 32] [--check-ratio 3]

One thread.  Settings: Table 8 (MQAR V=128, L=64, N_f=16; d_model 64, d_state 16, one layer,
batch 32, as ``bench_adapters.py``) and the cells of a D32-N4 card (V=512, L = 4·N_f for
each ``--facts``; d_model 32, d_state 4).  A step is forward + backward + AdamW on a fixed
batch, after warm-up.  Within a setting both adapters are built once, then each round times
``--steps`` steps of each in turn; a row shows the median ms/step over the rounds and the
median of the per-round ratio rwkv6 / linear-mamba.  ``--check-ratio R`` exits 1 when the
Table-8 ratio exceeds R.  The chunked RWKV-6 recurrence is tested against fla's naive one
(tests/test_fla_chunked_gla.py), the layer against fla's forward (tests/test_fla_rwkv6_layer.py).
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch

from bench_adapters import CLOCKS, measure  # benchmarks/bench_adapters.py
from bench_adapters import make_step as adapter_step
from recallbench.api.errors import ConfigError
from recallbench.api.fields import check_range, fail

NAMES = ("rwkv6", "linear-mamba")


def make_step(name: str, d_model: int, d_state: int, vocab: int, facts: int, seq_len: int):
    """One training step of adapter ``name`` on MQAR (``bench_adapters.make_step``)."""
    return adapter_step(name, d_model, d_state,
                        {"name": "mqar", "vocab_size": vocab, "seq_len": seq_len, "num_facts": facts})


def settings(facts: list[int]) -> list[tuple[str, tuple[int, int, int, int, int]]]:
    """(label, (d_model, d_state, V, N_f, L)): Table 8, then a D32-N4 card cell per N_f."""
    return [("Table 8 D64-N16 L=64", (64, 16, 128, 16, 64))] + [
        (f"card D32-N4 N_f={nf} L={4 * nf}", (32, 4, 512, nf, 4 * nf)) for nf in facts]


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench_rwkv6.py", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5, help="steps timed per adapter and round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (the adapters take turns in each)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                    help="cpu: this process's CPU time (default); wall: elapsed time")
    ap.add_argument("--facts", type=int, nargs="*", default=[9, 32], help="N_f of the card cells")
    ap.add_argument("--check-ratio", type=float, default=None, metavar="R",
                    help="exit 1 when rwkv6's Table-8 step takes more than R times linear-mamba's")
    args = ap.parse_args(argv)
    try:
        for flag in ("steps", "rounds"):
            check_range(f"--{flag}", getattr(args, flag), 1)
        for nf in args.facts:
            check_range("--facts", nf, 1, 255, "(V=512 holds N_f <= 255)")
        if args.check_ratio is not None and not args.check_ratio > 0:
            fail("--check-ratio", args.check_ratio, "must be > 0")
    except ConfigError as exc:
        ap.exit(2, f"{ap.prog}: {exc}\n")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(1)
    print(f"1 thread, {args.clock} clock, median of {args.rounds} rounds of {args.steps} steps each")
    print(f"{'setting':<28} {'rwkv6 ms':>9} {'l-mamba ms':>10} {'ratio':>7}")
    table8 = None
    for label, shape in settings(args.facts):
        ms = measure({n: make_step(n, *shape) for n in NAMES}, args.steps, args.rounds, CLOCKS[args.clock])
        ratio = statistics.median(a / b for a, b in zip(*ms.values()))
        table8 = ratio if table8 is None else table8
        print(f"{label:<28} {statistics.median(ms[NAMES[0]]):9.1f} {statistics.median(ms[NAMES[1]]):10.1f}"
              f" {ratio:6.2f}x", flush=True)
    if args.check_ratio is None:
        return 0
    if table8 > args.check_ratio:
        print(f"rwkv6 at Table 8: {table8:.2f}x linear-mamba, above {args.check_ratio:g}x")
        return 1
    print(f"rwkv6 at Table 8 within {args.check_ratio:g}x linear-mamba")
    return 0


if __name__ == "__main__":
    sys.exit(main())
