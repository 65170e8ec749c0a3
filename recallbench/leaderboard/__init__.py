"""Leaderboards: suites, submissions, and their validation, verification and rendering.

The flow, one module per step::

    suite = load_suite("leaderboards/cpu-small")          # suite.py: the grid and recipe
    run_suite(suite, adapter, store)                       # run.py: missing points -> store
    sub = build_submission(suite, load_store_records([store]), name)   # submission.py
    write_submission(sub, suite.dir / SUBMISSIONS_DIR / f"{slug(name)}.yaml")
    sub, suite, notes = validate_file(path)                # validate.py: hashes, grid, Fano
    entries = check_files([path])                          # board.py: ... and no duplicates
    verify(sub, suite, k, seed=None)                       # run.py: re-run k sampled points
    render(suite.dir)                                      # render.py, plot.py, page.py:
                                                           # README, PNG, index.html
    write_states(suite.dir, out)                           # states.py: S_eff/S across models

Helpers: ``yaml_io`` (safe, size- and depth-limited YAML), ``checks`` (names, paths,
bounded numbers, one-line errors), ``schema`` (every field's type and bounds),
``recompute`` (state size and bits from the adapter, not the file), ``points`` (a
point's config = budget config + delta, matched against the suite), ``scoring`` (the
scorer's S_eff, capacity and Fano ratio per budget).

Submissions are read with a size limit checked before parsing, with PyYAML's safe loader
(no Python tags; aliases are refused too), and nothing in them is executed or used as a
path outside the leaderboard folder.
"""
from __future__ import annotations

from recallbench.leaderboard.board import check_board, check_files, valid_board
from recallbench.leaderboard.checks import check_name, slug
from recallbench.leaderboard.points import merge_config
from recallbench.leaderboard.render import render, render_markdown
from recallbench.leaderboard.table import PLOT, README, acc_by_nf, fmt, leaderboard_rows
from recallbench.leaderboard.plot import render_plot
from recallbench.leaderboard.run import (load_store_records, new_seed, plan, run_suite,
                                        sample_points, suite_executor, verify)
from recallbench.leaderboard.submission import (SUBMISSION_SCHEMA, build_submission, content_sha256,
                                                write_submission)
from recallbench.leaderboard.suite import (SUBMISSIONS_DIR, SUITE_FILE, Suite, load_suite,
                                           submission_files, suite_dirs)
from recallbench.leaderboard.validate import check_submission, validate_file
from recallbench.leaderboard.yaml_io import MAX_BYTES, dump_yaml, read_yaml_data

__all__ = [
    "MAX_BYTES", "PLOT", "README", "SUBMISSIONS_DIR", "SUBMISSION_SCHEMA", "SUITE_FILE", "Suite",
    "acc_by_nf", "build_submission", "check_board", "check_files", "check_name",
    "check_submission", "content_sha256", "dump_yaml", "fmt", "leaderboard_rows",
    "load_store_records", "load_suite", "merge_config", "new_seed", "plan", "read_yaml_data",
    "render",
    "render_markdown", "render_plot", "run_suite", "sample_points", "slug", "submission_files",
    "suite_dirs", "suite_executor", "valid_board", "validate_file", "verify", "write_submission",
]
