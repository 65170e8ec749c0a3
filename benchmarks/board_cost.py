"""Boards' training priced on this machine: CPU-hours on one machine, and their ratio.

    python benchmarks/board_cost.py leaderboards/cpu-v3 leaderboards/cpu-v4 [--steps 6]
                                    [--only MODEL ...]

A board's CPU-hours, as its runs report them, are summed over the machines the runs ran on,
with the code of their day; two boards' totals then compare machines as much as methods.
This script rebuilds every submitted run (its points as records with their learning-rate
searches, as ``leaderboard validate`` does) and, for each distinct model and task (config,
L), measures here on one thread the CPU time of one training step (batch, forward, loss at
the asked positions, backward, clipping, AdamW) and of one validation (``val_size``
sequences, no gradient).  A run is priced as its trained steps (every learning-rate
candidate, extensions included) times the step, plus one validation per ``val_every`` steps
and its test.  Per board and model it prints the CPU minutes the runs recorded, the price
here, and recorded / priced (how the recording machines and code compare with this one);
then each board's total, the total over the models every board holds (shape entries left
out), and the boards' ratios, priced in this one run.  Checkpoints, placement and process
start-up are not priced; nor is a model whose adapter cannot run here (it is named).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import yaml

from recallbench.api.config import resolve
from recallbench.api.record import cpu_info
from recallbench.leaderboard.capacity import method2
from recallbench.leaderboard.points import point_records


def board_runs(folder: Path, only=None) -> dict[str, list[dict]]:
    """Model name -> its submitted runs as records (every budget), shape entries left out;
    ``only``: those models alone."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out: dict[str, list[dict]] = {}
    for path in sorted((folder / "submissions").glob("*.yaml")):
        sub = yaml.load(path.read_text(), Loader=loader)
        if sub["model"].get("shape") or (only and sub["model"]["name"] not in only):
            continue
        recs = []
        for b in sub["budgets"]:
            recs += method2.with_protocol(point_records({**sub, "budgets": [b]}), b["points"])
        out[sub["model"]["name"]] = recs
    return out


def candidate_steps(r: dict) -> list[int]:
    """Optimizer steps of each learning-rate candidate of the run (the run's own without a
    search), as ``run_card.work_tokens`` counts them."""
    return [int(e.get("steps") or 0)
            for e in r.get("lr_search") or [{"steps": r.get("steps") or 0}]]


def run_steps(r: dict) -> int:
    """Optimizer steps the run trained, over every learning-rate candidate."""
    return sum(candidate_steps(r))


def price_key(r: dict) -> str:
    c = r["config"]
    train = {k: c["train"].get(k) for k in ("batch_size", "val_size", "test_size")}
    return json.dumps({"model": c["model"], "task": c["task"], "train": train}, sort_keys=True)


def measure(config: dict, steps: int) -> tuple[float, float]:
    """(CPU seconds a training step, CPU seconds a validation) of ``config`` here."""
    from recallbench.harness.data import TrainStream, fixed_set
    from recallbench.harness.loop import asked, labelled_loss
    from recallbench.harness.module import VAL_BATCH
    from recallbench.harness.prepare import build_model

    raw = json.loads(json.dumps(config))
    raw["train"].update(threads=1, device="cpu", progress=False)
    lr = raw["train"]["lr"]
    raw["train"]["lr"] = lr[0] if isinstance(lr, list) else lr
    cfg = resolve(raw)
    tc = cfg.train
    torch.manual_seed(0)
    _, model = build_model(cfg, torch.device("cpu"))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=float(tc.lr), betas=tuple(tc.betas))
    batches = iter(TrainStream(cfg.task, tc.batch_size, 0))

    def step():
        x, y = next(batches)
        loss = labelled_loss(model, x, y, tc.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if tc.grad_clip:
            torch.nn.utils.clip_grad_norm_(params, tc.grad_clip)
        opt.step()

    for _ in range(2):
        step()
    t0 = time.process_time()
    for _ in range(steps):
        step()
    per_step = (time.process_time() - t0) / steps
    inputs, targets = fixed_set(cfg.task, tc.val_size, 1)
    model.eval()
    with torch.inference_mode():
        t0 = time.process_time()
        for i in range(0, len(inputs), VAL_BATCH):
            asked(model, inputs[i:i + VAL_BATCH], targets[i:i + VAL_BATCH])
        per_val = time.process_time() - t0
    return per_step, per_val


def run_price(r: dict, per_step: float, per_val: float) -> float:
    """CPU seconds of the run at this machine's step and validation costs."""
    train = r["config"]["train"]
    vals = sum(n // int(train.get("val_every") or 50) for n in candidate_steps(r))
    test = int(train.get("test_size") or 0) / max(int(train.get("val_size") or 1), 1)
    return run_steps(r) * per_step + (vals + test) * per_val


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("boards", nargs="+", help="board folders (each with submissions/)")
    p.add_argument("--steps", type=int, default=6, help="timed steps per config (default 6)")
    p.add_argument("--only", nargs="*", default=None, help="price these models only")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps: {args.steps} is not allowed: give at least 1")
    torch.set_num_threads(1)
    boards = {Path(b).name: board_runs(Path(b), args.only) for b in args.boards}
    cache: dict[str, tuple[float, float] | str] = {}
    keys = {price_key(r) for runs in boards.values() for rs in runs.values() for r in rs
            if run_steps(r)}
    print(f"pricing {len(keys)} configs on {cpu_info()['model']}, 1 thread, {args.steps} steps each",
          file=sys.stderr, flush=True)
    totals: dict[str, dict[str, tuple[float, float]]] = {}
    for name, runs in boards.items():
        print(f"\n{name}\n{'model':<26}{'runs':>6}{'recorded min':>14}{'priced min':>12}"
              f"{'ratio':>7}")
        totals[name] = {}
        for model, recs in sorted(runs.items()):
            priced = recorded = 0.0
            missing = None
            for r in recs:
                recorded += float(r.get("cpu_s") or 0.0)
                if not run_steps(r):
                    continue
                k = price_key(r)
                if k not in cache:
                    try:
                        cache[k] = measure(r["config"], args.steps)
                    except Exception as e:  # an adapter that cannot run here
                        cache[k] = f"{type(e).__name__}: {e}"[:120]
                if isinstance(cache[k], str):
                    missing = cache[k]
                    continue
                priced += run_price(r, *cache[k])
            totals[name][model] = (recorded / 60, priced / 60)
            ratio = f"{recorded / priced:>7.2f}" if priced else f"{'-':>7}"
            print(f"{model:<26}{len(recs):>6}{recorded / 60:>14.1f}{priced / 60:>12.1f}{ratio}"
                  + (f"  (not priced: {missing})" if missing else ""), flush=True)
    common = set.intersection(*(set(t) for t in totals.values())) if len(totals) > 1 else set()
    print(f"\n{'board':<12}{'recorded h':>12}{'priced h':>10}"
          + (f"{'common recorded h':>19}{'common priced h':>17}" if common else ""))
    for name, t in totals.items():
        line = (f"{name:<12}{sum(v[0] for v in t.values()) / 60:>12.2f}"
                f"{sum(v[1] for v in t.values()) / 60:>10.2f}")
        if common:
            line += (f"{sum(t[m][0] for m in common) / 60:>19.2f}"
                     f"{sum(t[m][1] for m in common) / 60:>17.2f}")
        print(line)
    if common:
        names = list(totals)
        base = sum(totals[names[0]][m][1] for m in common)
        for n in names[1:]:
            other = sum(totals[n][m][1] for m in common)
            print(f"{n} / {names[0]} over the {len(common)} common models, priced here: "
                  f"{other / base:.2f}" if base else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
