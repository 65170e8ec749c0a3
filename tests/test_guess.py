"""No credit for guessing: the recall test, the guess-aware S_eff fit and "no recall beyond
guessing", on counts simulated with the correlation of real sequences."""
import math

import numpy as np
import pytest

from recallbench.api.registry import TASKS
from recallbench.law import fit, guess, scorer, theory
from recallbench.law import report as render

SEQUENCES = 1024


def sequence_counts(rng, p_sequence, num_facts, n=SEQUENCES, spread=20.0):
    """Correct answers of n sequences of num_facts queries whose per-sequence accuracy
    varies around p_sequence (a Beta of concentration ``spread``): the queries of one
    sequence share one state, so they are correlated, as in a trained model."""
    mean = np.clip(p_sequence, 1e-6, 1 - 1e-6)
    per_seq = rng.beta(mean * spread, (1 - mean) * spread, size=n)
    return int(rng.binomial(num_facts, per_seq).sum()), n * num_facts


def record(adapter, d, n, num_facts, correct, total, seed=0, vocab_size=128, state_size=None):
    cfg = {"task": {"name": "mqar", "vocab_size": vocab_size, "seq_len": 4 * num_facts,
                    "num_facts": num_facts, "power_a": 1.0, "random_non_queries": True},
           "model": {"adapter": adapter, "d_model": d, "d_state": n, "n_layers": 1,
                     "d_conv": 2, "n_heads": 1, "head_pattern": None, "expand": 2, "options": {}},
           "train": {"seed": seed, "max_steps": 2000, "lr": 1e-2, "threads": 1,
                     "test_size": SEQUENCES}}
    return {"schema": scorer.SCHEMA, "status": "ok", "error": None, "accuracy": correct / total,
            "correct": correct, "total": total, "seed": seed, "converged": True,
            "stop_reason": "plateau", "state_size": state_size or d, "state_bits": 32,
            "config": cfg, "config_hash": f"{adapter}-{d}-{n}-{num_facts}-{seed}"}


def test_tasks_declare_the_bag_of_values_guess():
    mqar = TASKS.get("mqar").from_params({"vocab_size": 128, "num_facts": 16, "seq_len": 64})
    assert mqar.guess_level() == 1 / 16 and mqar.guess_level(top_k=5) == 5 / 16
    assert mqar.guess_level(top_k=40) == 1.0
    ar = TASKS.get("ar").from_params({"vocab_size": 128, "num_facts": 8})
    assert ar.guess_level() == 1 / 8
    rk = TASKS.get("mqar-repeated-keys").from_params({"num_facts": 10, "num_key_repeats": 3,
                                                      "seq_len": 128})
    assert rk.guess_level() == 1 / 30  # every occurrence carries a fresh value


def test_the_guess_level_is_what_a_bag_of_values_guesser_scores():
    """Draw real MQAR batches and answer each query with a uniform pick among the values in
    its own context: the hit rate is the declared guess level."""
    import torch

    task = TASKS.get("mqar").from_params({"vocab_size": 128, "num_facts": 8, "seq_len": 32})
    gen = torch.Generator().manual_seed(0)
    x, y = task.sample(4096, gen)
    values = x[:, 1:2 * 8:2]  # the context's values
    pick = values.gather(1, torch.randint(8, (x.shape[0], 1), generator=gen))
    asked = y != -100
    hits = (pick.expand_as(y)[asked] == y[asked]).float()
    se = math.sqrt(task.guess_level() * (1 - task.guess_level()) / hits.numel())
    assert abs(hits.mean().item() - task.guess_level()) < 4 * se


def test_correlated_queries_are_counted_as_sequences():
    """7% right on 1,024 sequences of 16 queries against g = 1/16: 16,384 independent
    queries would show it above g, but sequences whose answers rise and fall together do
    not."""
    correct, total = round(0.07 * 16384), 16384
    assert guess.recall_test(correct, total, units=total, guess=1 / 16)[0]
    assert not guess.recall_test(correct, total, units=1024, guess=1 / 16)[0]


def test_the_recall_test_seldom_credits_a_guesser():
    """Guess-only counts with correlated queries, best of 3 seeds: the test at 95% calls
    them recall in about 5% of cells or fewer."""
    rng = np.random.default_rng(1)
    trials, hits = 300, 0
    for _ in range(trials):
        runs = [sequence_counts(rng, 1 / 16, 16) for _ in range(3)]
        c, t = max(runs)
        hits += guess.recall_test(c, t, SEQUENCES, 1 / 16, draws=3)[0]
    assert hits / trials < 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials), hits


def test_a_guess_only_model_gets_no_recall_beyond_guessing():
    """A GRU-like model that answers 1/N_f at every budget: no cell counts, S_eff is
    "no recall beyond guessing" with an upper bound, where the law without the guess
    credited it with a positive state."""
    rng = np.random.default_rng(2)
    recs = []
    for d in (16, 32, 64):
        for nf in (4, 8, 16):
            recs.append(record("gru-like", d, d, nf, *sequence_counts(rng, 1 / nf, nf),
                               state_size=d))
    report = scorer.score(recs)
    (g,) = report["groups"]
    assert all(any("NO RECALL" in f for f in c["flags"]) for c in g["cells"])
    eff = g["efficiency"]["best"]
    assert eff["no_recall"] and "ratio" not in eff and 0 < eff["ratio_upper"] < math.inf
    for cfg in g["configs"]:
        assert cfg["best"]["no_recall"] and cfg["best"]["s_eff"] is None
        assert 0 < cfg["best"]["s_eff_upper"] < math.inf
    # the plain law maps the same counts to a positive effective state
    plain = fit.fit_effective_state(
        [c["best"]["correct"] for c in g["cells"]], [c["best"]["total"] for c in g["cells"]],
        [c["d_model"] for c in g["cells"]], [c["num_facts"] for c in g["cells"]], 128,
        scale=[c["state_size"] / (2 * c["d_model"]) for c in g["cells"]])
    assert plain.theta_ci[0] > 0.1
    md = render.render_markdown(report)
    assert "no recall beyond guessing, S_eff/S ≤" in md and "NO RECALL" in md


@pytest.mark.parametrize("guesses", [False, True])
def test_the_guess_aware_fit_recovers_the_state_of_recallers(guesses):
    """Counts from the law at a known S_eff/S, from a model that guesses among the context's
    values when its read-out fails (the trained kind) and from one that does not (the
    designed kind): the fit recovers S_eff/S inside its interval either way, and says which
    kind it saw."""
    rng = np.random.default_rng(3)
    true_ratio, d, n, v = 0.6, 32, 8, 512
    recs = []
    for nf in (4, 8, 12, 16, 24, 32):
        p = theory.recall_probability(v, nf, d, true_ratio * n, 1.25)
        if guesses:
            p = 1 / nf + (1 - 1 / nf) * p
        recs.append(record("black-box", d, n, nf, *sequence_counts(rng, p, nf, spread=200.0),
                           vocab_size=v, state_size=2 * d * n))
    (g,) = scorer.score(recs)["groups"]
    eff = g["efficiency"]["best"]
    lo, hi = eff["ratio_ci"]
    assert lo < true_ratio < hi and hi / lo < 1.5, eff
    cells = [c for c in g["cells"] if c["best"]["recall"]]
    f = fit.fit_effective_state([c["best"]["correct"] for c in cells],
                                [c["best"]["total"] for c in cells], d,
                                [c["num_facts"] for c in cells], v, scale=n,
                                guess=[c["guess_level"] for c in cells])
    assert (f.guess_share > 0.5) == guesses, f.guess_share


def test_the_designed_model_is_fitted_as_it_is():
    """The designed model (fixed weights, no training) reads out blind: its eq. 19 curve at
    a = 3 sits below 1/N_f at large N_f.  Its cells above the guess give S_eff/S = 5/4 ÷ 3
    within the interval: the guess term does not bias a model that does not guess."""
    from recallbench.harness.train import run

    recs = []
    for nf in (4, 8, 12, 16, 24):
        r = run({"task": {"name": "mqar", "vocab_size": 512, "num_facts": nf,
                          "seq_len": 4 * nf},
                 "model": {"adapter": "designed", "d_model": 32, "d_state": 8},
                 "train": {"progress": False, "test_size": SEQUENCES, "val_size": 8}})
        recs.append(r)
    (g,) = scorer.score(recs)["groups"]
    eff = g["efficiency"]["best"]
    lo, hi = eff["ratio_ci"]
    assert lo < 1.25 / 3 < hi, eff
    assert eff["n_cells"] >= 3


def test_a_cell_without_a_registered_task_is_not_judged():
    rec = record("black-box", 16, 16, 8, 100, 8192)
    rec["config"]["task"]["name"] = "not-registered-here"
    (g,) = scorer.score([rec])["groups"]
    assert g["cells"][0]["guess_level"] is None
    assert "recall" not in g["cells"][0]["best"]


def test_module_examples():
    import doctest

    assert doctest.testmod(guess).failed == 0


def test_the_pytest_plugin_summary_says_no_recall():
    """The plugin's S_eff of one run at the guess level (a state-8 GRU answering 1/N_f): 0
    with an upper bound, printed as "no recall", never as a positive S_eff."""
    from recallbench.pytest_plugin import session, summary

    rng = np.random.default_rng(4)
    rec = record("gru-like", 8, 8, 16, *sequence_counts(rng, 1 / 16, 16), state_size=8)
    rec.update(steps=100, wall_s=1.0)
    value, ci, note = session._effective_state(rec)
    assert value == 0.0 and ci[0] == 0.0 and 0 < ci[1] < math.inf and "no recall" in note
    row = summary._row({"key": "t", "record": rec, "effective_state": value,
                        "effective_state_ci": ci, "effective_state_error": note})
    assert row[4].startswith("no recall (<= ")
    # a run that recalls keeps its fitted S_eff
    rec2 = record("gru-like", 8, 8, 16, *sequence_counts(rng, 0.5, 16), state_size=8)
    value, ci, note = session._effective_state(rec2)
    assert value > 0 and note is None


def _guess_only_store(tmp_path):
    import json

    rng = np.random.default_rng(5)
    recs = [record("gru-like", d, d, nf, *sequence_counts(rng, 1 / nf, nf), state_size=d)
            for d in (16, 32) for nf in (4, 8, 16)]
    path = tmp_path / "guess.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_score_cli_reports_no_recall_and_can_credit_guessing_for_old_reports(tmp_path, cli):
    import json

    path = _guess_only_store(tmp_path)
    rc, out, err = cli("score", str(path), "--out", str(tmp_path / "r"), "--no-figures")
    assert rc == 0, err
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["settings"]["guess"] is True
    assert rep["groups"][0]["efficiency"]["best"]["no_recall"]
    assert "no recall beyond guessing" in (tmp_path / "r" / "report.md").read_text()
    rc, out, err = cli("score", str(path), "--out", str(tmp_path / "old"), "--no-figures",
                       "--credit-guessing")
    assert rc == 0, err
    old = json.loads((tmp_path / "old" / "report.json").read_text())
    assert old["settings"]["guess"] is False
    assert old["groups"][0]["efficiency"]["best"]["ratio"] > 0.1  # what guessing used to earn


def test_a_suite_chooses_whether_it_judges_guessing(tmp_path):
    """Suites made before the guess level keep the law alone (so their stored scores still
    verify); a suite that sets scoring.guess gets the guess-aware scorer; a bad value is
    refused naming the field."""
    from recallbench.api.errors import ConfigError
    from recallbench.leaderboard.grid import scoring
    from recallbench.leaderboard.suite import load_suite

    import yaml

    src = yaml.safe_load(open("leaderboards/cpu-v2/suite.yaml"))
    recs = scorer.load_records([_guess_only_store(tmp_path)])
    for value, no_recall in ((None, False), (True, True)):
        data = {**src, "scoring": {**src.get("scoring", {})}}
        if value is not None:
            data["scoring"]["guess"] = value
        d = tmp_path / str(value) / "cpu-v2"
        d.mkdir(parents=True)
        (d / "suite.yaml").write_text(yaml.safe_dump(data))
        eff = scoring.score_records(recs, load_suite(d))["groups"][0]["efficiency"]["best"]
        assert bool(eff.get("no_recall")) is no_recall
    data = {**src, "scoring": {"guess": "yes"}}
    (tmp_path / "bad" / "cpu-v2").mkdir(parents=True)
    (tmp_path / "bad" / "cpu-v2" / "suite.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="scoring.guess must be true or false"):
        load_suite(tmp_path / "bad" / "cpu-v2")
