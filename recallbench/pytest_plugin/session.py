"""One pytest session's recall measurements: the run cache, the checks, the report.

:class:`RecallSession` is registered as a pytest plugin object by ``pytest_configure``.
A measurement builds the config from the test's markers and the call
(:mod:`~recallbench.pytest_plugin.markers`), trains it once per config hash per session
(:func:`recallbench.harness.train.run`), fits S_eff, and fails the test on
``min_accuracy`` or against the baseline (:mod:`~recallbench.pytest_plugin.baseline`).
At the end it writes the regenerated baseline and the JSON report
(``recallbench.pytest-report/1``) and prints the summary
(:mod:`~recallbench.pytest_plugin.summary`).
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

from recallbench.api.canonical import plain
from recallbench.api.errors import ConfigError, UnavailableError
from recallbench.pytest_plugin import baseline
from recallbench.pytest_plugin.markers import MARKER, build, layers
from recallbench.pytest_plugin.summary import write_summary

REPORT_SCHEMA = "recallbench.pytest-report/1"


class RecallResult(dict):
    """A run's record with attribute access, and what the plugin adds to it."""

    key: str = ""
    cached: bool = False
    effective_state: float | None = None  # fitted S_eff (may be inf), None if not fitted
    effective_state_ci: tuple[float, float] | None = None
    baseline_accuracy: float | None = None

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def record(self) -> dict:
        return dict(self)


class RecallRunner:
    """The ``recall`` fixture's value for one test item."""

    def __init__(self, session: "RecallSession", item: pytest.Item):
        self._session = session
        self._item = item
        self.calls = 0

    def __call__(self, **keys: Any) -> RecallResult:
        self.calls += 1
        nodeid = self._item.nodeid
        key = nodeid if self.calls == 1 else f"{nodeid}#{self.calls}"
        return self._session.measure(self._item, key, keys)


_RUNNER = pytest.StashKey[RecallRunner]()


def _effective_state(record: dict) -> tuple[float | None, tuple | None, str | None]:
    """S_eff of one run (recallbench.law.fit.fit_effective_state), or why it is not available."""
    try:
        from recallbench.law import declared
        from recallbench.law.fit import fit_effective_state

        task = record["config"]["task"]
        family = declared.task_family(task["name"])
        if family is None:
            return None, None, f"task {task['name']!r} declares no law family"
        d_model = record["config"]["model"]["d_model"]
        fit = fit_effective_state(record["correct"], record["total"], d_model,
                                  task["num_facts"], task["vocab_size"], family=family)
        value, (lo, hi) = fit.state(d_model)
        return float(value), (float(lo), float(hi)), None
    except Exception as exc:  # a fit must never fail a test
        return None, None, f"{type(exc).__name__}: {exc}"


def _train(cfg) -> tuple[dict | None, str | None, str | None]:
    """(record, config error, unavailable reason) of one training run."""
    from recallbench.harness import train

    try:
        with warnings.catch_warnings():
            # Lightning's own deprecation noise, not the tested layer's
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
            return train.run(cfg, progress=False), None, None
    except ConfigError as exc:
        return None, str(exc), None
    except UnavailableError as exc:
        return None, None, str(exc)


class RecallSession:
    """Per-session state: options, the run cache, measurements, baseline, report."""

    def __init__(self, config: pytest.Config):
        opt = config.option
        here = Path(config.invocation_params.dir)
        self.budget = float(opt.recall_budget)
        self.device = opt.recall_device
        self.tolerance = float(opt.recall_tolerance)
        self.regen = bool(opt.recall_regen)
        self.report_path = here / opt.recall_report if opt.recall_report else None
        self.baseline_path = here / opt.recall_baseline if opt.recall_baseline else None
        self.baseline_arg = opt.recall_baseline  # as the user wrote it, for messages
        self.baseline: dict[str, dict] = {}
        self.regenerated: dict[str, dict] = {}
        self.cache: dict = {}
        self.runs = 0
        self.measurements: list[dict] = []
        self.outcomes: dict[str, str] = {}
        self.written: list[str] = []
        if self.baseline_path is not None and self.baseline_path.exists():
            self.baseline = baseline.load(self.baseline_path)

    def runner(self, item: pytest.Item) -> RecallRunner:
        runner = item.stash.get(_RUNNER, None)
        if runner is None:
            runner = item.stash[_RUNNER] = RecallRunner(self, item)
        return runner

    # -- one measurement ----------------------------------------------------------
    def _resolve(self, item: pytest.Item, keys: dict):
        from recallbench.api.config import resolve

        raw, plugin = build(layers(item, keys))
        raw["train"]["progress"] = False
        if self.device is not None:
            raw["train"]["device"] = self.device
        cfg = resolve(raw)
        if self.budget != 1.0 and cfg.train.max_steps > 0:
            cfg.train.max_steps = max(1, round(cfg.train.max_steps * self.budget))
            cfg.train.validate()
        return cfg, plugin

    def _run(self, cfg, factory, entry: dict) -> tuple:
        """The cached (record, S_eff fit, factory) of a config, training it if new."""
        cache_key = (cfg.hash(), id(factory) if factory is not None else None)
        hit = self.cache.get(cache_key)
        if hit is not None:
            entry["cached"] = True
            return hit
        record, error, unavailable = _train(cfg)
        # pytest.fail/skip are raised outside except blocks: no "during handling" chain
        if error is not None:
            entry["error"] = error
            pytest.fail(f"recall: {error}", pytrace=False)
        if unavailable is not None:
            entry["error"], entry["skipped"] = unavailable, True
            pytest.skip(f"recall: {unavailable}")
        self.runs += 1
        hit = self.cache[cache_key] = (record, _effective_state(record), factory)
        return hit

    def measure(self, item: pytest.Item, key: str, keys: dict) -> RecallResult:
        entry: dict[str, Any] = {"key": key, "nodeid": item.nodeid, "record": None,
                                 "cached": False, "problems": []}
        self.measurements.append(entry)
        error = None
        try:
            cfg, plugin = self._resolve(item, keys)
        except ConfigError as exc:
            error = str(exc)
        if error is not None:
            entry["error"] = error
            pytest.fail(f"recall: {error}", pytrace=False)
        record, (s_eff, s_ci, s_err), _ = self._run(cfg, plugin.get("factory"), entry)
        result = RecallResult(json.loads(json.dumps(record)))  # the cache keeps its own copy
        result.key, result.cached = key, entry["cached"]
        result.effective_state, result.effective_state_ci = s_eff, s_ci
        entry.update(record=dict(result), effective_state=s_eff, effective_state_ci=s_ci,
                     effective_state_error=s_err, min_accuracy=plugin.get("min_accuracy"))
        problems = entry["problems"]
        min_acc = plugin.get("min_accuracy")
        if min_acc is not None and record["accuracy"] < min_acc:
            problems.append(f"recall accuracy {record['accuracy']:.4f} "
                            f"({record['correct']}/{record['total']}) is below "
                            f"min_accuracy {min_acc:g}")
        tol = plugin.get("tolerance")
        entry["baseline"] = self._baseline(key, item.nodeid, record,
                                           self.tolerance if tol is None else tol, problems)
        if entry["baseline"] is not None:
            result.baseline_accuracy = entry["baseline"].get("accuracy")
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)
        return result

    def _baseline(self, key: str, nodeid: str, record: dict, tol: float,
                  problems: list) -> dict | None:
        if self.baseline_path is None:
            return None
        if self.regen:
            self.regenerated[key] = baseline.entry(record)
            return {"status": "regenerated", "accuracy": record["accuracy"], "tolerance": tol}
        path = self.baseline_arg
        return baseline.compare(
            self.baseline.get(key), key, record, tol, path=path, budget=self.budget,
            regen_hint=f"pytest '{nodeid}' --recall-baseline {path} --recall-regen",
            problems=problems)

    # -- hooks --------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function):
        result = yield
        if pyfuncitem.get_closest_marker(MARKER) is not None:
            runner = self.runner(pyfuncitem)
            if runner.calls == 0:  # a marker-only test: measure it after its body
                runner()
        return result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = report.outcome
            if report.when == "setup" and report.failed:
                outcome = "error"
            self.outcomes[report.nodeid] = outcome

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # pytest-xdist worker: nothing to write
            return
        if self.regen and self.regenerated:
            tests = {**self.baseline, **self.regenerated}
            self._write(self.baseline_path, {"schema": baseline.BASELINE_SCHEMA, "tests": tests})
        if self.report_path is not None:
            self._write(self.report_path, self.report())

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.measurements:
            write_summary(terminalreporter, self)

    def _write(self, path: Path, data: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(plain(data), indent=2, sort_keys=True, allow_nan=False) + "\n")
        os.replace(tmp, path)
        self.written.append(str(path))

    def report(self) -> dict:
        tests = []
        for m in self.measurements:
            rec = m.get("record") or {}
            tests.append({
                "key": m["key"], "nodeid": m["nodeid"],
                "outcome": self.outcomes.get(m["nodeid"]),
                "error": m.get("error"), "problems": m["problems"], "cached": m["cached"],
                "accuracy": rec.get("accuracy"), "correct": rec.get("correct"),
                "total": rec.get("total"), "state_size": rec.get("state_size"),
                "effective_state": m.get("effective_state"),
                "effective_state_ci": m.get("effective_state_ci"),
                "effective_state_error": m.get("effective_state_error"),
                "min_accuracy": m.get("min_accuracy"), "baseline": m.get("baseline"),
                "config_hash": rec.get("config_hash"), "record": m.get("record"),
            })
        return {"schema": REPORT_SCHEMA,
                "options": {"budget": self.budget, "device": self.device,
                            "tolerance": self.tolerance, "regen": self.regen,
                            "baseline": str(self.baseline_path) if self.baseline_path else None},
                "training_runs": self.runs, "measurements": len(self.measurements),
                "tests": tests}
