"""Leaderboards: suites, submissions, and their validation, verification and rendering.

Two kinds of board share one frame.  The shared parts live here: suite files
(``suite``), a submission's envelope, hash and points (``submission``, ``schema``,
``points``, ``protocol``, ``recompute``), validation (``validate``, ``board``), and
rendering's dispatch and page frame (``render``, ``states``, ``page``, ``markdown``).
Each kind of board has its own subpackage:

* :mod:`.grid`: grid suites (cpu-small, cpu-v2, gpu-standard): a fixed (budget, N_f, seed)
  grid, scored by the law's fit; ``run``, ``scoring``, ``table``, ``plot``, ``page``;
* :mod:`.capacity`: capacity suites (cpu-v3: card method 1; method 2): cards from the
  capacity search; ``suite``, ``method2``, ``board``, ``board2``, ``states``, ``reseed``.

The flow::

    suite = load_suite("leaderboards/cpu-v3")             # suite.py
    run_suite(suite, adapter, store)                       # grid/run.py (capacity/suite.py)
    sub = build_submission(suite, load_store_records([store]), name)   # submission.py
    write_submission(sub, suite.dir / SUBMISSIONS_DIR / f"{slug(name)}.yaml")
    sub, suite, notes = validate_file(path)                # validate.py: hashes, points, cards
    entries = check_files([path])                          # board.py: ... and no duplicates
    render(suite.dir)                                      # render.py: README, PNG, index.html
    write_states(suite.dir, out)                           # states.py: S_eff/S across models

Submissions are read with a size limit checked before parsing, with PyYAML's safe loader
(no Python tags; aliases are refused too), and nothing in them is executed or used as a
path outside the leaderboard folder.
"""
from __future__ import annotations

from recallbench.leaderboard.board import check_board, check_files, valid_board
from recallbench.leaderboard.checks import check_name, slug
from recallbench.leaderboard.grid.plot import render_plot
from recallbench.leaderboard.grid.readme import render_markdown
from recallbench.leaderboard.grid.run import (load_store_records, new_seed, plan, run_suite,
                                              sample_points, suite_executor, verify)
from recallbench.leaderboard.grid.table import PLOT, acc_by_nf, fmt, leaderboard_rows
from recallbench.leaderboard.markdown import README
from recallbench.leaderboard.points import merge_config
from recallbench.leaderboard.render import render
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
