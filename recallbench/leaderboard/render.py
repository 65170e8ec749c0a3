"""``leaderboard render``: a suite's board, written or (``check``) compared.

:func:`render` validates every submission of a suite as ``validate`` does (scores
recomputed, state sizes recomputed by the adapters, duplicates refused) and refuses to
render, naming the first refused file, when any fails; it then hands the valid submissions
to the board of the suite's kind: a grid suite's README.md, plot and page
(:mod:`.grid.readme`), or a capacity suite's cards ranked per budget (:mod:`.capacity.board`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from recallbench.api.errors import ConfigError
from recallbench.leaderboard.board import valid_board
from recallbench.leaderboard.capacity import board as capacity_board
from recallbench.leaderboard.grid.readme import render_grid
from recallbench.leaderboard.suite import Suite, load_suite

def _each_renders(suite: Suite, subs: list[tuple[Path, Mapping]]) -> None:
    """Each valid capacity submission's README lines and page, made alone: a card that
    validation accepted but the board could not show (a bug here, not in the file's
    favour) is refused in one line naming its file, before anything is written."""
    for path, sub in subs:
        try:
            rows = capacity_board.card_rows(suite, [(path, sub)])
            capacity_board.render_markdown(suite, rows)
            capacity_board.page_html(suite, rows, {})
        except (TypeError, ValueError, KeyError, AttributeError, IndexError,
                OverflowError) as exc:
            detail = " ".join(str(exc).split())[:120]
            raise ConfigError(f"{path}: its cards cannot be shown ({type(exc).__name__}: "
                              f"{detail}); nothing rendered") from None


def render(suite_dir: str | Path, *, check: bool = False, plot: bool = True,
           check_scores: bool = True) -> tuple[bool, list[str]]:
    """Write (or with ``check``, compare) the suite's README.md, plot and page (index.html).

    Returns (up_to_date, messages).  Every submission is validated first, with
    everything ``validate`` checks, so that nothing invalid is shown; one that fails is a
    ConfigError naming it, and nothing is written.  ``check_scores=False`` (only with
    ``check``) leaves out recomputing each score or card from its points, a board's
    re-seedings' too, as ``validate --no-scores`` does.
    """
    if not (check or check_scores):
        raise ValueError("render writes only after every score is recomputed (check_scores)")
    suite = load_suite(suite_dir)
    subs = valid_board(suite.dir, check_scores=check_scores)
    if suite.is_capacity:  # cards, not grid scores: ranked per budget (capacity_board)
        _each_renders(suite, subs)
        return capacity_board.render(suite, subs, check=check, plot=plot,
                                     check_scores=check_scores)
    return render_grid(suite, subs, check=check, plot=plot)
