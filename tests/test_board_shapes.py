"""A method-2 board's state shapes (``capacity.shapes_docs``): an adapter's default shape
beside the best of its shapes at the same S, a shape named only when its interval lies
above every other's, bounds never named, and no section without two shapes."""
import copy

import pytest

from recallbench.leaderboard.capacity import board2, shapes_docs
from test_capacity_suite_v2 import board2 as board  # noqa: F401  (the module's fixture)


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
