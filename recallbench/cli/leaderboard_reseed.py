"""``recallbench leaderboard verify`` (``--reseed`` too) and the re-seedings ``validate`` checks.

``verify_command``: a submission's sampled points re-run, or its cards re-seeded.
``reseed_command``: each card of a method-2 submission re-run from disjoint seeds
(:mod:`recallbench.leaderboard.capacity.reseed`), printed with its agreement, exit 1 when a
card disagrees; with ``--write FILE`` kept as a re-seeding document
(:mod:`recallbench.leaderboard.capacity.reseed_docs`).  ``validate_reseeds``: the
re-seedings of each suite folder ``validate`` is given.
"""
from __future__ import annotations

import os
from pathlib import Path

from recallbench.api.errors import ConfigError


def validate_reseeds(files: list[str], entries, *, check_scores: bool = True) -> list[str]:
    """The re-seedings of each suite folder named (``<suite>/reseeds/``): printed, and the
    reasons of those refused; their cards replayed unless ``check_scores=False``."""
    from recallbench import leaderboard as lb
    from recallbench.leaderboard.capacity.reseed_docs import check_reseeds

    errors = []
    for d in (Path(f) for f in files):
        if not (d.is_dir() and (d / lb.SUITE_FILE).is_file()):
            continue
        suite = lb.load_suite(d)
        subs = [(e.path, e.sub) for e in entries if e.sub is not None
                and Path(os.path.abspath(e.path)).parent.parent == Path(os.path.abspath(d))]
        for path, doc, target, error in check_reseeds(suite, subs, check_scores=check_scores):
            if error:
                print(f"INVALID {error}")
                errors.append(error)
            else:
                print(f"ok {path}: re-seeding of {target[0].name} with seeds "
                      f"{', '.join(map(str, doc['reseed_of']['seeds']))}")
    return errors


def verify_command(args) -> int:
    """``leaderboard verify FILE``: sampled points re-run, or with ``--reseed`` each card
    re-run from disjoint seeds (``reseed_command``)."""
    from recallbench import leaderboard as lb

    if args.sample < 1:
        raise ConfigError(f"--sample {args.sample}: must be >= 1")
    if args.seed is not None and not 0 <= args.seed < 2 ** 32:
        raise ConfigError(f"--seed {args.seed}: must be in [0, 2**32)")
    from recallbench.leaderboard.validate import find_suite_for

    if Path(args.file).is_dir():
        raise ConfigError(f"{args.file}: a folder; verify takes one submission .yaml file")
    # everything but the cards first, so that a mistake in the other arguments is said
    # before the cards are replayed (a minute for a noisy layer's)
    (entry,) = lb.check_files([args.file], check_scores=False)
    if entry.error:
        raise ConfigError(entry.error)
    suite = lb.load_suite(find_suite_for(entry.path))
    if args.reseed or args.seeds or args.store or args.write or args.from_reseeding \
            or args.budget:
        return reseed_command(args, entry, suite)
    lb.validate_file(entry.path)  # the cards, replayed
    rows = lb.verify(entry.sub, suite, args.sample, seed=args.seed, device=args.device,
                     log=lambda m: print(m, flush=True))
    bad = [r for r in rows if not r["ok"]]
    if bad:
        print(f"verify FAILED: {len(bad)} of {len(rows)} re-run point(s) disagree beyond "
              f"the suite's tolerance {suite.tolerance}")
        return 1
    print(f"verify ok: {len(rows)} re-run point(s) agree within {suite.tolerance}")
    return 0


def reseed_command(args, entry, suite) -> int:
    """``verify --reseed``: each card re-run from disjoint seeds (``leaderboard.reseed``),
    with ``--write`` kept as a re-seeding document (``capacity.reseed_docs``).  ``entry``
    is checked less its cards; they are replayed once the arguments are checked."""
    from recallbench import leaderboard as lb
    from recallbench.leaderboard.capacity.reseed import check_budgets, check_reseedable, reseed

    if not args.reseed:
        raise ConfigError("--seeds, --store, --budget, --write and --from-reseeding go with "
                          "--reseed")
    if not args.store:
        raise ConfigError("--reseed needs --store DIR: the result store the re-seeded runs go "
                          "to (nothing trained is lost; a rerun resumes)")
    if not 1 <= args.workers <= (os.cpu_count() or 1):
        raise ConfigError(f"--workers {args.workers} is not allowed: must be in "
                          f"[1, {os.cpu_count() or 1}]")
    seeds = _seed_list(args.seeds) if args.seeds else None
    check_reseedable(suite, seeds)
    budgets = check_budgets(args.budget, entry.sub) if args.budget else None
    out = Path(args.write) if args.write else None
    if out is not None:  # before the work, not after it
        from recallbench.cli.main import check_writable
        from recallbench.leaderboard.checks import check_file_name

        if out.exists() or out.is_symlink():
            raise ConfigError(f"--write {out}: exists; remove it first or name another file")
        try:
            check_file_name(out)
        except ConfigError as exc:
            raise ConfigError(f"--write {exc}") from None
        check_writable(out, "--write")
    earlier = _reseeding(args, suite, seeds) if args.from_reseeding else None
    lb.validate_file(entry.path)  # the cards, replayed
    if earlier is not None:
        seeds = _import(args, entry.sub, earlier)
    rows = reseed(entry.sub, suite, args.store, seeds=seeds, budgets=budgets,
                  workers=args.workers, log=lambda m: print(m, flush=True))
    if out is not None:
        from recallbench.leaderboard.capacity.reseed_docs import document
        from recallbench.leaderboard.submission import write_submission

        doc = document(entry.sub, suite, rows[0]["seeds"][1], lb.load_store_records([args.store]),
                       budgets)
        write_submission(doc, out)
        print(f"re-seeding written to {out} (sha256 {doc['sha256'][:12]}…)")
    bad = [r for r in rows if r["agreement"]["agree"] is False]
    print(f"reseed {'FAILED' if bad else 'ok'}: {len(rows) - len(bad)} of {len(rows)} card(s) "
          "agree with the submission's (N50 ranges overlap)")
    return 1 if bad else 0


def _reseeding(args, suite, seeds) -> dict:
    """--from-reseeding: the earlier re-seeding, checked (less its cards) and its seeds
    matched against --seeds."""
    from recallbench.leaderboard.capacity.resume import checked

    doc = checked(args.from_reseeding, suite, "--from-reseeding")
    theirs = doc.get("reseed_of")
    if not isinstance(theirs, dict):
        raise ConfigError(f"--from-reseeding {args.from_reseeding}: not a re-seeding (it has "
                          "no reseed_of); a submission's runs go in with `leaderboard run "
                          "--from-submission`")
    if seeds is not None and list(seeds) != theirs["seeds"]:
        raise ConfigError(f"--seeds {','.join(map(str, seeds))}: the re-seeding was made with "
                          f"seeds {','.join(map(str, theirs['seeds']))}; leave --seeds out")
    return doc


def _import(args, sub, doc) -> list[int]:
    """The earlier re-seeding's runs put into --store; the seeds to use (its own)."""
    from recallbench.leaderboard.capacity.resume import import_runs

    theirs = doc["reseed_of"]
    added, held = import_runs(doc, sub["model"]["adapter"], args.store)
    print(f"from {args.from_reseeding}: {added} run(s) put into {args.store}"
          + (f", {held} already there" if held else ""), flush=True)
    return list(theirs["seeds"])


def _seed_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--seeds {text}: must be integers separated by commas, "
                          "such as 2,3") from None
