"""`recallbench capacity`: the search over N_f, the capacity card and its bounds, on runs
simulated from the law (a model of known effective state) and on a few real ones."""
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from recallbench.api.canonical import config_hash
from recallbench.law import card as cards
from recallbench.law import card_render, scorer, theory
from recallbench.runs import capacity

BASE = {"task": {"name": "mqar", "vocab_size": 512},
        "model": {"adapter": "linear-mamba", "d_model": 32, "d_state": 8}, "train": {}}
S = 2 * 32 * 8
ROOT = Path(__file__).resolve().parent.parent


def simulated(n_eff, guesses=True, units=1024, seed=0, cut_from=None, fail_seed=None):
    """run_cell of a model that recalls as the linear reference at N_eff (guessing among the
    context's values when it does not), with correlated queries; ``cut_from``: cells from
    that N_f on hit the step cap while improving; ``fail_seed``: that seed stays at the
    guess (an optimisation failure)."""
    rng = np.random.default_rng(seed)
    calls = []

    def run_cell(cfgs):
        calls.append([c["task"]["num_facts"] for c in cfgs])
        out = []
        for c in cfgs:
            nf, v, d = c["task"]["num_facts"], c["task"]["vocab_size"], c["model"]["d_model"]
            p = theory.recall_probability(v, nf, d, n_eff, 1.25)
            if guesses:
                p = 1 / nf + (1 - 1 / nf) * p
            if fail_seed is not None and c["train"]["seed"] == fail_seed:
                p = 1 / nf
            per = rng.beta(max(p, 1e-6) * 50, max(1 - p, 1e-6) * 50, size=units)
            k, n = int(rng.binomial(nf, per).sum()), units * nf
            cut = cut_from is not None and nf >= cut_from
            out.append({"schema": scorer.SCHEMA, "status": "ok", "correct": k, "total": n,
                        "accuracy": k / n, "converged": not cut,
                        "stop_reason": "max_steps" if cut else "plateau",
                        "state_size": S, "state_bits": 32, "steps": 500, "extended": 0,
                        "seed": c["train"]["seed"], "config": c, "config_hash": config_hash(c),
                        "cpu_s": 2.0, "wall_s": 1.0, "lr": 0.01})
        return out

    run_cell.calls = calls
    return run_cell


@pytest.mark.parametrize("n_eff", [2.0, 8.0, 24.0])
def test_the_search_brackets_a_known_state_and_measures_it(n_eff):
    """One seed a cell (best of several seeds is biased upward by selection, the paper's
    convention; the next test covers it)."""
    runner = simulated(n_eff)
    res = capacity.measure(BASE, run_cell=runner, seeds=(0,), budget_s=1e9, say=lambda s: None)
    card = res.card
    assert card["status"] == "measured" and res.stopped == "measured"
    lo, hi = card["s_eff"]["ci"]
    assert hi / lo <= cards.MAX_SPREAD
    assert abs(card["s_eff"]["value"] / (2 * 32 * n_eff) - 1) < 0.15
    mid = [c for c in card["cells"] if c["mid"]]
    assert len(mid) >= 3 and any(c["accuracy"] >= 0.5 for c in mid) \
        and any(c["accuracy"] < 0.5 for c in mid)
    assert len(runner.calls) <= 6  # it brackets in a few cells, not a grid
    assert all(c["seq_len"] == 4 * c["num_facts"] for c in card["cells"])
    cap = card["capacity"]
    assert cap["p50"]["ci"][0] <= cap["p50"]["value"] <= cap["p50"]["ci"][1]
    assert cap["p1_delta"]["value"] < cap["p50"]["value"]


@pytest.mark.parametrize("n_eff", [16.0, 64.0])
def test_max_step_keeps_each_new_cell_within_a_factor_of_those_measured(n_eff):
    """Unlimited, the search jumps more than 2x after a cell near the ceiling (the law
    says far more state); with max_step 2 no cell is placed beyond 2x the largest or below
    half the smallest measured, and the card is still measured, on the same state."""
    free, capped = simulated(n_eff), simulated(n_eff)
    res = {}
    for name, runner, step in (("free", free, None), ("capped", capped, 2.0)):
        res[name] = capacity.measure(BASE, run_cell=runner, seeds=(0,), budget_s=1e9,
                                     say=lambda s: None, max_step=step)
    jumps = lambda runner: [(max(nf for nf, in runner.calls[:i]), runner.calls[i][0])
                            for i in range(1, len(runner.calls))]
    assert any(nf > 2 * top for top, nf in jumps(free))
    assert all(nf <= 2 * top for top, nf in jumps(capped))
    for name in res:
        card = res[name].card
        assert card["status"] == "measured", name
        assert abs(card["s_eff"]["value"] / (2 * 32 * n_eff) - 1) < 0.15, name


def test_max_step_is_replayed_as_the_run_used_it():
    runner = simulated(64.0)
    run = capacity.measure(BASE, run_cell=runner, seeds=(0,), budget_s=1e9,
                           say=lambda s: None, max_step=2.0)
    same = capacity.replay(BASE, run.records, seeds=(0,), max_step=2.0)
    assert [c["num_facts"] for c in same.card["cells"]] == \
        [c["num_facts"] for c in run.card["cells"]] and same.stopped == "measured"
    other = capacity.replay(BASE, run.records, seeds=(0,))  # without it: another search
    assert other.stopped != "measured"


@pytest.mark.slow
def test_the_card_interval_covers_the_true_state():
    """12 simulated searches at each of three states, one seed a cell: the 95% interval of
    S_eff holds the true state in at least 30 of the 36 (measured: 34)."""
    covered = 0
    for n_eff in (2.0, 8.0, 24.0):
        for seed in range(12):
            res = capacity.measure(BASE, run_cell=simulated(n_eff, seed=seed), seeds=(0,),
                                   budget_s=1e9, say=lambda s: None)
            lo, hi = res.card["s_eff"]["ci"]
            covered += lo <= 2 * 32 * n_eff <= hi
    assert covered >= 30, covered


def test_a_guesser_gets_no_recall_and_an_upper_bound():
    res = capacity.measure(BASE, run_cell=simulated(1e-4), budget_s=1e9, say=lambda s: None)
    card = res.card
    assert card["status"] == "no recall" and card["s_eff"]["value"] == 0.0
    assert card["s_eff"]["bound"] == "upper" and 0 < card["s_eff"]["ci"][1] < math.inf
    assert min(c["num_facts"] for c in card["cells"]) == capacity.MIN_FACTS
    assert "no recall beyond guessing" in card_render.headline(card)


def test_a_state_beyond_the_vocabulary_is_a_lower_bound():
    res = capacity.measure(BASE, run_cell=simulated(1e6), budget_s=1e9, say=lambda s: None)
    card = res.card
    assert card["status"] == "bound" and card["s_eff"]["bound"] == "lower"
    assert "larger --vocab-size" in res.stopped
    md = card_render.render_markdown(card)
    assert "≥" in md and "(a lower bound)" in md


def test_cells_cut_by_the_cap_are_not_fitted_and_make_a_bound():
    res = capacity.measure(BASE, run_cell=simulated(8.0, cut_from=10), budget_s=1e9,
                           max_cells=5, say=lambda s: None)
    card = res.card
    cut = [c for c in card["cells"] if not c["converged"]]
    assert cut and all(c["num_facts"] not in card.get("fitted_cells", []) for c in cut)
    assert card["status"] == "bound" and card["why"]
    assert "no (cap: a lower bound)" in card_render.render_markdown(card)


def test_a_seed_stuck_at_the_guess_is_an_optimisation_failure_and_best_of_seeds_is_kept():
    res = capacity.measure(BASE, run_cell=simulated(8.0, fail_seed=1), seeds=(0, 1),
                           budget_s=1e9, say=lambda s: None)
    card = res.card
    opt = card["optimisation_failures"]
    recalling = [c for c in card["cells"] if c["recall"]]
    assert opt["count"] == len(recalling) and opt["runs"] == 2 * len(card["cells"])
    assert all(c["seed"] == 0 for c in recalling)
    assert card["status"] == "measured"


def test_the_time_budget_stops_before_a_cell_that_cannot_fit():
    clock = [0.0]

    def tick():
        return clock[0]

    inner = simulated(8.0)

    def slow_cell(cfgs):
        clock[0] += 40.0 * cfgs[0]["task"]["num_facts"]  # 10 s a token of L
        return inner(cfgs)

    said: list[str] = []
    res = capacity.measure(BASE, run_cell=slow_cell, budget_s=700, clock=tick, say=said.append)
    assert res.stopped == "time budget" and res.card["status"] != "measured"
    assert clock[0] <= 700  # it never started a cell it could not finish
    # before each trained cell: what it should cost at the rate so far, and what is left
    starts = [ln for ln in said if ": training " in ln]
    assert "the first trained cell" in starts[0] and "11.7 min of the budget left" in starts[0]
    for ln in starts[1:]:
        nf = int(re.search(r"N_f = (\d+)", ln).group(1))
        assert f"about {10 * 4 * nf / 60:.1f} min at the highest rate so far" in ln, ln


def test_a_cpu_budget_counts_the_runs_cpu_time_reused_ones_included():
    """budget_s in CPU seconds: the runs' cpu_s, wall time aside; a resumed search counts
    what the store already spent, so it stops at the same cell as one uninterrupted."""
    def costly(cfgs):
        recs = simulated(8.0)(cfgs)
        for r in recs:
            r["cpu_s"] = 10.0 * r["config"]["task"]["seq_len"]
        return recs

    free = capacity.measure(BASE, run_cell=costly, budget_s=1e12, cpu=True, say=lambda s: None)
    budget = 0.6 * sum(r["cpu_s"] for r in free.records)
    whole = capacity.measure(BASE, run_cell=costly, budget_s=budget, cpu=True,
                             say=lambda s: None, clock=lambda: 0.0)
    assert whole.stopped == "CPU budget" and len(whole.records) < len(free.records)
    assert sum(r["cpu_s"] for r in whole.records) <= budget
    first = whole.records[:2]  # an interrupted run: its first cell in the store
    resumed = capacity.measure(BASE, run_cell=costly, budget_s=budget, cpu=True,
                               done={r["config_hash"]: r for r in first}, say=lambda s: None)
    assert [r["config_hash"] for r in resumed.records] == \
        [r["config_hash"] for r in whole.records]


def test_fit_budget_measures_the_largest_cell_that_fits_instead_of_stopping():
    """A large state puts the first cell at the ceiling and the next beyond it.  With
    a CPU budget that holds the first cell and a cell halfway to that next one, the search
    without fit_budget stops after one cell; with it, it measures the halfway cell (the
    largest that fits, at 1 CPU-s per token of L) and goes on within the budget; a replay
    finds the same cells only with the same setting."""
    def costly(cfgs):
        recs = simulated(64.0)(cfgs)
        for r in recs:
            r["cpu_s"] = float(r["config"]["task"]["seq_len"])
        return recs

    free = capacity.measure(BASE, run_cell=costly, seeds=(0,), budget_s=1e12, cpu=True,
                            say=lambda s: None)
    first, second = (r["config"]["task"]["num_facts"] for r in free.records[:2])
    assert second >= first + 2  # a cell between them to fit
    mid = (first + second) // 2
    budget = 4.0 * (first + mid)
    stop = capacity.measure(BASE, run_cell=costly, seeds=(0,), budget_s=budget, cpu=True,
                            say=lambda s: None)
    assert stop.stopped == "CPU budget" and len(stop.records) == 1
    said: list[str] = []
    fit = capacity.measure(BASE, run_cell=costly, seeds=(0,), budget_s=budget, cpu=True,
                           say=said.append, fit_budget=True)
    order = [r["config"]["task"]["num_facts"] for r in fit.records]
    assert order[:2] == [first, mid], order
    assert sum(r["cpu_s"] for r in fit.records) <= budget
    assert any(f"N_f = {second} would need about" in ln and f"N_f = {mid} instead" in ln
               for ln in said), said
    again = capacity.replay(BASE, fit.records, seeds=(0,), cpu_budget_s=budget, fit_budget=True)
    assert [r["config_hash"] for r in again.records] == [r["config_hash"] for r in fit.records]
    assert again.stopped == fit.stopped
    without = capacity.replay(BASE, fit.records, seeds=(0,), cpu_budget_s=budget)
    assert len(without.records) == 1 and without.stopped == "CPU budget"


def test_a_rerun_reuses_the_store_and_trains_nothing():
    first = simulated(8.0)
    res = capacity.measure(BASE, run_cell=first, budget_s=1e9, say=lambda s: None)
    done = {r["config_hash"]: r for r in res.records}
    second = simulated(8.0)
    again = capacity.measure(BASE, run_cell=second, budget_s=1e9, done=done, say=lambda s: None)
    assert second.calls == [] and again.card["s_eff"] == res.card["s_eff"]


def test_the_card_renders_json_markdown_and_png(tmp_path):
    from recallbench.cli.capacity import write_card

    res = capacity.measure(BASE, run_cell=simulated(8.0), budget_s=1e9, say=lambda s: None)
    written = write_card(res.card, tmp_path)
    card = json.loads((tmp_path / "card.json").read_text())
    assert card["schema"] == cards.CARD_SCHEMA and card["status"] == "measured"
    md = (tmp_path / "card.md").read_text()
    for text in ("S_eff [95%]", "N_f* at p = 0.5", "N_f* at p = 1 − δ", "per kbit",
                 "Fano ratio", "optimisation failures", "CPU time", "| N_f | L | V |"):
        assert text in md, text
    assert (tmp_path / "card.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert written["markdown"].endswith("card.md")


@pytest.mark.parametrize("flags,field", [
    (["--d-model", "0"], "--d-model 0"),
    (["--d-model", "8", "--seeds", "0,0"], "--seeds"),
    (["--d-model", "8", "--time-budget", "-1"], "--time-budget"),
    (["--d-model", "8", "--method", "1", "--cpu-budget", "0"], "--cpu-budget 0 is not allowed"),
    (["--d-model", "8", "--cpu-budget", "5"], "--cpu-budget is for --method 1"),
    (["--d-model", "8", "--work-budget", "0.5"], "--work-budget 0.5 is not allowed"),
    (["--d-model", "8", "--method", "1", "--work-budget", "5"], "--work-budget is for --method 2"),
    (["--d-model", "8", "--set", "task.num_facts=4"], "--set task."),
    (["--d-model", "8", "--state-size", "5"], "--state-size"),
    (["--d-model", "8", "--set", "train.batch_size=0"], "train.batch_size"),
    (["--d-model", "8", "--max-step", "1.2"], "--max-step 1.2 is not allowed"),
    (["--d-model", "8", "--max-spread", "2.5"], "--max-spread 2.5 is not allowed: the N50 "
                                                "interval's target (upper / lower), a number "
                                                "in [1.3, 2]"),
    (["--d-model", "8", "--method", "1", "--max-spread", "1.4"], "--max-spread is for --method 2"),
])
def test_bad_flags_are_one_line_and_nothing_trains(cli, flags, field, tmp_path):
    rc, out, err = cli("capacity", "--adapter", "linear-mamba", "--out", str(tmp_path / "o"),
                       *flags)
    assert rc == 2 and field in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "store").exists()


@pytest.mark.parametrize("flags, fits", [([], True), (["--no-fit-budget"], False)])
def test_the_command_fits_the_budget_unless_told_not_to(cli, tmp_path, monkeypatch, flags, fits):
    """`capacity --method 1` searches with fit_budget by default (cpu-v3 did not:
    --no-fit-budget)."""
    seen = {}
    made = capacity.measure(BASE, run_cell=simulated(8.0), budget_s=1e9, say=lambda s: None)

    def run(base, **kw):
        seen.update(kw)
        return made

    monkeypatch.setattr(capacity, "run", run)
    rc, out, err = cli("capacity", "--adapter", "linear-mamba", "--d-model", "32",
                       "--d-state", "8", "--out", str(tmp_path / "o"), "--method", "1", *flags)
    assert rc == 0, err
    assert seen["fit_budget"] is fits and seen["max_step"] is None


def test_a_factory_needs_an_importable_callable(cli, tmp_path):
    rc, out, err = cli("capacity", "--factory", "no_such_module_here:make", "--d-model", "8",
                       "--out", str(tmp_path / "o"))
    assert rc == 2 and "cannot import" in err


def test_the_command_writes_a_card_and_a_rerun_resumes_from_its_store(cli, tmp_path):
    """The designed model (nothing to train) through the command: a card in --out, every
    run in the store, and the same command again reads the store instead of running."""
    args = ("capacity", "--adapter", "designed", "--d-model", "16", "--d-state", "4",
            "--seeds", "0", "--workers", "1", "--set", "train.test_size=256",
            "--out", str(tmp_path / "card"), "--method", "1")
    rc, out, err = cli(*args)
    assert rc == 0, err
    card = json.loads((tmp_path / "card" / "card.json").read_text())
    assert card["status"] in ("measured", "bound") and card["cells"]
    assert "card written to" in out and "capacity: cell 1: N_f = " in out
    lines = (tmp_path / "card" / "store" / "results.jsonl").read_text().splitlines()
    assert len(lines) == sum(c["seeds"] for c in card["cells"])
    rc, out2, err = cli(*args)
    assert rc == 0 and "(from the store)" in out2
    assert len((tmp_path / "card" / "store" / "results.jsonl").read_text().splitlines()) \
        >= len(lines)


def test_run_seconds_reads_the_protocol():
    """A run's time range: lr candidates x (earliest plateau .. step cap) x the step time."""
    from recallbench.runs.eta import run_seconds

    cfg = {"train": {"lr": [0.003, 0.01, 0.03], "max_steps": 2000, "max_steps_limit": 8000,
                     "patience": 10, "val_every": 50}}
    assert run_seconds(cfg, 0.01) == pytest.approx((3 * 550 * 0.01, 3 * 8000 * 0.01))
    cfg = {"train": {"lr": 0.01, "max_steps": 300, "patience": None, "val_every": 50}}
    assert run_seconds(cfg, 0.1) == pytest.approx((30.0, 30.0))


@pytest.mark.slow
def test_dry_runs_measure_a_step_and_train_nothing(cli, tmp_path):
    rc, out, err = cli("capacity", "--adapter", "linear-mamba", "--d-model", "8", "--d-state",
                       "2", "--out", str(tmp_path / "c"), "--dry-run", "--method", "1")
    assert rc == 0, err
    assert re.search(r"measured: [\d.]+ ms a step at N_f = \d+", out)
    assert re.search(r"ETA: [\d.]+ min to [\d.]+ min", out) and not (tmp_path / "c").exists()
    import yaml

    suite = tmp_path / "cpu-v2"  # a grid suite (the committed one is retired: no new runs)
    suite.mkdir()
    data = yaml.safe_load((ROOT / "leaderboards" / "cpu-v2" / "suite.yaml").read_text())
    data.pop("retired")
    (suite / "suite.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    rc, out, err = cli("leaderboard", "run", "--suite", str(suite), "--adapter",
                       "linear-mamba", "--store", str(tmp_path / "s"), "--dry-run")
    assert rc == 0, err
    assert out.count("ms a step at L = ") == 3 and "24 to run" in out
    assert re.search(r"ETA: [\d.]+ min to [\d.]+ min", out) and not (tmp_path / "s").exists()


def test_a_step_is_timed_after_a_warm_up(monkeypatch):
    """A first run's one-off costs (the first Trainer, the first forward) must not be read
    as the short run's steps: with them the difference would be negative."""
    import recallbench.harness.train as train
    from recallbench.runs import eta

    clock = {"t": 0.0, "runs": 0}

    def fake_run(cfg, progress=False):
        clock["t"] += (3.0 if clock["runs"] == 0 else 0.5) + 0.02 * cfg["train"]["max_steps"]
        clock["runs"] += 1

    monkeypatch.setattr(train, "run", fake_run)
    monkeypatch.setattr(eta.time, "perf_counter", lambda: clock["t"])
    assert eta.step_seconds({"train": {}}) == pytest.approx(0.02)


def test_a_pause_of_a_busy_machine_does_not_set_the_step(monkeypatch):
    """One timed run held up (another process took the core) or one short run slowed: the
    fastest of each length is used, so the step stays the true one (the difference of one
    pair said 0.1 ms for a 4.5 ms step on a busy machine)."""
    import recallbench.harness.train as train
    from recallbench.runs import eta

    for paused in (2, 3, 4):  # the first short, the first long, the second short timed run
        clock = {"t": 0.0, "runs": 0}

        def fake_run(cfg, progress=False):
            clock["t"] += 0.5 + 0.02 * cfg["train"]["max_steps"] + (
                0.4 if clock["runs"] == paused - 1 else 0.0)
            clock["runs"] += 1

        monkeypatch.setattr(train, "run", fake_run)
        monkeypatch.setattr(eta.time, "perf_counter", lambda: clock["t"])
        assert eta.step_seconds({"train": {}}) == pytest.approx(0.02), paused
