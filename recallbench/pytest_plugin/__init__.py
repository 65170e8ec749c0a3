"""pytest plugin: recall tests in a model zoo's own test suite (docs/pytest-plugin.md).

Loaded automatically wherever recallbench is installed (entry point ``pytest11``)::

    @pytest.mark.recall(task="mqar", vocab_size=512, num_facts=16, seq_len=64,
                        adapter="linear-mamba", d_model=64, d_state=16, min_accuracy=0.99)
    def test_my_layer_recalls(recall):
        result = recall()          # trains once per config per session; the result record
        assert result.accuracy >= 0.99

Keywords of the marker and of ``recall(...)``: config keys by short name (``task`` and its
parameters, ``model`` and ``train`` keys; a name two sections share must be dotted), dotted
``"section.key"`` names, ``config={...}`` (the lowest layer), and the plugin's own
``min_accuracy``, ``min_accuracy_reduced``, ``tolerance``, ``factory`` and ``state_size``.
Module and class markers, then the test's marker, then the call's keywords: later wins.  A
marked test that never calls ``recall()`` is measured after its body.  This package must import
fast (it loads in every pytest run): torch, Lightning and the registries load on the first
measurement.  Here: options, ``pytest_configure``, the ``recall`` fixture; the rest in .markers,
.factory, .session, .cache, .workers, .baseline, .output and .summary (this package's modules).
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from recallbench.pytest_plugin.session import RecallResult, RecallRunner, RecallSession

__all__ = ["pytest_addoption", "pytest_configure", "recall", "RecallResult", "RecallRunner"]


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
    group.addoption("--recall-cache", default=None, metavar="DIR",
                    help="keep every recall measurement in DIR and reuse it in later runs "
                         "while the config, the adapter's source and the library versions "
                         "are unchanged (ini: recall_cache)")
    group.addoption("--recall-cache-clear", action="store_true", default=False,
                    help="empty the recall cache folder before the run")
    parser.addini("recall_cache", "folder of the recall cache (as --recall-cache; relative "
                  "to the ini file)", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "recall(**keys): a recall test measured by recallbench; keys are config keys "
        "(task, vocab_size, adapter, d_model, d_state, max_steps, ...) and min_accuracy, "
        "tolerance, factory, state_size, config (see recallbench.pytest_plugin)")
    opt = config.option
    if not opt.recall_budget > 0:
        raise pytest.UsageError(f"--recall-budget {opt.recall_budget}: must be > 0")
    if not math.isfinite(opt.recall_budget):  # inf: every test's max_steps would overflow
        raise pytest.UsageError(f"--recall-budget {opt.recall_budget}: must be a finite number "
                                "> 0 (it multiplies train.max_steps)")
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
    cache_dir, cache_arg = _cache_folder(config)
    config.pluginmanager.register(RecallSession(config, cache_dir, cache_arg),
                                  "recallbench-session")


def _cache_folder(config: pytest.Config) -> tuple[Path | None, str | None]:
    """The cache folder (option, else ini), ready to use, and its name as given; emptied
    first on --recall-cache-clear (by the controller only, under pytest-xdist)."""
    from recallbench.pytest_plugin import cache

    arg, base = config.option.recall_cache, Path(config.invocation_params.dir)
    what = "--recall-cache"
    if not arg and config.getini("recall_cache"):
        arg, what = config.getini("recall_cache"), "ini recall_cache"
        base = config.inipath.parent if config.inipath else config.rootpath
    if not arg:
        if config.option.recall_cache_clear:
            raise pytest.UsageError("--recall-cache-clear needs --recall-cache DIR "
                                    "(or recall_cache in the ini file)")
        return None, None
    folder = base / arg
    try:
        cache.prepare(folder, what)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if config.option.recall_cache_clear and not hasattr(config, "workerinput"):
        cache.clear(folder)
    return folder, arg


def _session(config: pytest.Config) -> RecallSession:
    return config.pluginmanager.get_plugin("recallbench-session")


@pytest.fixture
def recall(request: pytest.FixtureRequest) -> RecallRunner:
    """Measure recall: ``recall(**keys)`` trains and tests one config, returns the record.

    Keys merge over the test's ``@pytest.mark.recall(...)`` keys.  The result is the run's
    record (``recallbench.result/1``) with attribute access (``result.accuracy``,
    ``result.state_size``, ``result.correct``, ...) plus ``result.effective_state``
    (fitted S_eff, or None), ``result.cached`` and ``result.key`` (its baseline key).
    A config trains once per session (and once across runs with ``--recall-cache``);
    ``min_accuracy`` and the baseline are checked inside the call and fail the test there.
    """
    return _session(request.config).runner(request.node)
