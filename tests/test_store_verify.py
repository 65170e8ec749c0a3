"""A stored record is used only if its config_hash is its config's and its counts are
possible: a forged or impossible record is one warning naming file:line, and not used."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from recallbench.api.config import resolve
from recallbench.law import scorer
from recallbench.runs.store import StoreWarning, read_store

TASK = {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4}
TRAIN = {"max_steps": 5, "val_every": 5, "val_size": 16, "test_size": 4, "batch_size": 16}
MODEL = {"adapter": "designed", "d_model": 8, "d_state": 4}
ROOT = Path(__file__).resolve().parent.parent


def record(seed: int, correct: int = 12, total: int = 16, **extra) -> dict:
    cfg = resolve({"task": TASK, "model": MODEL, "train": {**TRAIN, "seed": seed}})
    return {"schema": "recallbench.result/1", "status": "ok", "error": None, "seed": seed,
            "config": cfg.to_dict(), "config_hash": cfg.hash(), "correct": correct,
            "total": total, "accuracy": correct / total if total else 1.0,
            "state_size": 64, "state_bits": 32, **extra}


def write_store(tmp_path, records) -> Path:
    store = tmp_path / "st"
    store.mkdir()
    (store / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return store


def test_a_record_filed_under_another_points_hash_is_not_believed(cli, tmp_path):
    real, forged = record(0, correct=16), record(0, correct=16)
    forged["config_hash"] = record(1)["config_hash"]  # seed 0's result, seed 1's name
    store = write_store(tmp_path, [real, forged])
    with pytest.warns(StoreWarning, match=r"results.jsonl:2: record filed under config_hash "
                                          + forged["config_hash"][:12]):
        got = read_store(store)
    assert [r["config_hash"] for r in got.records] == [real["config_hash"]]
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"base": {"task": TASK, "model": MODEL, "train": TRAIN},
                                     "axes": {"train.seed": [0, 1]}}))
    rc, out, err = cli("sweep", str(sweep), "--store", "st", "--dry-run")
    assert rc == 0, err
    assert "1 ok, 1 pending" in out and "1 points left to run" in out
    assert f"{forged['config_hash'][:12]}  pending" in out
    assert err.count("recallbench: warning:") == 1 and "results.jsonl:2:" in err
    with pytest.warns(scorer.ScoreWarning, match=r"results.jsonl:2: record filed under"):
        scored = scorer.load_records(store)
    assert [r["config_hash"] for r in scored] == [real["config_hash"]]


def test_a_result_without_a_config_cannot_claim_a_points_hash(tmp_path):
    bare = {k: v for k, v in record(1).items() if k != "config"}
    with pytest.warns(StoreWarning, match=r"results.jsonl:1: .*no config to check"):
        assert read_store(write_store(tmp_path, [bare])).records == []


@pytest.mark.parametrize("change, what", [
    ({"total": 0, "correct": 0, "accuracy": 1.0}, "total = 0"),
    ({"correct": 20}, "correct = 20 is more than total = 16"),
    ({"correct": -1}, "correct = -1 is impossible"),
    ({"accuracy": 1.0}, "accuracy = 1.0 is not correct / total = 12/16"),
    ({"accuracy": 1.5}, "accuracy = 1.5 is impossible"),
    ({"total": True}, "total = True is impossible"),
])
def test_impossible_counts_are_one_warning_naming_the_line(tmp_path, change, what):
    good, bad = record(0), record(1)
    bad.update(change)
    store = write_store(tmp_path, [good, bad])
    with pytest.warns(StoreWarning) as seen:
        got = read_store(store)
    lines = [str(w.message) for w in seen]
    assert len(lines) == 1 and lines[0].startswith(f"{store / 'results.jsonl'}:2: ")
    assert what in lines[0]
    assert [r["config_hash"] for r in got.records] == [good["config_hash"]]


def test_the_scorer_skips_a_record_that_tested_nothing(tmp_path):
    bad = record(1, correct=0, total=0)  # accuracy 1.0 of no query
    with pytest.warns(scorer.ScoreWarning, match=r"results.jsonl:2: total = 0"):
        got = scorer.load_records(write_store(tmp_path, [record(0), bad]))
    assert len(got) == 1


def committed_stores() -> list[Path]:
    found = set()
    for top in ("docs/results", "leaderboards"):
        for f in (ROOT / top).rglob("*.jsonl"):
            if (f.parent / "steps.jsonl").is_file() and (f.parent / "summary.json").is_file():
                continue  # a benchmarks/gpu_run.py folder: benchmark rows, not a result store
            found.add(f.parent if f.name.startswith("results") else f)
    return sorted(found)


def test_every_committed_store_verifies():
    import warnings

    stores = committed_stores()
    assert len(stores) >= 9
    for store in stores:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            got = read_store(store)
        problems = [str(w.message) for w in seen if issubclass(w.category, StoreWarning)]
        assert problems == [], (store, problems[:3])
        assert got.read > 0 and len(got.records) + got.duplicates == got.read
