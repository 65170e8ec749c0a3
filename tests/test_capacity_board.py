"""The board of a capacity suite (leaderboards/cpu-v3): ranking, cards apart, page, states.

Submissions are built from cpu-v3's designed.yaml with their cards edited: the board is
read without validation (what is checked here is the ranking and the rendering, not the
cards' recomputation, which test_capacity_suite covers)."""
import copy
import importlib
import json
import re
import shutil
from pathlib import Path

import pytest

from recallbench import leaderboard as lb
from recallbench.leaderboard.capacity import board as cb

render_mod = importlib.import_module("recallbench.leaderboard.render")
states_mod = importlib.import_module("recallbench.leaderboard.states")

V3 = Path(__file__).resolve().parent.parent / "leaderboards" / "cpu-v3"
DESIGNED = lb.read_yaml_data(V3 / "submissions" / "designed.yaml")
EVIL = "<script>alert('x')</script>"


def _entry(value, lo, hi):
    return {"value": value, "ci": [lo, hi]}


def _measured(per_kbit, lo, hi):
    """A measured card (D32-N8, S = 512) with N_f* at 0.5 per kbit ``per_kbit [lo, hi]``."""
    def edit(card):
        kbits = 512 * 32 / 1000
        card["capacity"]["p50_per_kbit"] = _entry(per_kbit, lo, hi)
        card["capacity"]["p50"] = _entry(per_kbit * kbits, lo * kbits, hi * kbits)
    return edit


def _bound(card):
    card.update(status="bound", why="1 converged cell(s) between the guess level and 0.95, "
                "3 needed", stopped="time budget (20 min) spent")
    card["s_eff"] = {"value": 600.0, "ci": [300.0, 900.0], "bound": "lower"}
    card["ratio"] = _entry(600 / 512, 300 / 512, 900 / 512)
    card["capacity"]["p50"] = _entry(17.5, 9.25, 26.5)


def _no_recall(card):
    card.update(status="no recall", why="no cell is above its guess level at 95%",
                stopped="time budget (20 min) spent")
    card["s_eff"] = {"value": 0.0, "ci": [0.0, 40.0], "bound": "upper"}
    card["ratio"] = _entry(0.0, 0.0, 40 / 512)
    for k in ("capacity", "n_eff", "fitted_cells"):
        card.pop(k, None)


def _grows(card):
    card.update(state_size=None, ratio=None)
    card["capacity"].update(per_kbit=None, p50_per_kbit=None, p50=_entry(21.0, 19.0, 23.5))


def _sub(name, edit, *, state_size=512, cpu_s=(30.0, 90.0)):
    """designed.yaml renamed to ``name``, its D32-N8 card edited by ``edit``."""
    sub = copy.deepcopy(DESIGNED)
    sub["model"]["name"] = sub["model"]["adapter"] = name
    for b, cpu in zip(sub["budgets"], cpu_s):
        b["card"]["cpu_s"] = cpu
        if b["name"] == "D32-N8":
            b["state_size"] = state_size
            edit(b["card"])
    return Path(f"{name}.yaml"), sub


def _subs():
    return [_sub("alpha", _measured(0.50, 0.45, 0.55)), _sub("beta", _measured(0.52, 0.50, 0.60)),
            _sub("gamma", _measured(0.20, 0.18, 0.22)), _sub("bounded", _bound),
            _sub("silent", _no_recall), _sub("attention", _grows, state_size=None)]


@pytest.fixture(scope="module")
def suite():
    return lb.load_suite(V3)


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end, text.index(start))]


def test_overlapping_intervals_share_a_rank_and_a_card_entirely_below_is_ranked_below(suite):
    rows = cb.card_rows(suite, _subs())
    got = [(r["model"], r["rank"]) for r in cb.ranked(rows, "D32-N8")]
    # beta [0.50, 0.60] and alpha [0.45, 0.55] overlap: both first; gamma lies below both
    assert got == [("beta", 1), ("alpha", 1), ("gamma", 3)]
    assert {r["model"]: r["kind"] for r in rows if r["budget"] == "D32-N8"} == {
        "alpha": "measured", "beta": "measured", "gamma": "measured", "bounded": "bound",
        "silent": "no recall", "attention": "grows with L"}


def test_bounds_and_no_recall_are_listed_apart_with_their_sign_never_ranked(suite):
    text = cb.render_markdown(suite, cb.card_rows(suite, _subs()))
    part = _section(text, "## D32-N8", "## CPU time")
    table = [line for line in part.splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[1] for line in table[1:]] == ["beta", "alpha", "gamma"]
    bound = next(line for line in part.splitlines() if line.startswith("- bounded"))
    assert "S_eff ≥ 300" in bound and "S_eff/S ≥ 0.586" in bound and "≥ 9.25" in bound
    assert "600" not in bound and "3 needed" in bound and "time budget (20 min) spent" in bound
    silent = next(line for line in part.splitlines() if line.startswith("- silent"))
    assert "no recall beyond guessing" in silent and "S_eff ≤ 40" in silent
    grows = next(line for line in part.splitlines() if line.startswith("- attention"))
    assert "no per-kbit figure" in grows and "21 \\[19, 23.5\\]" in grows
    assert "](../../docs/capacity.md)" in text


def test_cpu_time_is_reported_per_card_and_summed_per_adapter(suite):
    head, body = cb.cpu_table(suite, cb.card_rows(suite, [_sub("alpha", _measured(.5, .4, .6))]))
    assert head[-1] == "CPU min, all budgets"
    assert body == [["alpha", "alpha", "0.5", "1.5", "2"]]  # 30 s + 90 s


def test_the_page_has_one_image_per_card_and_escapes_a_hostile_name(suite):
    subs = _subs() + [_sub(EVIL, _measured(0.3, 0.29, 0.31))]
    rows = cb.card_rows(suite, subs)
    text = cb.page_html(suite, rows, {(r["file"], r["budget"]): b"png" for r in rows})
    assert len(rows) == 14 and text.count("<img ") == len(rows)
    assert text.count('<article class="card"') == len(rows)
    assert EVIL not in text and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text
    assert text.count("<script>") == 1  # the page's own script only
    assert "lr_search" not in text and "steps_to" not in text


def test_render_check_catches_a_stale_readme_and_page(tmp_path, cli, monkeypatch):
    d = tmp_path / "cpu-v3"
    d.mkdir()
    shutil.copy(V3 / "suite.yaml", d)
    subs = _subs()[:2] + _subs()[3:5]
    monkeypatch.setattr(render_mod, "valid_board", lambda s, **kw: subs)
    rc, out, _ = cli("leaderboard", "render", str(d), "--check")
    assert rc == 1 and f"{d / lb.README} is stale" in out
    rc, out, err = cli("leaderboard", "render", str(d))
    assert rc == 0 and "(8 card(s), 6 ranked)" in out, err
    page = (d / "index.html").read_text()
    assert page.count('src="data:image/png;base64,iVBORw0KGgo') == 8  # real PNGs, one a card
    rc, out, _ = cli("leaderboard", "render", str(d), "--check")
    assert rc == 0, out
    readme = (d / lb.README).read_text()
    (d / lb.README).write_text(readme.replace("| 1 | beta |", "| 1 | gamma |"))
    rc, out, _ = cli("leaderboard", "render", str(d), "--check")
    assert rc == 1 and f"{d / lb.README} is stale" in out
    (d / lb.README).write_text(readme)
    (d / "index.html").write_text(page.replace("≥ 300", "300"))
    rc, out, _ = cli("leaderboard", "render", str(d), "--check")
    assert rc == 1 and f"{d / 'index.html'} is stale" in out and "README" not in out


def test_states_lists_each_card_with_its_bound_and_draws_it(tmp_path, cli, monkeypatch):
    monkeypatch.setattr(states_mod, "valid_board", lambda s: _subs())
    out = tmp_path / "states"
    rc, text, err = cli("leaderboard", "states", str(V3), "--out", str(out))
    assert rc == 0 and "(12 card(s))" in text, err
    cards = {(c["model"], c["budget"]): c for c in json.loads((out / "states.json").read_text())["cards"]}
    assert cards[("bounded", "D32-N8")]["bound"] == "lower"
    assert cards[("silent", "D32-N8")]["bound"] == "upper"
    assert cards[("alpha", "D32-N8")]["bound"] is None
    md = (out / "README.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| bounded | bounded | D32-N8"))
    assert "≥ 300" in row and "≥ 0.586" in row and "1.17" not in row
    assert re.search(r"\| attention \| attention \| D32-N8 \|.*– \(no fixed S\) \|", md)
    assert (out / "states.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
