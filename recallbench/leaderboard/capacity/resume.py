"""``leaderboard run --from-submission FILE``: a method-2 submission's runs put back into a
result store, so that its cards' searches resume from them instead of training again.

A method-2 submission holds every run its searches made: per point the counts, the
learning-rate search, steps, costs and convergence; per budget the sizes; per file the
adapter's provenance, the library versions and the machine (``leaderboard.points``).  When
the store is gone, or a newer version of the search asks for more runs (a stricter rule,
a larger budget), the runs are rebuilt from the file and appended to the store the user
names, each marked ``imported_from`` (the file's sha256); those whose config hash the store
holds already are skipped.  ``leaderboard run`` then trains only what the search still
lacks, and ``submit`` makes the submission again from the store.

The file is checked as ``validate`` checks it, less the cards (replayed under this
version's rule a card may be unfinished: that is why one resumes).  The search replays the
same cells whatever the machine, so a resumed card is the card its runs make.

    sub = checked(path, suite)                 # ConfigError in one line if refused
    added, kept = import_runs(sub, "mamba2", store)

A re-seeding (``<suite>/reseeds/NAME.yaml``) holds its runs the same way: ``leaderboard
verify FILE --reseed --from-reseeding OLD`` puts them into the re-seeding's store first.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from recallbench.api.errors import ConfigError
from recallbench.leaderboard.capacity import method2 as v2

#: point fields a store record carries as they are (besides the counts point_records sets)
POINT_FIELDS = ("best_step", "steps_to", "lr_search", "train_s", "wall_s", "cpu_s",
                "stop_reason", "converged", "extended")


def checked(path: str | Path, suite, flag: str = "--from-submission") -> dict:
    """The submission at ``path`` once checked against ``suite`` as ``validate`` checks it,
    less the cards; a ConfigError naming ``flag`` and the file otherwise (also off a
    method-2 suite).  A re-seeding (``reseed_of``) is checked against the suite with its
    seeds, less the submission it names, which may be the one being made again."""
    from recallbench.leaderboard.capacity.reseed_docs import check_reseed_of, reseeded_suite
    from recallbench.leaderboard.validate import check_submission
    from recallbench.leaderboard.yaml_io import read_yaml_data

    where = f"{flag} {path}"
    if not v2.is_v2(suite):
        raise ConfigError(f"{flag}: suite {suite.name} is not a method-2 capacity "
                          "suite (capacity.method 2), whose submissions hold every run")
    if not Path(path).is_file():
        raise ConfigError(f"{where}: no such file")
    sub = read_yaml_data(Path(path), "submission")
    if isinstance(sub, dict) and "reseed_of" in sub:
        rs = check_reseed_of(sub, suite, where)
        suite = reseeded_suite(suite, rs["seeds"], rs)
    check_submission(sub, suite, where, check_scores=False)
    return sub


def rebuilt(sub: Mapping[str, Any]) -> list[dict]:
    """The submission's runs as store records, in its order: ``points.point_records`` with
    each point's protocol fields, the budget's sizes, the file's provenance, versions,
    device and threads (where one), and the card's machine as ``cpu`` (where it names one)."""
    from recallbench.leaderboard.points import point_records

    env = sub.get("environment") or {}
    one = lambda xs: xs[0] if isinstance(xs, list) and len(xs) == 1 else None  # noqa: E731
    common = {"provenance": sub["model"].get("provenance"), "versions": env.get("versions"),
              "device": one(env.get("devices")), "threads": one(env.get("threads")),
              "imported_from": {"submission_sha256": sub.get("sha256")}}
    records = iter(point_records(sub))
    out = []
    for b in sub["budgets"]:
        cpu = one((b.get("card") or {}).get("machine"))
        for p in b["points"]:
            r = next(records)
            r.update({k: p[k] for k in POINT_FIELDS if k in p})
            r.update(common, params=b.get("params"), state_note=b.get("state_note"),
                     cpu=dict(cpu) if isinstance(cpu, dict) else None)
            out.append(r)
    return out


def import_runs(sub: Mapping[str, Any], adapter: str, store: str | Path,
                shape: Mapping | None = None) -> tuple[int, int]:
    """Append :func:`rebuilt` records to ``store`` (created if absent) but those whose config
    hash it holds; (added, already there).  Refused in one line when the file is another
    adapter's or another shape's than the run's."""
    from recallbench.runs.store import Store

    theirs = sub["model"].get("adapter")
    if theirs != adapter:
        raise ConfigError(f"--from-submission: the file holds adapter {theirs}'s runs, not "
                          f"--adapter {adapter}'s")
    if (sub["model"].get("shape") or None) != (dict(shape) if shape else None):
        have = sub["model"].get("shape")
        raise ConfigError("--from-submission: the file's shape is "
                          + (", ".join(f"{k}={v}" for k, v in have.items()) if have
                             else "the adapter's default")
                          + "; run with the same --shape" + ("" if have else " (none)"))
    st = Store(store)
    held = set(st.read().by_hash) if st.path.is_dir() else set()
    new = [r for r in rebuilt(sub) if r["config_hash"] not in held]
    with st.open() as sink:
        for r in new:
            sink.append(r)
    return len(new), sum(len(b["points"]) for b in sub["budgets"]) - len(new)
