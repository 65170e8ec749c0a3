"""Milliseconds per training step on CPU for every adapter that runs here, and the ratio to linear-mamba.

    python benchmarks/bench_adapters.py [--steps 5] [--rounds 5] [--threads 1] [--only NAME ...]
                                        [--clock wall|cpu] [--check-ratio 3]

Setting (issue: one layer): B=32, L=64, d_model=64, d_state=16, MQAR V=128, N_f=16.
Each adapter's step is forward + backward + AdamW on the same batch, after warm-up.
Every adapter (linear-mamba always among them, as the yardstick) is built once; then each
round times ``--steps`` steps of each adapter in turn, so that a slow spell of a shared
machine hits all of them alike.  A row shows the median ms/step over the rounds and the
median over the rounds of its ratio to linear-mamba's time in the same round.
``--clock cpu`` times this process's CPU time instead of the wall clock: on a machine
shared with other work, the time spent waiting for a core is then left out (with one
thread; with several it adds up the threads' time).
``--check-ratio R`` exits with status 1, naming them, when any adapter's ratio exceeds R.
Adapters that cannot run here are listed with the reason.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable

import torch

from recallbench.api.config import resolve
from recallbench.api.errors import ConfigError
from recallbench.api.fields import check_range, fail
from recallbench.api.registry import ADAPTERS
from recallbench.harness.loop import masked_loss
from recallbench.harness.model import RecallModel
from selection import runnable_adapters  # benchmarks/selection.py

YARDSTICK = "linear-mamba"


def make_step(name: str, d_model: int = 64, d_state: int = 16,
              task: dict | None = None) -> Callable[[], None]:
    """One training step of adapter ``name`` (model, batch of 32 and optimiser built once):
    by default in the benchmark setting, else at ``d_model``, ``d_state`` on ``task``."""
    cfg = resolve({"model": {"adapter": name, "d_model": d_model, "d_state": d_state,
                             "n_layers": 1}, **({"task": task} if task else {})})
    torch.manual_seed(0)
    model = RecallModel(ADAPTERS.get(name)(cfg.model), cfg.task.vocab_size)
    x, y = cfg.task.sample(32, torch.Generator().manual_seed(0))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3) if params else None

    def step():
        loss = masked_loss(model(x), y)
        if opt is not None:
            opt.zero_grad()
            loss.backward()
            opt.step()

    for _ in range(2):  # warm-up
        step()
    return step


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_ms(step: Callable[[], None], steps: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(steps):
        step()
    return (clock() - start) / steps * 1e3


def build(names: list[str]) -> dict[str, Callable[[], None]]:
    """Each adapter's step; one that fails is reported and left out (it must not hide the rest)."""
    steps = {}
    for name in names:
        try:
            steps[name] = make_step(name)
        except Exception as exc:
            print(f"{name:<18} failed: {type(exc).__name__}: {str(exc)[:200]}")
    return steps


def measure(steps: dict[str, Callable[[], None]], n: int, rounds: int,
            clock: Callable[[], float]) -> dict[str, list[float]]:
    """ms/step of every adapter in each round, the adapters timed in turn within a round."""
    ms: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            ms[name].append(time_ms(step, n, clock))
    return ms


def report(ms: dict[str, list[float]]) -> dict[str, float]:
    """Print the table; return each adapter's median ratio to the yardstick."""
    base = ms.get(YARDSTICK)
    ratios = {}
    print(f"{'adapter':<18} {'ms/step':>8}  ratio to {YARDSTICK}")
    for name, times in ms.items():
        note = " (evaluation only: forward)" if not ADAPTERS.get(name).trainable else ""
        if base is None:
            print(f"{name:<18} {statistics.median(times):8.1f}{note}")
            continue
        ratios[name] = statistics.median(t / b for t, b in zip(times, base))
        print(f"{name:<18} {statistics.median(times):8.1f}  {ratios[name]:6.2f}x{note}")
    return ratios


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench_adapters.py", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5, help="steps timed per adapter and round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (the adapters take turns in each)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", nargs="*", help=f"adapter names (default: all; {YARDSTICK} is always timed)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall: elapsed time; cpu: this process's CPU time")
    ap.add_argument("--check-ratio", type=float, default=None, metavar="R",
                    help=f"exit 1 when an adapter's step takes more than R times {YARDSTICK}'s")
    args = ap.parse_args(argv)
    try:
        for flag in ("steps", "rounds", "threads"):
            check_range(f"--{flag}", getattr(args, flag), 1)
        if args.check_ratio is not None and not args.check_ratio > 0:
            fail("--check-ratio", args.check_ratio, "must be > 0")
    except ConfigError as exc:
        ap.exit(2, f"{ap.prog}: {exc}\n")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(args.threads)
    names = list(runnable_adapters(args.only))
    if args.only and YARDSTICK not in names:
        names += list(runnable_adapters([YARDSTICK]))
    print(f"B=32 L=64 d_model=64 d_state=16, 1 layer, {args.threads} thread(s), "
          f"{args.clock} clock, median of {args.rounds} rounds of {args.steps} steps each")
    ratios = report(measure(build(names), args.steps, args.rounds, CLOCKS[args.clock]))
    if args.check_ratio is None:
        return 0
    if YARDSTICK not in ratios:
        print(f"--check-ratio: {YARDSTICK} could not be timed here, so no ratio was measured")
        return 1
    above = [f"{n} ({r:.2f}x)" for n, r in ratios.items() if n != YARDSTICK and r > args.check_ratio]
    if above:
        print(f"above {args.check_ratio:g}x {YARDSTICK}: {', '.join(above)}")
        return 1
    print(f"every adapter within {args.check_ratio:g}x {YARDSTICK}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
