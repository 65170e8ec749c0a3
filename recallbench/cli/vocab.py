"""``recallbench vocab INPUT... [--out DIR]``: the slope of Φ⁻¹(accuracy) against m_V.

INPUT is a result store, a ``.jsonl`` or a ``.json`` file, as for ``recallbench score``;
each group of runs that differ only in ``task.vocab_size`` (and the seed) and span three or
more V gets its line Φ⁻¹(p) = c − s·m_V, against the theory's s = 1 and the paper's
measured 1.18–1.56 (:mod:`recallbench.law.vocab`).  Prints the tables; with ``--out`` also
writes ``DIR/vocab.json``, ``DIR/vocab.md`` and ``DIR/vocab.png``.  Exit status 0, or 2 on
bad input (one line).
"""
from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("inputs", nargs="+", help="result stores, .jsonl or .json files")
    p.add_argument("--out", help="directory for vocab.json, vocab.md and vocab.png (created if missing)")
    p.add_argument("--level", type=float, default=0.95, help="interval level in (0, 1) (default 0.95)")
    p.add_argument("--include-unconverged", action="store_true",
                   help="also use runs cut by max_steps while still improving (left out by "
                        "default, as by recallbench score)")


def _fit_text(f) -> str:
    if f is None:
        return "fewer than 3 usable cells |  |  |"
    lo, hi = f["slope_ci"]
    return f"{f['slope']:.2f} [{lo:.2f}, {hi:.2f}] | {f['intercept']:.2f} | {f['cells']} |"


def to_markdown(res: dict) -> str:
    from recallbench.law import vocab

    lo, hi = res["paper_slope"]
    lines = [f"s in Φ⁻¹(accuracy) = c − s·m_V, with its {res['level']:.0%} interval; theory s = 1, "
             f"the paper measured {lo}–{hi}. Cells used: above the guess level at 95% and below "
             f"{res['ceiling']}. Runs left out: {res['skipped']['unconverged']} cut by max_steps "
             f"while improving, {res['skipped']['failed']} failed.", "",
             "| group | reading | s [interval] | c | cells | theory c (1/σ) | eq. 19 s |",
             "|---|---|---|---|---|---|---|"]
    for g in res["groups"]:
        th = g["theory"]
        for name, label in (("best", "best of seeds"), ("pooled", "seeds pooled"),
                            ("best_guess_aware", "best, against the guess"),
                            ("pooled_guess_aware", "pooled, against the guess")):
            lines.append(f"| {vocab.group_title(g)} | {label} | {_fit_text(g['fits'][name])} "
                         f"{'' if th is None else format(th['intercept'], '.2f')} | "
                         f"{'' if th is None else format(th['eq19_slope'], '.2f')} |")
    common = res.get("common")
    if common is not None:
        lo_c, hi_c = common["slope_ci"]
        lines += ["", f"One slope for all {common['groups']} groups (best of seeds, each group its "
                  f"own intercept): s = {common['slope']:.2f} [{lo_c:.2f}, {hi_c:.2f}] on "
                  f"{common['cells']} cells."]
    lines += ["", "| group | V | m_V | accuracy per seed | best | guess | used |",
              "|---|---|---|---|---|---|---|"]
    for g in res["groups"]:
        for c in g["cells"]:
            accs = ", ".join(f"{a:.4f}" for a in c["accuracies"])
            lines.append(f"| {vocab.group_title(g)} | {c['vocab_size']} | {c['m_v']:.3f} | {accs} | "
                         f"{max(c['accuracies']):.4f} | {c.get('guess', float('nan')):.4f} | "
                         f"{c.get('why_left_out', 'yes')} |")
    return "\n".join(lines) + "\n"


def command(args) -> int:
    from recallbench.cli.study import report
    from recallbench.law import vocab

    return report(args, "vocab", lambda records: vocab.analyse(
        records, level=args.level, include_unconverged=args.include_unconverged),
        to_markdown, figure=vocab.write_figure)
