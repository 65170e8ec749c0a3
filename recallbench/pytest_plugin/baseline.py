"""The recall baseline file: accuracies a project commits, and the check against them.

Schema ``recallbench.baseline/1``::

    {"schema": "recallbench.baseline/1",
     "tests": {KEY: {"accuracy", "correct", "total", "state_size", "config_hash", "config"}}}

KEY is the test's node id (``#2``, ``#3``, ... for its later ``recall()`` calls); config
is the run's config less its execution-only keys.  A measurement regresses when its
accuracy falls more than the tolerance below the stored one; a stored entry recorded
with another config is a failure that names the changed keys.  Files are written as
plain JSON (a non-finite number as null); older files wrote them as the strings "inf",
"-inf", "nan", which are read back as numbers.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from recallbench.api.canonical import strip_execution

BASELINE_SCHEMA = "recallbench.baseline/1"
NUMBERS = ("accuracy", "correct", "total", "state_size")
_NON_FINITE = ("inf", "-inf", "nan")  # how older files wrote non-finite numbers


def _revive(entry):
    """An entry of an older file with its "inf"-style strings back as floats."""
    if not isinstance(entry, dict):
        return entry
    return {k: float(v) if k in NUMBERS and v in _NON_FINITE else v for k, v in entry.items()}


def load(path: Path) -> dict:
    """The ``tests`` of a baseline file; pytest.UsageError if it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--recall-baseline {path}: cannot read it as JSON "
                                f"({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != BASELINE_SCHEMA \
            or not isinstance(data.get("tests"), dict):
        raise pytest.UsageError(f"--recall-baseline {path}: not a recallbench baseline "
                                f"(schema {BASELINE_SCHEMA}); regenerate it with "
                                f"--recall-regen")
    return {key: _revive(entry) for key, entry in data["tests"].items()}


def entry(record: dict) -> dict:
    """What a baseline stores of a run."""
    return {"accuracy": record["accuracy"], "correct": record["correct"],
            "total": record["total"], "state_size": record["state_size"],
            "config_hash": record["config_hash"], "config": strip_execution(record["config"])}


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _changed(stored: dict, record: dict) -> str:
    """The config keys that differ between a stored entry and a run, as one line."""
    now = _flat({s: v for s, v in record["config"].items()})
    then = _flat(stored.get("config") or {})
    changed = [f"{k}: {then.get(k, '-')!r} -> {now.get(k, '-')!r}"
               for k in sorted(set(now) | set(then))
               if k in then and then.get(k) != now.get(k)]
    return "; ".join(changed) or "hash " + str(stored.get("config_hash"))[:12]


def compare(stored: dict | None, key: str, record: dict, tol: float, *, path: str,
            regen_hint: str, budget: float, problems: list) -> dict:
    """The baseline status of a run (ok, improved, REGRESSED, missing, config changed);
    a failure message is appended to ``problems`` where the test must fail."""
    if stored is None:
        problems.append(f"no recall baseline for {key} in {path}; measured accuracy "
                        f"{record['accuracy']:.4f}. Create it with `{regen_hint}` and "
                        f"commit the file")
        return {"status": "missing", "accuracy": None, "tolerance": tol}
    out = {"status": "ok", "accuracy": stored.get("accuracy"), "tolerance": tol}
    if stored.get("config_hash") != record["config_hash"]:
        what = _changed(stored, record)
        if budget != 1.0:
            what += f"; note --recall-budget {budget:g} scales train.max_steps"
        problems.append(f"the recall baseline for {key} in {path} was recorded with another "
                        f"config ({what}); if the change is intended, update it with "
                        f"`{regen_hint}`")
        out["status"] = "config changed"
        return out
    before = float(stored["accuracy"])
    measured = float(record["accuracy"])
    if measured < before - tol:
        problems.append(
            f"recall regression in {key}\n"
            f"  stored   accuracy {before:.4f} ({stored.get('correct')}/{stored.get('total')})"
            f"  [{path}]\n"
            f"  measured accuracy {measured:.4f} ({record['correct']}/{record['total']})\n"
            f"  drop {before - measured:.4f} > tolerance {tol:g}\n"
            f"  if the change is intended, update the baseline: {regen_hint}")
        out["status"] = "REGRESSED"
    elif measured > before + tol:
        out["status"] = "improved"
    return out
