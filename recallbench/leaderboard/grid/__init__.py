"""Grid boards (cpu-small, cpu-v2, gpu-standard): every submission runs one fixed grid of
(budget, N_f, seed) points, scored by the recall law's fit over its cells.

* :mod:`.run`: ``leaderboard run`` and ``verify`` of a grid suite;
* :mod:`.scoring`: a submission's points as records, scored (S_eff, capacity, Fano ratio);
* :mod:`.table`, :mod:`.plot`, :mod:`.page`: the ranked table, the figure and the web page.

The shared parts (suite files, submission envelope and hash, validation, the page's frame)
are the parent package's.
"""
