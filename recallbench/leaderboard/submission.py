"""Building a submission from a result store's records, and writing it.

A submission (``leaderboards/<suite>/submissions/<name>.yaml``, schema
``recallbench.submission/1``) is data: the model, its per-point counts, the scorer's
fitted effective state, capacity and Fano ratio per budget, the environment, and a
``sha256`` over the canonical JSON of everything else (an integrity check against
accidental or careless edits, not a signature).  Each point also carries the training
protocol's facts from its record: the learning rate kept (``lr``) and the search that
chose it (``lr_search``), ``converged``, ``stop_reason`` and ``steps_to``; the model
carries the adapter's ``provenance``.  Each point carries its ``config_hash``;
the full config of a point is its budget's ``config`` updated with the point's ``delta``
(per section), and the hash is recomputed from it on validation.
"""
from __future__ import annotations

import copy
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from recallbench.api.canonical import SECTIONS, canonical_json, config_hash, sha256_of
from recallbench.api.errors import ConfigError
from recallbench.api.registry import ADAPTERS
from recallbench.leaderboard.checks import check_name, is_count, is_num, need, short
from recallbench.leaderboard.points import (check_delta, config_delta, first_mismatch,
                                            shared_model_config)
from recallbench.leaderboard.protocol import check_point_protocol
from recallbench.leaderboard.recompute import expected_state
from recallbench.leaderboard.schema import POINT, check_fields, check_protocol_fields, check_provenance
from recallbench.leaderboard.grid.scoring import budget_scores, score_records, scoring_entry
from recallbench.leaderboard.points import point_records, rounded
from recallbench.leaderboard.suite import Suite
from recallbench.leaderboard.yaml_io import MAX_BYTES, dump_yaml

SUBMISSION_SCHEMA = "recallbench.submission/1"
POINT_COUNTS = ("correct", "total", "correct_topk")
IMPOSSIBLE_KEYS = ("d_model", "d_state", "n_layers", "num_facts", "config_hash", "implied_bits",
                   "state_bits_total")


def content_sha256(submission: Mapping) -> str:
    """sha256 of the canonical JSON of a submission without its ``sha256`` field."""
    body = {k: v for k, v in submission.items() if k != "sha256"}
    try:
        return sha256_of(body)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"submission holds a value that is not plain data ({exc})") from None


def _library(adapter: str, versions: Mapping) -> dict:
    """The distribution whose code runs the adapter, and its version from the records."""
    try:
        cls = ADAPTERS.get(adapter)
    except ConfigError:  # an adapter not installed here: credit recallbench
        cls = None
    lib_class = getattr(cls, "library_class", "") or ""
    dist = getattr(cls, "distribution", None) or "recallbench"
    return {"name": dist, "version": versions.get(dist), "class": lib_class or None}


def _single_adapter(records: list[Mapping]) -> str:
    adapters = sorted({(r["config"].get("model") or {}).get("adapter") for r in records} - {None})
    need(len(adapters) == 1, "submit", f"the store holds runs of {len(adapters)} adapters "
         f"({', '.join(adapters) or 'none'}): choose one with --adapter")
    return adapters[0]


def _usable(r: Mapping) -> bool:
    """An ok record whose config has the three sections and names an adapter."""
    cfg = r.get("config")
    return (r.get("status") == "ok" and isinstance(cfg, dict)
            and all(isinstance(cfg.get(s), dict) for s in SECTIONS)
            and isinstance(cfg["model"].get("adapter"), str))


def _check_record(r: Mapping) -> None:
    """A record that fills a point: hash, counts and sizes are plain, bounded values, and
    its ``total`` is what a run of its config tests (test sequences × queries per sequence)."""
    from recallbench.api.record import tested_queries

    h = r.get("config_hash")
    need(isinstance(h, str) and bool(re.fullmatch(r"[0-9a-f]{64}", h)), "submit",
         f"a record in the store has config_hash {short(h)}, not 64 hex digits")
    rw = f"submit: record {h[:12]}"
    for k in POINT_COUNTS:
        need(is_count(r.get(k)), rw, f"{k} = {short(r.get(k))} is not an integer count")
    need(0 <= r["correct"] <= r["correct_topk"] <= r["total"] and r["total"] > 0, rw,
         "counts must satisfy 0 <= correct <= correct_topk <= total, total > 0")
    got = tested_queries(r["config"])
    if got is not None:
        size, per = got
        need(r["total"] == size * per, rw, f"total = {r['total']} is not what a run of its "
             f"config tests, train.test_size × queries per sequence = {size} × {per} = "
             f"{size * per}: an impossible record; remove it from the store")
    need(is_num(r.get("info_bits")) and 0 < r["info_bits"] <= 1e9, rw,
         f"info_bits = {short(r.get('info_bits'))} is not a number in (0, 1e9]")
    need(r.get("state_size") is None or is_count(r.get("state_size"), 1), rw,
         f"state_size = {short(r.get('state_size'))} is not a positive integer or null")
    for k in ("steps", "best_step", "params"):
        need(r.get(k) is None or is_count(r.get(k)), rw, f"{k} = {short(r.get(k))} is not a count")
    for k in ("train_s", "wall_s", "cpu_s"):
        need(r.get(k) is None or (is_num(r.get(k)) and r[k] >= 0), rw,
             f"{k} = {short(r.get(k))} is not a finite number >= 0")
    need(r.get("threads") is None or is_count(r.get("threads"), 1), rw,
         f"threads = {short(r.get('threads'))} is not a positive integer or null")
    v = r.get("versions")
    need(v is None or (isinstance(v, dict) and all(isinstance(x, str) and len(x) <= 200
                                                   for kv in v.items() for x in kv)), rw,
         "versions must map distribution names to version texts")


def match_points(suite: Suite, records: Iterable[Mapping], adapter: str | None) -> tuple[str, dict]:
    """(adapter, {point key: record}) of the records that fill the suite's grid."""
    recs = [r for r in records if isinstance(r, dict) and _usable(r)]
    if adapter is None:
        adapter = _single_adapter(recs)
    by_point: dict[tuple, dict[str, Mapping]] = {}
    for r in recs:
        if (r["config"].get("model") or {}).get("adapter") != adapter:
            continue
        for p in suite.points():
            if first_mismatch(r["config"], suite.fixed_values(adapter, p)) is None:
                _check_record(r)
                by_point.setdefault(suite.key(p), {})[r.get("config_hash")] = r  # last wins
                break
    missing = [p for p in suite.points() if suite.key(p) not in by_point]
    if missing:
        raise ConfigError(f"submit: the store lacks {len(missing)} of {len(suite.points())} points "
                          f"of suite {suite.name} for adapter {adapter}, e.g. budget "
                          f"{suite.label(missing[0])} (run `recallbench leaderboard run --suite "
                          f"{suite.dir} --adapter {adapter} --store ...`)")
    out = {}
    for key, found in by_point.items():
        if len(found) > 1:
            raise ConfigError(f"submit: {len(found)} different runs fill point {key} "
                              f"(configs {', '.join(h[:12] for h in found)}); keep one model "
                              "config per store")
        out[key] = next(iter(found.values()))
    return adapter, out


def _point_entry(p: Mapping, r: Mapping, base: Mapping) -> dict:
    """One point of a budget: its counts, the protocol's facts (the lr kept, the search,
    convergence), and its config as a delta from ``base``; checked as validate checks it."""
    rw = f"submit: run {str(r.get('config_hash'))[:12]}"
    delta = config_delta(base, r["config"])
    check_delta(delta, rw)
    entry = {"num_facts": p["num_facts"], "lr": p["lr"] if "lr" in p else r.get("lr"),
             "seed": p["seed"], "config_hash": r["config_hash"], "delta": delta,
             "correct": r["correct"], "total": r["total"], "correct_topk": r["correct_topk"],
             "accuracy": rounded(r["correct"] / r["total"]),
             "info_bits": rounded(r.get("info_bits"), 12),
             "steps": r.get("steps"), "best_step": r.get("best_step"),
             "converged": bool(r.get("converged")), "stop_reason": r.get("stop_reason"),
             "steps_to": r.get("steps_to"), "lr_search": r.get("lr_search"),
             "train_s": r.get("train_s"), "wall_s": r.get("wall_s"),
             **({"extended": int(r.get("extended") or 0)} if "extended" in r else {}),
             **({"cpu_s": r["cpu_s"]} if r.get("cpu_s") is not None else {})}
    check_fields(entry, POINT, rw)
    check_protocol_fields(entry, rw)
    check_point_protocol(entry, r["config"]["train"].get("lr"), rw)
    return entry


def _budget_entry(b: Mapping, pts: list[tuple[Mapping, Mapping]]) -> dict:
    """One budget from its (point, record) pairs; its config is the first record's."""
    base = copy.deepcopy(pts[0][1]["config"])
    sizes = {r.get("state_size") for _, r in pts}
    need(len(sizes) == 1, "submit", f"budget {b['name']}: runs report different state sizes {sizes}")
    points = [_point_entry(p, r, base) for p, r in pts]
    first = pts[0][1]
    state_size, state_bits = expected_state(base["model"], f"submit: budget {b['name']}")
    need(first.get("state_size") == state_size, f"submit: budget {b['name']}",
         f"the runs report state_size {short(first.get('state_size'))}, the adapter computes "
         f"{state_size} for this config")
    note = first.get("state_note")
    return {"name": b["name"], "state_size": state_size, "state_bits": state_bits,
            "state_note": note if isinstance(note, str) else None,
            "params": first.get("params"), "config": base, "points": points}


def _add_scores(sub: dict, suite: Suite) -> None:
    """Score the submission's counts: per-budget scores, settings, impossible points (a
    capacity suite's budgets carry their cards instead of scores)."""
    if suite.is_capacity:
        sub["scoring"] = scoring_entry(suite)
        sub["impossible"] = []  # validate checks each point against the Fano bound
        return
    report = score_records(point_records(sub), suite)
    for bsub in sub["budgets"]:
        bsub["score"] = rounded(budget_scores(report, bsub["config"]["model"]))
    sub["scoring"] = scoring_entry(suite)
    sub["impossible"] = [{k: i.get(k) for k in IMPOSSIBLE_KEYS} for i in report.get("impossible", [])]


def _provenance(chosen: list[Mapping]) -> dict | None:
    """The adapter's provenance, the same in every run (null where the records lack it)."""
    found = {canonical_json(r.get("provenance")) for r in chosen}
    need(len(found) == 1, "submit", f"the runs come from {len(found)} different adapter sources "
         "(their provenance differs: another version or edited code); re-run the suite with one")
    prov = chosen[0].get("provenance")
    check_provenance(prov, "submit: the runs' model")
    return copy.deepcopy(prov)


def _environment(chosen: list[Mapping], versions: Mapping) -> dict:
    """Library versions (and whether all runs agree), devices, threads, total wall time."""
    vset = {canonical_json(r.get("versions") or {}) for r in chosen}
    return {"versions": versions, "versions_consistent": len(vset) == 1,
            "devices": sorted({str(r.get("device")) for r in chosen}),
            "threads": sorted({r.get("threads") for r in chosen if r.get("threads") is not None}),
            "python_platform": sys.platform,
            "wall_s_total": rounded(sum(float(r.get("wall_s") or 0) for r in chosen), 6)}


def build_submission(suite: Suite, records: Iterable[Mapping], model_name: str, *,
                     adapter: str | None = None, description: str | None = None,
                     url: str | None = None, shape: Mapping | None = None) -> dict:
    """A submission dict from result records that fill the suite's grid for one adapter
    (a method-2 capacity suite: at ``shape``, ``capacity.shape_entry``, where given)."""
    check_name(model_name, "--model-name")
    if shape:
        from recallbench.leaderboard.capacity.shape_entry import check_suite

        check_suite(suite, "submit: --shape")
    if suite.is_capacity:
        from recallbench.leaderboard.capacity.suite import capacity_points

        records = [r for r in records if isinstance(r, dict) and _usable(r)]
        adapter = adapter or _single_adapter(records)
        records = [r for r in records if r["config"]["model"].get("adapter") == adapter]
        for r in records:
            _check_record(r)
        found = capacity_points(suite, records, adapter, shape)
        chosen = [r for _, pairs, _ in found for _, r in pairs]
        budgets = [{**_budget_entry(b, pairs), "card": card} for b, pairs, card in found]
    else:
        adapter, matched = match_points(suite, records, adapter)
        chosen = [matched[suite.key(p)] for p in suite.points()]
        budgets = [_budget_entry(b, [(p, matched[suite.key(p)]) for p in suite.points()
                                     if p["budget"] == b["name"]]) for b in suite.budgets]
    versions = dict(chosen[0].get("versions") or {})
    model_cfg = shared_model_config(budgets[0]["config"]["model"])
    sub: dict[str, Any] = {
        "schema": SUBMISSION_SCHEMA,
        "suite": suite.name,
        "suite_recipe_sha256": suite.recipe_sha256(),
        "model": {"name": model_name, "adapter": adapter, "description": description,
                  "url": url, "library": _library(adapter, versions),
                  "provenance": _provenance(chosen),
                  "config": model_cfg, "config_hash": config_hash({"model": model_cfg}),
                  **({"shape": dict(shape)} if shape else {})},
        "budgets": budgets,
    }
    _add_scores(sub, suite)
    sub["environment"] = _environment(chosen, versions)
    sub["created"] = time.strftime("%Y-%m-%d", time.gmtime())
    sub["sha256"] = content_sha256(sub)
    return sub


def write_submission(sub: Mapping, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = ("# recallbench leaderboard submission (data only; validate with\n"
            "# `recallbench leaderboard validate FILE`). Do not edit by hand: the sha256 covers it.\n"
            + dump_yaml(dict(sub)))
    if len(text.encode()) > MAX_BYTES:
        raise ConfigError(f"submission would be {len(text.encode())} bytes, over the {MAX_BYTES}-byte limit")
    path.write_text(text, encoding="utf-8")
    return path
