"""Running a suite into a result store, and re-running sampled points of a submission.

:func:`run_suite` trains every missing point of a suite's grid for one adapter and
appends the records to a store (what `recallbench submit` then reads);
:func:`verify` re-runs K points of a submission, chosen by :func:`sample_points` from a
seed the verifier picks (its own randomness, or ``--seed`` to repeat a verification),
never from anything in the submission, and compares the accuracies with the suite's
tolerance.
"""
from __future__ import annotations

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


def run_suite(suite: Suite, adapter: str, store: str | Path, *, model_extra: Mapping | None = None,
              limit: int | None = None, log: Callable[[str], None] = print,
              runner: Callable | None = None) -> dict[str, int]:
    """Run every point of ``suite`` for ``adapter`` not yet in ``store`` (ok runs skipped).

    Records are appended to ``STORE/results.jsonl`` as each run finishes; a run that
    raises is stored as a failed record (and retried next time).
    """
    from recallbench.api.config import resolve
    from recallbench.api.errors import UnavailableError
    from recallbench.api.registry import ADAPTERS
    from recallbench.runs.driver import Job, drive
    from recallbench.runs.executors import InProcess

    ADAPTERS.require(adapter, where=f"suite {suite.name}")
    store = Path(store)
    need(store.is_dir() or not (store.exists() or store.is_symlink()), f"--store {store}",
         "exists and is not a directory")
    done = read_store(store).hashes("ok") if store.exists() else set()
    todo = []
    for p in suite.points():
        cfg = resolve(suite.point_config(adapter, p, model_extra))
        if cfg.hash() not in done:
            todo.append(Job(cfg, tag=p))
    counts = {"points": len(suite.points()), "skipped": len(suite.points()) - len(todo), "ran": 0,
              "failed": 0}
    if limit is not None:
        todo = todo[:limit]
    log(f"suite {suite.name}, adapter {adapter}: {counts['points']} points, "
        f"{counts['skipped']} already in {store}, {len(todo)} to run")
    if not todo:
        return counts
    def show(job, record, tally) -> None:
        p = job.tag
        if record.get("status") == "ok":
            msg = f"accuracy {record['accuracy']:.4f} ({record['correct']}/{record['total']})"
        else:
            msg = f"FAILED: {record.get('error')}"
        log(f"[{tally.ran}/{len(todo)}] {p['budget']} N_f={p['num_facts']} lr={p['lr']:g} "
            f"seed={p['seed']}: {msg} in {tally.lap:.1f}s")

    # a run that crashes is data (a failed record); a user error or a missing dependency stops
    executor = InProcess(runner=runner, reraise=(ConfigError, UnavailableError))
    with Store(store) as out:
        tally = drive([[job] for job in todo], executor, out, show)
    counts.update(ran=tally.ok, failed=tally.failed)
    return counts


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
