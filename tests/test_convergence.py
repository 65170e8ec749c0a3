"""Convergence: patience stops a plateau, the record says whether the cap cut a run short,
steps_to follows the validation history, and the scorer never fits an unconverged point."""
import json
import math

import numpy as np
import pytest

from recallbench.api.config import resolve
from recallbench.harness import convergence
from recallbench.harness.convergence import History
from recallbench.harness.ensemble import run_ensemble
from recallbench.harness.train import run
from recallbench.law import scorer

TASK = {"name": "mqar", "vocab_size": 32, "seq_len": 16, "num_facts": 4}
MODEL = {"adapter": "linear-mamba", "d_model": 8, "d_state": 4}
TRAIN = {"max_steps": 40, "batch_size": 32, "val_every": 5, "val_size": 32, "test_size": 32,
         "early_stop": None, "progress": False, "threads": 1}


def config(**train):
    return {"task": TASK, "model": MODEL, "train": {**TRAIN, **train}}


def test_history_stops_on_a_plateau_and_at_early_stop():
    h = History(early_stop=None, patience=3)
    stops = [h.add(s, a) for s, a in [(10, 0.2), (20, 0.3), (30, 0.3005), (40, 0.29), (50, 0.3)]]
    assert stops == [False, False, False, False, True] and h.stop_reason == "plateau"
    assert h.summary() == {"converged": True, "stop_reason": "plateau",
                           "steps_to": {"0.5": None, "0.9": None, "0.99": None}}
    e = History(early_stop=0.9, patience=None)
    assert [e.add(s, a) for s, a in [(10, 0.5), (20, 0.9), (30, 0.95)]] == [False, False, True]
    assert e.summary()["stop_reason"] == "early_stop" and e.steps_to()["0.9"] == 20


def test_a_gain_within_the_validation_noise_is_a_plateau():
    """The threshold is the binomial standard error of the best accuracy: a creep of 0.002
    a validation is progress on 10**6 queries and a plateau on 2,048 (SE 0.011)."""
    creep = [(50 * i, 0.40 + 0.002 * i) for i in range(1, 9)]
    small, large, unknown = History(None, 4), History(None, 4), History(None, 4)
    stops = [small.add(s, a, total=2048) for s, a in creep]
    assert stops.index(True) == 4 and small.stop_reason == "plateau"  # 4 waits after 50
    assert not any(large.add(s, a, total=10**6) for s, a in creep)
    assert not any(unknown.add(s, a) for s, a in creep)  # no size: MIN_DELTA only
    # a jump larger than one standard error resets the wait
    se = math.sqrt(0.4 * 0.6 / 2048)
    j = History(None, 2)
    assert [j.add(1, 0.4, 2048), j.add(2, 0.4 + 0.5 * se, 2048), j.add(3, 0.4 + 1.5 * se, 2048),
            j.add(4, 0.4 + 1.6 * se, 2048)] == [False, False, False, False]
    assert j.resolution(2048) == pytest.approx(math.sqrt(j.reference * (1 - j.reference) / 2048))
    assert History(None, 2).resolution(10**9) == convergence.MIN_DELTA


def test_a_history_at_the_guess_level_does_not_stop_on_a_plateau():
    """Validations scattered around the guess level (binomial noise of a guesser on 2,048
    queries) for 60 validations: the old rule would stop after `patience`; with the guess
    level, patience starts only once one clearly exceeds it, then stops as before."""
    guess, total = 1 / 16, 2048
    rng = np.random.default_rng(3)
    noise = [float(rng.binomial(total, guess)) / total for _ in range(60)]
    h, old = History(None, 3, guess=guess), History(None, 3)
    assert not any(h.add(10 * (i + 1), a, total) for i, a in enumerate(noise))
    assert h.wait == 0 and not h.left_guess and not h.converged()
    assert any(old.add(10 * (i + 1), a, total) for i, a in enumerate(noise))
    above = [h.add(700 + 10 * i, 0.5, total) for i in range(4)]
    assert h.left_guess and above == [False, False, False, True]
    assert h.stop_reason == "plateau" and h.converged()


def test_leaving_the_guess_level_takes_three_standard_errors():
    g, total = 0.25, 1024
    h = History(None, 2, guess=g)
    edge = g + convergence.GUESS_MARGIN * math.sqrt(g * (1 - g) / total)
    assert h.guess_threshold(total) == pytest.approx(edge)
    for step in range(1, 6):
        assert not h.add(step, edge - 1e-9, total)  # a best short of the margin: no count
    assert not h.left_guess and h.wait == 0
    h.add(6, edge + 1e-3, total)
    assert h.left_guess and [h.add(7, 0.0, total), h.add(8, 0.0, total)] == [False, True]
    # unknown size: MIN_DELTA only; a level that is all but certain is not a plateau
    assert History(None, 2, guess=0.1).guess_threshold(None) == pytest.approx(0.1 + 1e-3)


def test_the_guess_level_is_ignored_without_patience():
    """Null patience: the cap's plateau judgment is that of the records made before."""
    h, old = History(None, None, guess=0.25), History(None, None)
    for i in range(convergence.PLATEAU_WINDOW + 1):
        h.add(i, 0.25, 1024)
        old.add(i, 0.25, 1024)
    assert h.converged() and h.summary() == old.summary()


def test_guess_of_reads_the_task():
    task = resolve(config()).task
    assert convergence.guess_of(task) == pytest.approx(1 / TASK["num_facts"])
    assert convergence.guess_of(object()) is None  # a task that cannot say: no gate


def test_history_judges_the_cap():
    improving = History(None, None)
    for i in range(30):
        improving.add(10 * (i + 1), 0.01 * i)
    assert improving.summary() == {"converged": False, "stop_reason": "max_steps",
                                   "steps_to": {"0.5": None, "0.9": None, "0.99": None}}
    flat = History(None, None)
    for i in range(convergence.PLATEAU_WINDOW + 1):
        flat.add(10 * (i + 1), 0.4)
    assert flat.converged() and flat.stop_reason is None  # not stopped, but plateaued
    assert not History(None, 5).converged()  # nothing validated: not converged
    assert History(None, 5).summary(trainable=False)["converged"]  # nothing to train


def test_steps_to_is_monotone_and_matches_the_history():
    rng = np.random.default_rng(0)
    accs = np.clip(np.cumsum(rng.uniform(-0.05, 0.12, 40)), 0, 1)
    h = History(None, None)
    for i, a in enumerate(accs):
        h.add(25 * (i + 1), float(a))
    got = h.steps_to()
    levels = [got[f"{x:g}"] for x in convergence.LEVELS]
    assert [s for s in levels if s is not None] == sorted(s for s in levels if s is not None)
    for level, step in zip(convergence.LEVELS, levels):
        reached = [25 * (i + 1) for i, a in enumerate(accs) if a >= level]
        assert step == (reached[0] if reached else None)


def _guess_threshold(total: int) -> float:
    g = resolve(config()).task.guess_level(1)
    return g + convergence.GUESS_MARGIN * math.sqrt(g * (1 - g) / total)


def test_patience_stops_a_plateaued_run_early():
    rec = run(config(lr=3e-2, patience=2, max_steps=200))  # learns, then stalls
    assert rec["stop_reason"] == "plateau" and rec["converged"] is True
    assert rec["steps"] < 200 and rec["steps"] % TRAIN["val_every"] == 0
    assert rec["config"]["train"]["patience"] == 2 and rec["lr_search"] is None
    assert rec["val_accuracy"] > _guess_threshold(TRAIN["val_size"] * TASK["num_facts"])


def test_patience_waits_while_a_run_is_at_the_guess_level():
    """Too small an lr to learn: validation never leaves the guess level, so patience never
    counts; the run trains to the cap and is not converged (its accuracy is no capacity)."""
    rec = run(config(lr=1e-7, patience=2, max_steps=60))
    assert rec["val_accuracy"] <= _guess_threshold(TRAIN["val_size"] * TASK["num_facts"])
    assert rec["steps"] == 60 and rec["stop_reason"] == "max_steps" and not rec["converged"]


def test_a_run_cut_by_the_cap_while_improving_is_not_converged():
    rec = run(config(lr=1e-2))  # 8 validations, fewer than the plateau window
    assert rec["steps"] == 40 and rec["stop_reason"] == "max_steps"
    assert rec["converged"] is False and "patience" not in rec["config"]["train"]
    assert set(rec["steps_to"]) == {"0.5", "0.9", "0.99"}


def test_ensemble_members_stop_on_their_own_plateau():
    recs = run_ensemble([config(lr=3e-2, patience=2, max_steps=200),
                         config(lr=1e-7, patience=2, max_steps=200)])
    assert recs[0]["stop_reason"] == "plateau" and recs[0]["converged"]
    assert recs[0]["steps"] < 200
    # the member at the guess level is not on a plateau: it trains to the cap
    assert recs[1]["steps"] == 200 and not recs[1]["converged"]
    single = run(config(lr=3e-2, patience=2, max_steps=200))
    assert single["steps"] == recs[0]["steps"]


def test_bad_patience_is_one_line(cli):
    for value in ("0", "-3", "1.5", "x"):
        rc, out, err = cli("run", "--set", f"train.patience={value}")
        assert rc == 2 and err.count("\n") == 1 and "train.patience" in err


def _records(unconverged_cells: set):
    """Linear-mamba records from the law, at (D, N) cells; the cells named are cut by the
    cap while improving, at a fraction of the law's accuracy."""
    from scipy import special

    rng = np.random.default_rng(1)
    out = []
    b = math.sqrt(2 * math.log(512))
    for d in (8, 16, 32):
        for n in (2, 4, 8):
            p = float(special.ndtr(math.sqrt(n * d / (1.25 * 32 + n)) - b))
            cut = (d, n) in unconverged_cells
            k = int(rng.binomial(32768, p * (0.3 if cut else 1.0)))
            cfg = {"task": {"name": "mqar", "vocab_size": 512, "seq_len": 128, "num_facts": 32},
                   "model": {"adapter": "linear-mamba", "d_model": d, "d_state": n,
                             "n_layers": 1, "expand": 2},
                   "train": {"seed": 0, "lr": 0.003}}
            out.append({"schema": scorer.SCHEMA, "status": "ok", "accuracy": k / 32768,
                        "correct": k, "total": 32768, "correct_topk": k, "top_k": 5,
                        "state_size": 2 * d * n, "state_bits": 32, "seed": 0, "config": cfg,
                        "config_hash": f"{d}-{n}", "converged": not cut,
                        "stop_reason": "max_steps" if cut else "plateau",
                        "info_bits": 32 * math.log2(256)})
    return out


def test_scorer_flags_unconverged_cells_and_leaves_them_out_of_the_fits():
    cut = {(8, 4), (32, 2)}
    report = scorer.score(_records(cut))
    (group,) = report["groups"]
    flagged = {(c["d_model"], c["d_state"]) for c in group["cells"] if c["best_unconverged"]}
    assert flagged == cut
    assert all(any("UNCONVERGED" in f for f in c["flags"]) == ((c["d_model"], c["d_state"]) in cut)
               for c in group["cells"])
    assert all("theory" not in c for c in group["cells"] if c["best_unconverged"])
    fitted = {(e["d_model"], e["d_state"]) for e in group["configs"]}
    assert fitted.isdisjoint(cut) and len(fitted) == 9 - len(cut)
    clean = scorer.score([r for r in _records(cut) if r["converged"]])
    assert group["collapse"]["best"]["a"] == pytest.approx(clean["groups"][0]["collapse"]["best"]["a"])
    # a record without stop_reason (made before convergence was judged): unknown, kept
    assert not scorer.unconverged({"converged": False, "correct": 1, "total": 2})


def test_include_unconverged_fits_the_cut_cells_at_their_lower_bound(cli, tmp_path):
    """The cells cut at 0.3 of the law's accuracy pull the fit when included (so they are
    in it), are still flagged, and the report says the fits hold them; the default report of
    the same records leaves them out."""
    cut = {(8, 4), (32, 2)}
    store = tmp_path / "r.jsonl"
    store.write_text("".join(json.dumps(r) + "\n" for r in _records(cut)))
    rc, out, err = cli("score", str(store), "--out", "with", "--no-figures", "--collapse",
                       "always", "--include-unconverged")
    assert rc == 0, err
    (group,) = json.loads((tmp_path / "with" / "report.json").read_text())["groups"]
    default = scorer.score(_records(cut), collapse=True)["groups"][0]
    assert {(e["d_model"], e["d_state"]) for e in group["configs"]} >= cut
    assert group["collapse"]["best"]["n_points"] == 9
    assert default["collapse"]["best"]["n_points"] == 7
    assert group["collapse"]["best"]["a"] != pytest.approx(default["collapse"]["best"]["a"],
                                                           rel=0.05)
    flags = [f for c in group["cells"] for f in c["flags"] if f.startswith("UNCONVERGED")]
    assert len(flags) == 2 and all("in the fits by --include-unconverged" in f for f in flags)
    md = (tmp_path / "with" / "report.md").read_text()
    assert "**--include-unconverged**: such cells are in every fit" in md


def test_record_fields_of_a_resolved_run_are_json(tmp_path):
    cfg = resolve(config(lr=1e-2, max_steps=10, val_every=5))
    rec = run(cfg)
    assert rec["lr"] == 1e-2 and rec["steps_to"]["0.5"] in (None, 5, 10)
    assert rec["converged"] in (True, False) and rec["stop_reason"] in ("max_steps", "plateau")
