"""The pytest plugin (recallbench.pytest_plugin): marker, fixture, options, baseline, report.

Inner test suites run in-process with ``pytester`` (the plugin is auto-loaded through
its ``pytest11`` entry point, as in a user's project); one test runs in a fresh
interpreter to check that auto-loading and a third-party adapter's entry point.
Every inner run is tiny: the ``designed`` adapter (no training) or a linear-mamba /
factory model trained for a few dozen steps on MQAR V=32, L=16, N_f=4.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

# the designed model is exact (accuracy 1.0) at d_model = d_state = vocab_size, L = 4·N_f
EXACT = ('task="mqar", adapter="designed", vocab_size=16, seq_len=16, num_facts=4, '
         'd_model=16, d_state=16, val_size=64, test_size=64')
# ... and imperfect (about 0.46) with a Gaussian embedding and a small state: room to regress
LOSSY_KEYS = dict(task="mqar", adapter="designed", vocab_size=32, seq_len=16, num_facts=4,
                  d_model=16, d_state=4, val_size=64, test_size=64)
LOSSY = ", ".join(f"{k}={v!r}" for k, v in LOSSY_KEYS.items())
TINY = ('task="mqar", vocab_size=32, seq_len=16, num_facts=4, d_model=16, d_state=8, '
        'max_steps=30, val_every=10, val_size=64, test_size=64')


@pytest.fixture(scope="module", autouse=True)
def lossy() -> dict:
    """The LOSSY config's record, measured out here (no training: instant).

    It also loads what a measurement imports (registries, tasks, Lightning, scipy) in
    this process: an in-process ``pytester.runpytest`` drops the modules its inner
    session imported from ``sys.modules`` afterwards, so the registries (imported out
    here) would keep classes of dropped modules, and Lightning would load again per run.
    """
    from recallbench.api.config import resolve
    from recallbench.law.fit import fit_effective_state
    from recallbench.pytest_plugin.markers import build
    from recallbench.harness.train import run

    raw, _ = build([LOSSY_KEYS])
    record = run(resolve(raw), progress=False)
    fit_effective_state(record["correct"], record["total"], 16, 4, 32)
    assert 0.15 < record["accuracy"] < 0.85, "LOSSY must leave room both ways"
    return record


def _acc(record: dict, accuracy: float | None = None, correct: int | None = None) -> str:
    """How the plugin prints an accuracy: 0.4648 (119/256)."""
    accuracy = record["accuracy"] if accuracy is None else accuracy
    correct = record["correct"] if correct is None else correct
    return f"{accuracy:.4f} ({correct}/{record['total']})"


def _report(pytester) -> dict:
    return json.loads((pytester.path / "report.json").read_text())


def test_plugin_is_registered_and_imports_light():
    from importlib.metadata import entry_points

    assert any(ep.value == "recallbench.pytest_plugin" for ep in entry_points(group="pytest11"))
    code = ("import sys, recallbench.pytest_plugin; "
            "heavy = [m for m in ('torch', 'lightning', 'scipy', 'numpy') if m in sys.modules]; "
            "print(heavy); sys.exit(bool(heavy))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_passing_recall_test_summary_and_marker_only(pytester):
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({EXACT}, min_accuracy=0.99)
        def test_exact(recall):
            result = recall()
            assert result.accuracy == 1.0 and result["accuracy"] == 1.0
            assert result.state_size == 2 * 16 * 16
            assert result.config["model"]["adapter"] == "designed"
            assert result.effective_state == float("inf")  # above the reference's cap

        @pytest.mark.recall({EXACT}, min_accuracy=0.99)
        def test_marker_only():
            pass  # measured after the body; min_accuracy asserted by the plugin
    """)
    result = pytester.runpytest("--recall-report", "report.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*= recall summary =*",
        "test * accuracy * correct/total * state * S_eff*",
        "*::test_exact * 1.0000 * 256/256 * 512 * inf *",
        "*::test_marker_only * 1.0000 * cached*",
        "1 training run(s) for 2 measurement(s)",
    ])
    exact = _report(pytester)["tests"][0]
    assert exact["effective_state"] is None  # S_eff = inf is written as plain JSON: null
    assert exact["effective_state_ci"][0] > 0 and exact["effective_state_ci"][1] is None


def test_min_accuracy_fails_like_an_assertion(pytester, lossy):
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({LOSSY}, min_accuracy=0.99)
        def test_lossy(recall):
            recall()
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*recall accuracy {_acc(lossy)} is below min_accuracy 0.99*"])
    assert "Traceback" not in result.stdout.str()


def test_session_cache_trains_once(pytester, monkeypatch):
    import recallbench.harness.train as train

    calls = []
    real = train.run

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(train, "run", counting)
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({TINY}, adapter="linear-mamba")
        def test_a(recall):
            assert not recall().cached

        @pytest.mark.recall({TINY}, adapter="linear-mamba", threads=1)  # unhashed: same run
        def test_b(recall):
            result = recall()
            assert result.cached and result.steps > 0
    """)
    result = pytester.runpytest("--recall-report", "report.json")
    result.assert_outcomes(passed=2)
    assert len(calls) == 1
    report = _report(pytester)
    assert report["training_runs"] == 1 and report["measurements"] == 2
    a, b = report["tests"]
    assert (a["cached"], b["cached"]) == (False, True)
    assert a["config_hash"] == b["config_hash"] and a["accuracy"] == b["accuracy"]


def test_json_report(pytester, lossy):
    pytester.makepyfile(f"""
        import pytest

        pytestmark = pytest.mark.recall({LOSSY})  # module-level defaults

        def test_plain(recall):
            assert recall().accuracy < 1

        def test_two_configs(recall):
            recall(d_state=8)
            recall(**{{"model.d_state": 2}})
            assert recall(config={{"model": {{"d_state": 8}}}}).cached  # same as the first

        @pytest.mark.recall(d_sate=3)
        def test_typo(recall):
            recall()
    """)
    result = pytester.runpytest("--recall-report", "out/report.json")
    result.assert_outcomes(passed=2, failed=1)
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    assert report["schema"] == "recallbench.pytest-report/1"
    assert report["training_runs"] == 3 and report["measurements"] == 5
    by_key = {t["key"]: t for t in report["tests"]}
    plain = by_key["test_json_report.py::test_plain"]
    assert plain["outcome"] == "passed" and plain["accuracy"] == lossy["accuracy"]
    assert (plain["correct"], plain["total"], plain["state_size"]) == (lossy["correct"], 256, 128)
    assert plain["effective_state"] > 0 and len(plain["effective_state_ci"]) == 2
    assert plain["record"]["schema"] == "recallbench.result/1"
    first, second = by_key["test_json_report.py::test_two_configs"], \
        by_key["test_json_report.py::test_two_configs#2"]
    assert first["record"]["config"]["model"]["d_state"] == 8
    assert second["record"]["config"]["model"]["d_state"] == 2
    typo = by_key["test_json_report.py::test_typo"]
    assert typo["outcome"] == "failed" and typo["record"] is None
    assert typo["error"] == "unknown key 'd_sate'; did you mean d_state?"


def test_baseline_regen_compare_and_regression(pytester, lossy):
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({LOSSY})
        def test_strict(recall):
            recall()

        @pytest.mark.recall({LOSSY}, tolerance=0.5)
        def test_lenient(recall):
            recall()
    """)
    # no baseline yet: a clear failure telling how to create it
    result = pytester.runpytest("--recall-baseline", "recall-baseline.json")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*no recall baseline for test_baseline_regen_compare_and_regression.py::test_strict in "
        "recall-baseline.json*--recall-baseline recall-baseline.json --recall-regen*"])

    # regenerate: passes and writes both entries
    result = pytester.runpytest("--recall-baseline", "recall-baseline.json", "--recall-regen")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*{lossy['accuracy']:.4f} regenerated*",
                                 "recall baseline written to *"])
    path = pytester.path / "recall-baseline.json"
    data = json.loads(path.read_text())
    assert data["schema"] == "recallbench.baseline/1"
    entry = data["tests"]["test_baseline_regen_compare_and_regression.py::test_strict"]
    assert (entry["accuracy"], entry["correct"]) == (lossy["accuracy"], lossy["correct"])
    assert "device" not in entry["config"]["train"]  # execution-only keys are not stored

    # compare against it: same measurement, passes
    result = pytester.runpytest("--recall-baseline", "recall-baseline.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*{lossy['accuracy']:.4f} ok*"])

    # a stored accuracy 0.1 better: the strict test regresses, the lenient one is within tolerance
    better = lossy["correct"] + 26
    for e in data["tests"].values():
        e["accuracy"], e["correct"] = better / 256, better
    path.write_text(json.dumps(data))
    result = pytester.runpytest("--recall-baseline", "recall-baseline.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*recall regression in test_baseline_regen_compare_and_regression.py::test_strict",
        f"*stored   accuracy {_acc(lossy, better / 256, better)}*recall-baseline.json*",
        f"*measured accuracy {_acc(lossy)}",
        f"*drop {26 / 256:.4f} > tolerance 0.02",
        "*--recall-regen*",
        f"*{better / 256:.4f} REGRESSED*",
    ])
    # a looser global tolerance lets it pass
    pytester.runpytest("--recall-baseline", "recall-baseline.json",
                       "--recall-tolerance", "0.3").assert_outcomes(passed=2)

    # a reduced budget is the same config: it is compared with that budget's numbers, which
    # are missing until recorded, and recording them keeps the full budget's
    result = pytester.runpytest("--recall-baseline", "recall-baseline.json",
                                "--recall-budget", "0.5")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*no recall baseline for *test_strict at --recall-budget 0.5 in "
                                 "recall-baseline.json*--recall-budget 0.5 --recall-regen*"])
    assert "another config" not in result.stdout.str()
    pytester.runpytest("--recall-baseline", "recall-baseline.json", "--recall-budget", "0.5",
                       "--recall-regen").assert_outcomes(passed=2)
    entry = json.loads((pytester.path / "recall-baseline.json").read_text())["tests"]
    strict = entry["test_baseline_regen_compare_and_regression.py::test_strict"]
    assert strict["budgets"]["0.5"]["max_steps"] == 1000 and strict["accuracy"] == better / 256
    pytester.runpytest("--recall-baseline", "recall-baseline.json", "--recall-budget",
                       "0.5").assert_outcomes(passed=2)
    # a changed config is not compared against a stale entry; the message shows the full
    # budget's config, whatever --recall-budget scaled
    strict["config_hash"], strict["config"]["train"]["max_steps"] = "other", 3000
    (pytester.path / "recall-baseline.json").write_text(json.dumps({**data, "tests": entry}))
    result = pytester.runpytest("--recall-baseline", "recall-baseline.json", "-k", "strict",
                                "--recall-budget", "0.5")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*recorded with another config (train.max_steps: 3000 -> 2000)*"])


def test_bad_marker_arguments_give_one_line_errors(pytester):
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({EXACT}, d_sate=3)
        def test_unknown_key(recall):
            recall()

        @pytest.mark.recall({EXACT})
        def test_bad_value(recall):
            recall(vocab_size=15)  # the call's keys override the marker's

        @pytest.mark.recall({EXACT}, min_accuracy=2)
        def test_bad_plugin_key(recall):
            recall()

        @pytest.mark.recall("mqar")
        def test_positional(recall):
            recall()

        @pytest.mark.recall({EXACT})
        def test_unknown_adapter(recall):
            recall(adapter="linear_mamba")
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=5)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "recall: unknown key 'd_sate'; did you mean d_state?",
        "recall: task.vocab_size = 15 is not allowed: must be even*",
        "recall: min_accuracy = 2 is not allowed: a number in [[]0, 1[]] or None",
        "recall: @pytest.mark.recall takes keyword arguments only*",
        "recall: unknown adapter 'linear_mamba'; did you mean linear-mamba*",
    ])
    assert "Traceback" not in out and "recallbench/" not in out and "During handling" not in out


def test_options_are_validated(pytester):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--recall-regen")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--recall-regen needs --recall-baseline PATH*"])
    result = pytester.runpytest("--recall-budget", "0")
    result.stderr.fnmatch_lines(["*--recall-budget 0.0: must be > 0*"])
    result = pytester.runpytest("--recall-device", "gpu")
    result.stderr.fnmatch_lines(["*--recall-device: train.device = 'gpu' is not allowed*"])
    (pytester.path / "b.json").write_text("[]")
    result = pytester.runpytest("--recall-baseline", "b.json")
    result.stderr.fnmatch_lines(["*not a recallbench baseline*"])


@pytest.mark.parametrize("budget, said", [("inf", "must be a finite number > 0"),
                                           ("nan", "must be > 0")])
def test_a_budget_that_is_no_number_is_refused_at_parsing(pytester, budget, said):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--recall-budget", budget)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--recall-budget {budget}: {said}*"])
    assert "OverflowError" not in result.stderr.str() + result.stdout.str()


def test_budget_and_device_options(pytester):
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({EXACT}, max_steps=40)
        def test_scaled(recall):
            result = recall()
            assert result.config["train"]["max_steps"] == 10
            assert result.device.startswith("cpu")
    """)
    result = pytester.runpytest("--recall-budget", "0.25", "--recall-device", "cpu")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*budget x0.25*"])


def test_nn_module_factory(pytester):
    pytester.makepyfile(f"""
        import pytest
        from torch import nn

        class ShiftMixer(nn.Module):
            '''A token-shift mixer: sees the previous token only (no long-range state).'''
            def __init__(self, d_model):
                super().__init__()
                self.proj = nn.Linear(2 * d_model, d_model)

            def forward(self, x):  # (B, L, D) -> (B, L, D)
                prev = nn.functional.pad(x, (0, 0, 1, 0))[:, :-1]
                return self.proj(__import__("torch").cat([x, prev], -1))

        @pytest.mark.recall({TINY}, state_size=16)
        def test_factory(recall):
            result = recall(factory=lambda d_model, layer_idx: ShiftMixer(d_model))
            assert result.state_size == 16 and result.steps > 0
            assert result.config["model"]["adapter"] == "pytest-factory"
            assert result.config["model"]["options"]["factory"].endswith("<lambda>")
            assert 0 <= result.accuracy < 0.9  # no state, no recall

        @pytest.mark.recall({TINY}, n_layers=2, factory=ShiftMixer)  # by parameter name
        def test_class_factory_no_state_size(recall):
            result = recall()
            assert result.state_size is None and result.params > 0

        @pytest.mark.recall({TINY}, factory=lambda d_model: "not a module")
        def test_bad_factory(recall):
            recall()

        @pytest.mark.recall({TINY}, adapter="linear-mamba", factory=ShiftMixer)
        def test_both(recall):
            recall()
    """)
    result = pytester.runpytest("--recall-report", "report.json")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "recall: factory test_nn_module_factory:*<lambda> returned str, expected an nn.Module",
        "recall: give adapter= ('linear-mamba') or factory=, not both",
        "*::test_factory * 16 *",
    ])
    tests = {t["key"].split("::")[1]: t for t in _report(pytester)["tests"]}
    assert tests["test_class_factory_no_state_size"]["state_size"] is None
    assert tests["test_class_factory_no_state_size"]["record"]["config"]["model"]["n_layers"] == 2


THIRD_PARTY_ADAPTER = '''
import torch
from torch import nn
from recallbench.api.adapter import Adapter

class Lookup(nn.Module):
    """Passes the embedding through: no state, evaluation only."""
    def forward(self, x):
        return torch.zeros_like(x)

class ZeroAdapter(Adapter):
    trainable = False
    def build_blocks(self, device):
        return nn.ModuleList([Lookup() for _ in range(self.cfg.n_layers)])
    def state_size(self):
        return 7
'''


@pytest.mark.slow
def test_autoload_in_fresh_interpreter_with_third_party_adapter(pytester, plugin_dist):
    """No conftest, no -p: the entry point loads the plugin; the adapter comes by entry point."""
    plugin_dist({"recallbench.adapters": [("zero-adapter", "rb_zero_adapter:ZeroAdapter")]},
                {"rb_zero_adapter": THIRD_PARTY_ADAPTER})
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({EXACT.replace('"designed"', '"zero-adapter"')})
        def test_third_party(recall):
            result = recall()
            assert result.state_size == 7 and result.accuracy < 0.5
    """)
    result = pytester.runpytest_subprocess("--recall-report", "report.json", timeout=300)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*= recall summary =*", "*::test_third_party * 7 *"])
    assert _report(pytester)["tests"][0]["record"]["config"]["model"]["adapter"] == "zero-adapter"


def test_unavailable_device_skips(pytester):
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({EXACT})
        def test_on_cuda(recall):
            recall()
    """)
    result = pytester.runpytest("--recall-device", "cuda", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*::test_on_cuda * skipped: train.device = cuda*",
                                 "*recall: train.device = cuda, but no CUDA device*"])


@pytest.mark.parametrize("x, shown", [(998.2, "998"), (1038.7, "1040"), (31.34, "31.3"),
                                      (2.5e8, "2.5e+08"), (float("inf"), "inf")])
def test_summary_numbers_keep_three_digits_without_exponents_in_range(x, shown):
    from recallbench.pytest_plugin.summary import short_number

    assert short_number(x) == shown


def test_baseline_files_of_older_versions_with_inf_strings_are_read_as_numbers(tmp_path):
    from recallbench.pytest_plugin import baseline

    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema": "recallbench.baseline/1", "tests": {
        "t::a": {"accuracy": "inf", "correct": 3, "total": 4, "state_size": "inf",
                 "config_hash": "h", "config": {"task": {"name": "inf"}}}}}))
    stored = baseline.load(path)["t::a"]
    assert stored["accuracy"] == float("inf") and stored["state_size"] == float("inf")
    assert stored["config"] == {"task": {"name": "inf"}}  # only the numbers are revived
    record = {"accuracy": 0.75, "correct": 3, "total": 4, "config_hash": "h", "config": {}}
    problems = []
    status = baseline.compare(stored, "t::a", record, {"config_hash": "h", "config": {}}, 0.02,
                              path="old.json", regen_hint="regen", budget=1.0, problems=problems)
    assert status["status"] == "REGRESSED" and "stored   accuracy inf (3/4)" in problems[0]


def test_min_accuracy_is_the_full_budgets_floor_and_min_accuracy_reduced_the_reduced_ones(
        pytester, lossy):
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({LOSSY}, min_accuracy=0.99)
        def test_full_floor(recall):
            recall()

        @pytest.mark.recall({LOSSY}, min_accuracy=0.1, min_accuracy_reduced=0.99)
        def test_reduced_floor(recall):
            recall()
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"*recall accuracy {lossy['accuracy']:.4f}*is below "
                                 "min_accuracy 0.99"])
    result = pytester.runpytest("--recall-budget", "0.25")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*is below min_accuracy_reduced 0.99 (--recall-budget 0.25)"])
    result = pytester.runpytest("--recall-budget", "0.25", "-k", "full_floor")
    result.assert_outcomes(passed=1)


def test_the_learning_rate_search_is_passed_through_as_train_lr():
    from recallbench.api.errors import ConfigError
    from recallbench.pytest_plugin.markers import build

    for lr in ([3e-3, 1e-2], "auto"):
        raw, plugin = build([dict(task="mqar", lr=lr, min_accuracy_reduced=0.5)])
        assert raw["train"]["lr"] == lr and plugin["min_accuracy_reduced"] == 0.5
    with pytest.raises(ConfigError, match=r"min_accuracy_reduced = 2 is not allowed: a number in \[0, 1\]"):
        build([dict(task="mqar", min_accuracy_reduced=2)])
