"""Runs needed to fit the law's a: theory-guided adaptive search vs the full D×N grid.

    python benchmarks/bench_adaptive.py                       # linear-mamba, coarse grid
    python benchmarks/bench_adaptive.py --adapter designed    # fixed weights: seconds
    python benchmarks/bench_adaptive.py --full-grid grid.jsonl   # cache the full grid

The full grid (every candidate cell with N ≤ D, one run each) gives the reference a
(``fit.fit_collapse`` on all its records).  The adaptive search
(``recallbench.adaptive.adaptive_search``) then places runs near the predicted phase
boundary until the 95% CI half-width of a is ≤ ``--tol``·a.  Printed: runs, wall time,
a and its CI for both, the adaptive a's distance to the full-grid a, and the fraction of
the grid's runs the search used, for each ``--p-range``.

``--full-grid FILE``: full-grid records are read from FILE (JSONL, one record per line)
when it exists, else run and written there.  Runs are deterministic for a seed, so by
default the adaptive search is served from those records (the same config gives the same
record) and its wall time is the sum of the served runs' ``wall_s`` plus the search's own
time; ``--fresh`` runs its cells again instead.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from recallbench.adaptive import adaptive_search, cell_config, fit_records
from recallbench.train import run

GRIDS = {
    "coarse": ([2, 4, 6, 8, 12, 16, 24, 32, 48, 64], [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]),
    "dense": ([2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64],
              [1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32]),
}


def base_config(args) -> dict:
    train = {"max_steps": args.steps, "batch_size": 64, "lr": 1e-2, "early_stop": 0.99,
             "val_size": 256, "test_size": args.test_size, "seed": 0, "progress": False}
    return {"task": {"name": "mqar", "vocab_size": args.vocab, "seq_len": args.seq_len,
                     "num_facts": args.facts},
            "model": {"adapter": args.adapter}, "train": train}


def cell_of(rec: dict) -> tuple[int, int]:
    m = rec["config"]["model"]
    return int(m["d_model"]), int(m["d_state"])


def full_grid(base: dict, cells, path: Path | None) -> tuple[list[dict], bool]:
    if path is not None and path.exists():
        recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        have = {cell_of(r): r for r in recs if r["config"]["task"] == run_task(base)
                and r["config"]["model"]["adapter"] == base["model"]["adapter"]}
        if all(c in have for c in cells):
            return [have[c] for c in cells], True
        print(f"  {path}: does not hold every cell of this grid and task; running the grid")
    recs = []
    for i, (d, n) in enumerate(cells):
        recs.append(run(cell_config(base, d, n)))
        if sys.stdout.isatty():
            print(f"\r  full grid: {i + 1}/{len(cells)} runs", end="", flush=True)
    if sys.stdout.isatty():
        print()
    if path is not None:
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return recs, False


def run_task(base: dict) -> dict:
    from recallbench.config import resolve

    cfg = resolve(base)
    return {"name": cfg.task_name, **cfg.task.params()}


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
    ap.add_argument("--tol", type=float, default=0.10)
    ap.add_argument("--max-runs", type=int, default=40)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--p-range", type=float, nargs=2, action="append", default=None,
                    help="informative range of predicted recall (repeatable); default 0.2 0.8 "
                         "and 0.05 0.95")
    ap.add_argument("--full-grid", type=Path, default=None, help="JSONL cache of the full grid")
    ap.add_argument("--fresh", action="store_true", help="rerun the adaptive cells too")
    args = ap.parse_args()
    grid = args.grid or ("dense" if args.adapter == "designed" else "coarse")
    ds, ns = GRIDS[grid]
    cells = [(d, n) for d in ds for n in ns if n <= d]
    base = base_config(args)
    kind = "designed" if args.adapter == "designed" else "linear"
    print(f"MQAR V={args.vocab} L={args.seq_len} N_f={args.facts}, {args.adapter}, {grid} grid "
          f"of {len(cells)} cells (N <= D), test {args.test_size} sequences"
          + (f", max_steps {args.steps}, early stop 0.99" if kind == "linear" else ""))

    t0 = time.perf_counter()
    recs, cached = full_grid(base, cells, args.full_grid)
    grid_wall = sum(r.get("wall_s", 0.0) for r in recs)
    full = fit_records(recs, model_kind=kind)
    src = f"read from {args.full_grid}" if cached else f"run now ({time.perf_counter() - t0:.0f} s)"
    print(f"full grid: {len(recs)} runs ({src}), {grid_wall:.1f} s of runs: "
          f"a = {full.a:.3f} [{full.a_ci[0]:.3f}, {full.a_ci[1]:.3f}], b = {full.b:.3f}, "
          f"dispersion {full.dispersion:.1f}")

    by_cell = {cell_of(r): r for r in recs}
    for lo, hi in args.p_range or [(0.2, 0.8), (0.05, 0.95)]:
        served = []

        def runner(cfg):
            d, n = cfg["model"]["d_model"], cfg["model"]["d_state"]
            rec = run(cfg) if args.fresh else by_cell[(d, n)]
            served.append(rec)
            return rec

        t = time.perf_counter()
        out = adaptive_search(base, cells, runner=runner, tol=args.tol, max_runs=args.max_runs,
                              batch=args.batch, p_range=(lo, hi))
        own = time.perf_counter() - t
        wall = own if args.fresh else own + sum(r.get("wall_s", 0.0) for r in served)
        dist = abs(out["a"] - full.a) / full.a
        print(f"adaptive, p in [{lo}, {hi}]: {out['runs']} runs ({out['runs'] / len(cells):.0%} "
              f"of the grid), {wall:.1f} s ({'run now' if args.fresh else 'runs served from the full grid'}), "
              f"stopped: {out['stopped']}; a = {out['a']:.3f} [{out['a_ci'][0]:.3f}, "
              f"{out['a_ci'][1]:.3f}] (half-width {out['half_width']:.1%}), "
              f"{dist:.1%} from the full grid's a"
              + (" (within tol)" if dist <= args.tol else " (outside tol)"))
        for h in out["history"]:
            cells_s = " ".join(f"{d}x{n}" for d, n in h["cells"])
            hw = h["half_width"]
            print(f"    round {h['round']}: {cells_s}  ->  a = {h['a']:.3f}, half-width "
                  f"{hw:.1%}" if math.isfinite(hw) else
                  f"    round {h['round']}: {cells_s}  ->  a unbounded yet")


if __name__ == "__main__":
    main()
