"""The result store: torn lines, shards, merging, duplicates, one writer per file."""
import json

import pytest
import yaml

from recallbench.law import scorer
from recallbench.api.errors import ConfigError
from recallbench.runs.store import Store, StoreWarning, merge_records, read_lines, read_store

BASE = {"task": {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4},
        "model": {"adapter": "designed", "d_model": 8, "d_state": 4},
        "train": {"val_size": 16, "test_size": 16, "progress": False}}


def rec(h, status="ok", **extra):
    return {"schema": "recallbench.result/1", "status": status, "config_hash": h,
            "error": None if status == "ok" else "boom", **extra}


@pytest.fixture
def sweep_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"base": BASE, "axes": {
        "model.d_state": [2, 4, 8], "task.num_facts": [2, 4], "train.seed": [0, 1]}}))
    return str(path)


def test_torn_last_line_is_reported_ignored_and_the_next_append_is_safe(tmp_path):
    with Store(tmp_path / "st") as st:
        for i in range(3):
            st.append(rec(f"h{i}", accuracy=i / 10))
    path = tmp_path / "st" / "results.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[:-25])  # a crash in the middle of the third record
    with pytest.warns(StoreWarning, match=r"results.jsonl:3: ignoring a torn line"):
        got = read_store(tmp_path / "st")
    assert [r["config_hash"] for r in got.records] == ["h0", "h1"]
    assert got.torn == [(path, 3)]
    with Store(tmp_path / "st") as st:  # the rerun appends the lost point again
        st.append(rec("h2", accuracy=0.2))
        st.append(rec("h3"))
    with pytest.warns(StoreWarning, match="torn"):
        got = read_store(tmp_path / "st")
    assert [r["config_hash"] for r in got.records] == ["h0", "h1", "h2", "h3"]
    assert got.records[2]["accuracy"] == 0.2
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[3])["config_hash"] == "h2"
    with pytest.warns(scorer.ScoreWarning, match="torn"):  # the scorer reads it the same way
        assert len(scorer.load_records(tmp_path / "st")) == 4


def test_ok_beats_failed_and_duplicates_are_counted():
    records, dup = merge_records([rec("a", "failed"), rec("b"), rec("a", "ok", n=1),
                                  rec("a", "ok", n=2), rec("c", "failed"), rec("c", "failed", n=3),
                                  rec("b", "failed")])
    assert dup == 4
    by = {r["config_hash"]: r for r in records}
    assert [r["config_hash"] for r in records] == ["a", "b", "c"]
    assert by["a"]["n"] == 1 and by["b"]["status"] == "ok" and by["c"]["n"] == 3


def test_one_writer_per_file(tmp_path):
    with Store(tmp_path / "st"):
        with pytest.raises(ConfigError, match="being written by another sweep"):
            Store(tmp_path / "st").open()
        with Store(tmp_path / "st", (0, 2)) as shard:  # a shard has its own file
            shard.append(rec("x"))
    with Store(tmp_path / "st") as st:  # the lock went with the first writer
        st.append(rec("y"))
    assert (tmp_path / "st" / "results.shard-0-of-2.jsonl").is_file()
    assert {r["config_hash"] for r in read_store(tmp_path / "st").records} == {"x", "y"}


def test_shards_merge_without_loss_or_duplicates(cli, tmp_path, sweep_file):
    for i in range(2):
        rc, out, err = cli("sweep", sweep_file, "--store", "st", "--shard", f"{i}/2")
        assert rc == 0, err
        assert f"shard {i}/2:" in out
    files = sorted(p.name for p in (tmp_path / "st").iterdir())
    assert files == ["results.shard-0-of-2.jsonl", "results.shard-1-of-2.jsonl"]
    parts = [[json.loads(ln)["config_hash"] for ln in (tmp_path / "st" / f).read_text().splitlines()]
             for f in files]
    assert not set(parts[0]) & set(parts[1]) and abs(len(parts[0]) - len(parts[1])) <= 1
    rc, out, err = cli("sweep", sweep_file, "--store", "st", "--dry-run")
    assert "grid 12 cells, 12 points (skipped: none); store st: 12 ok" in out
    contents = read_store(tmp_path / "st")
    assert len(contents.records) == 12 and contents.duplicates == 0 and contents.read == 12
    assert len(scorer.load_records(tmp_path / "st")) == 12
    # an unsharded rerun sees every shard's points as done
    rc, out, err = cli("sweep", sweep_file, "--store", "st")
    assert rc == 0 and "12 done; 0 to run" in out


def test_merge_stores(cli, tmp_path, sweep_file):
    assert cli("sweep", sweep_file, "--store", "a", "--shard", "0/2")[0] == 0
    assert cli("sweep", sweep_file, "--store", "b", "--shard", "1/2")[0] == 0
    assert cli("sweep", sweep_file, "--store", "b", "--limit", "2")[0] == 0  # overlaps a
    rc, out, err = cli("sweep", "--merge", "a", "b", "--store", "all")
    assert rc == 0, err
    assert "12 added" in out and "2 already there" in out and "holds 12 points (12 ok, 0 failed)" in out
    rc, out, err = cli("sweep", "--merge", "a", "b/results.jsonl", "--store", "all")
    assert rc == 0 and "0 added" in out
    contents = read_store(tmp_path / "all")
    assert len(contents.records) == 12 and contents.duplicates == 0
    assert len((tmp_path / "all" / "results.jsonl").read_text().splitlines()) == 12
    rc, out, err = cli("sweep", "--merge", "nope", "--store", "all")
    assert rc == 2 and "nope does not exist" in err
    rc, out, err = cli("sweep", "--merge", "a")
    assert rc == 2 and "--store" in err


def test_merge_conflicts_are_found_before_anything_is_written(tmp_path):
    from recallbench.runs.merge import MergeConflicts, merge_stores

    with Store(tmp_path / "a") as st:
        st.append(rec("h", accuracy=0.5, correct=8, total=16))
    with Store(tmp_path / "b") as st:
        st.append(rec("h", accuracy=0.25, correct=4, total=16))
        st.append(rec("k"))
    with pytest.raises(MergeConflicts) as info:
        merge_stores([tmp_path / "a", tmp_path / "b"], tmp_path / "c")
    assert not (tmp_path / "c").exists()
    (conflict,) = info.value.conflicts
    assert conflict.line() == (f"conflict: config h: {tmp_path}/a/results.jsonl:1 has accuracy "
                               f"0.5000 (8/16), {tmp_path}/b/results.jsonl:1 has accuracy "
                               f"0.2500 (4/16)")
    counts = merge_stores([tmp_path / "a", tmp_path / "b"], tmp_path / "c", on_conflict="first")
    assert counts["added"] == 2 and len(counts["conflicts"]) == 1
    assert read_store(tmp_path / "c").by_hash["h"]["accuracy"] == 0.5


def test_skipped_lines_are_reported_a_few_then_counted(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(b"\xff\n" * 8 + b"[1]\n" * 3 + json.dumps(rec("h")).encode() + b"\n")
    notes = []
    records, torn = read_lines(path, notes.append)
    assert [r["config_hash"] for r in records] == ["h"] and torn == list(range(1, 9))
    assert notes[:5] == [f"{path}:{n}: ignoring a torn line (an unfinished record from an "
                         "interrupted write)" for n in range(1, 6)]
    assert notes[5] == f"{path}: 3 more lines ignored"
    assert notes[6:] == [f"{path}:{n}: ignoring an entry that is not a result record"
                         for n in (9, 10, 11)]
