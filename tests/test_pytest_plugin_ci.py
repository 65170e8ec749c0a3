"""The pytest plugin in CI: the cache across runs, JUnit properties, the step summary,
and pytest-xdist (measurements travel to the controller, which writes what a serial run
writes).

Inner suites run in-process with ``pytester``; the xdist ones start worker processes and
are marked slow.  Models are tiny: the ``designed`` adapter or an evaluation-only adapter
(no training), or a factory model trained for 30 steps on MQAR V=32, L=16, N_f=4.
"""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

pytest_plugins = ["pytester"]

EXACT = ('task="mqar", adapter="designed", vocab_size=16, seq_len=16, num_facts=4, '
         'd_model=16, d_state=16, val_size=64, test_size=64')
LOSSY = ('task="mqar", adapter="designed", vocab_size=32, seq_len=16, num_facts=4, '
         'd_model=16, d_state=4, val_size=64, test_size=64')
TINY = ('task="mqar", vocab_size=32, seq_len=16, num_facts=4, d_model=16, d_state=8, '
        'max_steps=30, val_every=10, val_size=64, test_size=64')

# an evaluation-only third-party adapter in a package of its own, its layer in another module
LAYER = '''
import torch
from torch import nn

class Echo(nn.Module):
    """Adds nothing: no state, no recall."""
    def forward(self, x):
        return torch.zeros_like(x)
'''
ADAPTER = '''
from torch import nn
from recallbench.api.adapter import Adapter
from rbzoo.layer import Echo

class EchoAdapter(Adapter):
    trainable = False
    def build_blocks(self, device):
        return nn.ModuleList([Echo() for _ in range(self.cfg.n_layers)])
    def state_size(self):
        return 5
'''
CONFTEST = '''
from recallbench.api.registry import ADAPTERS

def pytest_configure(config):
    from rbzoo.adapter import EchoAdapter
    ADAPTERS.add("rb-echo", EchoAdapter, origin="rbzoo")

def pytest_unconfigure(config):
    ADAPTERS.remove("rb-echo")
'''


@pytest.fixture(scope="module", autouse=True)
def _measurement_modules_loaded():
    """Import what a measurement imports, out here (see test_pytest_plugin.lossy)."""
    from recallbench.api.config import resolve
    from recallbench.harness.train import run
    from recallbench.pytest_plugin.markers import build

    raw, _ = build([dict(task="mqar", adapter="designed", vocab_size=16, seq_len=16,
                         num_facts=4, d_model=16, d_state=16, val_size=64, test_size=64)])
    run(resolve(raw), progress=False)


@pytest.fixture
def train_calls(monkeypatch) -> list:
    """Every training run of the in-process inner sessions."""
    import recallbench.harness.train as train

    calls, real = [], train.run

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(train, "run", counting)
    return calls


def _zoo(pytester) -> None:
    """The rbzoo package (adapter and layer modules) and a conftest registering it."""
    pytester.mkpydir("rbzoo")
    (pytester.path / "rbzoo" / "layer.py").write_text(LAYER)
    (pytester.path / "rbzoo" / "adapter.py").write_text(ADAPTER)
    pytester.makeconftest(CONFTEST)
    pytester.syspathinsert()


def _summary_line(result) -> str:
    return next(line for line in result.stdout.lines if "training run(s) for" in line)


def test_cache_second_run_trains_nothing_and_an_edited_layer_retrains(pytester, train_calls):
    _zoo(pytester)
    test_file = pytester.makepyfile(f"""
        import pytest
        from torch import nn

        class Shift(nn.Module):
            def __init__(self, d_model):
                super().__init__()
                self.proj = nn.Linear(2 * d_model, d_model)

            def forward(self, x):
                prev = nn.functional.pad(x, (0, 0, 1, 0))[:, :-1]
                return self.proj(__import__("torch").cat([x, prev], -1))

        @pytest.mark.recall({EXACT.replace('"designed"', '"rb-echo"')})
        def test_a(recall):
            recall()

        @pytest.mark.recall({EXACT.replace('"designed"', '"rb-echo"')})
        def test_b(recall):
            recall()

        @pytest.mark.recall({TINY})
        def test_factory(recall):
            recall(factory=lambda d_model: Shift(d_model))
    """)

    def run(*args) -> str:
        train_calls.clear()
        result = pytester.runpytest("--recall-report", "report.json", *args)
        result.assert_outcomes(passed=3)
        return _summary_line(result)

    first = run("--recall-cache", "rc")
    assert len(train_calls) == 2
    assert first == "2 training run(s) for 3 measurement(s); cache rc: 2 trained, 0 from cache"
    assert len(list((pytester.path / "rc").glob("*.json"))) == 2

    assert run("--recall-cache", "rc").endswith("cache rc: 0 trained, 3 from cache")
    assert train_calls == []
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["training_runs"] == 0 and report["from_cache"] == 3
    assert [t["source"] for t in report["tests"]] == ["cache"] * 3
    assert all(t["cached"] for t in report["tests"])

    # the ini option names the same folder
    pytester.makeini("[pytest]\nrecall_cache = rc\n")
    assert run().endswith("cache rc: 0 trained, 3 from cache") and train_calls == []

    # an edited layer module: the adapter's tests retrain once, the factory's does not
    layer = pytester.path / "rbzoo" / "layer.py"
    layer.write_text(LAYER + "# tuned\n")
    assert run().endswith("cache rc: 1 trained, 1 from cache") and len(train_calls) == 1
    # an edited factory module retrains the factory's test only
    test_file.write_text(test_file.read_text() + "# edited\n")
    assert run().endswith("cache rc: 1 trained, 2 from cache") and len(train_calls) == 1

    # a torn or foreign entry is retrained, not trusted
    for entry in (pytester.path / "rc").glob("*.json"):
        entry.write_text("{")
    assert run().endswith("cache rc: 2 trained, 0 from cache") and len(train_calls) == 2

    # clearing removes the entries (and only them)
    (pytester.path / "rc" / "notes.txt").write_text("mine")
    assert run("--recall-cache-clear").endswith("2 trained, 0 from cache")
    assert len(train_calls) == 2 and (pytester.path / "rc" / "notes.txt").exists()


def test_share_key_covers_provenance_and_refuses_closures(tmp_path, plugin_dist):
    import functools

    from recallbench.api.config import resolve
    from recallbench.api.provenance import provenance
    from recallbench.api.registry import ADAPTERS
    from recallbench.pytest_plugin.cache import share_key

    assert provenance("designed")["distribution"] == "recallbench"
    assert provenance("designed")["version"]
    plugin_dist({}, {}, dist="rbzoo")
    (tmp_path / "rbzoo").mkdir()
    (tmp_path / "rbzoo" / "__init__.py").write_text("")
    (tmp_path / "rbzoo" / "layer.py").write_text(LAYER)
    (tmp_path / "rbzoo" / "adapter.py").write_text(ADAPTER)
    from rbzoo.adapter import EchoAdapter

    ADAPTERS.add("rb-echo-key", EchoAdapter, origin="rbzoo")
    try:
        prov = provenance("rb-echo-key")
        assert (prov["distribution"], prov["version"], prov["library"]) == ("rbzoo", "0.1", None)
        cfg = resolve({"task": {"name": "mqar", "vocab_size": 16, "seq_len": 16,
                                "num_facts": 4},
                       "model": {"adapter": "rb-echo-key", "d_model": 16, "d_state": 4}})
        key, material = share_key(cfg, None)
        assert material["adapter"] == prov and material["config_hash"] == cfg.hash()
        assert {"python", "recallbench", "torch", "lightning"} <= set(material["versions"])
        (tmp_path / "rbzoo" / "layer.py").write_text(LAYER + "# tuned\n")  # imported module
        assert provenance("rb-echo-key")["source_sha256"] != prov["source_sha256"]
        assert share_key(cfg, None)[0] != key

        def make(d_model, width):
            return EchoAdapter(d_model, width)

        width = 3
        assert share_key(cfg, functools.partial(make, width=3)) == (None, None)
        assert share_key(cfg, lambda d_model: make(d_model, width)) == (None, None)  # closure
        one = lambda d_model: ET.Element(d_model)  # noqa: E731  (globals only: shared)
        two = lambda d_model: ET.Element(d_model)  # noqa: E731
        assert share_key(cfg, one)[0] == share_key(cfg, one)[0] != share_key(cfg, two)[0]
        label = share_key(cfg, EchoAdapter)[1]["factory"]["label"]
        assert label == "rbzoo.adapter:EchoAdapter"
    finally:
        ADAPTERS.remove("rb-echo-key")


def test_settle_orders_by_collection_and_credits_the_first_measurement():
    from recallbench.pytest_plugin.workers import counts, settle

    def m(order, source, share, config_hash="h"):
        return {"order": order, "source": source, "share": share,
                "record": {"config_hash": config_hash}}

    # a worker ran b first (trained) and a waited for it: a serial run trains a
    got = settle([m([1, 1], "trained", "k"), m([0, 1], "session", "k"),
                  m([2, 1], "cache", "c"), m([3, 1], "session", "c"),
                  m([4, 1], "trained", None, "x"), m([4, 2], "trained", None, "x"),
                  m([5, 1], None, None)])
    assert [x["order"][0] for x in got] == [0, 1, 2, 3, 4, 4, 5]
    assert [x["source"] for x in got] == ["trained", "session", "cache", "cache",
                                          "trained", "trained", None]
    assert counts(got) == {"trained": 3, "session": 1, "cache": 2, "retrained": 1}


def test_junit_properties_and_github_step_summary(pytester, monkeypatch):
    summary = pytester.path / "step-summary.md"
    summary.write_text("# an earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({EXACT})
        def test_exact(recall):
            recall()
            recall(d_state=8)

        @pytest.mark.recall({LOSSY}, min_accuracy=0.99)
        def test_lossy(recall):
            recall()
    """)
    result = pytester.runpytest("--junitxml", "junit.xml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*recall accuracy 0.* is below min_accuracy 0.99*"])
    cases = {c.get("name"): c for c in ET.parse(pytester.path / "junit.xml").iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_exact"].iter("property")}
    assert props["accuracy"] == "1.0" and props["state_size"] == "512"
    assert props["effective_state"] == "inf" and props["state_size#2"] == "256"
    assert float(props["accuracy#2"]) <= 1 and float(props["effective_state#2"]) > 0
    lossy = {p.get("name"): p.get("value") for p in cases["test_lossy"].iter("property")}
    assert set(lossy) == {"accuracy", "state_size", "effective_state"}
    assert "below min_accuracy 0.99" in cases["test_lossy"].find("failure").get("message")

    text = summary.read_text()
    assert text.startswith("# an earlier step\n### recall summary\n")
    assert "| test | accuracy | correct/total | state | S_eff [95% CI] |" in text
    assert re.search(r"\| `test_junit\S+::test_exact` \| 1\.0000 \| 256/256 \| 512 \| inf ",
                     text)
    assert "\n3 training run(s) for 3 measurement(s)\n" in text


def test_cache_options_are_validated(pytester):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--recall-cache-clear")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--recall-cache-clear needs --recall-cache DIR*"])
    (pytester.path / "afile").write_text("")
    result = pytester.runpytest("--recall-cache", "afile")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--recall-cache *afile: not a folder"])


def test_unwritable_report_fails_the_run_in_one_line(pytester, monkeypatch):
    (pytester.path / "afile").write_text("")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "afile" / "summary.md"))
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({EXACT})
        def test_exact(recall):
            recall()
    """)
    result = pytester.runpytest("--recall-report", "afile/report.json")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["recall: cannot write */afile/report.json (*)",
                                 "recall: cannot write $GITHUB_STEP_SUMMARY (*)"])
    assert "Traceback" not in result.stdout.str()


XDIST_SUITE = f"""
    import pytest

    @pytest.mark.recall({TINY}, adapter="linear-mamba")
    def test_trained(recall):
        recall()

    @pytest.mark.recall({TINY}, adapter="linear-mamba")
    def test_same_config(recall):
        recall()

    @pytest.mark.recall({LOSSY})
    def test_two_calls(recall):
        recall()
        recall(d_state=8)

    @pytest.mark.recall({LOSSY}, min_accuracy=0.99)
    def test_marker_only_fails():
        pass

    @pytest.mark.recall({EXACT.replace('"designed"', '"rb-echo"')})
    def test_third_party(recall):
        recall()
"""


def _timeless(report: dict) -> dict:
    for test in report["tests"]:
        for key in ("wall_s", "train_s", "cpu_s"):
            (test["record"] or {}).pop(key, None)
    report["options"]["baseline"] = None
    return report


def _recall_summary(result) -> list[str]:
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "= recall summary =" in line)
    end = next(i for i, line in enumerate(lines) if "training run(s) for" in line)
    return [re.sub(r"\d+\.\d+s\b", "T", line) for line in lines[start:end + 1]]


@pytest.mark.slow
def test_xdist_writes_what_a_serial_run_writes(pytester):
    _zoo(pytester)
    pytester.makepyfile(XDIST_SUITE)
    args = ("--recall-regen", "--recall-report", "report.json", "--junitxml", "junit.xml")
    serial = pytester.runpytest("--recall-baseline", "serial.json", *args)
    serial.assert_outcomes(passed=4, failed=1)
    serial_report = _timeless(json.loads((pytester.path / "report.json").read_text()))
    parallel = pytester.runpytest("-n", "2", "--recall-baseline", "parallel.json", *args)
    parallel.assert_outcomes(passed=4, failed=1)
    parallel_report = _timeless(json.loads((pytester.path / "report.json").read_text()))

    assert (pytester.path / "serial.json").read_bytes() == \
        (pytester.path / "parallel.json").read_bytes()
    assert len(json.loads((pytester.path / "parallel.json").read_text())["tests"]) == 6
    assert parallel_report == serial_report
    assert parallel_report["training_runs"] == 4 and parallel_report["measurements"] == 6
    assert _recall_summary(parallel) == [line.replace("serial.json", "parallel.json")
                                         for line in _recall_summary(serial)]
    parallel.stdout.fnmatch_lines(["*::test_same_config * cached *",
                                   "4 training run(s) for 6 measurement(s)*"])
    cases = {c.get("name"): c for c in ET.parse(pytester.path / "junit.xml").iter("testcase")}
    assert {p.get("name") for p in cases["test_two_calls"].iter("property")} == {
        "accuracy", "state_size", "effective_state",
        "accuracy#2", "state_size#2", "effective_state#2"}

    # the cache across runs under xdist: the second run trains nothing
    for _ in range(2):
        result = pytester.runpytest("-n", "2", "--recall-cache", "rc")
        result.assert_outcomes(passed=4, failed=1)
    assert _summary_line(result).startswith("0 training run(s) for 6 measurement(s); "
                                            "cache rc: 0 trained, 6 from cache")
