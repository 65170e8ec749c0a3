"""The recall baseline file under concurrent regeneration, and entries of the wrong type."""
from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import types

import pytest

pytest_plugins = ["pytester"]

LOSSY = ('task="mqar", adapter="designed", vocab_size=32, seq_len=16, num_facts=4, '
         'd_model=16, d_state=4, val_size=64, test_size=64')


def session(path, key: str, stale: dict):
    """What output.write_all reads of a session that measured ``key`` with --recall-regen
    and read the baseline file as ``stale`` when it began."""
    record = {"accuracy": 0.5, "correct": 8, "total": 16, "state_size": 64,
              "config": {"train": {"max_steps": 10}}}
    ident = {"config_hash": f"hash-{key}", "config": {"task": {"name": "mqar"}}}
    return types.SimpleNamespace(
        measurements=[{"key": key, "record": record, "identity": ident,
                       "baseline": {"status": "regenerated"}}],
        budget=1.0, baseline=dict(stale), baseline_path=path, report_path=None,
        unwritten=[], written=[])


def test_two_sessions_regenerating_different_tests_keep_both_entries(tmp_path):
    from recallbench.pytest_plugin import output

    path = tmp_path / "baseline.json"
    first, second = session(path, "t::a", {}), session(path, "t::b", {})  # both began empty
    assert output.write_all(second) and output.write_all(first)
    tests = json.loads(path.read_text())["tests"]
    assert sorted(tests) == ["t::a", "t::b"]
    assert tests["t::b"]["config_hash"] == "hash-t::b"


def test_regeneration_waits_for_the_lock_beside_the_file(tmp_path):
    from recallbench.pytest_plugin import output

    path = tmp_path / "baseline.json"
    lock = os.open(tmp_path / "baseline.json.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)  # another session is writing
    done = threading.Event()
    worker = threading.Thread(target=lambda: (output.write_all(session(path, "t::a", {})),
                                              done.set()))
    worker.start()
    time.sleep(0.5)
    assert not done.is_set() and not path.exists()
    path.write_text(json.dumps({"schema": "recallbench.baseline/1", "tests": {
        "t::b": {"accuracy": 1.0, "correct": 4, "total": 4}}}))  # what the other one wrote
    os.close(lock)
    worker.join(10)
    assert done.is_set()
    assert sorted(json.loads(path.read_text())["tests"]) == ["t::a", "t::b"]


@pytest.mark.parametrize("entry, field", [
    (3, "entry 't::a': 3 is not allowed"),
    ({"accuracy": "high"}, "entry 't::a': accuracy = 'high' is not allowed"),
    ({"accuracy": 0.5, "budgets": "0.5"}, "entry 't::a': budgets = '0.5' is not allowed"),
    ({"accuracy": 0.5, "budgets": {"0.5": [1]}}, "entry 't::a': budgets.0.5 = [1] is not allowed"),
    ({"accuracy": 0.5, "config_hash": 7}, "entry 't::a': config_hash = 7 is not allowed"),
    ({"accuracy": 0.5, "total": [4]}, "total = [4] is not allowed: expected a number"),
])
def test_an_entry_of_the_wrong_type_is_one_clear_error(tmp_path, entry, field):
    from recallbench.pytest_plugin import baseline

    path = tmp_path / "b.json"
    path.write_text(json.dumps({"schema": "recallbench.baseline/1", "tests": {"t::a": entry}}))
    with pytest.raises(pytest.UsageError) as info:
        baseline.load(path)
    assert str(path) in str(info.value) and field in str(info.value)


def test_a_wrong_entry_stops_the_session_with_one_line(pytester):
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.recall({LOSSY})
        def test_a(recall):
            recall()
    """)
    (pytester.path / "b.json").write_text(json.dumps({
        "schema": "recallbench.baseline/1",
        "tests": {"test_a_wrong_entry_stops_the_session_with_one_line.py::test_a":
                  {"accuracy": 0.5, "budgets": {"0.5": "fast"}}}}))
    result = pytester.runpytest("--recall-baseline", "b.json", "--recall-budget", "0.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--recall-baseline *b.json: entry *test_a': "
                                 "budgets.0.5 = 'fast' is not allowed*"])
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "AttributeError" not in text
