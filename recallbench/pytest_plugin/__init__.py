"""pytest plugin: recall tests in a model zoo's own test suite.

Loaded automatically wherever recallbench is installed (entry point ``pytest11``)::

    @pytest.mark.recall(task="mqar", vocab_size=512, num_facts=16, seq_len=64,
                        adapter="linear-mamba", d_model=64, d_state=16, min_accuracy=0.99)
    def test_my_layer_recalls(recall):
        result = recall()          # trains once per config per session; the result record
        assert result.accuracy >= 0.99

Marker and ``recall(...)`` keywords
-----------------------------------
* the keys of the config sections by their short names: ``task`` (the task's name) and
  the task's parameters (``vocab_size``, ``seq_len``, ``num_facts``, ...), the ``model``
  keys (``adapter``, ``d_model``, ``d_state``, ``n_layers``, ...) and the ``train`` keys
  (``max_steps``, ``lr``, ``seed``, ...); a name two sections share must be dotted;
* dotted names ``"section.key"`` (as ``--set``), e.g. ``**{"model.options.embedding": "gaussian"}``;
* ``config={...}``: a raw config mapping (sections task/model/train), the lowest layer;
* the plugin's own: ``min_accuracy`` (asserted by the fixture), ``tolerance`` (against
  the baseline; default ``--recall-tolerance``), ``factory`` (an ``nn.Module`` factory
  instead of an adapter name) and ``state_size`` (the factory's state size, for reports).

Layers merge in this order, later winning: module/class markers, the test's marker,
the keywords of the ``recall(...)`` call.  A marked test that never calls ``recall()``
is measured after its body.  Errors in the keywords fail the test with the one-line
:class:`recallbench.api.errors.ConfigError` text; an adapter that cannot run here skips it.

This module must import fast (it loads in every pytest run of a project that has
recallbench installed): torch, Lightning and the registries load on the first measurement.
"""
from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest

MARKER = "recall"
FACTORY_ADAPTER = "pytest-factory"
PLUGIN_KEYS = ("min_accuracy", "tolerance", "factory", "state_size", "config")
BASELINE_SCHEMA = "recallbench.baseline/1"
REPORT_SCHEMA = "recallbench.pytest-report/1"

_FACTORIES: dict[str, Callable] = {}  # label -> the factory of the run being built


# -- options and set-up -------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("recallbench", "recall tests (recallbench)")
    group.addoption("--recall-budget", type=float, default=1.0, metavar="SCALE",
                    help="multiply train.max_steps of every recall test by SCALE (default 1)")
    group.addoption("--recall-device", default=None, metavar="DEVICE",
                    help="train.device of every recall test: auto, cpu, cuda or cuda:N")
    group.addoption("--recall-report", default=None, metavar="PATH",
                    help="write a JSON report of every recall measurement to PATH")
    group.addoption("--recall-baseline", default=None, metavar="PATH",
                    help="compare every recall test's accuracy with this baseline file")
    group.addoption("--recall-regen", action="store_true", default=False,
                    help="write the measured accuracies into --recall-baseline instead of "
                         "comparing (only the recall tests that run are updated)")
    group.addoption("--recall-tolerance", type=float, default=0.02, metavar="TOL",
                    help="allowed drop in accuracy below the baseline (default 0.02; "
                         "a marker's tolerance= overrides it)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "recall(**keys): a recall test measured by recallbench; keys are config keys "
        "(task, vocab_size, adapter, d_model, d_state, max_steps, ...) and min_accuracy, "
        "tolerance, factory, state_size, config (see recallbench.pytest_plugin)")
    opt = config.option
    if not opt.recall_budget > 0:
        raise pytest.UsageError(f"--recall-budget {opt.recall_budget}: must be > 0")
    if not opt.recall_tolerance >= 0:
        raise pytest.UsageError(f"--recall-tolerance {opt.recall_tolerance}: must be >= 0")
    if opt.recall_regen and not opt.recall_baseline:
        raise pytest.UsageError("--recall-regen needs --recall-baseline PATH (the file to write)")
    if opt.recall_device is not None:
        from recallbench.api.config import TrainConfig
        from recallbench.api.errors import ConfigError

        try:
            TrainConfig(device=opt.recall_device).validate()
        except ConfigError as exc:
            raise pytest.UsageError(f"--recall-device: {exc}") from None
    config.pluginmanager.register(RecallSession(config), "recallbench-session")


def _session(config: pytest.Config) -> "RecallSession":
    return config.pluginmanager.get_plugin("recallbench-session")


@pytest.fixture
def recall(request: pytest.FixtureRequest) -> "RecallRunner":
    """Measure recall: ``recall(**keys)`` trains and tests one config, returns the record.

    Keys merge over the test's ``@pytest.mark.recall(...)`` keys.  The result is the run's
    record (``recallbench.result/1``) with attribute access (``result.accuracy``,
    ``result.state_size``, ``result.correct``, ...) plus ``result.effective_state``
    (fitted S_eff, or None), ``result.cached`` and ``result.key`` (its baseline key).
    Runs are cached per session by config hash; ``min_accuracy`` and the baseline are
    checked inside the call and fail the test there.
    """
    return _session(request.config).runner(request.node)


# -- results ------------------------------------------------------------------------

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


# -- building a config from marker keywords --------------------------------------------

def _layers(item: pytest.Item, call_keys: dict) -> list[dict]:
    """Keyword layers, lowest first: module/class markers, the test's marker(s), the call."""
    layers = []
    for mark in reversed(list(item.iter_markers(MARKER))):
        if mark.args:
            from recallbench.api.errors import ConfigError

            raise ConfigError(f"@pytest.mark.recall takes keyword arguments only "
                              f"(got positional {mark.args!r})")
        layers.append(dict(mark.kwargs))
    layers.append(dict(call_keys))
    return layers


def _deep_update(dst: dict, src: dict) -> dict:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _deep_update(dst[k], v)
        else:
            dst[k] = dict(v) if isinstance(v, dict) else v
    return dst


def _set_dotted(raw: dict, dotted: str, value: Any) -> None:
    from recallbench.api.config import SECTIONS
    from recallbench.api.errors import ConfigError

    parts = dotted.split(".")
    if len(parts) < 2 or not all(parts) or parts[0] not in SECTIONS:
        raise ConfigError(f"key {dotted!r}: a dotted key must be section.key with a "
                          f"section among {', '.join(SECTIONS)}")
    node = raw[parts[0]]
    for p in parts[1:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"key {dotted!r}: {p} is not a mapping")
    node[parts[-1]] = value


def build(layers: list[dict]) -> tuple[dict, dict]:
    """(raw config, plugin keys) from keyword layers; ConfigError names a bad key."""
    import dataclasses

    from recallbench.api.config import SECTIONS, ModelConfig, TrainConfig
    from recallbench.api.errors import ConfigError
    from recallbench.api.registry import TASKS

    # the task's name first: it decides which short names are task parameters
    task_name = "mqar"
    for layer in layers:
        cfg = layer.get("config")
        if isinstance(cfg, dict) and isinstance(cfg.get("task"), dict) and "name" in cfg["task"]:
            task_name = cfg["task"]["name"]
        task_name = layer.get("task.name", layer.get("task", task_name))
    if not isinstance(task_name, str):
        raise ConfigError(f"task = {task_name!r} is not allowed: a task name, e.g. 'mqar'")
    task_cls = TASKS.get(task_name)
    fields = {
        "task": [f.name for f in dataclasses.fields(task_cls) if f.init],
        "model": [f.name for f in dataclasses.fields(ModelConfig)],
        "train": [f.name for f in dataclasses.fields(TrainConfig)],
    }

    raw: dict = {s: {} for s in SECTIONS}
    plugin: dict = {}
    for layer in layers:
        base = layer.get("config")
        if base is not None:
            if not isinstance(base, dict):
                raise ConfigError(f"config = {base!r} is not allowed: a mapping with "
                                  f"sections {', '.join(SECTIONS)}")
            for section, values in base.items():
                if section not in SECTIONS:
                    raise ConfigError(f"config: unknown section {section!r}; allowed: "
                                      f"{', '.join(SECTIONS)}")
                if not isinstance(values, dict):
                    raise ConfigError(f"config: section {section} must be a mapping")
                _deep_update(raw[section], values)
        for key, value in layer.items():
            if key == "config":
                continue
            if key in PLUGIN_KEYS:
                plugin[key] = value
            elif key == "task":
                raw["task"]["name"] = value
            elif "." in key:
                _set_dotted(raw, key, value)
            else:
                owners = [s for s in SECTIONS if key in fields[s]]
                if len(owners) > 1:
                    raise ConfigError(f"key {key!r} is ambiguous ("
                                      + ", ".join(f"{s}.{key}" for s in owners)
                                      + "): pass it dotted, e.g. **{'" + f"{owners[-1]}.{key}"
                                      + "': ...}")
                if not owners:
                    import difflib

                    known = [*fields["task"], *fields["model"], *fields["train"], *PLUGIN_KEYS]
                    close = difflib.get_close_matches(key, known, n=1)
                    if close:
                        allowed = f"did you mean {close[0]}?"
                    else:
                        allowed = (f"allowed: task, keys of task {task_name} "
                                   f"({', '.join(fields['task'])}), model keys "
                                   f"({', '.join(fields['model'])}), train keys "
                                   f"({', '.join(fields['train'])}), {', '.join(PLUGIN_KEYS)}, "
                                   f"or section.key")
                    raise ConfigError(f"unknown key {key!r}; {allowed}")
                raw[owners[0]][key] = value
    raw["task"].setdefault("name", task_name)
    _check_plugin_keys(plugin, raw)
    return raw, plugin


def _check_plugin_keys(plugin: dict, raw: dict) -> None:
    from recallbench.api.errors import ConfigError
    from recallbench.api.fields import fail

    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    m = plugin.get("min_accuracy")
    if m is not None and not (number(m) and 0 <= m <= 1):
        fail("min_accuracy", m, "a number in [0, 1] or None")
    t = plugin.get("tolerance")
    if t is not None and not (number(t) and t >= 0):
        fail("tolerance", t, "a number >= 0 or None")
    s = plugin.get("state_size")
    if s is not None and not (isinstance(s, int) and not isinstance(s, bool) and s >= 0):
        fail("state_size", s, "an integer >= 0 or None")
    factory = plugin.get("factory")
    if factory is None:
        if s is not None:
            raise ConfigError("state_size= is only for factory= runs: a named adapter "
                              "reports its own state size")
        return
    if not callable(factory):
        fail("factory", factory, "a callable returning an nn.Module, "
             "e.g. lambda d_model, layer_idx: MyMixer(d_model)")
    adapter = raw["model"].get("adapter")
    if adapter is not None and adapter != FACTORY_ADAPTER:
        raise ConfigError(f"give adapter= ({adapter!r}) or factory=, not both")
    label = _factory_label(factory)
    _FACTORIES[label] = factory
    _factory_adapter()  # registered under FACTORY_ADAPTER
    raw["model"]["adapter"] = FACTORY_ADAPTER
    options = dict(raw["model"].get("options") or {})
    options.update({"factory": label, "state_size": s})
    raw["model"]["options"] = options


def _factory_label(factory: Callable) -> str:
    target = getattr(factory, "func", factory)  # functools.partial
    qual = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{getattr(target, '__module__', None) or '?'}:{qual}"


def _call_factory(factory: Callable, cfg, layer_idx: int, device):
    """Call ``factory`` with the config values its parameters name, else (d_model, layer_idx)."""
    import inspect

    available = {"d_model": cfg.d_model, "layer_idx": layer_idx, "d_state": cfg.d_state,
                 "n_heads": cfg.n_heads, "expand": cfg.expand, "d_conv": cfg.d_conv,
                 "device": device}
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return factory(cfg.d_model, layer_idx)
    empty = inspect.Parameter.empty
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    required = [p for p in params if p.default is empty and p.kind in
                (*named, inspect.Parameter.POSITIONAL_ONLY)]
    if all(p.kind in named and p.name in available for p in required):
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            kwargs = dict(available)
        else:
            kwargs = {p.name: available[p.name] for p in params
                      if p.kind in named and p.name in available}
        return factory(**kwargs)
    return factory(cfg.d_model, layer_idx)


_FACTORY_CLASS = None


def _factory_adapter():
    """The ad-hoc adapter that wraps ``recall(factory=...)`` (defined and registered once)."""
    global _FACTORY_CLASS
    if _FACTORY_CLASS is not None:
        return _FACTORY_CLASS
    import dataclasses

    from torch import nn

    from recallbench.api.adapter import Adapter, PreNormResidual
    from recallbench.api.config import HEAD_PATTERNS
    from recallbench.api.errors import ConfigError
    from recallbench.api.fields import from_mapping
    from recallbench.api.registry import ADAPTERS

    @dataclasses.dataclass
    class FactoryOptions:
        factory: str = ""
        state_size: int | None = None

    class FactoryAdapter(Adapter):
        description = "an nn.Module factory given to the recall fixture (pytest plugin)"
        library_class = "recall(factory=...)"
        state_formula = "given by the test (state_size=)"
        head_patterns = HEAD_PATTERNS

        def validate(self) -> None:
            super().validate()
            self.options = from_mapping(FactoryOptions, self.cfg.options, "model.options")
            self.factory = _FACTORIES.get(self.options.factory)
            if self.factory is None:
                raise ConfigError(f"adapter {FACTORY_ADAPTER} is for the pytest plugin's "
                                  f"recall(factory=...) only (no factory "
                                  f"{self.options.factory!r} in this process)")

        def build_blocks(self, device):
            blocks = []
            for i in range(self.cfg.n_layers):
                mixer = _call_factory(self.factory, self.cfg, i, device)
                if not isinstance(mixer, nn.Module):
                    raise ConfigError(f"factory {self.options.factory} returned "
                                      f"{type(mixer).__name__}, expected an nn.Module")
                blocks.append(PreNormResidual(mixer, self.cfg.d_model))
            return nn.ModuleList(blocks).to(device)

        def state_size(self):
            return self.options.state_size

        def state_note(self):
            if self.options.state_size is None:
                return "unknown: pass state_size= to the recall marker"
            return self.state_formula

    ADAPTERS.register(FACTORY_ADAPTER)(FactoryAdapter)
    _FACTORY_CLASS = FactoryAdapter
    return FactoryAdapter


# -- the session --------------------------------------------------------------------

def _finite(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats as the strings "inf", "-inf", "nan"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _effective_state(record: dict) -> tuple[float | None, tuple | None, str | None]:
    """S_eff of one run (recallbench.law.fit.fit_effective_state), or why it is not available."""
    try:
        from recallbench.law.fit import fit_effective_state

        task = record["config"]["task"]
        d_model = record["config"]["model"]["d_model"]
        fit = fit_effective_state(record["correct"], record["total"], d_model,
                                  task["num_facts"], task["vocab_size"], task=task["name"])
        value, (lo, hi) = fit.state(d_model)
        return float(value), (float(lo), float(hi)), None
    except Exception as exc:  # a fit must never fail a test
        return None, None, f"{type(exc).__name__}: {exc}"


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
            self.baseline = self._load_baseline(self.baseline_path)

    @staticmethod
    def _load_baseline(path: Path) -> dict:
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
        return data["tests"]

    def runner(self, item: pytest.Item) -> RecallRunner:
        runner = item.stash.get(_RUNNER, None)
        if runner is None:
            runner = item.stash[_RUNNER] = RecallRunner(self, item)
        return runner

    # -- one measurement ----------------------------------------------------------
    def _resolve(self, item: pytest.Item, keys: dict):
        from recallbench.api.config import resolve

        raw, plugin = build(_layers(item, keys))
        raw["train"]["progress"] = False
        if self.device is not None:
            raw["train"]["device"] = self.device
        cfg = resolve(raw)
        if self.budget != 1.0 and cfg.train.max_steps > 0:
            cfg.train.max_steps = max(1, round(cfg.train.max_steps * self.budget))
            cfg.train.validate()
        return cfg, plugin

    def measure(self, item: pytest.Item, key: str, keys: dict) -> RecallResult:
        from recallbench.api.errors import ConfigError, UnavailableError

        entry: dict[str, Any] = {"key": key, "nodeid": item.nodeid, "record": None,
                                 "cached": False, "problems": []}
        self.measurements.append(entry)
        # pytest.fail/skip are raised outside the except blocks: no "during handling" chain
        error = unavailable = None
        try:
            cfg, plugin = self._resolve(item, keys)
        except ConfigError as exc:
            error = str(exc)
        if error is not None:
            entry["error"] = error
            pytest.fail(f"recall: {error}", pytrace=False)
        factory = plugin.get("factory")
        cache_key = (cfg.hash(), id(factory) if factory is not None else None)
        hit = self.cache.get(cache_key)
        if hit is None:
            from recallbench.harness import train

            try:
                with warnings.catch_warnings():
                    # Lightning's own deprecation noise, not the tested layer's
                    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
                    record = train.run(cfg, progress=False)
            except ConfigError as exc:
                error = str(exc)
            except UnavailableError as exc:
                unavailable = str(exc)
            if error is not None:
                entry["error"] = error
                pytest.fail(f"recall: {error}", pytrace=False)
            if unavailable is not None:
                entry["error"], entry["skipped"] = unavailable, True
                pytest.skip(f"recall: {unavailable}")
            self.runs += 1
            hit = self.cache[cache_key] = (record, _effective_state(record), factory)
        else:
            entry["cached"] = True
        record, (s_eff, s_ci, s_err), _ = hit
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
        from recallbench.api.canonical import EXECUTION_KEYS as UNHASHED

        path = self.baseline_arg
        if self.regen:
            config = {s: {k: v for k, v in vals.items() if k not in UNHASHED.get(s, ())}
                      for s, vals in record["config"].items()}
            self.regenerated[key] = {
                "accuracy": record["accuracy"], "correct": record["correct"],
                "total": record["total"], "state_size": record["state_size"],
                "config_hash": record["config_hash"], "config": config}
            return {"status": "regenerated", "accuracy": record["accuracy"], "tolerance": tol}
        stored = self.baseline.get(key)
        regen_hint = f"pytest '{nodeid}' --recall-baseline {path} --recall-regen"
        if stored is None:
            problems.append(f"no recall baseline for {key} in {path}; measured accuracy "
                            f"{record['accuracy']:.4f}. Create it with `{regen_hint}` and "
                            f"commit the file")
            return {"status": "missing", "accuracy": None, "tolerance": tol}
        out = {"status": "ok", "accuracy": stored.get("accuracy"), "tolerance": tol}
        if stored.get("config_hash") != record["config_hash"]:
            now = _flat({s: v for s, v in record["config"].items()})
            then = _flat(stored.get("config") or {})
            changed = [f"{k}: {then.get(k, '-')!r} -> {now.get(k, '-')!r}"
                       for k in sorted(set(now) | set(then))
                       if k in then and then.get(k) != now.get(k)]
            what = "; ".join(changed) or "hash " + str(stored.get("config_hash"))[:12]
            if self.budget != 1.0:
                what += f"; note --recall-budget {self.budget:g} scales train.max_steps"
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
            self._write(self.baseline_path, {"schema": BASELINE_SCHEMA, "tests": tests})
        if self.report_path is not None:
            self._write(self.report_path, self.report())

    def _write(self, path: Path, data: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(_finite(data), indent=2, sort_keys=True, allow_nan=False) + "\n")
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

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.measurements:
            return
        tr = terminalreporter
        tr.write_sep("=", "recall summary")
        rows = [("test", "accuracy", "correct/total", "state", "S_eff [95% CI]", "steps",
                 "wall", "baseline")]
        for m in self.measurements:
            rec = m.get("record")
            if rec is None:
                err = ("skipped: " if m.get("skipped") else "error: ") + (m.get("error") or "?")
                rows.append((m["key"], "-", "", "", "", "", "",
                             err if len(err) <= 90 else err[:89] + "…"))
                continue
            state = "-" if rec["state_size"] is None else str(rec["state_size"])
            if m.get("effective_state") is None:
                seff = "-"
            else:
                lo, hi = m["effective_state_ci"]
                seff = f"{_num(m['effective_state'])} [{_num(lo)}, {_num(hi)}]"
            base = m.get("baseline")
            if base is None:
                btxt = "-"
            elif base["accuracy"] is None:
                btxt = base["status"]
            else:
                btxt = f"{base['accuracy']:.4f} {base['status']}"
            rows.append((m["key"], f"{rec['accuracy']:.4f}", f"{rec['correct']}/{rec['total']}",
                         state, seff, str(rec["steps"]),
                         "cached" if m["cached"] else f"{rec['wall_s']:.1f}s", btxt))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        widths[0] = min(widths[0], 70)
        for r in rows:
            name = r[0] if len(r[0]) <= widths[0] else "…" + r[0][-(widths[0] - 1):]
            cells = [name.ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:-1], widths[1:-1])]
            tr.write_line("  ".join(cells + [r[-1]]).rstrip())
        notes = [f"{self.runs} training run(s) for {len(self.measurements)} measurement(s)"]
        if self.budget != 1.0:
            notes.append(f"budget x{self.budget:g}")
        if self.baseline_path is not None:
            notes.append(f"baseline {self.baseline_arg} (tolerance {self.tolerance:g})")
        tr.write_line("; ".join(notes))
        for path in self.written:
            is_baseline = self.baseline_path is not None and path == str(self.baseline_path)
            what = "baseline" if is_baseline else "report"
            tr.write_line(f"recall {what} written to {path}")


def _num(x: float) -> str:
    """Three significant digits, without an exponent for S_eff's usual range (1040, not
    1.04e+03)."""
    if x == math.inf:
        return "inf"
    if 100 <= abs(x) < 1e7:
        return f"{float(f'{x:.3g}'):.0f}"
    return f"{x:.3g}"


_RUNNER = pytest.StashKey[RecallRunner]()
