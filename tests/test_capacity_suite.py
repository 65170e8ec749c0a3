"""Capacity suites (leaderboards/cpu-v3): run, submit, validate, and refuse tampering.

End to end on the designed model (fixed weights: a card in seconds, real records)."""
import argparse
import re
from pathlib import Path

import pytest
import yaml

from recallbench import leaderboard as lb
from recallbench.api.canonical import config_hash
from recallbench.api.errors import ConfigError
from recallbench.leaderboard.capacity.suite import budget_base, run_capacity_suite
from recallbench.leaderboard.submission import content_sha256
from recallbench.runs import capacity

ROOT = Path(__file__).resolve().parent.parent
V3 = ROOT / "leaderboards" / "cpu-v3"


def _suite_copy(tmp: Path, **changes) -> Path:
    d = tmp / "cpu-v3"
    d.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((V3 / "suite.yaml").read_text())
    data.pop("retired", None)  # an open suite with cpu-v3's recipe
    data["budgets"] = [b for b in data["budgets"] if b["name"] == "D32-N8"]
    data.update(changes)
    data = {k: v for k, v in data.items() if v is not None}
    (d / "suite.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    return d


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """A one-budget copy of cpu-v3 with the designed model run, submitted and validated."""
    tmp = tmp_path_factory.mktemp("v3")
    d = _suite_copy(tmp)
    suite = lb.load_suite(d)
    store = tmp / "store"
    cards = run_capacity_suite(suite, "designed", store, log=lambda m: None)
    records = lb.load_store_records([store])
    sub = lb.build_submission(suite, records, "designed")
    path = lb.write_submission(sub, d / "submissions" / "designed.yaml")
    return suite, path, sub, cards["D32-N8"]


def _check(suite, sub):
    return lb.check_submission(sub, suite, "sub")


def _forged(sub, edit):
    """``sub`` edited by ``edit`` and re-signed, as a forger who reads the code would."""
    sub = yaml.safe_load(yaml.safe_dump(sub))
    edit(sub)
    sub["sha256"] = content_sha256(sub)
    return sub


def test_the_suite_is_the_capacity_protocol_of_the_cli():
    """A board card and a `recallbench capacity` card of the same model are the same runs."""
    from recallbench.cli.capacity import base_config

    suite = lb.load_suite(V3)
    assert suite.is_capacity and suite.data["train"] == capacity.TRAIN
    for b in suite.budgets:
        args = argparse.Namespace(d_model=b["model"]["d_model"], d_state=b["model"]["d_state"],
                                  n_layers=1, vocab_size=suite.data["task"]["vocab_size"],
                                  max_cells=12, max_step=0.0, time_budget=20, cpu_budget=None,
                                  state_size=None,
                                  factory=None,
                                  adapter="linear-mamba", set=[])
        cli = capacity.cell_config(base_config(args), 9, 1)
        board = capacity.cell_config(budget_base(suite, "linear-mamba", b), 9, 1)
        assert config_hash(cli) == config_hash(board)


def test_a_run_submits_and_validates_with_the_card_of_the_run(board):
    suite, path, sub, card = board
    got, _, notes = lb.validate_file(path)
    b = got["budgets"][0]
    assert b["card"]["status"] == card["status"] == "measured"
    assert b["card"]["s_eff"]["value"] == pytest.approx(card["s_eff"]["value"], rel=1e-6)
    nfs = sorted({p["num_facts"] for p in b["points"]})
    assert nfs == sorted(c["num_facts"] for c in card["cells"])
    assert len(b["points"]) == 2 * len(nfs)  # every seed of every cell
    assert all(p["lr"] == 0.01 for p in b["points"])  # designed trains nothing: no lr search


def test_a_forged_card_is_refused(board):
    suite, _, sub, _ = board

    def edit(s):
        s["budgets"][0]["card"]["s_eff"]["value"] *= 1.5
    with pytest.raises(ConfigError, match=r"card\.s_eff .* recomputed from the points"):
        _check(suite, _forged(sub, edit))

    def status(s):
        s["budgets"][0]["card"]["status"] = "measured" if \
            s["budgets"][0]["card"]["status"] != "measured" else "bound"
    with pytest.raises(ConfigError, match=r"card\.status"):
        _check(suite, _forged(sub, status))


def test_a_cell_left_out_of_the_middle_of_the_search_is_refused(board):
    suite, _, sub, card = board
    first = card["cells"][0]["num_facts"]  # the search's first cell; later ones follow it

    def edit(s):
        s["budgets"][0]["points"] = [p for p in s["budgets"][0]["points"]
                                     if p["num_facts"] != first]
    # named by the missing cell, not by the first point after the gap
    with pytest.raises(ConfigError, match=f"a cell of the search is missing: the search "
                                          f"stopped before N_f = {first} "):
        _check(suite, _forged(sub, edit))


def test_a_cell_without_all_its_seeds_is_refused(board):
    suite, _, sub, _ = board

    def edit(s):
        s["budgets"][0]["points"] = s["budgets"][0]["points"][1:]
    with pytest.raises(ConfigError, match="lacks seed"):
        _check(suite, _forged(sub, edit))


def test_a_point_outside_the_search_range_is_refused(board):
    suite, _, sub, _ = board

    def edit(s):
        s["budgets"][0]["points"][0]["num_facts"] = 400
    with pytest.raises(ConfigError, match=r"num_facts = 400 is not allowed: .*\[2, 255\]"):
        _check(suite, _forged(sub, edit))


def test_an_edit_without_re_signing_is_refused(board):
    suite, _, sub, _ = board
    sub = yaml.safe_load(yaml.safe_dump(sub))
    sub["budgets"][0]["card"]["ratio"]["value"] = 0.9
    with pytest.raises(ConfigError, match="content sha256 mismatch"):
        _check(suite, sub)


@pytest.mark.parametrize("change, message", [
    ({"num_facts": [4, 8]}, "a capacity suite has no num_facts"),
    ({"task": {"name": "ar", "vocab_size": 512}}, "task.name must be mqar"),
    ({"capacity": {"max_cells": 0}}, r"capacity.max_cells = 0 is not allowed"),
    ({"capacity": {"cells": 3}},
     "capacity must be a mapping of cpu_budget_min, fit_budget, max_cells, max_step$"),
    ({"capacity": {"max_cells": 12, "max_step": 1.2}}, r"capacity.max_step = 1.2 is not allowed"),
    ({"capacity": {"max_cells": 12, "fit_budget": 1}},
     "capacity.fit_budget = 1 is not allowed: true or false"),
    ({"seq_len_per_fact": 8}, "seq_len_per_fact: 4"),
])
def test_a_bad_capacity_suite_is_one_line(tmp_path, change, message):
    d = _suite_copy(tmp_path, **change)
    with pytest.raises(ConfigError, match=message):
        lb.load_suite(d)


def test_a_suite_s_search_settings_reach_its_search_and_cpu_v3_has_none(tmp_path, monkeypatch):
    """cpu-v3 searched without a step limit and stopped before a cell that did not fit, and
    its replay must too; a suite that sets capacity.max_step and capacity.fit_budget runs
    and replays its search with them, and its board says so."""
    from recallbench.leaderboard.capacity import suite as capacity_suite
    from recallbench.leaderboard.capacity.board import render_markdown

    v3 = lb.load_suite(V3)
    assert capacity_suite.max_step(v3) is None and capacity_suite.fit_budget(v3) is False
    suite = lb.load_suite(_suite_copy(tmp_path, capacity={"max_cells": 3, "cpu_budget_min": 1,
                                                          "max_step": 2, "fit_budget": True}))
    seen = []
    monkeypatch.setattr(capacity, "measure", lambda *a, **k:
                        seen.append((k["max_step"], k["fit_budget"])) or
                        capacity.Result({"cells": [], "status": "bound"}, "test", []))
    run_capacity_suite(suite, "designed", tmp_path / "store", log=lambda s: None)
    capacity_suite._replay(suite, budget_base(suite, "designed", suite.budgets[0]), [])
    assert seen == [(2.0, True), (2.0, True)]
    text = render_markdown(suite, [])
    assert "each new N_f within 2x those measured" in text and "largest N_f that does" in text
    assert "largest N_f that does" not in render_markdown(v3, [])


def test_grid_suites_keep_their_recipe_hash():
    """The capacity key is hashed only where present: every stored grid submission still
    names its suite's recipe."""
    for name in ("cpu-small", "cpu-v2"):
        suite = lb.load_suite(ROOT / "leaderboards" / name)
        for f in lb.submission_files(suite.dir):
            sub = yaml.safe_load(f.read_text())
            assert sub["suite_recipe_sha256"] == suite.recipe_sha256(), f


def test_the_cli_runs_a_capacity_suite_and_refuses_grid_flags(cli, tmp_path):
    d = _suite_copy(tmp_path)
    rc, out, err = cli("leaderboard", "run", "--suite", str(d), "--adapter", "designed",
                       "--store", str(tmp_path / "s"), "--time-budget", "5")
    assert rc == 2 and "--time-budget is not for a capacity suite" in err
    assert "Traceback" not in err and not (tmp_path / "s").exists()


def test_verify_re_runs_points_of_a_capacity_submission(board):
    suite, _, sub, _ = board
    rows = lb.verify(sub, suite, 2, seed=7, log=lambda m: None)
    assert len(rows) == 2 and all(r["ok"] for r in rows)
    assert all(r["diff"] == 0 for r in rows)  # fixed weights: the same counts again


def test_a_stored_value_agrees_with_its_recomputation_only_where_it_should():
    from recallbench.leaderboard.checks import agrees

    inf = float("inf")
    # an interval a card's cells do not close is stored as .inf and recomputed as inf
    assert agrees({"ci": [1.0, inf]}, {"ci": [1.01, inf]})
    assert not agrees(inf, -inf) and not agrees(inf, 1e300) and not agrees(1e300, inf)
    assert not agrees(float("nan"), float("nan"))
    assert agrees(1.0, 1.019) and not agrees(1.0, 1.03)
    assert not agrees({"a": 1.0}, {"a": 1.0, "b": 2.0}) and not agrees([1.0], [1.0, 1.0])
    assert agrees(None, None) and not agrees(None, 0.0) and not agrees("x", "y")


def test_a_dry_run_of_a_capacity_suite_plans_from_the_store_and_trains_nothing(board, cli,
                                                                             tmp_path):
    """A finished search says so; an empty store gets a measured step and an ETA within the
    card's CPU budget; nothing is written."""
    suite, path, _, _ = board
    store = path.parents[2] / "store"
    before = (store / "results.jsonl").read_bytes()
    rc, out, err = cli("leaderboard", "run", "--suite", str(suite.dir), "--adapter", "designed",
                       "--store", str(store), "--dry-run")
    assert rc == 0, err
    assert "D32-N8: the store holds " in out and "the search is over, measured" in out
    assert "in all: nothing to run" in out and (store / "results.jsonl").read_bytes() == before
    fresh = tmp_path / "fresh"
    rc, out, err = cli("leaderboard", "run", "--suite", str(suite.dir), "--adapter", "designed",
                       "--store", str(fresh), "--dry-run", "--workers", "2")
    assert rc == 0, err
    eta = re.search(r"D32-N8: nothing in the store yet; measured [\d.]+ ms a step at the first "
                    r"cell \(N_f = \d+, L = \d+\).*\n  ETA: ([\d.]+) to ([\d.]+) CPU-min .* at "
                    r"most 30\.0 CPU-min.* on 2 worker", out)
    assert eta, out
    assert 0 <= float(eta.group(1)) <= float(eta.group(2)) <= 30.0
    assert "(dry run: nothing was trained)" in out and not fresh.exists()
