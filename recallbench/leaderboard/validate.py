"""Validating a submission file against its suite.

:func:`validate_file` reads a submission (from ``<suite>/submissions/`` only) and
:func:`check_submission` checks it, stopping at the first problem with a one-line
:class:`ConfigError`:

1. header: known fields of the right types (``schema``), schema, the content sha256, the
   suite and its recipe hash, scoring settings, environment, paths;
2. model: names, ``config_hash`` = hash of ``config``, the library the adapter declares;
3. each budget: sizes recomputed by the adapter (``recompute``), one model config, and
   each point: on the suite's grid, counts consistent and bounded, ``config_hash`` = hash
   of (budget config + delta), config following the suite, ``info_bits`` from the task,
   ``total`` = its test sequences × the task's queries per sequence, and no accuracy
   beyond the Fano bound (Lem 4.5; docs/theory.md, 'The law');
4. the scorer flagged nothing impossible, and (unless ``check_scores`` is off) every
   stored score agrees with the scorer's, recomputed from the counts; a capacity suite's
   search ended and each card is, field by field, the one its points make
   (``capacity_suite.check_cards``).

A file is checked on its own here; ``board`` compares the files of a suite (duplicates).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from recallbench.api.canonical import SECTIONS, config_hash
from recallbench.api.errors import ConfigError
from recallbench.leaderboard.capacity import shape_entry
from recallbench.leaderboard.capacity import suite as capacity_suite
from recallbench.leaderboard.checks import (agrees, check_file_name, check_keys, check_name,
                                            check_relative_path, need, short)
from recallbench.leaderboard.points import (check_delta, first_mismatch, merge_config,
                                            shared_model_config)
from recallbench.leaderboard.recompute import check_info_bits, check_library, check_state
from recallbench.leaderboard.protocol import check_point_protocol
from recallbench.leaderboard.schema import (BUDGET, ENVIRONMENT, HEADER, MAX_TEXT, POINT,
                                            check_created, check_fields, check_protocol_fields,
                                            check_provenance, check_score)
from recallbench.leaderboard.grid.scoring import budget_scores, score_records, scoring_entry
from recallbench.leaderboard.points import point_records, rounded
from recallbench.leaderboard.submission import SUBMISSION_SCHEMA, content_sha256
from recallbench.leaderboard.suite import SUBMISSIONS_DIR, SUITE_FILE, Suite, load_suite
from recallbench.leaderboard.yaml_io import read_yaml_data

SUB_KEYS = {"schema", "suite", "suite_recipe_sha256", "model", "budgets", "scoring", "impossible",
            "environment", "created", "sha256", "artifacts", "reseed_of"}
MODEL_KEYS = {"name", "adapter", "description", "url", "library", "config", "config_hash",
              "provenance", "shape"}
MODEL_REQUIRED = {"name", "adapter", "config", "config_hash", "library"}
BUDGET_KEYS = {"name", "state_size", "state_bits", "state_note", "params", "config", "points", "score",
               "card"}
#: the training protocol's facts of a point (``protocol``): optional in a suite with an lr
#: grid (submissions made before they existed show "—"), required where the suite searches
PROTOCOL_KEYS = {"lr_search", "converged", "stop_reason", "steps_to"}
POINT_KEYS = {"num_facts", "lr", "seed", "config_hash", "delta", "correct", "total", "correct_topk",
              "accuracy", "info_bits", "steps", "best_step", "train_s", "wall_s", "cpu_s",
              "extended", *PROTOCOL_KEYS}
POINT_REQUIRED = {"num_facts", "lr", "seed", "config_hash", "correct", "total", "correct_topk",
                  "info_bits"}


def find_suite_for(path: Path) -> Path:
    """The suite folder of a submission file: .../<suite>/submissions/<file>.yaml."""
    p = Path(os.path.abspath(path))
    need(p.exists() or p.is_symlink(), str(path), "no such file")
    need(p.parent.name == SUBMISSIONS_DIR and (p.parent.parent / SUITE_FILE).is_file(), str(path),
         f"submissions must live in <leaderboards>/<suite>/{SUBMISSIONS_DIR}/ next to the "
         f"suite's {SUITE_FILE}")
    return p.parent.parent


def _hash_of(what: Callable[[], str], where: str) -> str:
    """A content or config hash, or a one-line error naming the file (NaN, non-data)."""
    try:
        return what()
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _check_header(sub: Any, suite: Suite, where: str) -> None:
    """Fields, schema, content sha256, suite, recipe hash, scoring, environment, paths."""
    check_keys(sub, SUB_KEYS, SUB_KEYS - {"artifacts", "created", "reseed_of"}, where)
    need(sub.get("reseed_of") == suite.data.get("reseed_of"), where,
         "a re-seeding (it has reseed_of): it belongs in the suite's reseeds/ folder, not "
         "submissions/" if "reseed_of" in sub and "reseed_of" not in suite.data else
         "reseed_of differs from what the re-seeding was checked against")
    check_fields(sub, HEADER, where)
    if "created" in sub:
        check_created(sub["created"], where)
    need(sub["schema"] == SUBMISSION_SCHEMA, where,
         f"schema must be {SUBMISSION_SCHEMA!r} (got {short(sub['schema'])})")
    need(bool(re.fullmatch(r"[0-9a-f]{64}", sub["sha256"])), where, "sha256 must be 64 hex digits")
    got = _hash_of(lambda: content_sha256(sub), where)
    need(got == sub["sha256"], where, f"content sha256 mismatch: the file says {sub['sha256'][:12]}…, "
         f"its content hashes to {got[:12]}… (edited after submit?)")
    check_name(sub["suite"], f"{where}: suite")
    need(sub["suite"] == suite.name, where, f"suite {sub['suite']!r} is not this folder's suite {suite.name!r}")
    need(sub["suite_recipe_sha256"] == suite.recipe_sha256(), where,
         "suite recipe changed since this submission was made (suite_recipe_sha256 differs): re-run it")
    need(sub["scoring"] == scoring_entry(suite), where, "scoring differs from the suite's scoring settings")
    check_keys(sub["environment"], set(ENVIRONMENT), set(ENVIRONMENT), f"{where}: environment")
    check_fields(sub["environment"], ENVIRONMENT, f"{where}: environment")
    for i, a in enumerate(sub.get("artifacts") or []):
        check_relative_path(a, f"{where}: artifacts[{i}]")


def _check_model(sub: Mapping, suite: Suite, where: str) -> None:
    m = sub["model"]
    required = MODEL_REQUIRED | ({"provenance"} if suite.searches_lr else set())
    check_keys(m, MODEL_KEYS, required, f"{where}: model")
    check_provenance(m.get("provenance"), f"{where}: model")
    check_name(m["name"], f"{where}: model.name")
    check_name(m["adapter"], f"{where}: model.adapter")
    need(isinstance(m["config"], dict), where, "model.config must be a mapping")
    need(_hash_of(lambda: config_hash({"model": m["config"]}), where) == m["config_hash"], where,
         "model.config_hash does not match model.config")
    for k in ("description", "url"):
        need(m.get(k) is None or (isinstance(m.get(k), str) and len(m[k]) <= MAX_TEXT), where,
             f"model.{k} must be text of at most {MAX_TEXT} characters")
    check_library(m, sub["environment"]["versions"], where)
    if "shape" in m:
        shape_entry.check(m["shape"], f"{where}: model")
        shape_entry.check_suite(suite, f"{where}: model.shape")
        first = _planned(suite, m, suite.budgets[0], where)
        need(shared_model_config(first) == m["config"], where,
             "model.config is not the adapter's at model.shape (beyond the budget's sizes)")


def _planned(suite: Suite, model: Mapping, budget: Mapping, where: str) -> dict:
    """The model config of ``model.shape`` at ``budget``; one line naming ``where`` if the
    budget's S does not realise it."""
    try:
        return shape_entry.budget_model(suite, model["adapter"], budget, model["shape"])
    except ConfigError as exc:
        raise ConfigError(f"{where}: model.shape: {str(exc).replace('--shape ', '')}") from None


def _check_budget_names(sub: Mapping, suite: Suite, where: str) -> None:
    names = [b.get("name") if isinstance(b, dict) else None for b in sub["budgets"]]
    want = [b["name"] for b in suite.budgets]
    need(sorted(map(str, names)) == sorted(want), where,
         f"budgets {short(names)} do not match the suite's {short(want)}")


def _check_budget(b: Mapping, model: Mapping, suite: Suite, bw: str) -> None:
    """One budget: fields, sizes (recomputed), its config against the model's, its points."""
    result = "card" if suite.is_capacity else "score"
    check_keys(b, BUDGET_KEYS - {"score", "card"} | {result},
               BUDGET_KEYS - {"state_note", "params", "score", "card"} | {result}, bw)
    check_fields(b, BUDGET, bw)
    if not suite.is_capacity:
        check_score(b["score"], bw)
    cfg = b["config"]
    need(set(cfg) == set(SECTIONS) and all(isinstance(cfg[s], dict) for s in SECTIONS), bw,
         f"config must be a mapping with sections {', '.join(SECTIONS)}")
    need(cfg["model"].get("adapter") == model["adapter"], bw,
         f"config.model.adapter {short(cfg['model'].get('adapter'))} is not model.adapter {model['adapter']!r}")
    shape = model.get("shape")
    planned = _planned(suite, model, suite.budget(b["name"]), bw) if shape else None
    if shape:
        need(cfg["model"] == planned, bw, f"config.model is not adapter {model['adapter']}'s "
             f"at model.shape {shape['term']}={shape['value']} and this budget's S")
    else:
        need(shared_model_config(cfg["model"]) == model["config"], bw,
             "config.model differs from model.config (beyond the budget's sizes)")
    check_state(b, bw)
    want_pts = {suite.key(p) for p in suite.points() if p["budget"] == b["name"]}
    seen: set[tuple] = set()
    for j, p in enumerate(b["points"]):
        _check_point(p, b, model["adapter"], suite, f"{bw} point {j + 1}", want_pts, seen,
                     planned)
    if suite.is_capacity:
        capacity_suite.check_cells_complete(b, suite, bw)
        return
    missing = sorted(want_pts - seen)
    if missing:
        first = [p for p in suite.points() if suite.key(p) == missing[0]][0]
        raise ConfigError(f"{bw}: {len(missing)} point(s) of the suite missing, e.g. "
                          f"{suite.label(first)}")


def _check_point(p: Any, b: Mapping, adapter: str, suite: Suite, pw: str, want_pts: set,
                 seen: set, model: Mapping | None = None) -> None:
    """One point: on the grid and new (added to ``seen``), counts, hash, the suite's values
    (with ``model``, a shape's model config, in place of the budget's)."""
    check_keys(p, POINT_KEYS, POINT_REQUIRED | (PROTOCOL_KEYS if suite.searches_lr else set()), pw)
    check_fields(p, POINT, pw)
    check_protocol_fields(p, pw)
    point = {"budget": b["name"], "num_facts": p["num_facts"], "seed": p["seed"],
             **({} if suite.searches_lr else {"lr": p["lr"]})}
    key = suite.key(point)
    if suite.is_capacity:
        capacity_suite.check_point_facts(p, suite, pw)
    else:
        need(key in want_pts, pw, f"{suite.label(point)} is not a point of suite {suite.name}")
    need(key not in seen, pw, "duplicate point")
    seen.add(key)
    need(p["correct"] <= p["correct_topk"] <= p["total"], pw,
         "counts must satisfy 0 <= correct <= correct_topk <= total, total > 0")
    delta = p.get("delta") or {}
    need(isinstance(delta, dict) and set(delta) <= set(SECTIONS)
         and all(isinstance(v, dict) for v in delta.values()), pw,
         "delta must map sections to mappings")
    check_delta(delta, pw)
    full = merge_config(b["config"], delta)
    need(_hash_of(lambda: config_hash(full), pw) == p["config_hash"], pw,
         "config_hash does not match the point's config (budget config + delta)")
    bad = first_mismatch(full, suite.fixed_values(adapter, point, model))
    need(bad is None, pw, f"config does not follow the suite: {bad}")
    check_point_protocol(p, full["train"]["lr"], pw)
    check_info_bits(p, full["task"], pw)
    _check_total(p, full, pw)
    if p.get("accuracy") is not None:
        need(abs(p["accuracy"] - p["correct"] / p["total"]) < 1e-5, pw,
             "accuracy does not equal correct/total")
    if b["state_size"] is not None:
        _check_fano(p, b, suite.scoring["level"], pw)


def _check_total(p: Mapping, config: Mapping, pw: str) -> None:
    """The point's ``total`` is what a run of its config tests: its test sequences times the
    task's queries per sequence (counts multiplied alike keep the accuracy, and narrow
    every interval drawn from them)."""
    from recallbench.api.record import tested_queries

    got = tested_queries(config)
    need(got is not None, pw, "total cannot be checked: the config names no train.test_size")
    size, per = got
    need(p["total"] == size * per, pw, f"total = {short(p['total'])} is not allowed: a run of "
         f"this config tests train.test_size × queries per sequence = {size} × {per} = "
         f"{size * per} queries")


def _check_fano(p: Mapping, b: Mapping, level: float, pw: str) -> None:
    """The point's accuracy (lower confidence bound) fits in the budget's b·S state bits."""
    from recallbench.law.fit import fano_check

    chk = fano_check(p["correct"], p["total"], b["state_size"], b["state_bits"], p["info_bits"], level)
    need(not chk.impossible, pw,
         f"IMPOSSIBLE: accuracy >= {chk.accuracy_lower:.4f} at N_f={p['num_facts']} needs "
         f"{chk.implied_bits:.0f} bits, the state holds b*S = {chk.state_bits_total:.0f} "
         "(Fano bound, Lem 4.5): a leak or a bug")


def _check_scores(sub: Mapping, suite: Suite, where: str) -> None:
    """Every stored score agrees (2%) with the scorer's, recomputed from the counts (a
    capacity suite: every card with the replayed search's, ``capacity_suite.check_cards``)."""
    if suite.is_capacity:
        capacity_suite.check_cards(sub, suite, where, lambda b: point_records(
            {"budgets": [b]}))
        return
    report = score_records(point_records(sub), suite)
    for b in sub["budgets"]:
        fresh = rounded(budget_scores(report, b["config"]["model"]))
        for view in ("mean", "best"):
            stored, new = b["score"][view], fresh.get(view) or {}
            for k in sorted(set(stored) | set(new)):
                need(agrees(stored.get(k), new.get(k)), f"{where}: budget {b['name']}",
                     f"score.{view}.{k} = {short(stored.get(k))} does not match the scorer's "
                     f"{short(new.get(k))} recomputed from the counts")


def _check_all(sub: Any, suite: Suite, where: str, check_scores: bool) -> None:
    _check_header(sub, suite, where)
    _check_model(sub, suite, where)
    _check_budget_names(sub, suite, where)
    for b in sub["budgets"]:
        _check_budget(b, sub["model"], suite, f"{where}: budget {b['name']}")
    need(not sub["impossible"], where,
         "flagged impossible by the scorer (beats the Fano bound): a leak or a bug")
    if check_scores:
        _check_scores(sub, suite, where)


def check_submission(sub: Any, suite: Suite, where: str, *, check_scores: bool = True) -> list[str]:
    """Raise ConfigError on the first problem; returns notes (non-fatal remarks).

    The checks above test every field's type before using it; a value they still missed
    (a bug here, not in the file's favour) is refused in one line naming the file too.
    """
    try:
        _check_all(sub, suite, where, check_scores)
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError,
            RecursionError) as exc:
        detail = " ".join(str(exc).split())[:120]
        raise ConfigError(f"{where}: malformed submission ({type(exc).__name__}: {detail})") from None
    if not sub["environment"]["versions_consistent"]:
        return ["runs were made with different library versions"]
    return []


def validate_file(path: str | Path, suite_dir: str | Path | None = None, *,
                  check_scores: bool = True) -> tuple[dict, Suite, list[str]]:
    """Read and check one submission file; (submission, suite, notes) or ConfigError."""
    path = check_file_name(Path(path))
    where = str(path)
    if suite_dir is None:
        suite_dir = find_suite_for(path)
    else:
        sd = Path(os.path.abspath(suite_dir))
        need(Path(os.path.abspath(path)).parent == sd / SUBMISSIONS_DIR, where,
             f"not inside {sd / SUBMISSIONS_DIR}")
    need(not path.is_symlink(), where, "symbolic links are not accepted as submissions")
    need(not Path(os.path.abspath(path)).parent.is_symlink(), where,
         "the submissions folder is a symbolic link; not accepted")
    suite = load_suite(suite_dir)
    sub = read_yaml_data(path, "submission")
    notes = check_submission(sub, suite, where, check_scores=check_scores)
    return sub, suite, notes
