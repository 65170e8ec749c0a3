"""Which adapters a benchmark measures: those ``--only`` names (all by default) that can
run here; a line is printed for each one that cannot, with the reason."""
from __future__ import annotations

from typing import Iterator, Sequence

from recallbench import ADAPTERS


def runnable_adapters(only: Sequence[str] | None, *, word: str = "unavailable") -> Iterator[str]:
    for name, _origin, ok, why in ADAPTERS.describe():
        if only and name not in only:
            continue
        if not ok:
            print(f"{name:<18} {word}: {why}")
            continue
        yield name
