"""The types and bounds of a submission's descriptive fields.

:mod:`recallbench.leaderboard.validate` checks what a submission claims (grid, hashes,
counts, Fano bound); this module checks that every other field is the plain data it
should be (text of bounded length, a count, a finite number, a flag) before anything
reads it, so that a malformed file is one line naming the file and the field, never a
traceback.  Counts are bounded by ``checks.MAX_COUNT`` (10**400 is refused, not
overflowed).

The training protocol's facts that a point copies from its record (``lr_search``,
``stop_reason``, ``steps_to``; :mod:`recallbench.harness.lr_search`,
:mod:`recallbench.harness.convergence`) and the model's ``provenance``
(:mod:`recallbench.api.provenance`) are checked entry by entry
(:func:`check_protocol_fields`): exact keys, types, bounded sizes.
"""
from __future__ import annotations

import datetime
import re
from typing import Any, Callable, Mapping

from recallbench.leaderboard.checks import is_count, is_int, is_num, need, short

MAX_TEXT = 500  # characters in one descriptive text field
#: a run's stop reasons (:mod:`recallbench.harness.convergence`)
STOP_REASONS = ("early_stop", "plateau", "max_steps")
#: the accuracy levels of ``steps_to``, as the record writes them
LEVELS = ("0.5", "0.9", "0.99")
#: the most candidates an lr search may try (``recallbench.api.config.MAX_LRS``)
MAX_LR_SEARCH = 16
LR_ENTRY_KEYS = ("lr", "val_accuracy", "steps", "converged", "error")
#: a search by successive halving (``train.lr_rung``) adds to each entry ``rungs``:
#: [[steps, val_accuracy], ...], the comparisons it took part in (at most this many)
MAX_RUNGS = 16
PROVENANCE_KEYS = ("distribution", "version", "library", "library_version", "source_sha256")


def _text(x) -> bool:
    return isinstance(x, str) and len(x) <= MAX_TEXT


def _opt(pred: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda x: x is None or pred(x)


def _nonneg(x) -> bool:
    return is_num(x) and x >= 0


def _text_list(x) -> bool:
    return isinstance(x, list) and len(x) <= 64 and all(_text(v) for v in x)


# field -> (test, what it must be)
TEXT = (_text, f"text of at most {MAX_TEXT} characters")
OPT_TEXT = (_opt(_text), f"null or text of at most {MAX_TEXT} characters")
OPT_COUNT = (_opt(is_count), "null or an integer count")
OPT_SECONDS = (_opt(_nonneg), "null or a finite number >= 0")

HEADER = {"schema": TEXT, "suite": TEXT, "suite_recipe_sha256": TEXT, "sha256": TEXT,
          "artifacts": (_opt(_text_list), "a list of paths"),
          "model": (lambda x: isinstance(x, dict), "a mapping"),
          "budgets": (lambda x: isinstance(x, list) and x, "a non-empty list"),
          "scoring": (lambda x: isinstance(x, dict), "a mapping"),
          "impossible": (lambda x: isinstance(x, list), "a list"),
          "environment": (lambda x: isinstance(x, dict), "a mapping")}
ENVIRONMENT = {"versions": (lambda x: isinstance(x, dict) and len(x) <= 64
                            and all(_text(k) and _text(v) for k, v in x.items()),
                            "a mapping of names to version texts"),
               "versions_consistent": (lambda x: isinstance(x, bool), "true or false"),
               "devices": (_text_list, "a list of texts"),
               "threads": (lambda x: isinstance(x, list) and all(is_count(t, 1) for t in x),
                           "a list of thread counts"),
               "python_platform": TEXT, "wall_s_total": OPT_SECONDS}
BUDGET = {"state_note": OPT_TEXT, "params": OPT_COUNT,
          "state_size": (_opt(lambda x: is_count(x, 1)), "null or a positive integer"),
          "state_bits": (lambda x: is_int(x) and 1 <= x <= 64, "an integer in [1, 64]"),
          "config": (lambda x: isinstance(x, dict), "a mapping"),
          "points": (lambda x: isinstance(x, list), "a list"),
          "score": (lambda x: isinstance(x, dict), "a mapping"),
          "card": (lambda x: isinstance(x, dict), "a mapping")}
POINT = {"num_facts": (lambda x: is_count(x, 1), "a positive integer"),
         "lr": (lambda x: is_num(x) and x > 0, "a finite number > 0"),
         "seed": (lambda x: is_int(x) and 0 <= x < 2 ** 32, "an integer in [0, 2**32)"),
         "config_hash": TEXT,
         "correct": (is_count, "an integer count"), "correct_topk": (is_count, "an integer count"),
         "total": (lambda x: is_count(x, 1), "an integer count >= 1"),
         "accuracy": (_opt(lambda x: is_num(x) and 0 <= x <= 1), "null or a number in [0, 1]"),
         "info_bits": (lambda x: is_num(x) and 0 < x <= 1e9, "a number in (0, 1e9]"),
         "steps": OPT_COUNT, "best_step": OPT_COUNT,
         "converged": (_opt(lambda x: isinstance(x, bool)), "null, true or false"),
         "stop_reason": (_opt(lambda x: isinstance(x, str) and x in STOP_REASONS),
                         f"null or one of {', '.join(STOP_REASONS)}"),
         "train_s": OPT_SECONDS, "wall_s": OPT_SECONDS, "cpu_s": OPT_SECONDS,
         "extended": OPT_COUNT}
SCORE_VALUE = (_opt(is_num), "null or a finite number")
SCORE_CI = (lambda x: isinstance(x, list) and len(x) == 2 and all(SCORE_VALUE[0](v) for v in x),
            "a list of two numbers or nulls")


def check_created(value: Any, where: str) -> None:
    """``created``: a date ``YYYY-MM-DD`` (a real one) no later than today, in UTC, the
    clock ``submit`` writes it with."""
    today = datetime.datetime.now(datetime.timezone.utc).date()
    day = None
    if isinstance(value, str) and re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
        try:
            day = datetime.date.fromisoformat(value)
        except ValueError:
            pass
    need(day is not None and day <= today, f"{where}: created",
         f"must be a date YYYY-MM-DD no later than today ({today.isoformat()}, UTC); "
         f"got {short(value)}")


def check_fields(obj: Mapping, spec: Mapping, where: str) -> None:
    """Every key of ``spec`` that ``obj`` holds passes its test (presence is checked elsewhere)."""
    for key, (test, what) in spec.items():
        if key in obj:
            need(test(obj[key]), f"{where}: {key}", f"must be {what}")


def check_score(score: Mapping, where: str) -> None:
    """A budget's score: views mean and best, each the scorer's numbers or an error text."""
    from recallbench.leaderboard.grid.scoring import SCORE_KEYS

    need(set(score) == {"mean", "best"}, where, "score must hold exactly the views mean and best")
    for view, entry in score.items():
        vw = f"{where}: score.{view}"
        need(isinstance(entry, dict), vw, "must be a mapping")
        if "error" in entry:
            need(set(entry) == {"error"} and _text(entry["error"]), vw, "an error entry holds one text")
            continue
        need(set(entry) == set(SCORE_KEYS), vw, f"must hold exactly {', '.join(SCORE_KEYS)}")
        for k in SCORE_KEYS:
            test, what = SCORE_CI if k == "s_eff_ci" else SCORE_VALUE
            need(test(entry[k]), f"{vw}.{k}", f"must be {what}")


def _check_lr_search(entries, where: str) -> None:
    """``lr_search``: null, or 1 to :data:`MAX_LR_SEARCH` candidates with exactly
    :data:`LR_ENTRY_KEYS`, or all of them with ``rungs`` too (a search by halving)."""
    if entries is None:
        return
    need(isinstance(entries, list) and 1 <= len(entries) <= MAX_LR_SEARCH, f"{where}: lr_search",
         f"must be null or a list of 1 to {MAX_LR_SEARCH} candidates")
    halving = isinstance(entries[0], dict) and "rungs" in entries[0]
    keys = (*LR_ENTRY_KEYS, "rungs") if halving else LR_ENTRY_KEYS
    for i, e in enumerate(entries):
        ew = f"{where}: lr_search[{i}]"
        need(isinstance(e, dict) and set(e) == set(keys), ew,
             f"must be a mapping with exactly {', '.join(keys)}"
             + (" (every candidate of a search by halving has rungs)" if halving else ""))
        if halving:
            r = e["rungs"]
            need(isinstance(r, list) and len(r) <= MAX_RUNGS and all(
                isinstance(x, list) and len(x) == 2 and is_count(x[0])
                and (x[1] is None or (is_num(x[1]) and 0 <= x[1] <= 1)) for x in r)
                 and [x[0] for x in r] == sorted({x[0] for x in r}), f"{ew}.rungs",
                 f"must be a list of at most {MAX_RUNGS} [steps, val_accuracy] pairs, steps "
                 "increasing, accuracies null or in [0, 1]")
        for key, test, what in (
                ("lr", lambda x: is_num(x) and x > 0, "a finite number > 0"),
                ("val_accuracy", _opt(lambda x: is_num(x) and 0 <= x <= 1), "null or a number in [0, 1]"),
                ("steps", is_count, "an integer count"),
                ("converged", lambda x: isinstance(x, bool), "true or false"),
                ("error", _opt(_text), f"null or text of at most {MAX_TEXT} characters")):
            need(test(e[key]), f"{ew}.{key}", f"must be {what}")


def _check_steps_to(steps_to, where: str) -> None:
    """``steps_to``: null, or {"0.5", "0.9", "0.99"} → null or a step count."""
    if steps_to is None:
        return
    need(isinstance(steps_to, dict) and set(steps_to) == set(LEVELS), f"{where}: steps_to",
         f"must be null or a mapping with exactly the keys {', '.join(LEVELS)}")
    for k in LEVELS:
        need(steps_to[k] is None or is_count(steps_to[k]), f"{where}: steps_to.{k}",
             "must be null or an integer step count")


def check_provenance(prov, where: str) -> None:
    """``model.provenance``: null, or exactly :data:`PROVENANCE_KEYS`, each null or a short
    text, ``source_sha256`` null or 64 hex digits."""
    if prov is None:
        return
    need(isinstance(prov, dict) and set(prov) == set(PROVENANCE_KEYS), f"{where}: provenance",
         f"must be null or a mapping with exactly {', '.join(PROVENANCE_KEYS)}")
    for k in PROVENANCE_KEYS:
        need(prov[k] is None or (isinstance(prov[k], str) and 0 < len(prov[k]) <= 200),
             f"{where}: provenance.{k}", f"must be null or text of 1 to 200 characters "
             f"(got {short(prov[k])})")
    sha = prov["source_sha256"]
    need(sha is None or bool(re.fullmatch(r"[0-9a-f]{64}", sha)), f"{where}: provenance.source_sha256",
         "must be null or 64 hex digits")


def check_protocol_fields(point: Mapping, where: str) -> None:
    """A point's ``lr_search`` and ``steps_to`` (its ``stop_reason`` is in :data:`POINT`)."""
    _check_lr_search(point.get("lr_search"), where)
    _check_steps_to(point.get("steps_to"), where)
