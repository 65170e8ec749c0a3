"""A capacity search's stale results: what its store holds for the card but was made by other
adapter (or ``--factory``) source than the one that runs now.

    stale_policy(base, seeds, store, refuse=args.refuse_stale, say=warn)

The search (:func:`recallbench.runs.capacity.measure`) reuses every ok record of a cell it
visits; which cells it visits is only known as it goes, so every record the search *could*
reuse is checked before it starts: an ok record whose config is the card's cell config at
its own N_f and seed (:func:`recallbench.runs.capacity.cell_config`), one of ``seeds``.
Those made by other source (``provenance.source_sha256``; a factory's is its module's,
:mod:`recallbench.pytest_plugin.factory`) are warned about, one line each (bounded), and
kept, as ``sweep`` keeps them (:func:`recallbench.runs.sweep_policy.check_stale`); with
``refuse`` (``--refuse-stale``) they stop the command before anything is trained.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from recallbench.api.errors import ConfigError
from recallbench.runs.store import StoreContents, read_store
from recallbench.runs.sweep_policy import MAX_STALE_LINES, check_stale


@dataclasses.dataclass(frozen=True)
class CellPoint:
    """One stored run a card's search could reuse, as :func:`check_stale` names a point."""

    hash: str
    adapter: str
    num_facts: int
    seed: int

    def label(self) -> str:
        return f"N_f={self.num_facts} seed={self.seed}"


def card_points(base: Mapping[str, Any], seeds: Sequence[int] | Callable[[int, int], bool],
                contents: StoreContents) -> list[CellPoint]:
    """The store's ok records that a search from ``base`` over ``seeds`` would reuse
    (``seeds``: the seeds, or ``seeds(seed, num_facts)`` saying whether a run's is one)."""
    from recallbench.api.canonical import config_hash
    from recallbench.runs.capacity import cell_config

    adapter = str(base["model"]["adapter"])
    wanted = seeds if callable(seeds) else (lambda s, _nf, _w=frozenset(seeds): s in _w)
    hashes: dict[tuple[int, int], str | None] = {}
    points = []
    for rec in contents.records:
        if rec.get("status") != "ok":
            continue
        cfg = rec.get("config") or {}
        nf = (cfg.get("task") or {}).get("num_facts")
        seed = (cfg.get("train") or {}).get("seed")
        if not (type(nf) is int and type(seed) is int and wanted(seed, nf)):
            continue
        if (nf, seed) not in hashes:
            try:
                hashes[nf, seed] = config_hash(cell_config(base, nf, seed))
            except ConfigError:  # an N_f the search cannot visit
                hashes[nf, seed] = None
        if hashes[nf, seed] == rec["config_hash"]:
            points.append(CellPoint(rec["config_hash"], adapter, nf, seed))
    return points


def stale_policy(base: Mapping[str, Any], seeds: Sequence[int] | Callable[[int, int], bool],
                 store: str | Path, *,
                 refuse: bool, say: Callable[[str], None],
                 max_lines: int = MAX_STALE_LINES) -> None:
    """Check ``store`` (a directory; none yet: nothing to check) before a search from
    ``base`` over ``seeds``: warn through ``say`` about each stored result it would reuse
    that was made by other source, or with ``refuse`` raise ConfigError (one line, after
    the warning lines)."""
    path = Path(store)
    if not path.is_dir():
        return
    contents = read_store(path, warn=lambda _: None)  # the search's own read reports lines
    check_stale(card_points(base, seeds, contents), contents, refuse, say, max_lines,
                of="this card")
