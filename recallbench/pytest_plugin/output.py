"""What a recall session writes at its end (serial run or pytest-xdist controller).

* the regenerated baseline (``--recall-regen``): the stored entries (re-read under a
  lock on ``<file>.lock``, so concurrent sessions keep each other's), the measured ones
  replacing the numbers of this ``--recall-budget`` (the other budgets' are kept while
  the config is the same; :mod:`~recallbench.pytest_plugin.baseline`);
* the JSON report (``--recall-report``, schema ``recallbench.pytest-report/1``): every
  measurement in collection order, with its record, S_eff, baseline status and
  ``source`` (``trained``, ``session``: measured earlier in the session, ``cache``: read
  from ``--recall-cache``);
* the summary table as Markdown, appended to ``$GITHUB_STEP_SUMMARY`` when it is set.

JSON is written sorted, to a temporary file moved into place, so a serial and a parallel
run of the same tests write the same bytes apart from timings.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from recallbench.api.canonical import plain
from recallbench.pytest_plugin import baseline
from recallbench.pytest_plugin.cache import CACHE, TRAINED
from recallbench.pytest_plugin.summary import markdown_summary
from recallbench.pytest_plugin.workers import counts

REPORT_SCHEMA = "recallbench.pytest-report/1"
STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


def write_all(session) -> bool:
    """Write the baseline, the report and the step summary a session asks for; False if
    the baseline or the report could not be written (the reason is in
    ``session.unwritten``, for the summary)."""
    ok = True
    measured = [m for m in session.measurements
                if (m.get("baseline") or {}).get("status") == "regenerated"]
    if measured:
        ok &= _regenerate(session, measured)
    if session.report_path is not None:
        ok &= _write(session, session.report_path, report(session))
    step_summary = os.environ.get(STEP_SUMMARY)
    if step_summary and session.measurements:
        try:
            with open(step_summary, "a", encoding="utf-8") as f:
                f.write(markdown_summary(session))
        except OSError as exc:
            session.unwritten.append(f"${STEP_SUMMARY} ({exc.strerror or exc})")
    return ok


def _regenerate(session, measured: list[dict]) -> bool:
    """Merge the measured entries into the baseline file under a lock (``flock`` on
    ``<file>.lock`` beside it), re-reading the file inside it: two sessions regenerating
    different tests into one file keep the entries of both."""
    import pytest

    path = session.baseline_path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        session.unwritten.append(f"{path} ({exc.strerror or exc})")
        return False
    try:
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)
        except ImportError:  # not POSIX: no lock; concurrent regenerations are the user's
            pass
        try:
            stored = baseline.load(path) if path.exists() else {}
        except pytest.UsageError as exc:  # changed since the session began
            session.unwritten.append(f"{path} ({exc})")
            return False
        tests = {**stored, **{m["key"]: baseline.entry(m["record"], m["identity"],
                                                      session.budget, stored.get(m["key"]))
                              for m in measured}}
        return _write(session, path, {"schema": baseline.BASELINE_SCHEMA, "tests": tests})
    finally:
        os.close(lock)  # releases the lock


def _write(session, path: Path, data: dict) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(plain(data), indent=2, sort_keys=True, allow_nan=False)
                       + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        session.unwritten.append(f"{path} ({exc.strerror or exc})")
        return False
    session.written.append(str(path))
    return True


def report(session) -> dict:
    tests = []
    for m in session.measurements:
        rec = m.get("record") or {}
        tests.append({
            "key": m["key"], "nodeid": m["nodeid"],
            "outcome": session.outcomes.get(m["nodeid"]),
            "error": m.get("error"), "problems": m["problems"],
            "cached": m.get("source") not in (TRAINED, None), "source": m.get("source"),
            "accuracy": rec.get("accuracy"), "correct": rec.get("correct"),
            "total": rec.get("total"), "state_size": rec.get("state_size"),
            "effective_state": m.get("effective_state"),
            "effective_state_ci": m.get("effective_state_ci"),
            "effective_state_error": m.get("effective_state_error"),
            "min_accuracy": m.get("min_accuracy"), "baseline": m.get("baseline"),
            "config_hash": rec.get("config_hash"), "record": m.get("record"),
        })
    n = counts(session.measurements)
    return {"schema": REPORT_SCHEMA,
            "options": {"budget": session.budget, "device": session.device,
                        "tolerance": session.tolerance, "regen": session.regen,
                        "baseline": str(session.baseline_path) if session.baseline_path
                        else None, "cache": session.cache_arg},
            "training_runs": n[TRAINED], "from_cache": n[CACHE],
            "measurements": len(session.measurements), "tests": tests}
