"""Running a suite into a result store, and re-running sampled points of a submission.

:func:`run_suite` trains every missing point of a suite's grid for one adapter and
appends the records to a store (what `recallbench submit` then reads), through
:func:`recallbench.runs.driver.drive` and the executor :func:`suite_executor` makes (in
this process, or worker processes; resumable: points already in the store are skipped;
with a time budget it stops cleanly between rounds and the same command continues);
:func:`verify` re-runs K points of a submission, chosen by :func:`sample_points` from a
seed the verifier picks (its own randomness, or ``--seed`` to repeat a verification),
never from anything in the submission, and compares the accuracies with the suite's
tolerance.
"""
from __future__ import annotations

import os
import random
import secrets
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping

from recallbench.api.errors import ConfigError
from recallbench.leaderboard.checks import need
from recallbench.leaderboard.points import merge_config
from recallbench.leaderboard.suite import Suite
from recallbench.runs.store import Store, read_store


def load_store_records(paths: Iterable[str | Path]) -> list[dict]:
    """Records of stores (all their files) and of .jsonl/.json files (scorer.load_records);
    an unreadable input (binary, not UTF-8, nested too deep) is one line naming the inputs."""
    from recallbench.law.scorer import load_records

    paths = list(paths)
    try:
        return load_records(paths)
    except ConfigError:
        raise
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        names = ", ".join(str(p) for p in paths)[:200]
        raise ConfigError(f"--store {names}: unreadable ({type(exc).__name__}: "
                          f"{str(exc)[:100]})") from None


#: processes sharing one GPU may outnumber the CPUs (a small model's worker mostly waits
#: on its kernels), up to this many per CPU and :data:`MAX_GPU_WORKERS` in all
GPU_WORKERS_PER_CPU = 4
MAX_GPU_WORKERS = 32


def suite_executor(suite: Suite, kind: str = "inprocess", workers: int | None = None, *,
                   runner: Callable | None = None, notify: Callable[[str], None] | None = None,
                   point_timeout: float | None = None):
    """The executor of a suite's runs: ``inprocess`` (one point after another here; a user
    error or a missing dependency stops the run instead of failing every point), or
    ``processes`` (``workers`` local processes, the suite's ``threads`` each).  On a CPU
    suite the workers are bounded by the CPUs (:func:`recallbench.runs.executors.make_executor`);
    on a ``cuda`` suite they share the GPU and may number up to :data:`GPU_WORKERS_PER_CPU`
    per CPU (at most :data:`MAX_GPU_WORKERS`).  ``point_timeout``: the processes' per-point
    watchdog (:mod:`recallbench.runs.watchdog`; default from each point's step cap)."""
    from recallbench.api.errors import UnavailableError
    from recallbench.runs.executors import InProcess, Processes, make_executor

    need(kind in ("inprocess", "processes"), "--executor", f"{kind!r} is not allowed: one of "
         "inprocess, processes")
    if kind == "inprocess":
        need(workers is None, "--workers", "is for --executor processes")
        return InProcess(runner=runner, reraise=(ConfigError, UnavailableError))
    threads = suite.data.get("threads") or 1
    if not str(suite.data.get("device") or "").startswith("cuda"):
        return make_executor("processes", workers=workers, threads=threads, notify=notify,
                             point_timeout=point_timeout)
    cpus = os.cpu_count() or 1
    most = min(GPU_WORKERS_PER_CPU * cpus, MAX_GPU_WORKERS)
    need(workers is None or 1 <= workers <= most, f"--workers {workers}",
         f"is not allowed: must be in [1, {most}] ({GPU_WORKERS_PER_CPU} per CPU, at most "
         f"{MAX_GPU_WORKERS}, for processes sharing the GPU)")
    return Processes(workers or cpus, threads, False, notify, point_timeout=point_timeout)


def _todo(suite: Suite, adapter: str, store: Path, model_extra: Mapping | None) -> list:
    """Jobs of the points whose run is not yet in ``store`` as ok, in the suite's order."""
    from recallbench.api.config import resolve
    from recallbench.runs.driver import Job

    done = read_store(store).hashes("ok") if store.exists() else set()
    todo = []
    for p in suite.points():
        cfg = resolve(suite.point_config(adapter, p, model_extra))
        if cfg.hash() not in done:
            todo.append(Job(cfg, tag=p))
    return todo


def _outcome(record: Mapping) -> str:
    """A finished point for its progress line: accuracy, the lr chosen, convergence."""
    if record.get("status") != "ok":
        return f"FAILED: {record.get('error')}"
    msg = f"accuracy {record['accuracy']:.4f} ({record['correct']}/{record['total']})"
    if record.get("lr_search"):
        msg += f", lr {record['lr']:g} chosen of {len(record['lr_search'])}"
    if record.get("stop_reason"):
        conv = "converged" if record.get("converged") else "NOT converged"
        msg += f", {conv} ({record['stop_reason']} at step {record.get('steps')})"
    return msg


def run_suite(suite: Suite, adapter: str, store: str | Path, *, model_extra: Mapping | None = None,
              limit: int | None = None, log: Callable[[str], None] = print,
              runner: Callable | None = None, executor=None, time_budget: float | None = None,
              clock: Callable[[], float] = time.monotonic) -> dict[str, int]:
    """Run every point of ``suite`` for ``adapter`` not yet in ``store`` (ok runs skipped).

    Records are appended to the store as each run finishes (so an interrupted run resumes
    where it stopped); a run that raises is stored as a failed record (and retried next
    time).  ``executor``: :func:`suite_executor`'s (default in-process, with ``runner``).
    ``time_budget`` (seconds): a point starts on each free worker while the time left holds
    the longest one has taken so far; the first always runs
    (:class:`recallbench.runs.budget.Gate`).  Counts: points, skipped (already
    in the store), ran, failed, left.
    """
    from recallbench.api.registry import ADAPTERS
    from recallbench.runs.budget import Gate
    from recallbench.runs.driver import Tally, drive

    ADAPTERS.require(adapter, where=f"suite {suite.name}")
    store = Path(store)
    need(store.is_dir() or not (store.exists() or store.is_symlink()), f"--store {store}",
         "exists and is not a directory")
    start = clock()
    todo = _todo(suite, adapter, store, model_extra)
    n = len(suite.points())
    counts = {"points": n, "skipped": n - len(todo), "ran": 0, "failed": 0, "left": len(todo)}
    if limit is not None:
        todo = todo[:limit]
    executor = executor or suite_executor(suite, runner=runner)
    log(f"suite {suite.name}, adapter {adapter}: {n} points, {counts['skipped']} already in "
        f"{store}, {len(todo)} to run [{executor.name}"
        + (f" x{executor.parallel}" if executor.parallel > 1 else "") + "]"
        + (f", time budget {time_budget:g} s" if time_budget is not None else ""))
    if not todo:
        return counts
    tally, total = Tally(), len(todo)

    def show(job, record, tally) -> None:
        from recallbench.runs.eta import remaining

        own = record.get("wall_s")  # the point's own time, not the wait since the last one
        log(f"[{tally.ran}/{total}] {suite.label(job.tag)}: {_outcome(record)} in "
            f"{own if own is not None else tally.lap:.1f}s"
            + (f"; {remaining(tally.elapsed, tally.ran, total)}" if tally.ran < total else ""))

    with Store(store) as out:
        gate = None if time_budget is None else Gate(time_budget, clock=clock, start=start)
        drive([[job] for job in todo], executor, out, show, tally, gate=gate)
    counts.update(ran=tally.ok, failed=tally.failed, left=counts["left"] - tally.ran)
    return counts


def plan(suite: Suite, adapter: str, store: str | Path, *, model_extra: Mapping | None = None,
         workers: int = 1, log: Callable[[str], None] = print) -> dict:
    """``leaderboard run --dry-run``: the points left to run and an ETA from step times
    measured here (:mod:`recallbench.runs.eta`), one measurement per budget at its longest
    L; shorter L are scaled down in proportion for the early end of the range only."""
    from recallbench.api.registry import ADAPTERS
    from recallbench.runs import eta

    ADAPTERS.require(adapter, where=f"suite {suite.name}")
    todo = _todo(suite, adapter, Path(store), model_extra)
    n = len(suite.points())
    log(f"suite {suite.name}, adapter {adapter}: {n} points, {n - len(todo)} already in "
        f"{store}, {len(todo)} to run on {workers} worker(s)")
    lo = hi = 0.0
    by_budget: dict[str, list] = {}
    for job in todo:
        by_budget.setdefault(job.tag["budget"], []).append(job)
    def length(job) -> int:
        return int(job.config["task"].get("seq_len") or 1)

    for name, jobs in by_budget.items():
        longest = max(jobs, key=length)
        step = eta.step_seconds(longest.config)
        b_lo = b_hi = 0.0
        for j in jobs:
            r_lo, r_hi = eta.run_seconds(j.config, step)
            b_lo += r_lo * length(j) / length(longest)
            b_hi += r_hi
        log(f"  {name}: {len(jobs)} point(s), {step * 1000:.1f} ms a step at L = "
            f"{length(longest)}: {eta.minutes(b_lo)} to {eta.minutes(b_hi)} of runs")
        lo, hi = lo + b_lo, hi + b_hi
    log(f"ETA: {eta.minutes(lo / workers)} to {eta.minutes(hi / workers)} on {workers} "
        "worker(s) (earliest: every run stops on its first plateau; latest: every run goes "
        "to its step cap)")
    log("(dry run: nothing was trained)")
    return {"points": n, "todo": len(todo), "eta_s": [lo / workers, hi / workers]}


MAX_SEED = 2 ** 32


def new_seed() -> int:
    """A sampling seed from the operating system's randomness (what no submitter controls)."""
    return secrets.randbelow(MAX_SEED)


def sample_points(sub: Mapping, k: int, seed: int) -> list[tuple[dict, dict]]:
    """K (budget, point) pairs drawn with ``seed`` (the same seed draws the same points)."""
    need(0 <= seed < MAX_SEED, "--seed", f"{seed} is not in [0, 2**32)")
    all_pts = [(b, p) for b in sub["budgets"] for p in b["points"]]
    idx = sorted(random.Random(seed).sample(range(len(all_pts)), min(k, len(all_pts))))
    return [all_pts[i] for i in idx]


def verify(sub: Mapping, suite: Suite, k: int, *, seed: int | None = None,
           runner: Callable | None = None, log: Callable[[str], None] = print,
           device: str | None = None) -> list[dict]:
    """Re-run K points drawn with ``seed`` (None: a fresh one, logged); one row per point."""
    if runner is None:
        from recallbench.harness.train import run as runner
    seed = new_seed() if seed is None else seed
    picked = sample_points(sub, k, seed)
    n = sum(len(b["points"]) for b in sub["budgets"])
    log(f"re-running {len(picked)} of {n} points drawn with seed {seed} "
        f"(repeat with --seed {seed})")
    rows = []
    for b, p in picked:
        cfg = merge_config(b["config"], p.get("delta") or {})
        cfg["train"] = {**cfg["train"], "progress": False}
        if suite.data.get("threads") is not None:
            cfg["train"]["threads"] = suite.data["threads"]
        if device:
            cfg["train"]["device"] = device
        t0 = time.perf_counter()
        rec = runner(cfg, progress=False)
        need(rec.get("status", "ok") == "ok", "verify", f"re-run failed: {rec.get('error')}")
        need(rec["config_hash"] == p["config_hash"], "verify",
             "the re-run's config hash differs from the submission's (another recallbench version?)")
        old = p["correct"] / p["total"]
        new = rec["correct"] / rec["total"]
        row = {"budget": b["name"], "num_facts": p["num_facts"], "lr": p["lr"], "seed": p["seed"],
               "submitted": old, "rerun": new, "diff": new - old,
               "ok": abs(new - old) <= suite.tolerance + 1e-12, "wall_s": time.perf_counter() - t0}
        log(f"{b['name']} N_f={p['num_facts']} lr={p['lr']:g} seed={p['seed']}: submitted {old:.4f}, "
            f"re-run {new:.4f}, diff {new - old:+.4f} (tolerance {suite.tolerance}) "
            f"{'ok' if row['ok'] else 'DISAGREES'}")
        rows.append(row)
    return rows
