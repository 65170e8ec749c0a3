"""Re-seedings kept on a method-2 board: ``<suite>/reseeds/*.yaml``, checked and shown.

A re-seeding (``leaderboard verify --reseed --write FILE``) is a submission made from the
runs of disjoint seeds, with ``reseed_of: {submission_sha256, submission_seeds, seeds}``
naming the submission it re-measures, and ``budgets`` where it re-runs fewer than all its
cards (``--budget``).  It is checked as a submission to the suite with its seeds in place
of the suite's and only those budgets (every card recomputed from its points, hashes,
counts), its seeds must be disjoint from the suite's, and the submission it names must be
on the board with the seeds it names.  The board shows each re-run budget's two cards side
by side and whether their N50 ranges agree (:func:`recallbench.law.card_agreement.agreement`).

    doc = document(sub, suite, seeds=[2, 3], records=store_records)
    pairs = valid_reseeds(suite, subs)   # [(path, doc, (path, sub))]; ConfigError if refused
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

from recallbench.api.errors import ConfigError
from recallbench.law.card_agreement import agreement
from recallbench.leaderboard.checks import check_keys, need, short
from recallbench.leaderboard.suite import Suite

RESEEDS_DIR = "reseeds"
RESEED_KEYS = {"submission_sha256", "submission_seeds", "seeds"}
RESEED_OPTIONAL = {"budgets"}


def reseeded_suite(suite: Suite, seeds: Sequence[int], reseed_of: Mapping | None = None
                   ) -> Suite:
    """The suite with ``seeds`` in place of its own (its recipe hash changes with them);
    ``reseed_of`` is what a document checked against it must carry, and its ``budgets``
    (where named) the only budgets the suite keeps."""
    data = {**suite.data, "seeds": list(seeds)}
    if reseed_of is not None:
        data["reseed_of"] = dict(reseed_of)
        if "budgets" in reseed_of:
            data["budgets"] = [b for b in suite.budgets if b["name"] in reseed_of["budgets"]]
    return Suite(data, suite.dir)


def document(sub: Mapping, suite: Suite, seeds: Sequence[int], records: list[Mapping],
             budgets: Sequence[str] | None = None) -> dict:
    """The re-seeding of submission ``sub`` from store ``records`` trained with ``seeds``,
    of the cards of ``budgets`` (names; default every budget)."""
    from recallbench.leaderboard.submission import build_submission, content_sha256

    m = sub["model"]
    rs = {"submission_sha256": sub["sha256"], "submission_seeds": list(suite.seeds),
          "seeds": list(seeds)}
    if budgets is not None and set(budgets) != {b["name"] for b in suite.budgets}:
        rs["budgets"] = [b["name"] for b in suite.budgets if b["name"] in budgets]
    doc = build_submission(reseeded_suite(suite, seeds, rs), records, m["name"],
                           adapter=m["adapter"], description=m.get("description"),
                           url=m.get("url"))
    doc["reseed_of"] = rs
    doc["sha256"] = content_sha256(doc)
    return doc


def reseed_files(suite_dir: str | Path) -> list[Path]:
    d = Path(suite_dir) / RESEEDS_DIR
    return sorted(p for p in d.iterdir() if p.suffix in (".yaml", ".yml")) if d.is_dir() else []


def check_reseed_of(doc, suite: Suite, where: str) -> Mapping:
    """``doc``'s ``reseed_of`` once checked against ``suite`` (its keys, both seed lists),
    less the submission it names; a ConfigError starting with ``where`` otherwise."""
    from recallbench.leaderboard.capacity import method2
    from recallbench.leaderboard.capacity.reseed import check_seeds

    need(isinstance(doc, dict) and isinstance(doc.get("reseed_of"), dict), where,
         "not a re-seeding: it needs reseed_of {submission_sha256, submission_seeds, seeds} "
         "(made by `recallbench leaderboard verify FILE --reseed --store DIR --write FILE`)")
    need(method2.is_v2(suite), where, f"suite {suite.name} is not a method-2 capacity suite")
    rs = doc["reseed_of"]
    check_keys(rs, RESEED_KEYS | RESEED_OPTIONAL, RESEED_KEYS, f"{where}: reseed_of")
    for k in ("submission_seeds", "seeds"):
        need(isinstance(rs[k], list) and all(type(s) is int for s in rs[k]), where,
             f"reseed_of.{k} must be a list of integers (got {short(rs[k])})")
    if "budgets" in rs:
        names = [b["name"] for b in suite.budgets]
        need(isinstance(rs["budgets"], list) and rs["budgets"]
             and rs["budgets"] == [n for n in names if n in rs["budgets"]], where,
             f"reseed_of.budgets must name some of the suite's budgets ({', '.join(names)}), "
             f"each once, in that order (got {short(rs['budgets'])})")
    need(rs["submission_seeds"] == list(suite.seeds), where,
         f"reseed_of.submission_seeds {rs['submission_seeds']} are not the suite's seeds "
         f"{list(suite.seeds)}")
    try:
        check_seeds(rs["seeds"], suite, "reseed_of.seeds")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return rs


def check_document(doc, suite: Suite, subs: list[tuple[Path, Mapping]], where: str, *,
                   check_scores: bool = True) -> tuple[Path, Mapping]:
    """(file, submission) that ``doc`` re-seeds, after checking it (module doc);
    ``check_scores=False`` leaves out replaying its cards, as ``validate --no-scores`` does."""
    from recallbench.leaderboard.validate import check_submission

    rs = check_reseed_of(doc, suite, where)
    found = [(p, s) for p, s in subs if s.get("sha256") == rs["submission_sha256"]]
    need(bool(found), where, f"re-seeds submission sha256 {short(rs['submission_sha256'])}, "
         "which is not on this board (re-seed the submission as it is now)")
    path, sub = found[0]
    check_submission(doc, reseeded_suite(suite, rs["seeds"], rs), where,
                     check_scores=check_scores)
    need(doc["model"]["adapter"] == sub["model"]["adapter"]
         and doc["model"]["name"] == sub["model"]["name"], where,
         f"its model is not the one of {path.name} it names")
    return path, sub


def check_reseeds(suite: Suite, subs: list[tuple[Path, Mapping]], *,
                  check_scores: bool = True) -> list[tuple]:
    """Every re-seeding of the board: [(file, document, (file, submission), None)], or
    (file, None, None, the one-line reason) for a refused one."""
    from recallbench.leaderboard.checks import check_file_name
    from recallbench.leaderboard.yaml_io import read_yaml_data

    out = []
    for p in reseed_files(suite.dir):
        where = str(p)
        try:
            check_file_name(p)
            need(not p.is_symlink() and not Path(os.path.abspath(p)).parent.is_symlink(),
                 where, "symbolic links are not accepted")
            doc = read_yaml_data(p, "re-seeding")
            out.append((p, doc, check_document(doc, suite, subs, where,
                                               check_scores=check_scores), None))
        except ConfigError as exc:
            out.append((p, None, None, str(exc)))
    return out


def valid_reseeds(suite: Suite, subs: list[tuple[Path, Mapping]], *,
                  check_scores: bool = True) -> list[tuple]:
    """[(file, document, (file, submission))]; a ConfigError naming the first refused."""
    checked = check_reseeds(suite, subs, check_scores=check_scores)
    bad = [c for c in checked if c[3]]
    if bad:
        raise ConfigError(f"{bad[0][3]}; nothing rendered")
    return [c[:3] for c in checked]


def rows(pairs: list[tuple[Path, dict, tuple[Path, Mapping]]]) -> list[dict]:
    """One row per budget of each re-seeding: the two cards, their seeds and agreement."""
    out = []
    for path, doc, (sub_path, sub) in pairs:
        theirs = {b["name"]: b["card"] for b in sub["budgets"]}
        for b in doc["budgets"]:
            if b["name"] in theirs:
                out.append({"model": sub["model"]["name"], "budget": b["name"],
                            "file": path.name, "of": sub_path.name,
                            "seeds": [doc["reseed_of"]["submission_seeds"],
                                      doc["reseed_of"]["seeds"]],
                            "cards": [theirs[b["name"]], b["card"]],
                            "agreement": agreement(theirs[b["name"]], b["card"])})
    return out


HEAD = ("model", "budget", "submitted: seeds, N50 [95%]", "re-seeded: seeds, N50 [95%]",
        "ranges agree", "points inside the other's range")
NOTE = ("Each card here was trained again from seeds that share no run with the "
        "submission's (`recallbench leaderboard verify submissions/NAME.yaml --reseed --store "
        "DIR --write reseeds/NAME.yaml`) and is checked like a submission. Two honest 95% "
        "intervals of one quantity overlap with probability 99.4%; a point lies inside the "
        "other's interval about 83% of the time (equal widths). A bound's range is its "
        "interval, or [lo, ∞) and (0, hi] when the cells do not bracket N50.")


def _n50(seeds: list[int], card: Mapping) -> str:
    from recallbench.law.card_render import estimate
    from recallbench.leaderboard.capacity.board import bounded

    n50, status = card.get("n50"), card.get("status")
    value = estimate(n50) if status == "measured" else bounded(n50, (n50 or {}).get("bound"))
    value += " †" if status == "measured" and (card.get("simulated") or {}).get("outside") \
        else ""
    return f"{', '.join(map(str, seeds))}: {value}" + ("" if status == "measured"
                                                       else f" ({status})")


def table(rows: list[dict]) -> list[list[str]]:
    """The cells of :data:`HEAD` for :func:`rows`."""
    def yes(x):
        return "–" if x is None else ("yes" if x else "no")
    out = []
    for r in rows:
        a = r["agreement"]
        inside = ("–" if None in a["inside"] else f"{sum(map(bool, a['inside']))} of 2")
        out.append([r["model"], r["budget"], _n50(r["seeds"][0], r["cards"][0]),
                    _n50(r["seeds"][1], r["cards"][1]), yes(a["agree"]), inside])
    return out
