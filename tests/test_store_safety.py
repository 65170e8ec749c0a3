"""Odd paths never hang, a record the disk refuses is never lost, and a record saved aside
is never written through a planted link."""
from __future__ import annotations

import errno
import json
import os
import signal
import socket
import tempfile
import types

import pytest
import yaml

from recallbench.api.errors import ConfigError

TASK = {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4}
TRAIN = {"max_steps": 5, "val_every": 5, "val_size": 16, "test_size": 16, "batch_size": 16,
         "progress": False}
RUN = ["--set", "task.vocab_size=32 task.seq_len=16 task.num_facts=4 model.adapter=designed "
       "model.d_model=8 model.d_state=4 train.val_size=16 train.test_size=16 train.max_steps=5",
       "--quiet"]


class Hung(Exception):
    """Not an OSError: no fallback path may take it for a failed write."""


@pytest.fixture
def no_hang():
    """A test that would block forever fails after 60 s instead."""
    def alarm(signum, frame):
        raise Hung("blocked for 60 s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def sweep_file(tmp_path, seeds=(0, 1)):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"base": {"task": TASK, "train": TRAIN, "model": {
        "adapter": "designed", "d_model": 8, "d_state": 4}}, "axes": {"train.seed": list(seeds)}}))
    return str(path)


def one_line_error(err: str, *names: str) -> None:
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("recallbench: error:")]
    assert len(lines) == 1, err
    for name in names:
        assert name in lines[0], lines[0]


# -- 1. no hang on odd paths -------------------------------------------------------------

def test_run_refuses_a_fifo_out_before_training(cli, tmp_path, no_hang, monkeypatch):
    import recallbench.harness.train as train

    os.mkfifo(tmp_path / "pipe")
    monkeypatch.setattr(train, "run", lambda *a, **k: pytest.fail("trained before refusing"))
    rc, out, err = cli("run", *RUN, "--out", "pipe")
    assert rc == 2
    one_line_error(err, "--out", "pipe", "FIFO")
    assert "accuracy" not in out


def test_run_refuses_a_socket_out_and_a_device_weights_path(cli, tmp_path, no_hang):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        rc, _, err = cli("run", *RUN, "--out", "sock")
        assert rc == 2
        one_line_error(err, "--out", "socket")
    finally:
        sock.close()
    os.symlink("/dev/null", tmp_path / "r.pt")  # the weights would vanish into a device
    rc, _, err = cli("run", *RUN, "--out", "r.json", "--save-weights")
    assert rc == 2
    one_line_error(err, "--save-weights", "character device")


def test_save_record_never_blocks_on_a_fifo_made_after_the_check(tmp_path, monkeypatch,
                                                                 no_hang):
    from recallbench.cli.main import save_record

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    os.mkfifo(tmp_path / "late")
    where, why = save_record({"config_hash": "cd" * 32}, tmp_path / "late")
    assert why and where != str(tmp_path / "late")
    assert json.loads(open(where).read()) == {"config_hash": "cd" * 32}


@pytest.mark.parametrize("where", ["store", "results", "shard"])
def test_sweep_refuses_a_fifo_store_before_training(cli, tmp_path, no_hang, monkeypatch, where):
    import recallbench.runs.executors as executors

    monkeypatch.setattr(executors, "run_configs", lambda *a, **k: pytest.fail("trained"))
    if where == "store":
        os.mkfifo(tmp_path / "st")
    else:
        (tmp_path / "st").mkdir()
        os.mkfifo(tmp_path / "st" / ("results.jsonl" if where == "results"
                                     else "results.shard-0-of-2.jsonl"))
    for extra in ([], ["--dry-run"]):
        rc, out, err = cli("sweep", sweep_file(tmp_path), "--store", "st", *extra)
        assert rc == 2, (out, err)
        one_line_error(err, "--store", "FIFO")


# -- 2. nothing trained is lost ------------------------------------------------------------

def _disk_full(monkeypatch):
    import recallbench.runs.store as store

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store, "write_all", full)


def test_a_full_disk_stops_the_sweep_with_the_record_saved_and_the_merge_command(
        cli, tmp_path, monkeypatch):
    from recallbench.runs.store import read_store

    sweep = sweep_file(tmp_path)
    with monkeypatch.context() as m:
        _disk_full(m)
        rc, out, err = cli("sweep", sweep, "--store", "st")
    assert rc == 1, (out, err)
    one_line_error(err, "No space left on device", "recallbench sweep --merge")
    aside = list((tmp_path / "st").glob("results.unmerged-*.jsonl"))
    assert len(aside) == 1 and str(aside[0]) in err
    saved = [json.loads(line) for line in aside[0].read_text().splitlines()]
    assert len(saved) == 1 and saved[0]["status"] == "ok"
    assert read_store(tmp_path / "st").records == []  # the store itself holds nothing
    command = err.split("merge it back with: ")[1].split()  # the command it names works
    assert command[:3] == ["recallbench", "sweep", "--merge"]
    rc, out, err = cli(*command[1:])
    assert rc == 0, err
    assert read_store(tmp_path / "st").by_hash[saved[0]["config_hash"]] == saved[0]


def test_records_go_to_the_temp_folder_when_the_store_folder_refuses_them(tmp_path,
                                                                          monkeypatch):
    import recallbench.api.safe_files as safe_files
    from recallbench.runs.store import Store, StoreWriteError

    spare = tmp_path / "tmp"
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    real = tempfile.mkstemp

    def mkstemp(prefix, suffix, dir=None):
        if dir is not None:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(prefix=prefix, suffix=suffix)

    monkeypatch.setattr(safe_files.tempfile, "mkstemp", mkstemp)
    st = Store(tmp_path / "st").open()
    _disk_full(monkeypatch)
    with pytest.raises(StoreWriteError) as info:
        st.append({"config_hash": "a" * 64, "status": "ok"})
    st.close()
    assert info.value.saved_to.parent == spare and str(info.value.saved_to) in str(info.value)
    assert json.loads(info.value.saved_to.read_text())["config_hash"] == "a" * 64


def test_the_rest_of_an_ensemble_item_is_saved_with_the_record_the_store_refused(
        tmp_path, monkeypatch):
    from recallbench.api.config import resolve
    from recallbench.runs.driver import Job, drive
    from recallbench.runs.store import Store, StoreWriteError

    jobs = [Job(resolve({"task": TASK, "model": {"adapter": "designed", "d_model": 8,
                                                 "d_state": 4}, "train": {**TRAIN, "seed": s}}))
            for s in range(3)]
    recs = [{"status": "ok", "config_hash": j.cfg.hash()} for j in jobs]
    executor = types.SimpleNamespace(run=lambda items: iter([(0, recs)]))
    with Store(tmp_path / "st") as st:
        _disk_full(monkeypatch)
        with pytest.raises(StoreWriteError) as info:
            drive([jobs], executor, st)
    saved = [json.loads(x) for x in info.value.saved_to.read_text().splitlines()]
    assert saved == recs
    assert len(list((tmp_path / "st").glob("results.unmerged-*"))) == 1  # one file, not two


# -- 3. nothing written outside --------------------------------------------------------------

def test_a_fallback_record_never_follows_a_planted_symlink(tmp_path, monkeypatch):
    from recallbench.cli.main import save_record

    spare = tmp_path / "tmp"
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    h = "ef" * 32
    for name in (f"recallbench-{h[:12]}.json", f"recallbench-{h[:12]}-.json"):
        os.symlink(victim, spare / name)  # the names an attacker would guess
    (tmp_path / "gone").write_text("")  # --out cannot be written: its folder is a file
    where, why = save_record({"config_hash": h, "accuracy": 1.0}, tmp_path / "gone" / "r.json")
    assert why and victim.read_text() == "precious\n"
    assert os.path.dirname(where) == str(spare) and not os.path.islink(where)
    assert os.path.basename(where).startswith(f"recallbench-{h[:12]}-")
    assert json.loads(open(where).read())["config_hash"] == h
    assert os.stat(where).st_mode & 0o077 == 0  # private to its owner


def test_check_writable_still_accepts_a_regular_file_and_a_new_name(tmp_path):
    from recallbench.cli.main import check_writable

    (tmp_path / "old.json").write_text("{}")
    check_writable(tmp_path / "old.json")
    check_writable(tmp_path / "new" / "r.json")
    with pytest.raises(ConfigError, match="is a folder"):
        check_writable(tmp_path)
