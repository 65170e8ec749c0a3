"""Tampering with a capacity suite's submissions and stores (leaderboards/cpu-v3).

A forger who re-signs the file (the sha256 is recomputed, as anyone can) must still be
refused, by `leaderboard validate` and by `leaderboard render`, each in one line naming the
file and the field: a stored card is, field by field, the one its points make; a point's
``total`` is its test sequences × the task's queries per sequence; a search the points (or
the store) hold only the start of is not a card.  A store reading a record whose counts
were scaled, or whose times are impossible, warns naming file:line and does not use it.
"""
from __future__ import annotations

import json
import shutil

import pytest

from recallbench import leaderboard as lb
from recallbench.leaderboard.capacity import suite as capacity_suite
from recallbench.leaderboard.points import point_records
from recallbench.runs.store import StoreWarning, read_store
from test_capacity_suite import V3, _forged, board  # noqa: F401  (board: a designed run)
from test_leaderboard_tamper import _assert_one_line

DESIGNED = lb.read_yaml_data(V3 / "submissions" / "designed.yaml")
COUNTS = ("correct", "total", "correct_topk")


@pytest.fixture
def v3(tmp_path):
    """A copy of cpu-v3's suite, with no submissions yet."""
    d = tmp_path / "leaderboards" / "cpu-v3"
    (d / "submissions").mkdir(parents=True)
    shutil.copy(V3 / "suite.yaml", d / "suite.yaml")
    return d


def _card(d):
    return d["budgets"][0]["card"]  # D32-N4: cells 2, 3, 5 at 0.7456, 0.6012, 0.4051


def _remade(edit):
    """``edit`` the points, then make every card again from them, as submit would."""
    def run(d):
        edit(d)
        suite = lb.load_suite(V3)
        for b in d["budgets"]:
            result = capacity_suite._replay(suite, b["config"], point_records({"budgets": [b]}))
            b["card"] = {**capacity_suite.stored_card(result.card), "stopped": result.stopped}
    return run


def _scaled(factor):
    def edit(d):
        for p in d["budgets"][0]["points"]:
            p.update({k: p[k] * factor for k in COUNTS})  # accuracy unchanged
    return edit


def _last_cell(b) -> int:
    """The N_f of the last cell the budget's search visited (its replay's last record)."""
    result = capacity_suite._replay(lb.load_suite(V3), b["config"], point_records({"budgets": [b]}))
    return result.records[-1]["config"]["task"]["num_facts"]


def _last_cell_removed(d):
    b = d["budgets"][0]
    last = _last_cell(b)
    b["points"] = [p for p in b["points"] if p["num_facts"] != last]


# name -> (edit of designed.yaml, what the one-line refusal says)
CASES = {
    "cell-accuracy": (lambda d: _card(d)["cells"][0].update(accuracy=0.99),
                      "card.cells[0].accuracy = 0.99 is not the recomputed 0.7456"),
    "card-state-size": (lambda d: _card(d).update(state_size=64),
                        "card.state_size = 64 is not the recomputed 256"),
    "cpu-s": (lambda d: _card(d).update(cpu_s=0.001), "card.cpu_s = 0.001 is not the recomputed"),
    "stopped": (lambda d: _card(d).update(stopped="measured after 3 cells"),
                "card.stopped = 'measured after 3 cells' is not the recomputed 'measured'"),
    "unknown-key": (lambda d: _card(d).update(verified=True),
                    "card holds the unknown field 'verified'"),
    "missing-key": (lambda d: _card(d).pop("dispersion"), "card lacks the field 'dispersion'"),
    "cpu-s-text": (lambda d: _card(d).update(cpu_s="lots"), "card.cpu_s = 'lots' must be a number"),
    "cells-text": (lambda d: _card(d).update(cells="abc"),
                   "card.cells = 'abc' must be a list of 3 entries"),
    "counts-x10": (_remade(_scaled(10)), "total = 51200 is not allowed: a run of this config "
                   "tests train.test_size × queries per sequence = 1024 × 5 = 5120"),
    "counts-x16": (_remade(_scaled(16)), "total = 81920 is not allowed"),
    "last-cell-removed": (_remade(_last_cell_removed),
                          f"the search stopped before N_f = {_last_cell(DESIGNED['budgets'][0])} "),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_re_signed_forgery_is_refused_by_validate_and_render(v3, cli, case):
    edit, match = CASES[case]
    path = v3 / "submissions" / "tampered.yaml"
    path.write_text(lb.dump_yaml(_forged(DESIGNED, edit)))
    rc, out, err = cli("leaderboard", "validate", str(path))
    _assert_one_line(rc, err, f"{path}: budget D32-N4", match)
    assert out.startswith("INVALID ")
    if case == "last-cell-removed":
        assert "rerun `recallbench leaderboard run --suite" in err and "same store" in err
    rc, out, err = cli("leaderboard", "render", str(v3), "--no-plot")
    _assert_one_line(rc, err, "tampered.yaml", match)
    assert "nothing rendered" in err and not (v3 / lb.README).exists()


@pytest.mark.parametrize("case", ["cpu-s-text", "cells-text"])
def test_render_never_crashes_on_what_validate_accepts(v3, cli, case):
    """A card of the wrong types once passed validate and crashed render with a traceback:
    render shows what validate accepts, and refuses in one line what it refuses."""
    path = v3 / "submissions" / "tampered.yaml"
    path.write_text(lb.dump_yaml(_forged(DESIGNED, CASES[case][0])))
    accepted = cli("leaderboard", "validate", str(path))[0] == 0
    rc, out, err = cli("leaderboard", "render", str(v3), "--no-plot")
    assert "Traceback" not in err and rc == (0 if accepted else 2), err
    path.unlink()
    shutil.copy(V3 / "submissions" / "designed.yaml", v3 / "submissions" / "designed.yaml")
    rc, out, err = cli("leaderboard", "render", str(v3), "--no-plot")
    assert rc == 0 and "(2 card(s)" in out, err  # the untouched file's two cards


def _store(board, tmp_path, first_cell=False, **edits):  # noqa: F811
    """A copy of the designed run's store (with ``first_cell``, only the runs of the first
    cell the search visited), its first record's counts multiplied by ``factor`` and its
    other fields ``edits``."""
    factor = edits.pop("factor", 1)
    lines = (board[1].parents[2] / "store" / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # in the order the search ran them
    nf = records[0]["config"]["task"]["num_facts"]
    records = [r for r in records if r["config"]["task"]["num_facts"] == nf or not first_cell]
    records[0].update({k: records[0][k] * factor for k in COUNTS}, **edits)
    assert records[0]["correct"] / records[0]["total"] == records[0]["accuracy"]  # unchanged
    store = tmp_path / "forged"
    store.mkdir()
    (store / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return store, records


@pytest.mark.parametrize("edits, match", [
    ({"factor": 10}, "total = {total} is not the queries its config tests, train.test_size × "
                     "queries per sequence = 1024 × {nf} = {queries}"),
    ({"factor": 16}, "total = {total} is not the queries its config tests"),
    ({"cpu_s": -5.0}, "cpu_s = -5.0 is impossible"),
    ({"wall_s": float("inf")}, "wall_s = inf is impossible"),
])
def test_a_store_record_no_run_makes_is_warned_and_not_used(board, tmp_path, edits, match):  # noqa: F811
    store, records = _store(board, tmp_path, **edits)
    bad, nf = records[0], records[0]["config"]["task"]["num_facts"]
    with pytest.warns(StoreWarning) as seen:
        got = read_store(store)
    assert [str(w.message) for w in seen] == [
        f"{store / 'results.jsonl'}:1: " + str(seen[0].message).split(": ", 1)[1]]
    text = str(seen[0].message)
    assert match.format(total=bad["total"], nf=nf, queries=1024 * nf) in text, text
    assert text.endswith("record not used")
    assert bad["config_hash"] not in got.by_hash and len(got.records) == len(records) - 1


@pytest.mark.parametrize("factor", [10, 16])
def test_submit_refuses_a_store_with_scaled_counts(board, tmp_path, cli, factor):  # noqa: F811
    store, records = _store(board, tmp_path, factor=factor)
    out = tmp_path / "scaled.yaml"
    rc, _, err = cli("submit", "--suite", str(board[0].dir), "--store", str(store),
                     "--model-name", "scaled", "--out", str(out))
    # the store's reader warns naming file:line and leaves the record out; the search then
    # lacks its first cell, and submit refuses in one line
    warning, error = err.splitlines()
    assert rc == 2 and "Traceback" not in err
    assert warning.startswith("recallbench: warning: ") and "results.jsonl:1: total = " \
        f"{records[0]['total']} is not the queries its config tests" in warning
    assert warning.endswith("record not used") and error.startswith("recallbench: error: submit")
    assert not out.exists()


def test_submit_refuses_an_interrupted_search(board, tmp_path, cli):  # noqa: F811
    """A store holding only the first cell of an interrupted `leaderboard run`."""
    store, records = _store(board, tmp_path, first_cell=True)
    assert len(records) == 2 < 2 * len(board[3]["cells"])  # both seeds of one cell of several
    out = tmp_path / "cut.yaml"
    rc, _, err = cli("submit", "--suite", str(board[0].dir), "--store", str(store),
                     "--model-name", "cut", "--out", str(out))
    _assert_one_line(rc, err, "submit: budget D32-N8", "the search stopped before N_f = ")
    assert "rerun `recallbench leaderboard run --suite" in err and "with the same store" in err
    assert not out.exists()
