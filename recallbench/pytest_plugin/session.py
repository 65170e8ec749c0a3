"""One pytest session's recall measurements: the runs, the checks, the hooks.

:class:`RecallSession` is registered as a pytest plugin object by ``pytest_configure``.
A measurement builds the config from the test's markers and the call
(:mod:`~recallbench.pytest_plugin.markers`), takes its record from this session, from
the cache folder (:mod:`~recallbench.pytest_plugin.cache`) or by training it
(:func:`recallbench.harness.train.run`), fits S_eff, records JUnit properties, and fails
the test on ``min_accuracy`` or against the baseline
(:mod:`~recallbench.pytest_plugin.baseline`).  Measurements travel with the test reports
(:mod:`~recallbench.pytest_plugin.workers`), so under pytest-xdist the controller gets
them all; it writes the files (:mod:`~recallbench.pytest_plugin.output`) and the summary
(:mod:`~recallbench.pytest_plugin.summary`).
"""
from __future__ import annotations

import json
import shutil
import tempfile
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest

from recallbench.api.errors import ConfigError, UnavailableError
from recallbench.pytest_plugin import baseline, output, workers
from recallbench.pytest_plugin.cache import SESSION, TRAINED, RunCache, share_key
from recallbench.pytest_plugin.markers import MARKER, build, layers
from recallbench.pytest_plugin.summary import write_summary

# what the controller hands each xdist worker: the session's id and its cache folder
WORKERINPUT_KEY = "recallbench"
JUNIT_PROPERTIES = ("accuracy", "state_size", "effective_state")


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
        return self._session.measure(self._item, self.calls, keys)


_RUNNER = pytest.StashKey[RecallRunner]()


def _effective_state(record: dict) -> tuple[float | None, tuple | None, str | None]:
    """S_eff of one run (recallbench.law.fit.fit_effective_state), or why it is not available.

    A run whose accuracy is not above its task's guess level (recallbench.law.guess) has
    no recall beyond guessing: S_eff 0, with the upper bound the run leaves, and that note.
    """
    try:
        from recallbench.law import declared, guess
        from recallbench.law.fit import fit_effective_state

        task = record["config"]["task"]
        family = declared.task_family(task["name"])
        if family is None:
            return None, None, f"task {task['name']!r} declares no law family"
        d_model = record["config"]["model"]["d_model"]
        facts = guess.task_facts(task)
        g = facts[0] if facts else 0.0
        if facts is not None:
            recall, _, units = guess.judge(record["correct"], record["total"], facts)
            if not recall:
                hi = guess.no_recall_bound(record["correct"], record["total"], units, g,
                                           d_model, task["num_facts"], task["vocab_size"],
                                           family=family) * 2.0 * d_model
                return 0.0, (0.0, float(hi)), (f"no recall beyond guessing: accuracy not "
                                               f"above the guess level {g:.4g} at 95%")
        fit = fit_effective_state(record["correct"], record["total"], d_model,
                                  task["num_facts"], task["vocab_size"], family=family, guess=g)
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


def _share(cfg, factory) -> tuple[str | None, dict | None, str | None]:
    """(share key, material, unavailable reason): nothing is looked up for a run that
    cannot start here."""
    from recallbench.api.registry import ADAPTERS
    from recallbench.harness.prepare import pick_device

    try:
        ADAPTERS.require(cfg.model.adapter)
        pick_device(cfg.train.device)
    except UnavailableError as exc:
        return None, None, str(exc)
    return (*share_key(cfg, factory), None)


class RecallSession:
    """Per-session state: options, the runs, the measurements, the files at the end."""

    def __init__(self, config: pytest.Config, cache_dir: Path | None, cache_arg: str | None):
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
        self.is_worker = hasattr(config, "workerinput")
        shared = getattr(config, "workerinput", {}).get(WORKERINPUT_KEY) or {}
        self.session_id = shared.get("id") or uuid.uuid4().hex
        self.cache_arg = cache_arg  # the cross-run cache, as the user named it
        self._session_dir: Path | None = None  # the xdist workers' shared folder (controller)
        folder = cache_dir or (Path(shared["dir"]) if shared.get("dir") else None)
        self.cache = RunCache(folder, self.session_id) if folder is not None else None
        self.memory: dict = {}  # (config hash, factory id) -> (record, fit, factory, share)
        self.measurements: list[dict] = []  # every measurement, as the reports bring them
        self._pending: dict[str, list[dict]] = {}  # measured here, not yet on a report
        self._order: dict[str, int] = {}
        self.outcomes: dict[str, str] = {}
        self.written: list[str] = []
        self.unwritten: list[str] = []  # files that could not be written, with the reason
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
        ident = baseline.identity(cfg)  # the full budget's: the baseline's key to the config
        if self.budget != 1.0 and cfg.train.max_steps > 0:
            cfg.train.max_steps = max(1, round(cfg.train.max_steps * self.budget))
            cfg.train.validate()
        return cfg, plugin, ident

    def _fetch(self, cfg, factory) -> tuple:
        """(record, source, share key, config error, unavailable reason) of a new config."""
        share, material, unavailable = _share(cfg, factory)
        if unavailable is not None:
            return None, None, None, None, unavailable
        if self.cache is None or share is None:
            record, error, unavailable = _train(cfg)
            return record, TRAINED, share, error, unavailable
        record, source, error, unavailable = self.cache.fetch(share, material,
                                                              lambda: _train(cfg))
        return record, source, share, error, unavailable

    def _run(self, cfg, factory, entry: dict) -> tuple:
        """The (record, S_eff fit) of a config: this process's, else fetched or trained."""
        memory_key = (cfg.hash(), id(factory) if factory is not None else None)
        hit = self.memory.get(memory_key)
        if hit is not None:
            entry["source"], entry["share"] = SESSION, hit[3]
            return hit[:2]
        record, source, share, error, unavailable = self._fetch(cfg, factory)
        # pytest.fail/skip are raised outside except blocks: no "during handling" chain
        if error is not None:
            entry["error"] = error
            pytest.fail(f"recall: {error}", pytrace=False)
        if unavailable is not None:
            entry["error"], entry["skipped"] = unavailable, True
            pytest.skip(f"recall: {unavailable}")
        entry["source"], entry["share"] = source, share
        hit = self.memory[memory_key] = (record, _effective_state(record), factory, share)
        return hit[:2]

    def measure(self, item: pytest.Item, call: int, keys: dict) -> RecallResult:
        suffix = "" if call == 1 else f"#{call}"
        key = item.nodeid + suffix
        entry: dict[str, Any] = {"key": key, "nodeid": item.nodeid, "record": None,
                                 "order": [self._order.get(item.nodeid, len(self._order)), call],
                                 "source": None, "share": None, "problems": []}
        self._pending.setdefault(item.nodeid, []).append(entry)
        error = None
        try:
            cfg, plugin, ident = self._resolve(item, keys)
        except ConfigError as exc:
            error = str(exc)
        if error is not None:
            entry["error"] = error
            pytest.fail(f"recall: {error}", pytrace=False)
        record, (s_eff, s_ci, s_err) = self._run(cfg, plugin.get("factory"), entry)
        result = RecallResult(json.loads(json.dumps(record)))  # the cache keeps its own copy
        result.key, result.cached = key, entry["source"] != TRAINED
        result.effective_state, result.effective_state_ci = s_eff, s_ci
        min_acc = self._min_accuracy(plugin)
        entry.update(record=dict(result), effective_state=s_eff, effective_state_ci=s_ci,
                     effective_state_error=s_err, min_accuracy=min_acc, identity=ident)
        for name, value in zip(JUNIT_PROPERTIES, (record["accuracy"], record["state_size"], s_eff)):
            if value is not None:
                item.user_properties.append((name + suffix, value))
        problems = entry["problems"]
        if min_acc is not None and record["accuracy"] < min_acc:
            name = "min_accuracy" if self.budget >= 1.0 else "min_accuracy_reduced"
            problems.append(f"recall accuracy {record['accuracy']:.4f} "
                            f"({record['correct']}/{record['total']}) is below "
                            f"{name} {min_acc:g}"
                            + (f" (--recall-budget {self.budget:g})" if self.budget != 1.0 else ""))
        tol = plugin.get("tolerance")
        entry["baseline"] = self._baseline(key, item.nodeid, record, ident,
                                           self.tolerance if tol is None else tol, problems)
        if entry["baseline"] is not None:
            result.baseline_accuracy = entry["baseline"].get("accuracy")
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)
        return result

    def _min_accuracy(self, plugin: dict) -> float | None:
        """The floor this budget enforces: ``min_accuracy`` at the full budget (or above),
        ``min_accuracy_reduced`` (if given) under a reduced one, where fewer steps are
        expected to score lower and the baseline of that budget is the check."""
        return plugin.get("min_accuracy" if self.budget >= 1.0 else "min_accuracy_reduced")

    def _baseline(self, key: str, nodeid: str, record: dict, ident: dict, tol: float,
                  problems: list) -> dict | None:
        if self.baseline_path is None:
            return None
        if self.regen:
            return {"status": "regenerated", "accuracy": record["accuracy"], "tolerance": tol}
        path = self.baseline_arg
        budget = "" if self.budget == 1.0 else f" --recall-budget {self.budget:g}"
        return baseline.compare(
            self.baseline.get(key), key, record, ident, tol, path=path, budget=self.budget,
            regen_hint=f"pytest '{nodeid}' --recall-baseline {path}{budget} --recall-regen",
            problems=problems)

    # -- hooks --------------------------------------------------------------------
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._order = {item.nodeid: i for i, item in enumerate(session.items)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        """pytest-xdist, on the controller: give each worker the session's id and the
        folder its workers share (the cache folder, else a temporary one)."""
        if self.cache is None:
            self._session_dir = Path(tempfile.mkdtemp(prefix="recallbench-session-"))
            self.cache = RunCache(self._session_dir, self.session_id)
        node.workerinput[WORKERINPUT_KEY] = {"id": self.session_id, "dir": str(self.cache.root)}

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function):
        result = yield
        if pyfuncitem.get_closest_marker(MARKER) is not None:
            runner = self.runner(pyfuncitem)
            if runner.calls == 0:  # a marker-only test: measure it after its body
                runner()
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        report = yield
        pending = self._pending.pop(item.nodeid, None)
        if pending:
            workers.attach(report, pending)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.measurements.extend(workers.received(report))
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = report.outcome
            if report.when == "setup" and report.failed:
                outcome = "error"
            self.outcomes[report.nodeid] = outcome

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:  # pytest-xdist worker: the controller writes
            return
        self.measurements = workers.settle(self.measurements)
        if not output.write_all(self) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self._session_dir is not None:
            shutil.rmtree(self._session_dir, ignore_errors=True)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.measurements and not self.is_worker:
            write_summary(terminalreporter, self)
