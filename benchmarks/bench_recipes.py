"""recallbench's default training recipe against the paper code's (``train.recipe: paper``).

    python benchmarks/bench_recipes.py                   # Table 8, seeds 0, 1, 2 (~20 min)
    python benchmarks/bench_recipes.py --seeds 0 --set "train.max_steps=20 model.d_model=8"

Trains the paper's Table-8 setting (MQAR V=128, L=64, N_f=16; linear-mamba D=64, N=16)
with both recipes at each seed, one run at a time in this process, and prints side by
side, per seed and their mean: the optimizer steps, the training sequences (steps times
batch) and the CPU time (every thread of this process, from the first training step, so
validation included, model building and the test set's generation not) until validation
accuracy first reached ``--level`` (0.99), and the final test accuracy (of the
best-validation weights, on each recipe's own test set: 2,048 or 10,112 sequences).

The level is seen only at validations: every 25 steps under the default, after steps 251,
501, ... under the paper's, so the paper's steps to it are rounded up to those, and its
validations (10,112 new sequences each) are part of its CPU time.  ``--set`` applies to
both recipes, and an explicit key wins over the paper's recipe, as in any config.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

TABLE8 = {"task": {"name": "mqar", "vocab_size": 128, "seq_len": 64, "num_facts": 16},
          "model": {"adapter": "linear-mamba", "d_model": 64, "d_state": 16}}
RECIPES = (None, "paper")


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds or any(s < 0 for s in seeds):
        sys.exit(f"bench_recipes: --seeds = {text!r} is not allowed: comma-separated "
                 "integers >= 0, e.g. 0,1,2")
    return seeds


def one_run(raw: dict, level: float) -> dict:
    """Train one config; its steps, sequences and CPU seconds to ``level`` (None if never
    reached) and its test accuracy."""
    from recallbench.api.config import resolve
    from recallbench.harness.module import RecallModule
    from recallbench.harness.train import run

    cfg = resolve(raw)
    marks: dict[str, float] = {}
    seen: list[tuple[int, float, float]] = []  # (step, accuracy, CPU s since training began)
    validate, start = RecallModule.validate, getattr(RecallModule, "on_train_start")

    def timed_validate(self, step):
        acc = validate(self, step)
        seen.append((step, acc, time.process_time() - marks["start"]))
        return acc

    def train_start(self):
        marks["start"] = time.process_time()
        return start(self)

    RecallModule.validate, RecallModule.on_train_start = timed_validate, train_start
    try:
        rec = run(cfg, progress=False)
    finally:
        RecallModule.validate, RecallModule.on_train_start = validate, start
    hit = next(((s, t) for s, a, t in seen if a >= level), None)
    return {"steps": hit and hit[0], "sequences": hit and hit[0] * cfg.train.batch_size,
            "cpu_s": hit and hit[1], "test": rec["accuracy"], "ran": rec["steps"]}


def _cells(r: dict | None) -> str:
    if r is None:
        return f"{'':>7} {'':>10} {'':>8} {'':>8}"
    if r["steps"] is None:
        return f"{'never':>7} {'-':>10} {'-':>8} {r['test']:8.4f}"
    return f"{r['steps']:7d} {r['sequences']:10d} {r['cpu_s']:8.1f} {r['test']:8.4f}"


def _mean(rows: list[dict]) -> dict | None:
    hit = [r for r in rows if r["steps"] is not None]
    if not rows:
        return None
    test = statistics.fmean(r["test"] for r in rows)
    if len(hit) < len(rows):  # a mean of the runs that reached it would flatter the recipe
        return {"steps": None, "test": test}
    return {"steps": round(statistics.fmean(r["steps"] for r in hit)),
            "sequences": round(statistics.fmean(r["sequences"] for r in hit)),
            "cpu_s": statistics.fmean(r["cpu_s"] for r in hit), "test": test}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2", help="comma-separated (default 0,1,2)")
    p.add_argument("--level", type=float, default=0.99,
                   help="validation accuracy to reach (default 0.99)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value in both recipes (repeatable)")
    args = p.parse_args(argv)
    seeds = _seeds(args.seeds)
    if not 0.0 <= args.level <= 1.0:
        sys.exit(f"bench_recipes: --level = {args.level} is not allowed: in [0, 1]")

    from recallbench.api.config import apply_overrides, resolve
    from recallbench.api.errors import ConfigError

    try:  # a bad --set fails before anything trains
        base = apply_overrides(TABLE8, args.set)
        if "recipe" in base.get("train", {}):
            raise ConfigError("--set train.recipe is not allowed: the benchmark runs both "
                              "recipes, null and paper")
        shown, _ = (resolve({**base, "train": {**base.get("train", {}), "recipe": recipe}})
                    for recipe in RECIPES)
    except ConfigError as exc:
        sys.exit(f"bench_recipes: {exc}")
    print(f"MQAR V={shown.task.vocab_size} L={shown.task.seq_len} "
          f"N_f={shown.task.num_facts}, {shown.model.adapter} D={shown.model.d_model} "
          f"N={shown.model.d_state}; to validation accuracy {args.level:g}; "
          f"CPU s from the first training step")
    head = f"{'steps':>7} {'sequences':>10} {'CPU s':>8} {'test':>8}"
    print(f"{'':6} | {'default recipe':<36} | {'paper recipe':<36}")
    print(f"{'seed':6} | {head} | {head}")
    results: dict = {recipe: [] for recipe in RECIPES}
    for seed in seeds:
        row = []
        for recipe in RECIPES:
            train = {**base.get("train", {}), "seed": seed, "progress": False}
            if recipe is not None:
                train["recipe"] = recipe
            r = one_run({**base, "train": train}, args.level)
            results[recipe].append(r)
            row.append(r)
        print(f"{seed:<6} | {_cells(row[0])} | {_cells(row[1])}", flush=True)
    print(f"{'mean':6} | {_cells(_mean(results[None]))} | {_cells(_mean(results['paper']))}")
    ran = {recipe: [r["ran"] for r in rows] for recipe, rows in results.items()}
    print(f"steps trained: default {ran[None]}, paper {ran['paper']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
