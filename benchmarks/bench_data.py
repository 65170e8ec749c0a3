"""Sequences per second of each task generator vs a straightforward per-example generator.

    python benchmarks/bench_data.py [--seconds 1.0]

For each setting, (V=512, L=64, N_f=16, B=128) and (V=8192, L=256, N_f=64, B=256), it
times recallbench's vectorized ``Task.sample`` and a per-example Python generator written
here for comparison (one example at a time with ``random``, then stacked into a tensor,
the way a first implementation would), and prints the ratio.
"""
from __future__ import annotations

import argparse
import random
import time

import torch

from recallbench.api.registry import TASKS
from recallbench.api.task import IGNORE


def reference_example(rng: random.Random, task) -> tuple[list[int], list[int]]:
    """One sequence of ``task``, built token by token."""
    V, Nf = task.vocab_size, task.num_facts
    L = task.length
    Nk = getattr(task, "num_key_repeats", 1)
    keys = rng.sample(range(1, V // 2), Nf)
    if task.name == "ar":
        values = rng.sample(range(V // 2, V), Nf)
        q = rng.randrange(Nf)
        seq = [t for kv in zip(keys, values) for t in kv] + [keys[q]]
        return seq, [IGNORE] * (L - 1) + [values[q]]
    occurrences = [k for k in keys for _ in range(Nk)]
    rng.shuffle(occurrences)
    values = rng.sample(range(V // 2, V), len(occurrences))
    latest = {}
    seq = []
    for k, v in zip(occurrences, values):
        seq += [k, v]
        latest[k] = v
    start = len(seq)
    seq += [rng.randrange(V) for _ in range(L - start)]
    labels = [IGNORE] * L
    first_seen = list(dict.fromkeys(occurrences))  # keys are asked in this order
    for k, gap in zip(first_seen, rng.sample(range((L - start) // 2), Nf)):
        seq[start + 2 * gap] = k
        labels[start + 2 * gap] = latest[k]
    return seq, labels


def reference_batch(rng, task, batch):
    rows = [reference_example(rng, task) for _ in range(batch)]
    return torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])


def rate(fn, batch: int, seconds: float) -> float:
    fn()  # warm up
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return n * batch / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    args = ap.parse_args()
    torch.set_num_threads(1)
    settings = [dict(vocab_size=512, seq_len=64, num_facts=16, batch=128),
                dict(vocab_size=8192, seq_len=256, num_facts=64, batch=256)]
    print(f"{'task':<20} {'V':>5} {'L':>4} {'N_f':>4} {'B':>4} {'ours seq/s':>12} "
          f"{'per-example seq/s':>18} {'ratio':>7}")
    for s in settings:
        for name in ("mqar", "ar", "mqar-repeated-keys"):
            params = dict(vocab_size=s["vocab_size"], num_facts=s["num_facts"])
            if name == "mqar":
                params["seq_len"] = s["seq_len"]
            if name == "mqar-repeated-keys":
                params.update(seq_len=s["seq_len"], num_facts=s["num_facts"] // 2,
                              num_key_repeats=2)
            task = TASKS.get(name).from_params(params)
            gen = torch.Generator().manual_seed(0)
            rng = random.Random(0)
            ours = rate(lambda: task.sample(s["batch"], gen), s["batch"], args.seconds)
            ref = rate(lambda: reference_batch(rng, task, s["batch"]), s["batch"], args.seconds)
            print(f"{name:<20} {task.vocab_size:>5} {task.length:>4} {task.num_facts:>4} "
                  f"{s['batch']:>4} {ours:>12,.0f} {ref:>18,.0f} {ours / ref:>6.1f}x")


if __name__ == "__main__":
    main()
