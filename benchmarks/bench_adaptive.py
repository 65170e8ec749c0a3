"""Runs needed to fit the law's a: theory-guided adaptive search vs the full D×N grid.

    python benchmarks/bench_adaptive.py --adapter designed        # fixed weights: seconds
    python benchmarks/bench_adaptive.py --grid dense --seeds 0 1 \
        --full-grid docs/results/adaptive/grid_200steps.jsonl      # trained: a committed grid

The full grid (every candidate cell with N ≤ D, one run per seed) gives the reference a
(``fit.fit_collapse`` on all its records), for each seed and, with several seeds, for the
best of seeds (the paper's convention).  The adaptive search
(``recallbench.runs.adaptive.adaptive_search``) then places runs near the predicted phase
boundary until a is pinned down, on the same data: its runs are served from the full
grid's records (a run is deterministic for its seed, so this is the record it would get),
and its wall time is the sum of the served runs' ``wall_s`` (an ensemble member's share of
its ensemble's) plus the search's own time.
Printed: runs, wall time, a and its CI for both, the adaptive a's distance to the full
grid's a, and the fraction of the grid's runs the search used, for each ``--p-range`` and
stopping rule (``--stop``: ``interval`` stops when a's 95% CI is within ±tol, ``stable``
when three consecutive fits agree within tol/2; trained runs scatter far more than
binomial noise, so on them only the second can stop before the budget).

Two more measurements put those numbers in context:

- **random cells, same count**: ``--random-draws`` fits of that many cells drawn at random
  from the same grid (no theory), and how often they land within ±tol of the full grid's
  a: the alternative the search has to beat;
- **runs needed**: the search run without a stopping rule up to ``--needed-budget`` cells;
  printed is the number of runs (and their wall time) after which every later fit stays
  within ±tol of the full grid's a.  It looks at the answer, so no search could stop
  there by itself; it is the number the aim "fit a within ±10% with ≤ 10% of the runs"
  is about.

``--full-grid FILE``: full-grid records are read from FILE (JSONL, one record per line,
e.g. a result store's ``results.jsonl``) where it holds them (same task, adapter, seed,
steps, test size and early stop); missing cells are run and appended as each finishes, so
an interrupted grid resumes.  ``benchmarks/adaptive_grid.yaml`` is the 800-step grid as a
sweep, to fill such a store on every core with a cell's seeds batched.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from recallbench.runs.adaptive import adaptive_search, cell_config, fit_records
from recallbench.runs.adaptive_sweep import best_of_seeds
from recallbench.runs.store import read_lines
from recallbench.harness.train import run

GRIDS = {
    "coarse": ([2, 4, 6, 8, 12, 16, 24, 32, 48, 64], [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]),
    "dense": ([2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64],
              [1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32]),
}


def base_config(args, seed: int = 0) -> dict:
    train = {"max_steps": args.steps, "batch_size": 64, "lr": 1e-2, "early_stop": 0.99,
             "val_size": 256, "test_size": args.test_size, "seed": seed, "progress": False}
    return {"task": {"name": "mqar", "vocab_size": args.vocab, "seq_len": args.seq_len,
                     "num_facts": args.facts},
            "model": {"adapter": args.adapter}, "train": train}


def cell_of(rec: dict) -> tuple[int, int]:
    m = rec["config"]["model"]
    return int(m["d_model"]), int(m["d_state"])


def full_grid(base: dict, cells, path: Path | None) -> tuple[list[dict], int]:
    """Every cell's record: read from ``path`` where it holds the cell (same task, adapter,
    seed, steps, test size and early stop; a result store's ``results.jsonl`` will do), else
    run and appended to ``path`` as it finishes (an interrupted grid resumes).
    Returns the records and how many were read."""
    have = {}
    if path is not None and path.exists():
        for r in read_lines(path)[0]:  # a torn last line is reported and its cell runs again
            train = r["config"]["train"]
            if (r.get("status") == "ok" and r["config"]["task"] == run_task(base)
                    and r["config"]["model"]["adapter"] == base["model"]["adapter"]
                    and all(train.get(k) == base["train"][k]
                            for k in ("seed", "max_steps", "test_size", "early_stop"))):
                have[cell_of(r)] = r
    read = sum(c in have for c in cells)
    todo = [c for c in cells if c not in have]
    for i, (d, n) in enumerate(todo):
        rec = run(cell_config(base, d, n))
        have[(d, n)] = rec
        if path is not None:
            with path.open("a") as f:
                f.write(json.dumps(rec) + "\n")
        print(f"\r  full grid: {i + 1}/{len(todo)} runs", end="", flush=True, file=sys.stderr)
    if todo:
        print(file=sys.stderr)
    return [have[c] for c in cells], read


def run_task(base: dict) -> dict:
    from recallbench.api.config import resolve

    cfg = resolve(base)
    return {"name": cfg.task_name, **cfg.task.params()}


def run_wall(rec: dict) -> float:
    """A run's wall time; a member of a batched ensemble gets its share of the ensemble's."""
    return rec.get("wall_s", 0.0) / (rec.get("ensemble") or 1)


def runs_wall(cells, by_cell: dict, per: int, data: list) -> float:
    """Wall time of running ``cells``: their records in ``by_cell``, or for a best of seeds
    (``per`` > 1) every seed's run of them (the per-seed grids of ``data``)."""
    grids = [by_cell] if per == 1 else [d for _, d, p in data if p == 1]
    return sum(run_wall(g[c]) for g in grids for c in cells)


def serve(by_cell: dict):
    """A runner that answers a cell's config with the grid's record of that cell."""
    return lambda cfg: by_cell[(cfg["model"]["d_model"], cfg["model"]["d_state"])]


def best_of(per_seed: list[dict]) -> dict:
    """{cell: record} with each cell's best seed (the paper's convention)."""
    return {c: best_of_seeds([g[c] for g in per_seed]) for c in per_seed[0]}


def random_subsets(by_cell: dict, count: int, target: float, tol: float, draws: int,
                   kind: str, seed: int = 0) -> tuple[float, float]:
    """Fit ``draws`` random sets of ``count`` cells of ``by_cell``: the share whose a lies
    within ±tol of ``target``, and the median relative distance."""
    rng = np.random.default_rng(seed)
    cells = list(by_cell)
    dist = []
    for _ in range(draws):
        pick = rng.choice(len(cells), size=min(count, len(cells)), replace=False)
        try:
            a = fit_records([by_cell[cells[i]] for i in pick], model_kind=kind).a
        except ValueError:  # too few usable points: counts as a miss
            a = float("nan")
        dist.append(abs(a - target) / target if np.isfinite(a) else np.inf)
    dist = np.array(dist)
    return float(np.mean(dist <= tol)), float(np.median(dist))


def settled_at(history: list[dict], target: float, tol: float) -> int | None:
    """Runs after which every later round's a lies within ±tol of ``target`` (None: never)."""
    inside = [abs(h["a"] - target) <= tol * target for h in history]
    for i in range(len(history)):
        if all(inside[i:]):
            return history[i]["runs"]
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", default="linear-mamba", choices=["linear-mamba", "designed"])
    ap.add_argument("--grid", choices=sorted(GRIDS), default=None,
                    help="candidate cells (default: coarse for linear-mamba, dense for designed)")
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--facts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--test-size", type=int, default=512)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0],
                    help="train.seed values: each seed's grid is compared, and with several, "
                         "their best of seeds too (a cell then costs one run per seed)")
    ap.add_argument("--tol", type=float, default=0.10)
    ap.add_argument("--max-runs", type=int, default=40, help="cells the search may run")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--p-range", type=float, nargs=2, action="append", default=None,
                    help="informative range of predicted recall (repeatable); default 0.05 0.95 "
                         "(the search's default) and 0.2 0.8")
    ap.add_argument("--stop", nargs="+", choices=["interval", "stable", "either"],
                    default=["interval", "stable"],
                    help="stopping rules to compare (adaptive_search's stop); default both")
    ap.add_argument("--full-grid", type=Path, default=None,
                    help="JSONL cache of the full grids (records of every seed)")
    ap.add_argument("--history", action="store_true", help="print every round of the searches")
    ap.add_argument("--random-draws", type=int, default=100,
                    help="random cell sets fitted per search, for the no-theory baseline")
    ap.add_argument("--needed-budget", type=int, default=90,
                    help="cells the search may run when measuring the runs needed")
    args = ap.parse_args()
    grid = args.grid or ("dense" if args.adapter == "designed" else "coarse")
    ds, ns = GRIDS[grid]
    cells = [(d, n) for d in ds for n in ns if n <= d]
    kind = "designed" if args.adapter == "designed" else "linear"
    print(f"MQAR V={args.vocab} L={args.seq_len} N_f={args.facts}, {args.adapter}, {grid} grid "
          f"of {len(cells)} cells (N <= D), seeds {args.seeds}, test {args.test_size} sequences"
          + (f", max_steps {args.steps}, early stop 0.99" if kind == "linear" else ""))

    data = []  # (label, {cell: record}, runs per cell)
    for seed in args.seeds:
        t0 = time.perf_counter()
        recs, read = full_grid(base_config(args, seed), cells, args.full_grid)
        print(f"  seed {seed}: {read} runs read from {args.full_grid}, {len(recs) - read} run "
              f"now ({time.perf_counter() - t0:.0f} s)")
        data.append((f"seed {seed}", dict(zip(cells, recs)), 1))
    if len(args.seeds) > 1:
        data.append((f"best of {len(args.seeds)}", best_of([d for _, d, _ in data]),
                     len(args.seeds)))

    print("\nfull grid (reference):")
    fulls = {}
    for label, by_cell, per in data:
        wall = runs_wall(cells, by_cell, per, data)
        fulls[label] = full = fit_records(list(by_cell.values()), model_kind=kind)
        print(f"  {label:<10} {len(cells) * per:>4} runs, {wall:7.1f} s of runs: a = {full.a:.3f} "
              f"[{full.a_ci[0]:.3f}, {full.a_ci[1]:.3f}], b = {full.b:.3f}, dispersion "
              f"{full.dispersion:.0f}")

    print("\nadaptive search (runs served from the full grids; wall = those runs' wall_s + the "
          "search's own time):")
    windows = args.p_range or [(0.05, 0.95), (0.2, 0.8)]
    for label, by_cell, per in data:
        for (lo, hi), rule in [(r, s) for r in windows for s in args.stop]:
            t = time.perf_counter()
            out = adaptive_search(base_config(args), cells, runner=serve(by_cell), tol=args.tol,
                                  max_runs=args.max_runs, batch=args.batch, p_range=(lo, hi),
                                  stop=rule)
            wall = time.perf_counter() - t + runs_wall(out["cells"], by_cell, per, data)
            full = fulls[label]
            dist = abs(out["a"] - full.a) / full.a
            runs = out["runs"] * per
            print(f"  {label:<10} p in [{lo}, {hi}], stop {rule:<8} {runs:>3} runs "
                  f"({runs / (len(cells) * per):>4.0%} of the grid's), {wall:6.1f} s, stopped "
                  f"{out['stopped']:<9} a = {out['a']:.3f} [{out['a_ci'][0]:.3f}, "
                  f"{out['a_ci'][1]:.3f}] (±{out['half_width']:.0%}), {dist:.1%} from this "
                  f"full grid's a" + (" (within tol)" if dist <= args.tol else " (outside tol)"))
            share, med = random_subsets(by_cell, out["runs"], full.a, args.tol,
                                        args.random_draws, kind)
            print(f"{'':13}random {out['runs']} cells: {share:.0%} of {args.random_draws} "
                  f"within tol, median {med:.1%} from the full grid's a")
            if args.history:
                for h in out["history"]:
                    cells_s = " ".join(f"{d}x{n}" for d, n in h["cells"])
                    print(f"      round {h['round']}: {cells_s} -> a = {h['a']:.3f}")

    print(f"\nruns needed: the search without a stopping rule, up to {args.needed_budget} cells; "
          f"runs after which every later fit stays within ±{args.tol:.0%} of the full grid's a")
    for label, by_cell, per in data:
        for lo, hi in windows:
            out = adaptive_search(base_config(args), cells, runner=serve(by_cell), tol=0.0,
                                  stop="interval", max_runs=args.needed_budget,
                                  batch=args.batch, p_range=(lo, hi))
            full = fulls[label]
            at = settled_at(out["history"], full.a, args.tol)
            if at is None:
                print(f"  {label:<10} p in [{lo}, {hi}]: not within {out['runs'] * per} runs "
                      f"(last a = {out['a']:.3f}, full grid {full.a:.3f})")
                continue
            wall = runs_wall(out["cells"][:at], by_cell, per, data)
            print(f"  {label:<10} p in [{lo}, {hi}]: {at * per:>3} runs ({at / len(cells):.0%} of "
                  f"the grid's), {wall:6.1f} s of runs")


if __name__ == "__main__":
    main()
