"""recallbench.law.vocab and ``recallbench vocab``: the slope of Φ⁻¹(p) against m_V.

Data are drawn from a known line Φ⁻¹(p) = c − s·m_V (binomial counts on whole sequences),
so the fit must find s, and its interval must cover s about as often as it says.  Eq. 19's
exact Gaussian model, computed by quadrature, is the independent reference for the theory
column: its slope over V = 128-8192 sits below eq. 20's 1.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import special

from recallbench.law import theory, vocab

VOCABS = (128, 256, 512, 1024, 2048, 4096, 8192)


def _records(slope, intercept, *, seeds=2, sequences=1024, num_facts=16, d_model=32,
             rng=None, vocabs=VOCABS, p_of=None):
    """Records of linear-mamba runs on MQAR whose accuracy is Φ(c − s·m_V) (or ``p_of(V)``):
    each sequence's queries are all right or all wrong (the worst design effect)."""
    rng = rng or np.random.default_rng(0)
    out = []
    for v in vocabs:
        p = p_of(v) if p_of else float(special.ndtr(intercept - slope * float(theory.m_v(v))))
        for seed in range(seeds):
            right = int(rng.binomial(sequences, p))
            cfg = {"task": {"name": "mqar", "vocab_size": v, "seq_len": 4 * num_facts,
                            "num_facts": num_facts},
                   "model": {"adapter": "linear-mamba", "d_model": d_model, "d_state": 8,
                             "n_layers": 1},
                   "train": {"lr": 0.01, "seed": seed}}
            out.append({"status": "ok", "config": cfg, "config_hash": f"{d_model}-{v}-{seed}",
                        "correct": right * num_facts, "total": sequences * num_facts,
                        "converged": True, "stop_reason": "plateau"})
    return out


@pytest.mark.parametrize("slope", [1.0, 1.4])
def test_fit_recovers_the_generating_slope(slope):
    res = vocab.analyse(_records(slope, 4.2, rng=np.random.default_rng(1)))
    (group,) = res["groups"]
    fit = group["fits"]["pooled"]
    lo, hi = fit["slope_ci"]
    assert lo < slope < hi, fit
    assert abs(fit["slope"] - slope) < 0.1, fit
    assert fit["cells"] == len(VOCABS)
    if slope == 1.4:
        assert lo > 1.0, "the paper's steeper slope must be told apart from the theory's 1"


def test_interval_covers_the_true_slope_at_its_level():
    rng = np.random.default_rng(7)
    covered = 0
    trials = 120
    for _ in range(trials):
        fit = vocab.analyse(_records(1.3, 4.0, rng=rng, sequences=512))["groups"][0]["fits"]["pooled"]
        covered += fit["slope_ci"][0] < 1.3 < fit["slope_ci"][1]
    # whole-sequence outcomes are exactly what the sequence count assumes: nominal 95%
    assert 0.88 <= covered / trials <= 1.0, covered


def test_eq19_slope_is_below_eq20s_one_and_the_fit_finds_it():
    inv = float(theory.inverse_sigma(16, 32, 8, 1.25))
    exact = {v: float(theory.recall_from_inverse_sigma(inv, v, "eq19")) for v in VOCABS}
    res = vocab.analyse(_records(None, None, sequences=200_000, p_of=exact.get,
                                 rng=np.random.default_rng(3)))
    (group,) = res["groups"]
    th = group["theory"]
    assert th["a"] == 1.25 and th["intercept"] == pytest.approx(inv)
    assert 0.85 < th["eq19_slope"] < 0.97, th
    fit = group["fits"]["pooled"]
    assert fit["slope"] == pytest.approx(th["eq19_slope"], abs=0.02)
    assert fit["slope_ci"][1] < vocab.PAPER_SLOPE[0]


def test_guess_and_ceiling_cells_are_left_out_with_why():
    levels = {128: 0.999, 256: 0.97, 512: 0.9, 1024: 0.8, 2048: 0.7, 4096: 0.5, 8192: 1 / 16}
    res = vocab.analyse(_records(None, None, p_of=levels.get, rng=np.random.default_rng(2)))
    cells = {c["vocab_size"]: c for c in res["groups"][0]["cells"]}
    assert "ceiling" in cells[128]["why_left_out"]
    assert "no recall" in cells[8192]["why_left_out"]
    assert all("why_left_out" not in cells[v] for v in (256, 512, 1024, 2048, 4096))
    assert res["groups"][0]["fits"]["best"]["cells"] == 5


def test_guess_aware_reading_removes_the_guess_floor():
    # accuracy = g + (1 - g)·Φ(c − m_V): the guess-aware fit sees slope 1, the raw fit less
    g = 1 / 4
    def p_of(v):
        return g + (1 - g) * float(special.ndtr(3.2 - float(theory.m_v(v))))
    res = vocab.analyse(_records(None, None, num_facts=4, sequences=100_000, p_of=p_of,
                                 rng=np.random.default_rng(4)))
    fits = res["groups"][0]["fits"]
    assert fits["pooled_guess_aware"]["slope"] == pytest.approx(1.0, abs=0.03)
    assert fits["pooled"]["slope"] < 0.9


def test_common_slope_pools_groups_with_their_own_intercepts():
    rng = np.random.default_rng(5)
    recs = (_records(1.3, 4.5, num_facts=8, rng=rng) + _records(1.3, 3.5, num_facts=16, rng=rng)
            + _records(1.3, 2.8, num_facts=32, rng=rng))
    res = vocab.analyse(recs)
    common = res["common"]
    assert common["groups"] == 3
    assert common["slope_ci"][0] < 1.3 < common["slope_ci"][1]
    widths = [g["fits"]["best"]["slope_ci"][1] - g["fits"]["best"]["slope_ci"][0]
              for g in res["groups"]]
    assert common["slope_ci"][1] - common["slope_ci"][0] < min(widths)
    assert sorted(common["intercepts"].values()) == pytest.approx([2.8, 3.5, 4.5], abs=0.2)
    assert vocab.analyse(_records(1.3, 4.5))["common"] is None  # one group: nothing to pool


def test_groups_split_by_model_and_need_three_vocabularies():
    recs = _records(1.0, 4.0) + _records(1.0, 3.0, d_model=16)
    res = vocab.analyse(recs)
    assert sorted(g["model"]["d_model"] for g in res["groups"]) == [16, 32]
    with pytest.raises(ValueError, match="3 or more vocabularies"):
        vocab.analyse(_records(1.0, 4.0, vocabs=(128, 256)))


def test_unconverged_runs_are_left_out_unless_asked():
    recs = _records(1.0, 4.0)
    for r in recs[:2]:
        r["converged"] = False
    res = vocab.analyse(recs)
    assert res["skipped"]["unconverged"] == 2
    assert [c["vocab_size"] for c in res["groups"][0]["cells"]] == list(VOCABS[1:])
    assert vocab.analyse(recs, include_unconverged=True)["skipped"]["unconverged"] == 0


def test_cli_writes_report_and_refuses_bad_input(tmp_path, cli):
    store = tmp_path / "runs.jsonl"
    store.write_text("".join(json.dumps({**r, "schema": "recallbench.result/1",
                                         "accuracy": r["correct"] / r["total"]}) + "\n"
                             for r in _records(1.2, 4.0)))
    rc, out, err = cli("vocab", str(store), "--out", "report")
    assert rc == 0, err
    assert "best of seeds" in out
    report = tmp_path / "report"
    assert {p.name for p in report.iterdir()} == {"vocab.json", "vocab.md", "vocab.png"}
    saved = json.loads((report / "vocab.json").read_text())
    assert saved["groups"][0]["fits"]["best"]["cells"] == len(VOCABS)
    rc, out, err = cli("vocab", str(store), "--level", "1.5")
    assert rc == 2 and err.strip().count("\n") == 0
    assert "--level 1.5 is not allowed" in err
    rc, out, err = cli("vocab", str(store), "--out", str(store))
    assert rc == 2 and "is a file" in err


@pytest.mark.parametrize("store, report", [("store", "."), ("designed_store", "designed")])
def test_committed_study_report_is_what_vocab_writes_from_its_store(cli, tmp_path, store, report):
    from pathlib import Path

    here = Path(__file__).resolve().parent.parent / "docs" / "results" / "vl_reduced"
    rc, _, err = cli("vocab", str(here / store), "--out", str(tmp_path / "out"))
    assert rc == 0, err
    for name in ("vocab.md", "vocab.json"):
        assert (tmp_path / "out" / name).read_bytes() == (here / report / name).read_bytes(), name
