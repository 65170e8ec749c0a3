"""Measurements travel with the test reports, so one process sees them all.

Under pytest-xdist every test runs in a worker, and the controller alone writes the
baseline, the report and the summary.  Each measurement rides on the report of the test
phase that made it (an attribute that pytest's report serialization carries to the
controller, which xdist uses), and the controller collects them in
``pytest_runtest_logreport``.  A serial run sends them to itself the same way, so both
write the same files::

    attach(report, entries)        # where the test ran (makereport)
    entries = received(report)     # where the files are written (logreport)
    ordered = settle(all_entries)  # collection order; one training run per shared key

:func:`settle` puts the measurements in collection order, whichever worker finished first,
and makes the first of the measurements sharing a key the training run, as in a serial
run (the others waited for it or read what it stored); a key that an earlier run stored
is "from cache" in every measurement of it.
"""
from __future__ import annotations

import json

from recallbench.pytest_plugin.cache import CACHE, SESSION, TRAINED

ATTR = "recallbench_measurements"


def attach(report, entries: list[dict]) -> None:
    """Put ``entries`` on a test report (as one JSON string: any serializer carries it)."""
    setattr(report, ATTR, json.dumps(entries))


def received(report) -> list[dict]:
    """The measurements a report carries (none for reports of other tests)."""
    text = getattr(report, ATTR, None)
    return json.loads(text) if isinstance(text, str) else []


def settle(measurements: list[dict]) -> list[dict]:
    """The measurements in collection order, the first of each shared key the one trained."""
    ordered = sorted(measurements, key=lambda m: tuple(m["order"]))
    from_cache = {m["share"] for m in ordered if m.get("source") == CACHE}
    seen = set()
    for m in ordered:
        key = m.get("share")
        if key is None or m.get("source") not in (TRAINED, SESSION):
            continue
        if key in from_cache:  # stored before this session: every worker read it
            m["source"] = CACHE
        else:
            m["source"] = SESSION if key in seen else TRAINED
            seen.add(key)
    return ordered


def counts(measurements: list[dict]) -> dict[str, int]:
    """How many measurements were trained, taken from this session, read from the cache;
    ``retrained``: training runs of a config that another one had already trained."""
    out = {TRAINED: 0, SESSION: 0, CACHE: 0}
    trained_hashes: list[str] = []
    for m in measurements:
        if m.get("source") in out:
            out[m["source"]] += 1
        if m.get("source") == TRAINED:
            trained_hashes.append(m["record"]["config_hash"])
    out["retrained"] = len(trained_hashes) - len(set(trained_hashes))
    return out
