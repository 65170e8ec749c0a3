"""Capacity suites of card method 2 (``capacity: {method: 2, ...}``): run, submit, validate,
render, and refuse forgeries; method-1 suites (cpu-v3) unchanged.

End to end on the designed model (fixed weights: real records in seconds), and on a
simulated runner where the training work matters (the designed model trains nothing)."""
import contextlib
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import special

from recallbench import leaderboard as lb
from recallbench.api.canonical import config_hash
from recallbench.api.errors import ConfigError
from recallbench.law import run_card
from recallbench.leaderboard.capacity import board as capacity_board
from recallbench.leaderboard.capacity import method2 as capacity_method
from recallbench.leaderboard.capacity import suite as capacity_suite
from recallbench.leaderboard.points import point_records
from recallbench.runs import capacity, card_search
from test_capacity_suite import V3, _forged
from test_leaderboard_tamper import _assert_one_line

NAME = "cap-v2"


def _suite_dir(root: Path, **capacity_keys) -> Path:
    """cpu-v3's suite.yaml, its D32-N8 budget only, with card method 2."""
    d = root / NAME
    (d / "submissions").mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((V3 / "suite.yaml").read_text())
    data.pop("retired", None)  # an open suite with cpu-v3's recipe
    data.update(name=NAME, title="Method-2 capacity cards (test)",
                budgets=[b for b in data["budgets"] if b["name"] == "D32-N8"],
                capacity={"method": 2, "work_budget_mtok": 40, "max_batches": 8,
                          **capacity_keys})
    data["capacity"] = {k: v for k, v in data["capacity"].items() if v is not None}
    (d / "suite.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
    return d


@pytest.fixture(scope="module")
def board2(tmp_path_factory):
    """The suite run with the designed model (`leaderboard run`), then submitted."""
    from recallbench.cli.main import main

    tmp = tmp_path_factory.mktemp("v2")
    d, store = _suite_dir(tmp), tmp / "store"
    assert main(["leaderboard", "run", "--suite", str(d), "--adapter", "designed",
                 "--store", str(store)]) == 0
    assert main(["submit", "--suite", str(d), "--store", str(store),
                 "--model-name", "designed"]) == 0
    path = d / "submissions" / "designed.yaml"
    return lb.load_suite(d), path, lb.read_yaml_data(path), store


def _card(sub):
    return sub["budgets"][0]["card"]


def test_run_submit_validate_render_a_method_2_suite(board2, cli):
    suite, path, sub, store = board2
    card = _card(sub)
    assert suite.capacity_method == 2 and card["schema"] == run_card.CARD_SCHEMA
    assert card["status"] == "measured" and card["work_budget_mtok"] == 40.0
    assert card["machine"] and card["machine"][0]["cpus"] >= 1
    # the card is the method-2 search's over the store, run again on its own
    records = [json.loads(line) for line in (store / "results.jsonl").read_text().splitlines()]
    again = card_search.replay(capacity_suite.budget_base(suite, "designed", suite.budgets[0]),
                               records, seeds=suite.seeds, work_budget=40, max_batches=8)
    assert card["n50"]["value"] == pytest.approx(again.card["n50"]["value"], rel=1e-9)
    points = sub["budgets"][0]["points"]
    assert all(capacity_method.seed_allowed(p["seed"], p["num_facts"], suite) for p in points)
    assert len({p["seed"] for p in points}) == len(points)  # no two runs share a seed
    assert max(card_search.seed_parts(p["seed"])[1] for p in points) >= 1  # a batch j = 1
    rc, out, err = cli("leaderboard", "validate", str(path))
    assert rc == 0 and out.startswith(f"ok {path}"), err
    rc, out, err = cli("leaderboard", "render", str(suite.dir))
    assert rc == 0 and "(1 card(s), 1 ranked)" in out, err
    text = (suite.dir / "README.md").read_text()
    assert "by **N50 per kbit of state**" in text and "| N50 per kbit \\[95%\\] |" in text
    assert ("A card's rank is 1 + the number of ranked cards of its budget whose interval lies "
            "entirely above its own") in text
    assert "work budget of 40 Mtok (millions of tokens trained" in text
    machine = card["machine"][0]
    assert f"{machine['model']}, {machine['cpus']} CPUs" in text
    page = (suite.dir / "index.html").read_text()
    assert page.count('src="data:image/png;base64,') == 2 and "Mtok" in page  # card, board
    # the ranking links each card to its cells and figure
    assert '<a href="#card-designed.yaml-D32-N8">designed</a>' in page
    assert 'id="card-designed.yaml-D32-N8"' in page
    rc, out, err = cli("leaderboard", "render", str(suite.dir), "--check")
    assert rc == 0, err + out


@pytest.mark.parametrize("edit, match", [
    (lambda c: c["n50"].update(value=c["n50"]["value"] * 1.5), r"card\.n50\.value"),
    (lambda c: c["n50_per_kbit"]["ci"].__setitem__(0, c["n50_per_kbit"]["ci"][0] / 2),
     r"card\.n50_per_kbit"),
    (lambda c: c.update(status="bound"), r"card\.status"),
    (lambda c: c.update(work_mtok=12.0), r"card\.work_mtok"),
    (lambda c: c["runs"][0].update(accuracy=0.99), r"card\.runs"),
    (lambda c: c.update(rank=1), "card holds the unknown field 'rank'"),
    (lambda c: c.pop("machine"), "card lacks the field 'machine'"),
    (lambda c: c.update(machine=[{"model": "x"}]),
     r"card\.machine\[0\]: must be a mapping with exactly model, cpus, threads"),
])
def test_a_forged_method_2_card_is_refused(board2, edit, match):
    suite, _, sub, _ = board2
    with pytest.raises(ConfigError, match=match):
        lb.check_submission(_forged(sub, lambda s: edit(_card(s))), suite, "sub")


def test_validate_refuses_a_forged_card_in_one_line(board2, cli, tmp_path):
    suite, _, sub, _ = board2
    d = _suite_dir(tmp_path / "leaderboards")
    path = lb.write_submission(_forged(sub, lambda s: _card(s)["n50"].update(ci=[1.0, 2.0])),
                               d / "submissions" / "forged.yaml")
    rc, out, err = cli("leaderboard", "validate", str(path))
    _assert_one_line(rc, err, str(path), "card.n50 does not match the card recomputed")
    rc, _, err = cli("leaderboard", "render", str(d))
    _assert_one_line(rc, err, "forged.yaml")


@pytest.mark.parametrize("edit, match", [
    (lambda b: b["points"][0].update(seed=500),
     r"seed = 500 is not allowed: a batch's seeds at N_f = \d+ are the suite's seeds \[0, 1\] "
     r"\+ 1000·j \+ 100000·N_f, j from 0 to 7"),
    # a seed of another N_f's batch (runs sharing a seed across cells are correlated)
    (lambda b: b["points"][0].update(seed=b["points"][0]["seed"] + 100000),
     r"seed = \d+ is not allowed: a batch's seeds at N_f"),
    (lambda b: b["points"].pop(next(i for i, p in enumerate(b["points"])
                                    if card_search.seed_parts(p["seed"])[:2] == (1, 1))),
     r"the batch N_f=(?P<nf>\d+), j=1 lacks seed (?P=nf)01001"),
    (lambda b: b.update(points=[p for p in b["points"]
                                if p["num_facts"] != b["card"]["runs"][-1]["num_facts"]]),
     "not a cell the capacity search visits|the search stopped before N_f ="),
])
def test_points_that_are_not_the_search_s_batches_are_refused(board2, edit, match):
    suite, _, sub, _ = board2
    with pytest.raises(ConfigError, match=match):
        lb.check_submission(_forged(sub, lambda s: edit(s["budgets"][0])), suite, "sub")


def test_submit_refuses_an_interrupted_method_2_search(board2, cli, tmp_path):
    """A store holding only the first batch of a search that went on."""
    suite, _, sub, store = board2
    lines = (store / "results.jsonl").read_text().splitlines()
    first = [line for line in lines[:len(suite.seeds)]]
    assert len(lines) > len(first)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "results.jsonl").write_text("\n".join(first) + "\n")
    out = tmp_path / "cut.yaml"
    rc, _, err = cli("submit", "--suite", str(suite.dir), "--store", str(cut),
                     "--model-name", "cut", "--out", str(out))
    _assert_one_line(rc, err, "submit: budget D32-N8", "the search stopped before N_f = ")
    assert "rerun `recallbench leaderboard run --suite" in err and "with the same store" in err
    assert not out.exists()


def test_an_unfinished_card_names_the_command_that_finishes_it(board2):
    """A submission's search is finished by the run that made it (its shape flag kept); a
    re-seeding's by the verify that re-seeds the submission, from the re-seeding's file."""
    suite = board2[0]
    run = capacity_suite._finish(suite, "deltanet", {"term": "key", "value": 32})
    assert f"`recallbench leaderboard run --suite {suite.dir} --adapter deltanet --shape " \
           "key=32 --store STORE` with the same store" in run
    again = capacity_suite._finish(suite, "mamba", None, ("mamba", "r/mamba.yaml"))
    assert f"`recallbench leaderboard verify {suite.dir}/submissions/mamba.yaml --reseed " \
           "--store STORE --from-reseeding r/mamba.yaml --write NEW_FILE`" in again


def test_a_dry_run_states_the_work_budget_and_the_store_s_work(board2, cli, tmp_path):
    suite, _, _, store = board2
    before = (store / "results.jsonl").read_bytes()
    rc, out, err = cli("leaderboard", "run", "--suite", str(suite.dir), "--adapter",
                       "designed", "--store", str(store), "--dry-run")
    assert rc == 0, err
    assert re.search(r"D32-N8: the store holds \d+ batch\(es\) of the search, 0 of the 40 Mtok "
                     r"work budget .*the search is over, measured: nothing to run", out), out
    assert (store / "results.jsonl").read_bytes() == before
    rc, out, err = cli("leaderboard", "run", "--suite", str(suite.dir), "--adapter",
                       "designed", "--store", str(tmp_path / "fresh"), "--dry-run")
    assert rc == 0, err
    assert "nothing in the store yet (work budget 40 Mtok); measured" in out
    eta = re.search(r"ETA: about ([\d.]+) CPU-min \(8 runs.*\) to ([\d.]+) \(130 runs.*the work "
                    r"budget stops it by ([\d.]+)", out)
    assert eta and float(eta[1]) <= float(eta[2]) <= float(eta[3]), out
    assert not (tmp_path / "fresh").exists()


@pytest.mark.parametrize("keys, message", [
    ({"method": 3}, "capacity.method = 3 is not allowed: 1 or 2"),
    ({"work_budget_mtok": None}, "capacity.work_budget_mtok is required with method 2"),
    ({"work_budget_mtok": 0.5}, r"capacity.work_budget_mtok = 0.5 is not allowed: a number in "
                                r"\[1, 1e\+06\]"),
    ({"max_batches": 0}, r"capacity.max_batches = 0 is not allowed: an integer in \[1, 99\]"),
    ({"max_batches": 2.5}, "capacity.max_batches = 2.5 is not allowed"),
    ({"max_step": 1.1}, "capacity.max_step = 1.1 is not allowed"),
    ({"max_spread": 1.2}, r"capacity.max_spread = 1.2 is not allowed: a number in \[1.3, 2\]"),
    ({"cpu_budget_min": 30}, "capacity.cpu_budget_min is not a key of method 2: a method-2 "
                             "capacity suite sets method, work_budget_mtok, max_batches, "
                             "max_step, max_spread"),
])
def test_a_bad_method_2_suite_is_one_line(tmp_path, keys, message):
    with pytest.raises(ConfigError, match=message):
        lb.load_suite(_suite_dir(tmp_path, **keys))


def test_method_2_seeds_name_their_batch(tmp_path):
    d = _suite_dir(tmp_path)
    data = yaml.safe_load((d / "suite.yaml").read_text())
    (d / "suite.yaml").write_text(yaml.safe_dump({**data, "seeds": [0, 1000]}))
    with pytest.raises(ConfigError, match="seeds must be below 1000 with capacity.method 2"):
        lb.load_suite(d)


# -- a simulated runner: the work budget ---------------------------------------------------

def _simulated(adapter_state: int, n50=12.0, slope=1.4, tau=0.2, seed=0):
    """``run_cell`` of a model with a known N50, records as the harness writes them: three
    learning-rate candidates of 2,000 steps each (the training work the budget counts)."""
    rng = np.random.default_rng(seed)

    def run_cell(cfgs):
        out = []
        for c in cfgs:
            nf, total = c["task"]["num_facts"], 1024 * c["task"]["num_facts"]
            q = special.ndtr(slope * (math.log(n50) - math.log(nf)) + tau * rng.normal())
            g = 1.0 / nf
            search = [{"lr": lr, "val_accuracy": 0.5 + 0.1 * (lr == 0.01), "steps": 2000,
                       "converged": True, "error": None} for lr in c["train"]["lr"]]
            out.append({"status": "ok", "correct": int(rng.binomial(total, g + (1 - g) * q)),
                        "correct_topk": total, "total": total, "converged": True,
                        "stop_reason": "plateau", "state_size": adapter_state,
                        "state_bits": 32, "info_bits": nf * math.log2(256), "steps": 2000,
                        "seed": c["train"]["seed"], "config": c, "config_hash": config_hash(c),
                        "cpu_s": 60.0, "wall_s": 61.0, "lr": 0.01, "lr_search": search,
                        "cpu": {"model": "Simulated CPU", "cpus": 2, "threads": 1}})
        return out
    return run_cell


def test_the_work_budget_stops_a_method_2_suite_and_the_card_replays_from_its_points(
        tmp_path, monkeypatch):
    """The suite's work budget (40 Mtok) stops the search before a batch it cannot pay;
    the points replay to the same card, their learning-rate searches counted as work."""
    from recallbench.leaderboard.recompute import expected_state
    from recallbench.leaderboard.submission import _budget_entry

    suite = lb.load_suite(_suite_dir(tmp_path))
    adapter = "linear-mamba"
    base = capacity_suite.budget_base(suite, adapter, suite.budgets[0])
    state, _ = expected_state(base["model"], "test")
    made: list[dict] = []
    sim = _simulated(state)

    @contextlib.contextmanager
    def trained(store, workers=1, say=None, executor=None):
        yield {}, lambda cfgs: made.extend(sim(cfgs)) or made[-len(cfgs):]

    monkeypatch.setattr(capacity, "trained", trained)
    cards = capacity_suite.run_capacity_suite(suite, adapter, tmp_path / "store",
                                              log=lambda m: None)
    card = cards["D32-N8"]
    assert "work budget" in card["stopped"] and card["work_mtok"] <= 40  # next or narrowing
    (b, pairs, stored), = capacity_suite.capacity_points(suite, made, adapter)
    assert stored["machine"] == [{"model": "Simulated CPU", "cpus": 2, "threads": 1}]
    entry = {**_budget_entry(b, pairs), "card": stored}
    capacity_suite.check_cards({"budgets": [entry], "model": {"adapter": adapter}}, suite,
                               "sub", lambda bb: point_records({"budgets": [bb]}))
    bare = capacity_suite._replay(suite, base, point_records({"budgets": [entry]}))
    assert bare.card["work_mtok"] < stored["work_mtok"]  # without the lr search: a third


# -- the board ---------------------------------------------------------------------------

def _with(card, per_kbit, lo, hi, **changes):
    return {**card, "n50_per_kbit": {"value": per_kbit, "ci": [lo, hi]}, **changes}


def test_the_board_ranks_by_n50_per_kbit_and_lists_bounds_apart(board2):
    suite, path, sub, _ = board2
    card = _card(sub)
    made = {"top": _with(card, 4.0, 3.5, 4.5, cpu_s=600.0, work_mtok=20.0),
            "mid": _with(card, 1.8, 1.0, 2.0, cpu_s=60.0, work_mtok=5.5),
            "wide": _with(card, 2.0, 1.5, 3.0, cpu_s=1800.0, work_mtok=100.0),
            "low": _with(card, 0.15, 0.1, 0.2, cpu_s=240.0, work_mtok=4.5),
            "bound": {**_with(card, 9.0, 8.0, None), "status": "bound", "why": "too few runs",
                      "n50": {**card["n50"], "bound": "lower", "ci": [30.0, None]}}}
    subs = [(path.with_name(f"{k}.yaml"),
             {**sub, "model": {**sub["model"], "name": k},
              "budgets": [{**sub["budgets"][0], "card": c}]}) for k, c in made.items()]
    rows = capacity_board.card_rows(suite, subs)
    from recallbench.leaderboard.capacity import board2 as run_card_board
    got = {r["model"]: r["rank"] for r in run_card_board.ranked(rows, "D32-N8")}
    assert got == {"top": 1, "mid": 2, "wide": 2, "low": 4}  # 1 + the intervals above it
    text = capacity_board.render_markdown(suite, rows)
    table = text.split("## D32-N8")[1].split("Bounds (not ranked)")[0]
    assert "bound" not in table.split("|---|")[1]
    shape = run_card_board.shape_text(card["state_shape"])  # the state's shape beside S
    assert shape and (f"- bound (designed), S = 512 ({shape}): N50 ≥ 30, N50 per kbit ≥ 8, "
                      "S_eff/S ≥") in text
    assert "why: too few runs" in text
    cpu_min = [c.get("cpu_s") / 60 for c in made.values()]  # the bound's card keeps its own
    assert (f"In all: 5 cards, {130.0 + made['bound']['work_mtok']:,.0f} Mtok of training and "
            f"{sum(cpu_min) / 60:.1f} CPU-hours") in text
    assert f"the median card took {float(np.median(cpu_min)):.3g} CPU-min." in text
    assert "Without the shape entries" not in text  # every card is of a default shape
    rows[0] = {**rows[0], "shape": {"term": "key", "value": 32}}  # one card as a shape entry
    core = [r["card"]["cpu_s"] / 60 for r in rows[1:]]
    alone = capacity_board.render_markdown(suite, rows)
    assert (f"Without the shape entries and the states that grow with L: 4 cards, "
            f"{sum(r['card']['work_mtok'] for r in rows[1:]):,.0f} Mtok of training and "
            f"{sum(core) / 60:.1f} CPU-hours; the median card took "
            f"{float(np.median(core)):.3g} CPU-min.") in alone
    page = capacity_board.page_html(suite, rows, {})
    assert page.count('<article class="card"') == 5
    # every card, ranked or apart, links from the README to its cells and figure on the page
    links = re.findall(r"\[([^\]]+)\]\(index\.html#([^)]+)\)", text)
    assert sorted(name for name, _ in links if name != "card") == ["low", "mid", "top", "wide"]
    assert len(links) == 5 and all(f'id="{anchor}"' in page for _, anchor in links)


# -- method 1 unchanged --------------------------------------------------------------------

def test_cpu_v3_is_method_1_and_renders_as_committed():
    """cpu-v3 reads as method 1 with its own keys, its submissions name its recipe, and its
    board renders to the committed README.md and index.html (figures aside)."""
    suite = lb.load_suite(V3)
    assert suite.capacity_method == 1 and not capacity_method.is_v2(suite)
    assert suite.capacity == {"max_cells": 12, "cpu_budget_min": 30}
    subs = [(p, lb.read_yaml_data(p)) for p in lb.submission_files(V3)]
    assert subs and all(s["suite_recipe_sha256"] == suite.recipe_sha256() for _, s in subs)
    assert capacity_board.render(suite, subs, check=True) == (True, [])


def test_states_of_a_method_2_suite_say_every_run_enters(board2, cli, tmp_path):
    suite, _, sub, _ = board2
    out = tmp_path / "states"
    rc, said, err = cli("leaderboard", "states", str(suite.dir), "--out", str(out))
    assert rc == 0, err
    text = (out / "README.md").read_text()
    assert "every run of every seed enters the fit" in text and "best of seeds" not in text
    data = json.loads((out / "states.json").read_text())
    assert data["view"] == "card (every run)"
    ratio = _card(sub)["ratio"]
    assert data["cards"][0]["ratio"]["value"] == pytest.approx(ratio["value"], rel=1e-9)
