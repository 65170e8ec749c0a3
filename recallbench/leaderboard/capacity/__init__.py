"""Capacity boards: suites whose submissions carry capacity cards instead of a grid.

* :mod:`.suite`: running, submitting and checking a capacity suite's cards (both methods);
* :mod:`.method2`: what card method 2 changes (a search in batches, a work budget);
* :mod:`.board`: the board of cpu-v3's method (rows, ranking, README, page, states);
* :mod:`.board2`: the board of method 2;
* :mod:`.reseed`: ``leaderboard verify --reseed``, a method-2 card re-run from other seeds.

The shared parts (suite files, submission envelope and hash, validation, the page's frame)
are the parent package's; nothing here reads a grid suite's scoring or table.
"""
