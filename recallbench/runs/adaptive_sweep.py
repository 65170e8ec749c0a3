"""``recallbench sweep SWEEP.yaml --store DIR --adaptive``: a theory-guided search over a
sweep's D × N cells, through the result store.

The sweep's points are the candidates: they must differ only in ``model.d_model``,
``model.d_state`` and ``train.seed`` (one task, one adapter, ...).  A cell's result is the
best of its seeds (the paper's convention, which discards runs whose optimisation failed);
``--ensemble K`` trains a cell's seeds as one batched model.  :func:`recallbench.runs.adaptive.
adaptive_search` picks each round's cells; every run goes through the store exactly as a
plain sweep's points do (appended and flushed as it finishes, keyed by its config hash),
and a cell the store already holds as ok is served from it instead of run.  The search
is deterministic, so a rerun after a crash replays the same choices from the store and
carries on where it stopped.  A summary (the fit and each round) is written to
``DIR/adaptive.json`` when the search ends.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable

from recallbench.api.canonical import plain
from recallbench.api.errors import ConfigError
from recallbench.law.scorer import best_run
from recallbench.runs.driver import Tally, drive

SEARCH_AXES = ("model.d_model", "model.d_state")
SEED_AXIS = "train.seed"


def candidates(points: list) -> tuple[dict, dict[tuple[int, int], list]]:
    """The base config and {(D, N): [the cell's points, one per seed]} of a sweep's points;
    ConfigError when they differ in anything but D, N and the seed."""
    if not points:
        raise ConfigError("--adaptive: the sweep has no points to search")
    varying = sorted({k for p in points for k, v in p.axes.items()
                      if k not in SEARCH_AXES + (SEED_AXIS,) and v != points[0].axes.get(k)})
    if varying:
        raise ConfigError(f"--adaptive searches {' × '.join(SEARCH_AXES)} (best of "
                          f"{SEED_AXIS}) only; axis {varying[0]} takes several values: run one "
                          f"sweep per value")
    cells: dict[tuple[int, int], list] = {}
    for p in points:
        m = p.config["model"]
        cells.setdefault((int(m["d_model"]), int(m["d_state"])), []).append(p)
    if len({(d, n) for d, n in cells if n <= d}) < 2:
        raise ConfigError("--adaptive needs at least 2 cells with model.d_state <= "
                          "model.d_model among the sweep's points")
    return points[0].config, cells


def best_of_seeds(records: list[dict]) -> dict:
    """The best ok record by the scorer's rule (:func:`recallbench.law.scorer.best_run`); the
    first record when none is ok."""
    ok = [r for r in records if r.get("status") == "ok"]
    return best_run(ok) if ok else records[0]


def run_adaptive(points: list, store, executor, *, tol: float = 0.10, max_runs: int = 40,
                 batch: int | None = None, stop: str = "either",
                 echo: Callable[[str], None] = print, header: str = "") -> dict[str, Any]:
    """Run the search; returns adaptive_search's result (records: each chosen cell's best of
    seeds, fit, history, ...) plus ``counts`` (runs ran, served from the store, failed).
    ``max_runs`` counts cells."""
    from recallbench.runs.adaptive import adaptive_search

    base, cells = candidates(points)
    batch = batch or max(2, executor.parallel)
    stored = store.read().by_hash
    seeds = max(len(ps) for ps in cells.values())
    served = sum(1 for ps in cells.values() for p in ps
                 if stored.get(p.hash, {}).get("status") == "ok")
    echo(f"{header}adaptive search over {len(cells)} cells (D x N"
         + (f", best of {seeds} seeds" if seeds > 1 else "") + f"), tol ±{tol:.0%}, stop "
         f"{stop}, at most {max_runs} cells, {batch} per round; store {store.path}: "
         f"{served} of these runs done [{executor.name}"
         + (f" x{executor.parallel}" if executor.parallel > 1 else "") + "]")
    counts = {"ran": 0, "served": 0, "failed": 0}
    tally = Tally()

    def show(p, rec: dict, tally: Tally) -> None:
        stored[p.hash] = rec
        what = (f"accuracy {rec.get('accuracy', math.nan):.4f}" if rec.get("status") == "ok"
                else f"FAILED: {rec.get('error')}")
        echo(f"  ran {p.label()}: {what} ({tally.elapsed:.0f} s)")

    def run_batch(configs: list[dict]) -> list[dict]:
        chosen = [cells[(int(c["model"]["d_model"]), int(c["model"]["d_state"]))] for c in configs]
        items = []  # per cell, its seeds not in the store: one item (an ensemble if enabled)
        for ps in chosen:
            todo = [p for p in ps if stored.get(p.hash, {}).get("status") != "ok"]
            counts["served"] += len(ps) - len(todo)
            if todo:
                items.append(todo)
        drive(items, executor, store, show, tally)
        counts.update(ran=tally.ran, failed=tally.failed)
        return [best_of_seeds([stored[p.hash] for p in ps]) for ps in chosen]

    def on_round(h: dict) -> None:
        hw = h["half_width"]
        fit = (f"a = {h['a']:.3f} [{h['a_ci'][0]:.3f}, {h['a_ci'][1]:.3f}] (±{hw:.0%})"
               if math.isfinite(hw) else "a not bounded yet")
        cells_s = " ".join(f"{d}x{n}" for d, n in h["cells"])
        echo(f"round {h['round']}: {cells_s} -> {h['runs']} runs, {fit}")

    out = adaptive_search(base, list(cells), tol=tol, max_runs=max_runs, batch=batch,
                          stop=stop, on_round=on_round, run_batch=run_batch)
    path = _write_summary(out, counts, stop, Path(store.path) / "adaptive.json")
    hw = out["half_width"]
    echo(f"adaptive search stopped ({out['stopped']}) after {out['runs']} of {len(cells)} cells "
         f"({counts['ran']} run now, {counts['served']} from the store, {counts['failed']} "
         f"failed): a = {out['a']:.3f} [{out['a_ci'][0]:.3f}, {out['a_ci'][1]:.3f}]"
         + (f" (±{hw:.0%})" if math.isfinite(hw) else "") + f", b = {out['b']:.3f}; "
         f"summary in {path}")
    out["counts"] = counts
    return out


def _write_summary(out: dict, counts: dict, stop: str, path: Path) -> Path:
    """DIR/adaptive.json: the fit, each round and the run counts (standard JSON, written
    whole or not at all)."""
    summary = {k: out[k] for k in ("runs", "a", "a_ci", "b", "b_ci", "half_width", "converged",
                                   "stopped", "fit", "prior", "history", "tol", "candidates")}
    summary.update(stop=stop, ran=counts["ran"], served=counts["served"],
                   failed=counts["failed"], cells=[list(c) for c in out["cells"]])
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(plain(summary), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path
