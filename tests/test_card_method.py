"""Card method 2: the run-level N50 fit (law.runfit), the card it makes (law.run_card) and the
search that places its batches (runs.card_search), on runs simulated from known truths."""
import json
import math

import numpy as np
import pytest
from scipy import special

from recallbench.api.canonical import config_hash
from recallbench.law import card_render, run_card, run_card_render, runfit, theory
from recallbench.runs import card_lr, card_search

BASE = {"task": {"name": "mqar", "vocab_size": 512},
        "model": {"adapter": "linear-mamba", "d_model": 32, "d_state": 8},
        "train": {"lr": [0.003, 0.01, 0.03], "max_steps": 2000, "max_steps_limit": 8000,
                  "patience": 10, "batch_size": 32, "val_every": 50, "early_stop": 0.999,
                  "val_size": 512, "test_size": 1024}}


def draws(n50, slope, tau, fail, cells, reps, rng, units=1024):
    """(num_facts, correct, total, units, guess) of runs from the module's model."""
    out = []
    for nf in cells:
        for _ in range(reps):
            q = special.ndtr(slope * (math.log(n50) - math.log(nf)) + tau * rng.normal())
            q = 0.0 if rng.random() < fail else q
            g = 1.0 / nf
            total = units * nf
            out.append((nf, int(rng.binomial(total, g + (1 - g) * q)), total, units, g))
    return [np.array(c) for c in zip(*out)]


def _records(nf, k, n):
    """Result records of runs (N_f, correct, total), as the harness writes them."""
    return [{"status": "ok", "correct": int(k[i]), "total": int(n[i]), "converged": True,
             "stop_reason": "plateau", "state_size": 512, "seed": i, "steps": 2000,
             "config": {**BASE, "task": {**BASE["task"], "num_facts": int(nf[i]),
                                         "seq_len": 4 * int(nf[i])},
                        "train": {**BASE["train"], "seed": i}}} for i in range(len(nf))]


def runner(n50, slope, tau, fail, seed=0):
    """run_cell of the same model, making records as the harness does (three lr candidates
    of 2,000 steps each: the training work)."""
    rng = np.random.default_rng(seed)
    calls = []

    def run_cell(cfgs):
        calls.append([(c["task"]["num_facts"], c["train"]["seed"]) for c in cfgs])
        recs = []
        for c in cfgs:
            nf = c["task"]["num_facts"]
            (_, k, n, _, _) = draws(n50, slope, tau, fail, [nf], 1, rng)
            recs.append({"status": "ok", "correct": int(k[0]), "total": int(n[0]),
                         "converged": True, "stop_reason": "plateau", "state_size": 512,
                         "state_bits": 32, "steps": 2000, "seed": c["train"]["seed"],
                         "config": c, "config_hash": config_hash(c), "cpu_s": 1.0,
                         "wall_s": 1.0, "lr": 0.01,
                         "lr_search": [{"lr": lr, "steps": 2000} for lr in (0.003, 0.01, 0.03)]})
        return recs

    run_cell.calls = calls
    return run_cell


def test_the_fit_recovers_a_known_truth_from_many_runs():
    """40 runs a cell: N50, the slope and the run SD come back within a few of their
    standard errors (N50's SE ≈ τ/(β·√n) on the log scale)."""
    rng = np.random.default_rng(3)
    f = runfit.fit_runs(*draws(20.0, 1.4, 0.3, 0.0, [10, 14, 20, 28, 40], 40, rng))
    assert abs(math.log(f.n50 / 20.0)) < 4 * 0.3 / (1.4 * math.sqrt(200))
    assert f.slope == pytest.approx(1.4, rel=0.15) and f.tau == pytest.approx(0.3, rel=0.2)
    assert f.n50_ci[0] < 20.0 < f.n50_ci[1] and f.bracketed


def test_failures_are_a_fitted_rate_not_scatter():
    """A fifth of the runs left at the guess: the rate is fitted near 0.2 and N50 and the
    run SD stay those of the runs that learned (a failure is not a very bad run)."""
    rng = np.random.default_rng(5)
    f = runfit.fit_runs(*draws(20.0, 1.3, 0.2, 0.2, [10, 14, 20, 28], 30, rng))
    assert f.failure_rate == pytest.approx(0.2, abs=0.08)
    assert f.tau < 0.3 and abs(math.log(f.n50 / 20.0)) < 0.1


def test_few_runs_get_the_small_sample_threshold():
    """The threshold is that of a line with unknown noise, n·ln(1 + F(1, n−3)/(n−3)) on the
    uncensored runs: far above χ²₁ = 3.84 for a handful of runs, and infinite (no interval)
    with three or fewer."""
    from scipy import stats

    rng = np.random.default_rng(1)
    f = runfit.fit_runs(*draws(20.0, 1.3, 0.3, 0.0, [12, 20, 30], 2, rng))
    n = f.n_observed
    assert f.threshold == pytest.approx(n * math.log1p(stats.f.ppf(0.95, 1, n - 3) / (n - 3)))
    assert f.threshold > stats.chi2.ppf(0.95, 1) * 1.5
    f = runfit.fit_runs(*draws(20.0, 1.3, 0.3, 0.0, [14, 28], 1, rng))
    assert math.isinf(f.threshold) and f.n50_ci == (0.0, math.inf)


def test_an_interval_end_is_found_where_a_warm_started_profile_moves():
    """Eight runs of a simulated Mamba-1-like card (N50 8.18, slope 1.75, run SD 0.62, one
    run in six failing) on which Brent's method once raised: the profile, warm-started along
    the walk, read differently at the walk's last point when evaluated again.  The interval
    now ends where a fresh profile from many starts crosses the threshold, within one step
    of the walk (0.05 in ln N_f); below, that profile never crosses, so the interval opens
    to 0."""
    nf = [4, 4, 7, 7, 9, 9, 15, 15]
    correct = [1008, 4078, 3233, 4299, 7419, 4188, 1839, 3005]
    total = [1024 * n for n in nf]
    f = runfit.fit_runs(nf, correct, total, 1024, [1 / n for n in nf])
    assert f.n50_ci[0] == 0.0 and f.n50 < f.n50_ci[1] < math.inf
    x = np.log(nf)
    kind, z, v = runfit.classify(np.array(correct, float), np.array(total, float),
                                 np.full(8, 1024.0), 1 / np.array(nf, float), np.zeros(8, bool))
    starts = [np.array([math.log(b), math.log(t), r]) for b in (0.6, 1.3, 3.0)
              for t in (0.1, 0.5) for r in (0.02, 0.2)]

    def deviance(n50):
        r = min((runfit._minimize(lambda p: runfit._nll((math.log(n50), *p), x, kind, z, v),
                                  [s], runfit.BOUNDS[1:]) for s in starts), key=lambda r: r.fun)
        return 2 * (r.fun - f.nll)

    hi = f.n50_ci[1]
    assert deviance(hi * math.exp(-0.05)) < f.threshold < deviance(hi * math.exp(0.05))
    assert max(deviance(n) for n in (0.5, 2.0, 4.0)) < f.threshold


def test_censored_runs_are_kinds_not_numbers():
    """At the guess, at the ceiling, cut by the cap, or observed, by the run's counts."""
    kinds, _, _ = runfit.classify([1024, 20470, 8000, 6000], [10240, 20480, 10240, 10240],
                                  [1024, 1024, 1024, 1024], [0.1, 0.05, 0.1, 0.1],
                                  [False, False, True, False])
    assert list(kinds) == [1, 2, 3, 0]


def test_s_eff_is_anchored_where_the_reference_recalls_half():
    """The linear reference at the anchored N_eff recalls half its queries (eq. 19) at N50,
    checked through theory.recall_probability, not the inverse used to compute it."""
    for n50, d in ((12.0, 32), (40.0, 32), (6.0, 16)):
        n_eff = run_card.anchored_n_eff(n50, d, 512)
        p = float(theory.recall_probability(512, n50, d, n_eff, theory.coefficient_a("linear", "mqar")))
        assert p == pytest.approx(0.5, abs=1e-6)
    assert math.isinf(run_card.anchored_n_eff(10.0, 8, 512))  # D ≤ s²: never reaches 1/2


def test_the_search_measures_a_known_card_and_replays_it():
    run_cell = runner(20.0, 1.3, 0.15, 0.0)
    res = card_search.measure(BASE, run_cell=run_cell, say=lambda s: None)
    card = res.card
    assert card["status"] == "measured" and res.stopped == "measured"
    lo, hi = card["n50"]["ci"]
    assert hi / lo <= run_card.MAX_SPREAD and lo < 20.0 < hi
    assert card["work_mtok"] <= card_search.DEFAULT_WORK_MTOK
    again = card_search.replay(BASE, res.records, seeds=(0, 1))
    assert json.dumps(again.card, sort_keys=True) == json.dumps(card, sort_keys=True)
    # a repeated N_f trains new seeds; seeds 2,3 never meet seeds 0,1's runs
    seen = [pair for batch in run_cell.calls for pair in batch]
    assert len(seen) == len(set(seen))
    # no two runs of the card share a seed (a seed fixes the initial weights and the data)
    seeds = [r["config"]["train"]["seed"] for r in res.records]
    assert len(seeds) == len(set(seeds))
    for r in res.records:  # each seed names its card seed, batch and N_f
        s, j, nf = card_search.seed_parts(r["config"]["train"]["seed"])
        assert s in (0, 1) and nf == r["config"]["task"]["num_facts"]
        assert r["config"]["train"]["seed"] in card_search.batch_seeds([0, 1], j, nf)
    # seeds 2,3 never meet seeds 0,1's runs, at any N_f and batch
    ours = {card_search.run_seed(s, nf, j) for s in (0, 1) for nf in range(2, 256)
            for j in range(99)}
    theirs = {card_search.run_seed(s, nf, j) for s in (2, 3) for nf in range(2, 256)
              for j in range(99)}
    assert len(ours) == 2 * 254 * 99 and not ours & theirs


def test_the_card_widens_the_fits_interval_and_measures_the_widened_one():
    """The card's interval is the fit's stretched WIDEN-fold about N50 in ln N_f, and the
    1.3 of a measured card applies to that one: cards whose fit alone spans under 1.3 are
    bounds until the widened interval does (fails under an unwidened rule)."""
    w, top = run_card.WIDEN, run_card.MAX_SPREAD
    assert w > 1.0
    rng = np.random.default_rng(5)
    seen, runs = [], [[] for _ in range(5)]
    while not seen or seen[-1][1] != "measured":
        assert len(runs[0]) < 60, seen
        for i, c in enumerate(draws(20.0, 1.3, 0.4, 0.0, [12, 16, 20, 25, 32], 1, rng)):
            runs[i] += list(c)
        nf, k, n, u, g = (np.array(c) for c in runs)
        card = run_card.build_run_card(_records(nf, k, n))
        f = runfit.fit_runs(nf, k, n, u, g)
        if not 0 < f.n50_ci[0] < f.n50_ci[1] < math.inf:
            continue
        (lo, hi), e = card["n50"]["ci"], math.log(f.n50)
        assert card["n50"]["fit_ci"] == pytest.approx(list(f.n50_ci))
        assert math.log(hi) - e == pytest.approx(w * (math.log(f.n50_ci[1]) - e))
        assert e - math.log(lo) == pytest.approx(w * (e - math.log(f.n50_ci[0])))
        assert (card["status"] == "measured") == (hi / lo <= top)
        seen.append((f.n50_ci[1] / f.n50_ci[0], card["status"]))
    assert any(top ** (1 / w) < s <= top and st == "bound" for s, st in seen), seen


def test_a_card_names_the_fitted_values_outside_the_simulated_shapes():
    """Mamba-2's shallow, noisy shape (slope 0.72, run SD 0.47) is outside the slopes whose
    coverage is simulated: the measured card names the slope, in card.md and its headline;
    a card of slope 1.3 names nothing and says its fit is inside."""
    rng = np.random.default_rng(1)
    nf, k, n, _, _ = draws(12.0, 0.72, 0.47, 0.0, [6, 8, 10, 12, 15, 19, 24], 24, rng)
    shallow = run_card.build_run_card(_records(nf, k, n))
    assert shallow["status"] == "measured" and shallow["fit"]["slope"] < 1.0
    assert shallow["simulated"]["outside"] == ["slope"]
    assert shallow["simulated"]["slope"] == list(run_card.SIMULATED["slope"])
    md = run_card_render.render_markdown(shallow)
    assert "(coverage not simulated at its fit: slope 0." in run_card_render.headline(shallow)
    assert "; coverage not simulated at its fit: slope 0." in run_card_render.cite(shallow)
    assert "outside [1, 1.9] |" in md
    inside = card_search.measure(BASE, run_cell=runner(20.0, 1.3, 0.15, 0.0),
                                 say=lambda s: None).card
    assert inside["status"] == "measured" and inside["simulated"]["outside"] == []
    assert "coverage not simulated" not in run_card_render.headline(inside)
    assert "| yes: slope in [1, 1.9], run SD in [0, 0.7], failure rate in [0, 0.1] |" in \
        run_card_render.render_markdown(inside)


def test_a_fit_steeper_than_the_cap_is_not_measured(monkeypatch):
    """A fitted slope above the cap (3, beyond the fits at which simulated cards stopped)
    narrows the interval where its coverage is not shown: the card is a bound that names the
    slope, and the slope is the only thing it lacks (with no cap, the same runs are measured)."""
    rng = np.random.default_rng(3)
    nf, k, n, _, _ = draws(10.0, 4.5, 0.1, 0.0, [8, 9, 11, 12], 4, rng)
    card = run_card.build_run_card(_records(nf, k, n))
    assert card["fit"]["slope"] > run_card.MAX_SLOPE == 3.0
    assert card["criteria"]["spread"] <= run_card.MAX_SPREAD and card["criteria"]["bracketed"]
    assert card["status"] == "bound" and card["n50"]["bound"] == "interval"
    assert f"the fitted slope {card['fit']['slope']:.2f} is steeper than 3," in card["why"]
    assert "(not a measurement)" in run_card_render.headline(card)
    line = card_search._progress(card, 9, True, 0.0, 1000.0)  # the search's progress line
    assert "; N50 unresolved in [" in line and "is steeper than 3," in line
    monkeypatch.setattr(run_card, "MAX_SLOPE", math.inf)
    assert run_card.build_run_card(_records(nf, k, n))["status"] == "measured"


def test_the_work_budget_stops_the_search_before_a_batch_it_cannot_pay():
    """A budget in tokens: nothing trains past it, and the card says why it stopped."""
    res = card_search.measure(BASE, run_cell=runner(40.0, 1.6, 0.6, 0.05), work_budget=60,
                              say=lambda s: None)
    assert res.card["work_mtok"] <= 60 and res.card["status"] == "bound"
    assert "work budget" in res.stopped or "fits the work budget" in res.stopped


def test_a_card_that_never_recalls_says_so_within_the_protocol():
    res = card_search.measure(BASE, run_cell=runner(0.5, 1.3, 0.0, 0.0), say=lambda s: None)
    card = res.card
    assert card["status"] == "no recall" and "within the protocol's training" in card["why"]
    assert card["n50"]["bound"] == "upper"
    assert "an upper bound" in run_card_render.headline(card)


def test_a_capacity_below_two_facts_is_an_upper_bound_that_says_why():
    """N50 = 1.6: the runs at N_f = 2 recall, under half the queries above the guess, and no
    smaller cell exists; after 3 batches there the card is a bound on the upper side, the
    stop names N_f = 2."""
    run_cell = runner(1.6, 1.3, 0.0, 0.0)
    res = card_search.measure(BASE, run_cell=run_cell, say=lambda s: None)
    assert res.card["status"] == "bound" and res.card["n50"]["bound"] == "upper"
    assert "N50 lies below N_f = 2" in res.stopped and "median run of 6" in res.stopped
    assert "is at the guess level" not in res.stopped
    assert sum(nf == 2 for call in run_cell.calls for nf, _ in call) == 6


def test_a_capacity_beyond_the_vocabulary_is_a_lower_bound_at_the_largest_cell():
    """N50 = 10,000 (attention's case): every cell recalls at the ceiling, so the fit has no
    slope and leaves the interval's lower end at 0; the bound is then the largest N_f
    tried, where the median run still recalls at least half, and the card says so."""
    res = card_search.measure(BASE, run_cell=runner(1e4, 1.3, 0.0, 0.0), work_budget=5000,
                              say=lambda s: None)
    card, top = res.card, max(r["num_facts"] for r in res.card["runs"])
    assert "beyond V/2 - 1 = 255 keys" in res.stopped and top > 128
    assert card["status"] == "bound" and card["n50"]["bound"] == "lower"
    assert card["n50"]["fit_ci"][0] == 0.0 and card["n50"]["ci"] == [float(top), None]
    assert f"N50 ≥ {top}, the largest N_f whose median run" in card["why"]
    assert f"≥ {top} (a lower bound)" in run_card_render.headline(card)


def test_one_failure_at_two_facts_does_not_end_the_card():
    """N50 = 2.5: every cell above N_f = 2 is under q = 1/2, and a failed run at N_f = 2
    pulls the median of its two runs under too; the search runs N_f = 2 again instead of
    saying N50 lies below it, and brackets N50 there."""
    inner = runner(2.5, 1.3, 0.1, 0.0)
    failed = []

    def run_cell(cfgs):
        recs = inner(cfgs)
        for r in recs:
            if r["config"]["task"]["num_facts"] == 2 and not failed:
                failed.append(r)
                r["correct"] = r["total"] // 2  # at the guess level of N_f = 2
        return recs

    res = card_search.measure(BASE, run_cell=run_cell, say=lambda s: None, max_step=4.0)
    assert failed, "the search never reached N_f = 2"
    assert "below N_f = 2" not in res.stopped and res.card["criteria"]["bracketed"]
    assert sum(nf == 2 for call in inner.calls for nf, _ in call) > 2


def test_a_bound_is_never_printed_as_a_measurement(tmp_path):
    """A card still short of its rule prints its N50 as a bound with the reason, and the
    figure and Markdown render; the title is wrapped, not cut."""
    res = card_search.measure(BASE, run_cell=runner(30.0, 1.2, 0.6, 0.0), work_budget=40,
                              say=lambda s: None)
    card = res.card
    assert card["status"] == "bound"
    line = run_card_render.headline(card)
    assert "BOUND" in line and card["why"][:20] in line
    md = run_card_render.render_markdown(card, "card.png")
    assert "Cite as" in md and "one-parameter law" in md
    # the interval says how it was made, and the fit's own stands beside it
    assert f"profile interval widened {run_card.WIDEN:g}-fold" in md
    assert f"before the widening) | {card_render.interval(card['n50']['fit_ci'])} |" in md
    assert run_card_render.draw(card, tmp_path / "c.png").stat().st_size > 1000


def test_the_command_twice_on_its_store_trains_nothing_and_writes_the_same_card(cli, tmp_path):
    """The designed model (nothing to train) through `capacity`: the second run of the same
    command, with any wall-time limit, reads every run from the store and writes the same
    card.json."""
    args = ["capacity", "--adapter", "designed", "--d-model", "16", "--d-state", "4",
            "--seeds", "0", "--workers", "1", "--set", "train.test_size=128",
            "--work-budget", "5", "--out", str(tmp_path / "card")]
    rc, out, err = cli(*args)
    assert rc == 0, err
    first = (tmp_path / "card" / "card.json").read_text()
    lines = (tmp_path / "card" / "store" / "results.jsonl").read_text()
    for extra in ([], ["--time-budget", "0.01"]):
        rc, out, err = cli(*args, *extra)
        assert rc == 0, err
        assert "capacity: batch" not in out and "(from the store)" in out
        assert (tmp_path / "card" / "store" / "results.jsonl").read_text() == lines
        assert (tmp_path / "card" / "card.json").read_text() == first


def test_the_example_delta_rule_recalls_a_value_by_its_key():
    """examples/delta_rule.py through its forward: with orthogonal keys and β ≈ 1, the
    sequence a, b, a (the key a written with the value b, then queried by a) returns b's
    value read-out at the last step, and the layer holds S = d_k·d_v = 256 scalars."""
    import torch

    from examples.delta_rule import make_mixer, make_mixer_k4

    d = 32
    layer = make_mixer(d)
    assert layer.key_dim * layer.value_dim == 256 == make_mixer_k4(d).key_dim * 64
    with torch.no_grad():
        eye = torch.eye(d)
        layer.k.weight.copy_(eye[:32]), layer.q.weight.copy_(eye[:32])
        layer.v.weight.copy_(eye[:8]), layer.out.weight.copy_(eye[:, :8])
        layer.beta.weight.zero_(), layer.beta.bias.fill_(30.0)
        a, b = eye[0], eye[1]
        x = torch.stack([a, b, a]).unsqueeze(0)             # (1, 3, D)
        y = layer(x)
    assert y.shape == (1, 3, d)
    assert torch.allclose(y[0, 2], layer.out(layer.v(b)), atol=1e-4)


def test_a_grid_whose_edge_wins_is_said_and_widened_once():
    """Runs that choose the grid's largest rate: the search says so; with widen the later
    batches search 0.09 too (once: not 0.27), and the card replays with the same widening."""
    inner = runner(20.0, 1.3, 0.15, 0.0)

    def top_lr(cfgs):
        recs = inner(cfgs)
        for r, c in zip(recs, cfgs):
            r["lr"] = max(c["train"]["lr"])
            r["lr_search"] = [{"lr": lr, "steps": 2000} for lr in c["train"]["lr"]]
        return recs

    said: list[str] = []
    res = card_search.measure(BASE, run_cell=top_lr, say=said.append, widen=True)
    grids = [tuple(r["config"]["train"]["lr"]) for r in res.records]
    assert grids[0] == (0.003, 0.01, 0.03) and (0.003, 0.01, 0.03, 0.09) in grids
    assert all(max(g) <= 0.09 for g in grids)
    edge = [s for s in said if "sits at the edge of the grid" in s]
    assert edge[0].startswith("capacity: the chosen learning rate sits at the edge of the grid "
                              "(0.03 in ") and edge[0].endswith("search 0.003, 0.01, 0.03, 0.09")
    assert all("a wider grid (--set train.lr=[...]) may recall more" in s for s in edge[1:])
    done = {r["config_hash"]: r for r in res.records}
    again = card_search.measure(BASE, run_cell=None, done=done, say=lambda s: None, widen=True)
    assert json.dumps(again.card, sort_keys=True) == json.dumps(res.card, sort_keys=True)
    said.clear()
    plain = card_search.measure(BASE, run_cell=top_lr, say=said.append)
    assert {tuple(r["config"]["train"]["lr"]) for r in plain.records} == {(0.003, 0.01, 0.03)}
    assert any("sits at the edge" in s and "may recall more" in s for s in said)


def test_lr_edge_needs_most_runs_that_learned():
    runs = [{"lr": 0.03, "accuracy": 0.5, "kind": "observed"}] * 3 + \
           [{"lr": 0.01, "accuracy": 0.5, "kind": "observed"}] * 2 + \
           [{"lr": 0.03, "accuracy": 0.01, "kind": run_card.KINDS[1]}] * 5
    assert card_lr.lr_edge(runs, [0.003, 0.01, 0.03]) == (0.03, 3, 5)
    assert card_lr.lr_edge(runs[1:], [0.003, 0.01, 0.03]) is None  # 2 of 4: not most
    assert card_lr.lr_edge(runs, 0.01) is None  # no grid
    assert card_lr.wider_grid([0.003, 0.01, 0.03], 0.003, [0.003, 0.01, 0.03]) == \
        [0.001, 0.003, 0.01, 0.03]
