"""The recall baseline file: accuracies a project commits, and the check against them.

Schema ``recallbench.baseline/1``::

    {"schema": "recallbench.baseline/1",
     "tests": {KEY: {"accuracy", "correct", "total", "state_size", "config_hash", "config",
                     "budgets": {"0.25": {"accuracy", "correct", "total", "max_steps"}}}}}

KEY is the test's node id (``#2``, ``#3``, ... for its later ``recall()`` calls); config
and config_hash are the test's config at the full budget (``--recall-budget 1``) less its
execution-only keys, so one entry serves every budget; accuracy, correct and total are
the full budget's, and ``budgets`` holds those measured under a reduced
``--recall-budget`` (which scales ``train.max_steps``), keyed by the budget (``f"{b:g}"``).
A measurement is compared with the stored numbers of its own budget: it regresses when its
accuracy falls more than the tolerance below them; numbers missing for its budget fail
with the command that records them; an entry recorded with another config is a failure
that names the changed keys.  Files are written as
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
    tests = {key: _revive(entry) for key, entry in data["tests"].items()}
    for key, entry in tests.items():
        _check_entry(path, key, entry)
    return tests


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_numbers(path: Path, key: str, numbers, where: str) -> None:
    """``numbers`` (the entry, or one budget's: ``where``) a mapping of numbers."""
    at = f"{where}." if where else ""
    if not isinstance(numbers, dict):
        _bad_entry(path, key, where, numbers, "a mapping of accuracy, correct and total")
    for field in ("accuracy", "correct", "total", "state_size", "max_steps"):
        value = numbers.get(field)
        if value is not None and not _is_number(value):
            _bad_entry(path, key, f"{at}{field}", value, "a number (or null)")


def _check_entry(path: Path, key: str, entry) -> None:
    """pytest.UsageError naming the file, the entry and the field, for an entry of the
    wrong type (instead of a raw error when it is compared)."""
    _check_numbers(path, key, entry, "")
    for field, kind, what in (("config_hash", str, "a string"), ("config", dict, "a mapping"),
                              ("budgets", dict, "a mapping of budgets to numbers")):
        if entry.get(field) is not None and not isinstance(entry[field], kind):
            _bad_entry(path, key, field, entry[field], what)
    for budget, numbers in (entry.get("budgets") or {}).items():
        _check_numbers(path, key, numbers, f"budgets.{budget}")


def _bad_entry(path: Path, key: str, field: str, value, allowed: str):
    from recallbench.api.fields import short

    name = f"{field} = {short(value, 60)}" if field else f"{short(value, 60)}"
    raise pytest.UsageError(f"--recall-baseline {path}: entry {short(key, 200)}: {name} is "
                            f"not allowed: expected {allowed}; fix the entry or regenerate it "
                            f"with --recall-regen")


def budget_key(budget: float) -> str:
    return f"{budget:g}"


def identity(cfg) -> dict:
    """A test's config identity: its resolved config at the full budget (before
    ``--recall-budget`` scales max_steps), less the execution-only keys."""
    return {"config_hash": cfg.hash(), "config": strip_execution(cfg.to_dict())}


def entry(record: dict, ident: dict, budget: float, stored: dict | None) -> dict:
    """What a baseline stores of a run at ``budget``: the stored entry's numbers of other
    budgets are kept while the config identity is the same."""
    same = stored is not None and stored.get("config_hash") == ident["config_hash"]
    out = {**(stored if same else {}), **ident, "state_size": record["state_size"]}
    numbers = {k: record[k] for k in ("accuracy", "correct", "total")}
    if budget == 1.0:
        out.update(numbers)
    else:
        budgets = dict(out.get("budgets") or {})
        budgets[budget_key(budget)] = {**numbers,
                                       "max_steps": record["config"]["train"]["max_steps"]}
        out["budgets"] = budgets
    return out


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _changed(stored: dict, ident: dict) -> str:
    """The config keys that differ between a stored entry and a run's identity, as one line."""
    now = _flat({s: v for s, v in ident["config"].items()})
    then = _flat(stored.get("config") or {})
    changed = [f"{k}: {then.get(k, '-')!r} -> {now.get(k, '-')!r}"
               for k in sorted(set(now) | set(then))
               if k in then and then.get(k) != now.get(k)]
    return "; ".join(changed) or "hash " + str(stored.get("config_hash"))[:12]


def _numbers(stored: dict | None, budget: float) -> dict | None:
    """The stored accuracy, correct and total of ``budget``; None if there are none."""
    if stored is None:
        return None
    numbers = stored if budget == 1.0 else (stored.get("budgets") or {}).get(budget_key(budget))
    return numbers if isinstance(numbers, dict) and "accuracy" in numbers else None


def compare(stored: dict | None, key: str, record: dict, ident: dict, tol: float, *,
            path: str, regen_hint: str, budget: float, problems: list) -> dict:
    """The baseline status of a run at ``budget`` (ok, improved, REGRESSED, missing,
    config changed), against the entry of its config identity ``ident``; a failure
    message is appended to ``problems`` where the test must fail."""
    if stored is not None and stored.get("config_hash") != ident["config_hash"]:
        what = _changed(stored, ident)
        problems.append(f"the recall baseline for {key} in {path} was recorded with another "
                        f"config ({what}); if the change is intended, update it with "
                        f"`{regen_hint}`")
        return {"status": "config changed", "accuracy": stored.get("accuracy"), "tolerance": tol}
    numbers = _numbers(stored, budget)
    if numbers is None:
        at = "" if budget == 1.0 else f" at --recall-budget {budget:g}"
        problems.append(f"no recall baseline for {key}{at} in {path}; measured accuracy "
                        f"{record['accuracy']:.4f}. Create it with `{regen_hint}` and "
                        f"commit the file")
        return {"status": "missing", "accuracy": None, "tolerance": tol}
    stored = numbers
    out = {"status": "ok", "accuracy": stored.get("accuracy"), "tolerance": tol}
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
