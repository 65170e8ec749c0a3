"""``recallbench sweep SWEEP.yaml --store DIR``: run every point of a (shard of a) sweep that
the store does not hold yet, through :func:`recallbench.runs.driver.drive`.

Output: one header line (points done before, failed before, to run, the executor, the
time budget), one line per finished point (``[done/total] ok acc … | failed … | ETA …``)
and a summary.  With a time budget an item starts on each free worker while the time left
holds the longest one has taken so far, and none after (:mod:`recallbench.runs.budget`); the store keeps
every finished point, so the same command resumes.
"""
from __future__ import annotations

import sys
from typing import Callable

from recallbench.api.errors import UnavailableError
from recallbench.runs.budget import Gate
from recallbench.runs.driver import Tally, drive


def load_ensemble():
    """The ensemble module (run_ensemble, shape_key); UnavailableError if it is missing."""
    import importlib

    try:
        mod = importlib.import_module("recallbench.harness.ensemble")
    except ModuleNotFoundError as exc:
        if exc.name not in ("recallbench.harness.ensemble",):
            raise UnavailableError(f"--ensemble: recallbench.harness.ensemble cannot load: {exc}") from None
        raise UnavailableError("--ensemble needs recallbench.harness.ensemble (run_ensemble, shape_key), "
                               "which this installation does not have") from None
    for attr in ("run_ensemble", "shape_key"):
        if not callable(getattr(mod, attr, None)):
            raise UnavailableError(f"--ensemble: recallbench.harness.ensemble has no {attr}()")
    return mod


def batch_points(points: list, size: int | None, shape_key: Callable | None = None) -> list[list]:
    """Work items: one point each, or up to ``size`` points of equal shape_key per item."""
    if not size or shape_key is None:
        return [[p] for p in points]
    groups: dict[str, list] = {}
    for p in points:
        groups.setdefault(str(shape_key(p.cfg)), []).append(p)
    return [members[i:i + size] for members in groups.values()
            for i in range(0, len(members), size)]


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _plan(points: list, store, retry_failed: bool) -> dict:
    """What the store already holds of ``points`` and what is left to run."""
    contents = store.read()
    ok_before, failed_before = contents.hashes("ok"), contents.hashes("failed")
    done_before = [p for p in points if p.hash in ok_before]
    pending = [p for p in points if p.hash not in ok_before
               and (retry_failed or p.hash not in failed_before)]
    return {"done_before": len(done_before), "failed_before": len(failed_before),
            "kept_failed": len(points) - len(done_before) - len(pending),
            "retrying": sum(1 for p in pending if p.hash in failed_before), "pending": pending}


def _header(plan: dict, store, executor, limit, ensemble, n_items: int, n_pending: int) -> str:
    notes = [f"{plan['done_before']} done"]
    if plan["retrying"]:
        notes.append(f"{plan['retrying']} failed before (retrying)")
    if plan["kept_failed"]:
        notes.append(f"{plan['kept_failed']} failed before (kept, --no-retry-failed)")
    return (f"store {store.path}: {', '.join(notes)}; {n_pending} to run"
            + (f" (--limit {limit})" if limit is not None else "")
            + f" [{executor.name}" + (f" x{executor.parallel}" if executor.parallel > 1 else "")
            + (f", ensembles of <= {ensemble}: {n_items} batches" if ensemble else "") + "]")


def _progress(total: int, done_before: int, to_run: int, echo: Callable[[str], None]):
    """on_record for :func:`drive`: one line per finished point."""
    width = len(str(total))

    def show(point, record: dict, tally: Tally) -> None:
        if record.get("config_hash") != point.hash:
            echo(f"warning: record for {point.label()} has config_hash "
                 f"{str(record.get('config_hash'))[:12]}, expected {point.hash[:12]}")
        left = to_run - tally.ran
        eta = _clock(tally.elapsed / tally.ran * left) if left else "0:00:00"
        if record.get("status") == "ok":
            acc = record.get("accuracy")
            what = (f"ok     acc {acc:.4f} " if isinstance(acc, (int, float)) else "ok     ") \
                + f"{record.get('wall_s', 0) or 0:6.1f}s"
        else:
            what = f"FAILED {record.get('error')}"
        echo(f"[{done_before + tally.ran:>{width}}/{total}] {what}  {point.label()}  "
             f"| failed {tally.failed} | ETA {eta}")
    return show


def run_sweep(points: list, store, executor, *, retry_failed: bool = True, limit: int | None = None,
              ensemble: int | None = None, echo: Callable[[str], None] = print,
              header: str | None = None, time_budget: float | None = None,
              clock: Callable[[], float] | None = None) -> dict[str, int]:
    """Run the points of a (shard of a) sweep that the store does not have yet.

    ``time_budget`` (seconds): a work item starts on each free worker while the time left
    holds the longest one has taken so far (:class:`recallbench.runs.budget.Gate`).  Returns counts:
    total, done_before, failed_before, to_run, ran, ok, failed, left (points still to run
    ok: not started, failed now, or past --limit) and unstarted (those the budget left).
    """
    plan = _plan(points, store, retry_failed)
    pending = plan["pending"] if limit is None else plan["pending"][:limit]
    shape_key = load_ensemble().shape_key if ensemble else None
    items = batch_points(pending, ensemble, shape_key)
    total = len(points)
    echo((f"{total} points; " if header is None else header)
         + _header(plan, store, executor, limit, ensemble, len(items), len(pending))
         + (f", time budget {time_budget:g} s" if time_budget is not None else ""))
    counts = {"total": total, "done_before": plan["done_before"],
              "failed_before": plan["failed_before"], "to_run": len(pending),
              "ran": 0, "ok": 0, "failed": 0, "left": len(plan["pending"]), "unstarted": 0}
    if not pending:
        return counts
    show = _progress(total, plan["done_before"] + plan["kept_failed"], len(pending), echo)
    tally = Tally()
    try:
        gate = None if time_budget is None else Gate(time_budget, clock=clock)
        drive(items, executor, store, show, tally, gate=gate)
    finally:
        executor.close()
    counts.update(ran=tally.ran, ok=tally.ok, failed=tally.failed,
                  left=len(plan["pending"]) - tally.ok, unstarted=len(pending) - tally.ran)
    echo(f"finished {tally.ran} points in {_clock(tally.elapsed)}: "
         f"{tally.ok} ok, {tally.failed} failed"
         + (" (failed points are retried on the next run)" if tally.failed else ""))
    sys.stdout.flush()
    return counts
