"""The figure a method-2 board leads with (``leaderboard.capacity.board_figure``): what each
panel draws for measured cards and each kind of bound, its order, and the file render writes."""
import pytest

from recallbench import leaderboard as lb
from recallbench.leaderboard.capacity import board_figure as bf


def _row(model, kind, value, lo, hi, bound=None, budget="D32-N4"):
    return {"model": model, "budget": budget, "kind": kind,
            "card": {"n50_per_kbit": {"value": value, "ci": [lo, hi]}, "n50": {"bound": bound}}}


ROWS = [_row("a", "measured", 1.15, 1.07, 1.24), _row("b", "bound", 0.9, 0.77, 1.1, "interval"),
        _row("c", "no recall", None, None, 0.2, "upper"), _row("d", "bound", None, 2.0, None, "lower"),
        _row("e", "measured", 0.48, 0.43, 0.55), _row("f", "grows with L", 1.0, 0.9, 1.1),
        _row("g", "measured", 1.22, 1.18, 1.26, budget="D32-N8")]


def test_each_card_is_drawn_as_what_it_is_ranked_from_the_top():
    ms = bf.marks(ROWS, "D32-N4")
    assert [(m["label"], m["kind"]) for m in ms] == [
        ("d", "lower"), ("a", "measured"), ("b", "interval"), ("e", "measured"), ("c", "upper")]
    # a bound is never given a point; a state that grows with L has no per-kbit figure
    assert [m["value"] for m in ms if m["kind"] != "measured"] == [None, None, None]
    assert ms[0]["lo"] == 2.0 and ms[0]["hi"] is None and ms[-1]["hi"] == 0.2
    assert [m["label"] for m in bf.marks(ROWS, "D32-N8")] == ["g"]


def test_the_figure_is_a_png_with_a_panel_per_budget(tmp_path):
    import matplotlib.image

    suite = lb.load_suite("leaderboards/cpu-v4")
    path = bf.draw_board(suite, ROWS, tmp_path / bf.FIGURE)
    image = matplotlib.image.imread(path)
    assert image.shape[1] > 1.8 * image.shape[0]  # two panels side by side
    empty = bf.draw_board(suite, [], tmp_path / "empty.png")  # no cards yet: still drawn
    assert empty.stat().st_size > 1000


@pytest.mark.slow
@pytest.mark.parametrize("missing", [True, False])
def test_render_check_wants_the_figure(tmp_path, cli, missing):
    import shutil

    d = tmp_path / "cpu-v4"
    shutil.copytree("leaderboards/cpu-v4", d)
    if missing:
        (d / bf.FIGURE).unlink()
    rc, out, err = cli("leaderboard", "render", "--check", str(d))
    assert (rc == 1 and f"{bf.FIGURE} is missing" in out + err) if missing else rc == 0, out + err
