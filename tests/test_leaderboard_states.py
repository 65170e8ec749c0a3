"""``recallbench leaderboard states``: the effective-state table across a suite's models.

A tiny two-budget suite is run once for two adapters (the designed circuit, which trains
nothing, and linear-mamba, stopped early at a low accuracy so that its runs count as
converged); every test works on its own copy of the folder.  The reference for every
number is the scorer itself (``score_records`` / ``budget_scores`` on the submission).
"""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from recallbench import leaderboard as lb
from recallbench.leaderboard import states as lb_states
from recallbench.leaderboard.grid import states
from recallbench.leaderboard.grid.scoring import budget_scores, score_records
from recallbench.leaderboard.points import point_records

SUITE = """\
schema: recallbench.suite/1
name: tinyst
title: tiny effective-state suite
task: {name: mqar, vocab_size: 32, seq_len: 32}
num_facts: [2, 4]
budgets:
  - name: D32-N2
    model: {d_model: 32, d_state: 2, n_layers: 1}
  - name: D32-N4
    model: {d_model: 32, d_state: 4, n_layers: 1}
adapters: {}
train: {max_steps: 200, patience: 3, val_every: 20, early_stop: 0.15, batch_size: 8,
        val_size: 64, test_size: 128}
lr: [0.03]
seeds: [0]
device: cpu
threads: 1
tolerance: {accuracy: 0.0}
scoring: {delta: 0.01, form: eq19, level: 0.95}
"""
ADAPTERS = ("designed", "linear-mamba")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("lbst")
    suite_dir = root / "leaderboards" / "tinyst"
    suite_dir.mkdir(parents=True)
    (suite_dir / "suite.yaml").write_text(SUITE)
    suite = lb.load_suite(suite_dir)
    subs = {}
    for adapter in ADAPTERS:
        store = root / f"store-{adapter}"
        counts = lb.run_suite(suite, adapter, store, log=lambda m: None)
        assert counts["ran"] == 4 and counts["failed"] == 0
        sub = lb.build_submission(suite, lb.load_store_records([store]), adapter)
        lb.write_submission(sub, suite_dir / "submissions" / f"{adapter}.yaml")
        subs[adapter] = sub
    return root, subs


@pytest.fixture
def tiny(built, tmp_path):
    src, subs = built
    root = tmp_path / "lb"
    shutil.copytree(src, root)
    suite_dir = root / "leaderboards" / "tinyst"
    return {"suite_dir": suite_dir, "suite": lb.load_suite(suite_dir), "subs": copy.deepcopy(subs)}


def _inside(x, ci):
    lo, hi = ci
    return (lo is None or lo <= x) and (hi is None or x <= hi)


@pytest.mark.slow
@pytest.mark.parametrize("view", ["mean", "best"])
def test_rows_are_the_scorers_numbers_sorted_by_pooled_ratio(tiny, view):
    suite = tiny["suite"]
    rows = states.state_rows(suite, lb.valid_board(tiny["suite_dir"]), view)
    assert sorted(r["adapter"] for r in rows) == sorted(ADAPTERS)
    pooled = [r["pooled"]["ratio"] for r in rows]
    assert pooled == sorted(pooled, reverse=True) and pooled[0] > pooled[1] > 0
    for r in rows:
        sub = tiny["subs"][r["adapter"]]
        report = score_records(point_records(sub), suite)
        eff = report["groups"][0]["efficiency"][view]
        assert r["pooled"]["ratio"] == eff["ratio"] and r["pooled"]["ratio_ci"] == eff["ratio_ci"]
        assert _inside(r["pooled"]["ratio"], r["pooled"]["ratio_ci"])
        for row_b, b in zip(r["budgets"], sub["budgets"]):
            ref = budget_scores(report, b["config"]["model"])[view]
            assert row_b["budget"] == b["name"] and row_b["state_size"] == b["state_size"]
            for key in ("s_eff", "s_eff_ci", "ratio", "capacity"):
                assert row_b[key] == ref[key], key
            if view == "mean":  # the submission stores the scorer's numbers, rounded
                assert row_b["s_eff"] == pytest.approx(b["score"]["mean"]["s_eff"], rel=1e-5)
            for key in ("s_eff", "ratio", "n_eff", "capacity", "per_bit"):
                assert _inside(row_b[key], row_b[f"{key}_ci"]), key
            assert row_b["capacity_ci"][0] < row_b["capacity_ci"][1]
            bS = b["state_bits"] * b["state_size"]
            assert row_b["per_bit"] == pytest.approx(ref["capacity"] / bS, rel=1e-12)
            assert row_b["per_bit_ci"] == pytest.approx([c / bS for c in row_b["capacity_ci"]], rel=1e-12)
            assert row_b["unconverged"] == 0


@pytest.mark.slow
def test_cli_writes_the_json_readme_and_figure(tiny, cli, tmp_path):
    out = tmp_path / "states"
    rc, stdout, err = cli("leaderboard", "states", str(tiny["suite_dir"]), "--out", str(out))
    assert rc == 0, err
    data = json.loads((out / "states.json").read_text())
    assert data["suite"] == "tinyst" and data["view"] == "mean" and data["level"] == 0.95
    models = [r["model"] for r in data["submissions"]]
    readme = (out / "README.md").read_text()
    command = f"recallbench leaderboard states {tiny['suite_dir']} --out {out} --view mean"
    assert data["command"] == command and f"`{command}`" in readme
    assert "Suite `tinyst`, view **mean**" in readme and "δ = 0.01" in readme and "95% intervals" in readme
    table = [line for line in readme.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [line.split(" | ")[0][2:] for line in table] == models  # every model, in JSON order
    top, bottom = data["submissions"]
    assert f"Closest to the Fano bound (the largest pooled S_eff/S, the fewest state bits wasted): {top['model']} (" in readme
    assert f"Wastes the most of its state (the smallest pooled S_eff/S): {bottom['model']} (" in readme
    assert (out / "states.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in stdout and str(out / "states.json") in stdout


@pytest.mark.slow
def test_state_growing_with_length_gets_s_eff_but_no_ratio(tiny):
    suite = tiny["suite"]
    attn = copy.deepcopy(tiny["subs"]["designed"])
    attn["model"]["name"] = "attn"
    for b in attn["budgets"]:
        b["state_size"] = None
    rows = states.state_rows(suite, [(Path("attn.yaml"), attn),
                                     (Path("lm.yaml"), tiny["subs"]["linear-mamba"])])
    assert [r["model"] for r in rows] == ["linear-mamba", "attn"]
    a = rows[1]
    assert a["state"] == "grows with L" and a["pooled"]["ratio"] is None
    assert all(b["s_eff"] > 0 and b["ratio"] is None and b["per_bit"] is None for b in a["budgets"])
    text = states.render_readme(suite, rows, "mean", "cmd")
    assert "| attn | designed | grows with L | grows with L |" in text
    assert "Without a pooled S_eff/S (no fixed state, or no fit): attn." in text
    assert "Only linear-mamba (" in text


def _bad(cli, args):
    rc, _, err = cli("leaderboard", "states", *map(str, args))
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.slow
def test_a_tampered_submission_is_refused_naming_the_file(tiny, cli, tmp_path):
    path = tiny["suite_dir"] / "submissions" / "linear-mamba.yaml"
    data = yaml.safe_load(path.read_text())
    data["budgets"][0]["points"][0]["correct"] += 1  # the sha256 is kept
    path.write_text(lb.dump_yaml(data))
    out = tmp_path / "out"
    err = _bad(cli, [tiny["suite_dir"], "--out", out])
    assert str(path) in err and "sha256" in err
    assert not out.exists()


@pytest.mark.slow
def test_out_that_is_a_file_or_under_one_is_one_line(tiny, cli, tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    assert "--out" in _bad(cli, [tiny["suite_dir"], "--out", f]) and f.read_text() == "x"
    assert "is a file, not a folder" in _bad(cli, [tiny["suite_dir"], "--out", f / "sub"])


def test_a_suite_without_submissions_is_one_line(cli, tmp_path):
    suite_dir = tmp_path / "leaderboards" / "tinyst"
    suite_dir.mkdir(parents=True)
    (suite_dir / "suite.yaml").write_text(SUITE)
    err = _bad(cli, [suite_dir, "--out", tmp_path / "out"])
    assert "no submissions in" in err and not (tmp_path / "out").exists()


def _row(model, ratio, ci):
    return {"model": model, "pooled": {"ratio": ratio, "ratio_ci": ci}}


def test_the_verdict_names_unresolved_rankings_from_the_intervals():
    rows = [_row("alpha", 0.9, [0.7, 1.1]), _row("beta", 0.8, [0.6, 0.95]),
            _row("gamma", 0.1, [0.05, 0.2]), _row("delta", 0.05, [0.01, None])]
    text = states.verdict(rows, 0.9)
    assert "Closest to the Fano bound" in text and ": alpha (0.9 [0.7, 1.1]), not resolved at 90% from beta (" in text
    assert "(the smallest pooled S_eff/S): delta (0.05 [0.01, ∞]), not resolved at 90% from alpha" in text
    assert "Rankings not resolved (overlapping 90% intervals of neighbours): alpha vs beta; gamma vs delta." in text
    text = states.verdict(rows[1:3], 0.95)
    assert "ahead of every other model at 95%" in text and "resolved at 95% (no overlap)" in text


@pytest.mark.slow
def test_the_committed_study_is_not_stale(tmp_path):
    """docs/results/effective_state is the table of the committed cpu-v2 submissions: written
    again from them with its own command, its README.md (every number in it) is the same."""
    root = Path(__file__).resolve().parents[1]
    study = root / "docs" / "results" / "effective_state"
    committed = json.loads((study / "states.json").read_text())
    suite_arg = "leaderboards/cpu-v2"
    command = committed["command"]
    assert command.startswith(f"recallbench leaderboard states {suite_arg} --out docs/results/effective_state")
    lb_states.write_states(root / suite_arg, tmp_path, view=committed["view"], command=command)
    fresh = json.loads((tmp_path / "states.json").read_text())
    assert [r["model"] for r in fresh["submissions"]] == [r["model"] for r in committed["submissions"]], (
        "docs/results/effective_state is stale: run `" + command + "`")
    assert (tmp_path / "README.md").read_text() == (study / "README.md").read_text()


@pytest.mark.slow
def test_a_suite_that_judges_guessing_shows_no_recall(tmp_path):
    """A suite with scoring.guess: linear-mamba stopped at accuracy 0.15, below the guess
    levels 1/2 and 1/4 of N_f = 2 and 4, has no recall beyond guessing: its submission
    validates with S_eff 0 and an upper bound, and the table gives it no pooled ratio."""
    suite_dir = tmp_path / "leaderboards" / "tinyst"
    suite_dir.mkdir(parents=True)
    (suite_dir / "suite.yaml").write_text(
        SUITE.replace("level: 0.95}", "level: 0.95, guess: true}"))
    suite = lb.load_suite(suite_dir)
    store = tmp_path / "store"
    lb.run_suite(suite, "linear-mamba", store, log=lambda m: None)
    sub = lb.build_submission(suite, lb.load_store_records([store]), "linear-mamba")
    for b in sub["budgets"]:
        mean = b["score"]["mean"]
        assert mean["s_eff"] == 0.0 and mean["s_eff_ci"][0] == 0.0 and mean["s_eff_ci"][1] > 0
    lb.write_submission(sub, suite_dir / "submissions" / "linear-mamba.yaml")
    (row,) = states.state_rows(suite, [(suite_dir / "submissions" / "linear-mamba.yaml", sub)])
    assert row["pooled"]["ratio"] is None and "no recall beyond guessing" in row["pooled"]["note"]
    assert all(b.get("note") == "no recall beyond guessing" for b in row["budgets"])
    out = tmp_path / "out"
    lb_states.write_states(suite_dir, out)
    assert "linear-mamba" in (out / "README.md").read_text()
