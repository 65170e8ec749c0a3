"""Leaderboard suites that search the learning rate inside each run (``train.lr`` a list),
and the training protocol's facts a submission carries: the lr kept, ``lr_search``,
``converged``, ``stop_reason``, ``steps_to`` per point and the model's ``provenance``.

A tiny suite of linear-mamba at D=8 with a few steps is run once; every test works on its
own copy of the folder.
"""
from __future__ import annotations

import copy
import shutil

import pytest
import yaml

from recallbench import leaderboard as lb
from recallbench.api.errors import ConfigError
from recallbench.harness.lr_candidates import choose
from recallbench.leaderboard.schema import LEVELS, STOP_REASONS

SEARCH_SUITE = """\
schema: recallbench.suite/1
name: tinys
title: tiny suite that searches the learning rate
task: {name: mqar, vocab_size: 32, seq_len: 32}
num_facts: [2, 4]
budgets:
  - name: D8-N4
    model: {d_model: 8, d_state: 4, n_layers: 1}
adapters: {}
train: {lr: [0.01, 0.003], max_steps: 20, patience: 2, val_every: 10, early_stop: 0.01, batch_size: 8,
        val_size: 16, test_size: 64}
seeds: [0]
device: cpu
threads: 1
tolerance: {accuracy: 0.0}
scoring: {delta: 0.01, form: eq19, level: 0.95}
"""


@pytest.fixture(scope="module")
def searched_built(tmp_path_factory):
    root = tmp_path_factory.mktemp("lbs")
    suite_dir = root / "leaderboards" / "tinys"
    suite_dir.mkdir(parents=True)
    (suite_dir / "suite.yaml").write_text(SEARCH_SUITE)
    suite = lb.load_suite(suite_dir)
    counts = lb.run_suite(suite, "linear-mamba", root / "store", log=lambda m: None)
    assert counts == {"points": 2, "skipped": 0, "ran": 2, "failed": 0, "left": 0}
    sub = lb.build_submission(suite, lb.load_store_records([root / "store"]), "lm")
    lb.write_submission(sub, suite_dir / "submissions" / "lm.yaml")
    return root, sub


@pytest.fixture
def searched(searched_built, tmp_path):
    built, sub = searched_built
    root = tmp_path / "lb"
    shutil.copytree(built, root)
    suite_dir = root / "leaderboards" / "tinys"
    return {"root": root, "suite_dir": suite_dir, "suite": lb.load_suite(suite_dir),
            "store": root / "store", "path": suite_dir / "submissions" / "lm.yaml",
            "sub": copy.deepcopy(sub)}


def _rewrite(s, edit) -> None:
    data = copy.deepcopy(s["sub"])
    edit(data)
    data["sha256"] = lb.content_sha256(data)
    s["path"].write_text(lb.dump_yaml(data))


def test_search_suite_runs_one_config_per_point(searched):
    suite = searched["suite"]
    assert suite.searches_lr and suite.lrs == [0.003, 0.01]
    assert suite.points() == [{"budget": "D8-N4", "num_facts": 2, "seed": 0},
                              {"budget": "D8-N4", "num_facts": 4, "seed": 0}]
    cfg = suite.point_config("linear-mamba", suite.points()[0])
    assert cfg["train"]["lr"] == [0.003, 0.01]  # resolved as a run config resolves it
    assert suite.label(suite.points()[1]) == "D8-N4 N_f=4 seed=0"
    assert "searched in each run over 0.003, 0.01" in suite.lr_text()


def test_submission_carries_the_protocol_facts(searched):
    sub = searched["sub"]
    prov = sub["model"]["provenance"]
    assert prov["distribution"] == "recallbench" and len(prov["source_sha256"]) == 64
    for p in sub["budgets"][0]["points"]:
        assert [e["lr"] for e in p["lr_search"]] == [0.003, 0.01]
        assert p["lr"] == p["lr_search"][choose(p["lr_search"])]["lr"]
        assert p["stop_reason"] in STOP_REASONS and isinstance(p["converged"], bool)
        assert set(p["steps_to"]) == set(LEVELS)
    lb.validate_file(searched["path"])
    fresh, _ = lb.render(searched["suite_dir"], plot=False)
    page = (searched["suite_dir"] / "index.html").read_text()
    assert fresh and prov["source_sha256"][:12] in page and "lr 0.003: val" in page
    readme = (searched["suite_dir"] / "README.md").read_text()
    assert "lr searched in each run over 0.003, 0.01" in readme


def _point(d, j=0):
    return d["budgets"][0]["points"][j]


def _not_chosen(d):
    p = _point(d)
    p["lr"] = [e["lr"] for e in p["lr_search"] if e["lr"] != p["lr"]][0]


@pytest.mark.parametrize("edit, match", [
    (_not_chosen, r"point 1: lr: .* is not the one the search chooses"),
    (lambda d: _point(d)["lr_search"].pop(), "point 1: lr_search: does not try exactly"),
    (lambda d: _point(d)["lr_search"][0].update(x=1), r"lr_search\[0\]: must be a mapping with exactly"),
    (lambda d: _point(d)["lr_search"][1].update(val_accuracy=2), r"lr_search\[1\].val_accuracy: must be null or a number in \[0, 1\]"),
    (lambda d: _point(d)["lr_search"][0].update(steps=-1), r"lr_search\[0\].steps: must be an integer count"),
    (lambda d: _point(d).update(lr_search=_point(d)["lr_search"] * 9), "list of 1 to 16 candidates"),
    (lambda d: _point(d).update(lr_search=None), "lr_search: is required: the config's train.lr is a search"),
    (lambda d: _point(d).update(stop_reason="early_stop", converged=False), "converged: must be true for a run that stopped at early_stop"),
    (lambda d: _point(d).update(stop_reason="done"), "stop_reason: must be null or one of early_stop, plateau, max_steps"),
    (lambda d: _point(d).update(steps_to={"0.5": 20, "0.9": 10, "0.99": None}), "a higher accuracy level cannot be reached"),
    (lambda d: _point(d).update(steps_to={"0.5": 10**6, "0.9": None, "0.99": None}), "holds a step beyond the run's steps"),
    (lambda d: _point(d).update(steps_to={"0.5": 10}), "steps_to: must be null or a mapping with exactly the keys 0.5, 0.9, 0.99"),
    (lambda d: _point(d).pop("steps_to"), "missing field 'steps_to'"),
    (lambda d: _point(d).update(extra=1), "unknown field 'extra'"),
    (lambda d: d["model"]["provenance"].update(source_sha256="xyz"), "model: provenance.source_sha256: must be null or 64 hex digits"),
    (lambda d: d["model"]["provenance"].update(url="x"), "model: provenance: must be null or a mapping with exactly"),
    (lambda d: d["model"]["provenance"].update(version="v" * 300), "provenance.version: must be null or text of 1 to 200"),
    (lambda d: d["model"].pop("provenance"), "model: missing field 'provenance'"),
])
def test_protocol_fields_are_checked(searched, edit, match):
    _rewrite(searched, edit)
    with pytest.raises(ConfigError, match=match) as info:
        lb.validate_file(searched["path"])
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(searched["path"])) and len(msg) < 600


def test_converged_must_agree_with_the_chosen_candidate(searched):
    def edit(d):
        p = _point(d)
        chosen = p["lr_search"][choose(p["lr_search"])]
        p["converged"] = not chosen["converged"]
        p["stop_reason"] = "max_steps"
    _rewrite(searched, edit)
    with pytest.raises(ConfigError, match="converged: differs from the chosen candidate's"):
        lb.validate_file(searched["path"])


def test_an_unconverged_point_is_marked_and_left_out_of_the_fit(searched):
    from recallbench.leaderboard.grid.scoring import score_records
    from recallbench.leaderboard.points import point_records
    from recallbench.leaderboard.submission import _add_scores

    def edit(d):
        for p in d["budgets"][0]["points"]:
            p.update(stop_reason="max_steps", converged=False)
            for e in p["lr_search"]:
                e["converged"] = False
        _add_scores(d, searched["suite"])
    _rewrite(searched, edit)
    sub, suite, _ = lb.validate_file(searched["path"])
    cells = [c for g in score_records(point_records(sub), suite)["groups"] for c in g["cells"]]
    assert cells and all(c["best_unconverged"] for c in cells)
    assert sub["budgets"][0]["score"]["mean"].get("capacity") is None  # nothing fitted
    lb.render(searched["suite_dir"], plot=False)
    readme = (searched["suite_dir"] / "README.md").read_text()
    row = [line for line in readme.splitlines() if line.startswith("| 1 |")][0]
    assert row.count("†") == 2 and "a lower bound, not the layer's capacity" in readme


def test_submit_refuses_runs_of_different_adapter_code(searched, tmp_path):
    import json

    lines = (searched["store"] / "results.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    recs[0]["provenance"] = {**recs[0]["provenance"], "source_sha256": "0" * 64}
    with pytest.raises(ConfigError, match="the runs come from 2 different adapter sources"):
        lb.build_submission(searched["suite"], recs, "lm")


def test_a_retired_suite_takes_no_new_runs_or_submissions(searched, cli, tmp_path):
    data = yaml.safe_load((searched["suite_dir"] / "suite.yaml").read_text())
    data["retired"] = "superseded by tinys2"
    (searched["suite_dir"] / "suite.yaml").write_text(yaml.safe_dump(data))
    rc, _, err = cli("leaderboard", "run", "--suite", str(searched["suite_dir"]), "--adapter",
                     "linear-mamba", "--store", str(tmp_path / "s"))
    assert rc == 2 and "suite tinys is retired, no new runs: superseded by tinys2" in err
    rc, _, err = cli("submit", "--suite", str(searched["suite_dir"]), "--store",
                     str(searched["store"]), "--model-name", "x", "--out", str(tmp_path / "x.yaml"))
    assert rc == 2 and "no new submissions" in err and not (tmp_path / "x.yaml").exists()
    rc, out, _ = cli("leaderboard", "validate", str(searched["path"]))
    assert rc == 0 and out.startswith("ok ")  # its submissions stay checkable
    lb.render(searched["suite_dir"], plot=False)
    assert "> **Retired**: superseded by tinys2" in (searched["suite_dir"] / "README.md").read_text()


def test_a_model_with_nothing_to_train_passes_with_its_untried_search(searched, tmp_path):
    """The designed circuit trains nothing, so no candidate of the lr list is validated: its
    submission is valid with every candidate at 0 steps and the smallest lr kept.  A trained
    point that claims the same (no validated candidate) is refused."""
    store = tmp_path / "designed"
    counts = lb.run_suite(searched["suite"], "designed", store, log=lambda m: None)
    assert counts["failed"] == 0 and counts["ran"] == 2
    sub = lb.build_submission(searched["suite"], lb.load_store_records([store]), "designed")
    for p in sub["budgets"][0]["points"]:
        assert p["steps"] == 0 and p["lr"] == 0.003
        assert [(e["val_accuracy"], e["steps"]) for e in p["lr_search"]] == [(None, 0), (None, 0)]
    path = searched["suite_dir"] / "submissions" / "designed.yaml"
    lb.write_submission(sub, path)
    lb.validate_file(path)

    def forged(d):  # a trained point whose candidates lost their accuracies
        for e in _point(d)["lr_search"]:
            e["val_accuracy"] = None
    _rewrite(searched, forged)
    with pytest.raises(ConfigError, match="has no candidate with a validation accuracy .only a "
                                          "model with nothing to train"):
        lb.validate_file(searched["path"])


def _search(*entries):
    return [{"lr": lr, "val_accuracy": v, "steps": s, "converged": True, "error": None}
            for lr, v, s in entries]


def test_an_extended_run_keeps_the_candidate_chosen_at_its_cap():
    """The search compares candidates at max_steps and extends only the chosen one, whose
    entry then holds the extended run: it may have lost a tie on steps, never the best
    validation accuracy."""
    from recallbench.api.errors import ConfigError
    from recallbench.leaderboard.protocol import check_lr

    lrs = [0.003, 0.01, 0.03]
    tie = _search((0.003, 0.5, 2000), (0.01, 0.999, 4000), (0.03, 0.999, 1500))
    point = {"lr": 0.01, "lr_search": tie, "converged": True}
    with pytest.raises(ConfigError, match="not the one the search chooses"):
        check_lr(point, lrs, "p")  # not extended: the tie goes to fewer steps
    check_lr({**point, "extended": 1}, lrs, "p")
    beaten = _search((0.003, 0.5, 2000), (0.01, 0.9, 4000), (0.03, 0.95, 1500))
    with pytest.raises(ConfigError, match="not a candidate with the best validation"):
        check_lr({"lr": 0.01, "lr_search": beaten, "converged": True, "extended": 1}, lrs, "p")


@pytest.fixture(scope="module")
def halved():
    """A real record of a search by halving (train.lr_rung), on a tiny linear-mamba."""
    from recallbench.harness.train import run

    rec = run({"task": {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4},
               "model": {"adapter": "linear-mamba", "d_model": 8, "d_state": 4},
               "train": {"lr": [0.003, 0.03, 0.3], "lr_rung": 0.25, "max_steps": 80,
                         "val_every": 10, "val_size": 64, "test_size": 64, "batch_size": 8,
                         "seed": 0, "progress": False}}, progress=False)
    assert rec["status"] == "ok" and all("rungs" in e for e in rec["lr_search"])
    return rec


def test_a_search_by_halving_is_checked_at_its_deciding_rung(halved):
    """The kept lr has the best validation accuracy at the last rung two candidates shared;
    another candidate's lr, or an entry without rungs beside those with them, is refused."""
    from recallbench.api.errors import ConfigError
    from recallbench.leaderboard.protocol import check_lr
    from recallbench.leaderboard.schema import check_protocol_fields

    lrs = [0.003, 0.03, 0.3]
    point = {"lr": halved["lr"], "lr_search": halved["lr_search"],
             "converged": halved["converged"], "stop_reason": halved.get("stop_reason"),
             "steps_to": halved.get("steps_to")}
    check_protocol_fields(point, "p")
    check_lr(point, lrs, "p")
    search = halved["lr_search"]
    shared = max(s for s, _ in search[0]["rungs"])
    beaten = [e for e in search if e["lr"] != halved["lr"]]
    worse = [e for e in beaten if dict(map(tuple, e["rungs"])).get(shared, 1) <
             dict(map(tuple, next(x for x in search if x["lr"] == halved["lr"])["rungs"]))[shared]]
    assert worse, search  # lr 0.3 learns first on this config
    with pytest.raises(ConfigError, match="best validation accuracy at the rung"):
        check_lr({**point, "lr": worse[0]["lr"]}, lrs, "p")  # beaten at the rung
    forged = [dict(search[0], rungs=[[10, 0.5], [10, 0.6]]), *search[1:]]
    with pytest.raises(ConfigError, match="rungs"):
        check_protocol_fields({**point, "lr_search": forged}, "p")
    mixed = [{k: v for k, v in search[0].items() if k != "rungs"}, *search[1:]]
    with pytest.raises(ConfigError, match="must be a mapping with exactly"):
        check_protocol_fields({**point, "lr_search": mixed}, "p")


def test_a_candidate_that_stopped_on_its_own_before_the_last_rung_is_compared_there():
    """A run of Mamba-2's D32-N8 card: no candidate left the guess by 1,000 steps, so all
    three trained on to 2,000; lr 0.003 reached a plateau at 1,950 with the best validation
    (0.21) and was kept, as the halving compares a finished candidate at its final value.
    Its rival at 2,000 steps is refused."""
    from recallbench.api.errors import ConfigError
    from recallbench.leaderboard.protocol import check_lr

    search = [
        {"lr": 0.003, "val_accuracy": 0.2099609375, "steps": 1950, "converged": True,
         "error": None, "rungs": [[500, 0.025634765625], [1000, 0.07177734375],
                                  [1950, 0.2099609375]]},
        {"lr": 0.01, "val_accuracy": 0.095947265625, "steps": 2000, "converged": False,
         "error": None, "rungs": [[500, 0.04150390625], [1000, 0.08447265625],
                                  [2000, 0.095947265625]]},
        {"lr": 0.03, "val_accuracy": 0.1259765625, "steps": 2000, "converged": False,
         "error": None, "rungs": [[500, 0.049072265625], [1000, 0.101318359375],
                                  [2000, 0.1259765625]]}]
    lrs = [0.003, 0.01, 0.03]
    check_lr({"lr": 0.003, "lr_search": search, "converged": True}, lrs, "p")
    with pytest.raises(ConfigError, match="best validation accuracy at the rung of 2000"):
        check_lr({"lr": 0.03, "lr_search": search, "converged": False}, lrs, "p")
    # stopped earlier still (950 steps), it stays final and compared at the last rung
    early = [dict(search[0], steps=950, rungs=[[500, 0.0256], [950, 0.2099]]), *search[1:]]
    check_lr({"lr": 0.003, "lr_search": early, "converged": True}, lrs, "p")
    # but one that did not stop on its own (paused, not converged) is not final
    paused = [dict(search[0], converged=False), *search[1:]]
    with pytest.raises(ConfigError, match="best validation accuracy at the rung of 2000"):
        check_lr({"lr": 0.003, "lr_search": paused, "converged": False}, lrs, "p")
