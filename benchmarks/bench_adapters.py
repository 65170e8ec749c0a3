"""Milliseconds per training step on CPU for every adapter that runs here.

    python benchmarks/bench_adapters.py [--steps 10] [--threads 1] [--only NAME ...]

Setting (issue: one layer): B=32, L=64, d_model=64, d_state=16, MQAR V=128, N_f=16.
Each adapter's step is forward + backward + AdamW on the same batch, after warm-up.
Adapters that cannot run here are listed with the reason.
"""
from __future__ import annotations

import argparse
import time

import torch

from recallbench.api.config import resolve
from recallbench.harness.loop import masked_loss
from recallbench.harness.model import RecallModel
from recallbench.api.registry import ADAPTERS
from selection import runnable_adapters  # benchmarks/selection.py


def step_ms(name: str, steps: int) -> float:
    cfg = resolve({"model": {"adapter": name, "d_model": 64, "d_state": 16, "n_layers": 1}})
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

    for _ in range(2):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", nargs="*", help="adapter names (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"B=32 L=64 d_model=64 d_state=16, 1 layer, {args.threads} thread(s), "
          f"{args.steps} steps each")
    for name in runnable_adapters(args.only):
        try:
            ms = step_ms(name, args.steps)
        except Exception as exc:  # report and go on: one broken adapter must not hide the rest
            print(f"{name:<18} failed: {type(exc).__name__}: {exc}")
            continue
        note = " (evaluation only: forward)" if not ADAPTERS.get(name).trainable else ""
        print(f"{name:<18} {ms:8.1f} ms/step{note}")


if __name__ == "__main__":
    main()
