"""A method-2 board's state shapes (``capacity.shapes_docs``): an adapter's default shape
beside the best of its shapes at the same S, a shape named only when its interval lies
above every other's, bounds never named, and no section without two shapes."""
import copy
import shutil
from pathlib import Path

import pytest
import yaml

from recallbench import leaderboard as lb
from recallbench.leaderboard.capacity import board2, shapes_docs
from recallbench.leaderboard.submission import write_submission
from test_capacity_suite import _forged
from test_capacity_suite_v2 import board2 as board  # noqa: F401  (the module's fixture)
from test_leaderboard_tamper import _assert_one_line

ROOT = Path(__file__).resolve().parent.parent


def _variant(sub, path, name, per_kbit, ci, heads=1, **card_changes):
    """``sub`` as another submission: its model renamed, its card's value and interval set,
    and (heads > 1) a config and state shape of another shape at the same S."""
    sub = copy.deepcopy(sub)
    b = sub["budgets"][0]
    card = b["card"]
    card.update({"n50_per_kbit": {"value": per_kbit, "ci": list(ci)}, **card_changes})
    if heads > 1:
        b["config"]["model"]["n_heads"] = heads
        shape = dict(card["state_shape"])
        shape["heads"], shape["value"] = heads, shape["value"] // heads
        card["state_shape"] = shape
    sub["model"]["name"] = name
    return path.with_name(f"{name}.yaml"), sub


def _groups(suite, subs):
    return shapes_docs.groups(suite, board2.card_rows(suite, subs))


def test_a_shape_above_every_other_interval_is_named_beside_the_default(board):  # noqa: F811
    suite, path, sub, _ = board
    subs = [_variant(sub, path, "designed", 2.0, (1.8, 2.2)),
            _variant(sub, path, "designed-heads-2", 4.0, (3.6, 4.4), heads=2),
            _variant(sub, path, "designed-heads-4", 2.1, (1.9, 2.3), heads=4)]
    (g,) = _groups(suite, subs)
    assert g["default"]["model"] == "designed"  # its config is the suite's own
    assert g["best"]["verdict"] == "highest" and g["best"]["shape"] == "designed-heads-2"
    (row,) = shapes_docs.table([g])
    assert row[3].startswith("designed (") and row[5].startswith("designed-heads-2 (heads 2")
    assert row[6] == board2.estimate(subs[1][1]["budgets"][0]["card"]["n50_per_kbit"])
    text = board2.render_markdown(suite, board2.card_rows(suite, subs))
    section = text[text.index("## State shapes at the same S"):
                   text.index("## Training work")]
    assert "| highest: above every other shape's interval |" in section
    page = board2.page_html(suite, board2.card_rows(suite, subs), {})
    assert 'id="shapes"' in page and "designed-heads-2" in page


def test_overlapping_shapes_are_not_separable_and_a_bound_is_never_named(board):  # noqa: F811
    suite, path, sub, _ = board
    card = sub["budgets"][0]["card"]
    lower = {"status": "bound", "why": "too few runs",
             "n50": {**card["n50"], "bound": "lower", "ci": [30.0, None]}}
    subs = [_variant(sub, path, "designed", 2.0, (1.8, 2.2)),
            _variant(sub, path, "designed-heads-2", 2.4, (2.1, 2.8), heads=2),
            _variant(sub, path, "designed-heads-4", 9.0, (8.0, None), heads=4, **lower)]
    (g,) = _groups(suite, subs)
    best = g["best"]
    assert best["verdict"] == "not separable" and best["shape"] == "designed-heads-2"
    assert sorted(best["overlaps"]) == ["designed", "designed-heads-4"]  # a bound reaches ∞
    (row,) = shapes_docs.table([g])
    assert row[7] == "not separable: overlaps designed, designed-heads-4"
    only_bound = [_variant(sub, path, "designed-heads-4", 9.0, (8.0, None), heads=4, **lower),
                  _variant(sub, path, "designed-heads-2", 9.0, (8.0, None), heads=2, **lower)]
    (g,) = _groups(suite, only_bound)
    (row,) = shapes_docs.table([g])
    assert g["default"] is None and row[3] == "not submitted"
    assert row[5] == "none" and row[7] == "no shape measured: none named"
    assert row[4] == "–"


@pytest.mark.parametrize("heads", [1, None])
def test_no_shapes_section_without_two_shapes_of_one_adapter(board, heads):  # noqa: F811
    suite, path, sub, _ = board
    subs = [_variant(sub, path, "designed", 2.0, (1.8, 2.2))]
    if heads:  # a second card of the same shape
        subs.append(_variant(sub, path, "designed-again", 4.0, (3.6, 4.4), heads=heads))
    assert _groups(suite, subs) == []
    assert "State shapes" not in board2.render_markdown(suite, board2.card_rows(suite, subs))


# -- a shape as a board entry (``leaderboard run --shape``, ``submit --shape``) -----------

@pytest.fixture(scope="module")
def shaped(board, tmp_path_factory):  # noqa: F811
    """A copy of the board with the designed model at key 4 of S = 512 run and submitted
    beside its default (key 8)."""
    from recallbench.cli.main import main

    _, path, _, _ = board
    tmp = tmp_path_factory.mktemp("shaped")
    d = tmp / path.parent.parent.name
    shutil.copytree(path.parent.parent, d)
    store = tmp / "key4"
    assert main(["leaderboard", "run", "--suite", str(d), "--adapter", "designed",
                 "--shape", "key=4", "--store", str(store)]) == 0
    assert main(["submit", "--suite", str(d), "--store", str(store), "--model-name",
                 "designed-key-4", "--shape", "key=4"]) == 0
    out = d / "submissions" / "designed-key-4.yaml"
    return d, out, lb.read_yaml_data(out), store


def test_a_shape_runs_submits_validates_and_joins_the_shapes_table(shaped, cli):
    d, out, sub, _ = shaped
    assert sub["model"]["shape"] == {"term": "key", "value": 4}
    (b,) = sub["budgets"]
    assert b["state_size"] == 512 and b["card"]["state_shape"]["key"] == 4
    assert b["config"]["model"]["d_state"] == 4  # the budget's d_state is 8: S kept by d_model
    rc, text, err = cli("leaderboard", "validate", str(d))
    assert rc == 0, err
    rc, _, err = cli("leaderboard", "render", str(d), "--no-plot")
    assert rc == 0, err
    readme = (d / "README.md").read_text()
    row = [x for x in readme.split("## State shapes")[1].splitlines() if x.startswith("| D32")]
    assert len(row) == 1 and "| designed (key 8 × value 64) |" in row[0]
    assert row[0].endswith("| highest: above every other shape's interval |")  # key 8's
    assert ("| [designed-key-4](index.html#card-designed-key-4.yaml-D32-N8) | designed | "
            "512 (key 4 × value 128) |") in readme  # ranked too, linked to its card


@pytest.mark.parametrize("edit, match", [
    (lambda s: s["model"].update(shape={"term": "key", "value": 16}), "model.shape"),
    (lambda s: s["model"].update(shape={"term": "key", "value": 3}),
     "model.shape: key=3 is not allowed at budget D32-N8"),
    (lambda s: s["model"].update(shape={"term": "key", "value": "4"}), "model.shape must be"),
    (lambda s: s["model"].pop("shape"), "config does not follow the suite: model.d_model"),
])
def test_a_forged_shape_is_refused_in_one_line(shaped, cli, tmp_path, edit, match):
    d, out, sub, _ = shaped
    bad = d / "submissions" / "forged.yaml"
    write_submission(_forged(sub, edit), bad)
    try:
        rc, _, err = cli("leaderboard", "validate", str(bad))
    finally:
        bad.unlink()
    _assert_one_line(rc, err, "forged.yaml", match)


def test_shape_flags_are_checked_in_one_line(shaped, cli, tmp_path):
    d, _, _, store = shaped
    run = ("leaderboard", "run", "--suite", str(d), "--adapter", "designed",
           "--store", str(tmp_path / "s"))
    _assert_one_line(*cli(*run, "--shape", "key=3")[::2], "--shape key=3",
                     "realises key in {1, 2, 4, 8, 16}")
    _assert_one_line(*cli(*run, "--shape", "key")[::2], "--shape", "TERM=V")
    _assert_one_line(*cli(*run, "--shape", "key=4", "--set", "model.options.embedding=1")[::2],
                     "--shape with --set")
    open_grid = tmp_path / "cpu-small"  # its grid, not retired
    (open_grid / "submissions").mkdir(parents=True)
    data = yaml.safe_load((ROOT / "leaderboards" / "cpu-small" / "suite.yaml").read_text())
    data.pop("retired", None)
    (open_grid / "suite.yaml").write_text(yaml.safe_dump(data))
    grid = ("leaderboard", "run", "--suite", str(open_grid), "--adapter", "designed",
            "--store", str(tmp_path / "g"), "--shape", "key=4")
    _assert_one_line(*cli(*grid)[::2], "--shape is for a capacity suite")
    rc, _, err = cli("submit", "--suite", str(d), "--store", str(store), "--model-name", "x",
                     "--shape", "key=2", "--out", str(tmp_path / "x.yaml"))
    _assert_one_line(rc, err, "--shape key=2 --store")  # the command that makes its runs
