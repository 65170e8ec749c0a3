"""Is a stored record what it says it is?  :func:`record_problem`.

A store trusts a record's ``config_hash`` to say which point it is: a sweep skips the
points whose hash it holds as ok, and the scorer counts one record per hash.  A record
filed under another point's hash (edited, or copied from another store) would make that
point look done and put its numbers in the other point's place.  So every record read
from a store is checked:

* its ``config_hash`` is recomputed from its ``config``
  (:func:`recallbench.api.canonical.config_hash`, the function that made it: the config is
  stored exactly as it was hashed, execution keys and all, so records of every version
  verify).  A record with a hash of that form (64 hex digits) but no config cannot be
  checked and is not used either.  Hashes of any other form are not config hashes (no
  point of a sweep has one) and are left as they are;
* its counts are possible: ``total``, ``correct`` and ``correct_topk`` integers >= 0, the
  others at most ``total``, an ok record counting at least one query, and ``accuracy``
  (``accuracy_topk``) in [0, 1] and equal to ``correct / total`` (``correct_topk / total``).

A record that fails is reported (one warning naming its file and line) and not used.
"""
from __future__ import annotations

import math
import re
from typing import Any

HASH_FORM = re.compile(r"^[0-9a-f]{64}$")
#: how far a stored accuracy may be from correct / total (it is that quotient, rounded)
RATE_TOLERANCE = 1e-9


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def hash_problem(rec: dict) -> str | None:
    """Why the record's config_hash is not its config's, or None."""
    from recallbench.api.canonical import config_hash
    from recallbench.api.errors import ConfigError

    claimed = rec.get("config_hash")
    if not isinstance(claimed, str) or not HASH_FORM.match(claimed):
        return None
    cfg = rec.get("config")
    if not isinstance(cfg, dict):
        return (f"record of config_hash {claimed[:12]} has no config to check the hash "
                "against: not used")
    try:
        actual = config_hash(cfg)
    except ConfigError:
        actual = None
    if actual != claimed:
        return (f"record filed under config_hash {claimed[:12]} holds a config whose hash is "
                f"{str(actual)[:12]}: not used (edited, or copied under another point's hash)")
    return None


def counts_problem(rec: dict) -> str | None:
    """Why the record's counts or rates are impossible, or None."""
    total = rec.get("total")
    for key in ("total", "correct", "correct_topk"):
        v = rec.get(key)
        if v is not None and not (_int(v) and v >= 0):
            return f"{key} = {v!r} is impossible (an integer >= 0): record not used"
    if total == 0 and (rec.get("status") == "ok" or rec.get("accuracy") is not None):
        return "total = 0 in a record with results: it tested no query: record not used"
    for key, rate in (("correct", "accuracy"), ("correct_topk", "accuracy_topk")):
        count, value = rec.get(key), rec.get(rate)
        if count is not None and total is not None and count > total:
            return f"{key} = {count} is more than total = {total}: record not used"
        if value is None:
            continue
        if not (_number(value) and 0 <= value <= 1):
            return f"{rate} = {value!r} is impossible (in [0, 1]): record not used"
        if count is not None and _int(total) and total > 0 \
                and abs(value - count / total) > RATE_TOLERANCE:
            return (f"{rate} = {value!r} is not {key} / total = {count}/{total}: "
                    "record not used")
    return None


def record_problem(rec: dict) -> str | None:
    """Why a stored record must not be used (its hash, then its counts, then numbers no run
    of its config makes: :func:`recallbench.api.record.run_problem`), or None."""
    from recallbench.api.record import run_problem

    return hash_problem(rec) or counts_problem(rec) or run_problem(rec)
