"""``leaderboard states``: the effective-state table of a suite, written into a folder.

:func:`write_states` validates every submission of a suite as ``render`` does (nothing
invalid is shown) and writes ``states.json``, ``README.md`` and ``states.png``: for a grid
suite from each submission's counts scored by the law's scorer (:mod:`.grid.states`), for a
capacity suite from its cards (:mod:`.capacity.states`: S, S_eff and S_eff/S per budget,
measured or a bound).
"""
from __future__ import annotations

import json
import os
import tempfile
from functools import partial
from pathlib import Path

from recallbench.api.canonical import plain
from recallbench.api.errors import ConfigError
from recallbench.leaderboard.board import valid_board
from recallbench.leaderboard.suite import SUBMISSIONS_DIR, load_suite

SCHEMA = "recallbench.states/1"
STATES_JSON = "states.json"
STATES_MD = "README.md"
STATES_PNG = "states.png"
VIEWS = ("mean", "best")


def check_out_dir(out: Path) -> None:
    """ConfigError (one line naming --out) unless ``out`` is, or can be made, a writable folder."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file; give a folder")
    existing = next(p for p in [out, *out.absolute().parents] if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"--out {out}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: {existing} is not writable")
    if existing == out:
        try:
            with tempfile.NamedTemporaryFile(dir=out, prefix=".recallbench-"):
                pass
        except OSError as exc:
            raise ConfigError(f"--out {out}: cannot write a file there "
                              f"({exc.strerror or type(exc).__name__})") from None


def write_states(suite_dir: str | Path, out: str | Path, view: str = "mean",
                 command: str | None = None) -> list[str]:
    """Write states.json, README.md and states.png of a suite into ``out``; the messages.

    Every submission is validated first (``board.valid_board``); a refused one is a
    ConfigError naming it, and nothing is written.
    """
    if view not in VIEWS:
        raise ConfigError(f"--view {view!r}: must be one of {', '.join(VIEWS)}")
    suite, out = load_suite(suite_dir), Path(out)
    command = command or f"recallbench leaderboard states {suite_dir} --out {out} --view {view}"
    check_out_dir(out)
    subs = valid_board(suite.dir)
    if not subs:
        raise ConfigError(f"{suite_dir}: no submissions in {suite.dir / SUBMISSIONS_DIR}")
    sc = suite.scoring
    if suite.is_capacity:  # from the cards, not the grid scorer
        from recallbench.leaderboard.capacity import states as cs
        from recallbench.leaderboard.capacity.board import card_rows
        from recallbench.leaderboard.capacity.method2 import is_v2

        rows = cs.state_rows(card_rows(suite, subs))
        view, note = (("card (every run)", cs.STATES_NOTE_V2) if is_v2(suite)
                      else ("card (best of seeds)", cs.STATES_NOTE))
        data = {"schema": SCHEMA, "suite": suite.name, "view": view,
                "level": sc["level"], "command": command, "note": note, "cards": rows}
        text, what = cs.states_markdown(suite, rows, command, note), "card(s)"
        figure = partial(cs.cards_figure, suite, rows)
    else:
        from recallbench.leaderboard.grid.states import (NO_STATE_NOTE, render_readme,
                                                         state_rows, states_figure)

        rows = state_rows(suite, subs, view)
        data = {"schema": SCHEMA, "suite": suite.name, "view": view, "delta": sc["delta"],
                "level": sc["level"], "form": sc["form"], "command": command,
                "note": NO_STATE_NOTE, "submissions": rows}
        text, what = render_readme(suite, rows, view, command), "submission(s)"
        figure = partial(states_figure, rows, title=f"{suite.name}: pooled S_eff/S ({view}), "
                                                    f"{sc['level'] * 100:g}% intervals")
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / STATES_JSON).write_text(json.dumps(plain(data), indent=2) + "\n", encoding="utf-8")
        (out / STATES_MD).write_text(text, encoding="utf-8")
        figure(out / STATES_PNG)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write ({exc.strerror or type(exc).__name__})") from None
    return [f"wrote {out / name} ({len(rows)} {what})" if name == STATES_JSON
            else f"wrote {out / name}" for name in (STATES_JSON, STATES_MD, STATES_PNG)]
