"""Top-1 against top-k thresholds (recallbench.law.topk, `recallbench topk`)."""
import json

import numpy as np
import pytest
from scipy import stats

from recallbench.law import theory, topk

XS = np.linspace(0.5, 4.5, 13)


def _simulated_counts(vocab_size, top_k, trials, seed):
    """Hits of the Gaussian model drawn directly: the right read-out ~ N(x, 1), the V − 1
    wrong ones ~ N(0, 1); a hit when fewer than k wrong ones exceed the right one."""
    rng = np.random.default_rng(seed)
    hits = []
    for x in XS:
        right = stats.norm.rvs(loc=x, size=(trials, 1), random_state=rng)
        wrong = stats.norm.rvs(size=(trials, vocab_size - 1), random_state=rng)
        hits.append(int(np.sum((wrong > right).sum(axis=1) < top_k)))
    return np.array(hits), np.full(len(XS), trials)


@pytest.mark.parametrize("top_k", [1, 5])
def test_fit_recovers_the_theory_crossing_from_simulated_gaussian_model(top_k):
    k, n = _simulated_counts(128, top_k, 3000, seed=top_k)
    f = topk.fit_threshold(k, n, XS)
    truth = topk.theory_crossing(128, top_k)
    assert f.crossing_ci[0] < truth < f.crossing_ci[1]
    assert abs(f.crossing - truth) < 0.05
    assert f.threshold == pytest.approx(f.crossing ** 2)


def test_theory_crossings_order_and_grow_like_log_v_over_k():
    c = {(v, k): topk.theory_crossing(v, k) for v in (128, 512) for k in (1, 5)}
    assert c[(128, 5)] < c[(128, 1)] < c[(512, 1)]
    # x*² ≈ 2 log(V/k) at leading order: the same additive growth for k = 1 and k = 5 ...
    d1 = c[(512, 1)] ** 2 - c[(128, 1)] ** 2
    d5 = c[(512, 5)] ** 2 - c[(128, 5)] ** 2
    assert abs(d1 - d5) < 0.3 and 2.0 < d5 < 3.2
    # ... hence a larger ratio at fixed k
    assert c[(512, 5)] ** 2 / c[(128, 5)] ** 2 > c[(512, 1)] ** 2 / c[(128, 1)] ** 2 + 0.2


def test_fit_recovers_a_known_probit_and_its_interval_covers():
    rng = np.random.default_rng(0)
    p = stats.norm.cdf(1.4 * (XS - 2.3))
    n = np.full(len(XS), 2000)
    k = stats.binom.rvs(n, p, random_state=rng)
    f = topk.fit_threshold(k, n, XS)
    assert f.crossing_ci[0] < 2.3 < f.crossing_ci[1] and f.crossing_ci[1] - f.crossing_ci[0] < 0.2
    assert f.slope == pytest.approx(1.4, rel=0.1)
    assert f.dispersion < 2.5


def test_crossing_beyond_the_data_has_an_open_interval():
    n = np.full(4, 500)
    f = topk.fit_threshold(np.array([0, 1, 0, 2]), n, np.array([0.5, 0.7, 0.9, 1.1]))
    assert f.crossing > 1.1 and f.crossing_ci[1] == np.inf


@pytest.mark.parametrize("args, match", [
    (([5, 3], [4, 4], [1.0, 2.0]), "0 <= correct <= total"),
    (([1, 3], [4, 4], [1.0, 1.0]), "2 or more distinct x"),
    (([1, 3], [4, 4], [1.0, np.nan]), "x: every value"),
])
def test_fit_threshold_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        topk.fit_threshold(*args)


def test_theory_crossing_bad_input():
    with pytest.raises(ValueError, match=r"top_k = 128 is not allowed"):
        topk.theory_crossing(128, 128)


CELLS = [(8, 2), (8, 8), (16, 4), (16, 16), (32, 4), (32, 16)]


def _records(vocabs=(128, 512), top_k=5, seed=0):
    """Records whose counts are binomial draws from the Gaussian model's curves."""
    rng = np.random.default_rng(seed)
    recs = []
    for v in vocabs:
        for d, ns in CELLS:
            x = theory.inverse_sigma(16, d, ns, topk.PAPER_A)
            p1, pk = (theory.topk_from_inverse_sigma(x, v, k) for k in (1, top_k))
            total = 16384
            c1 = int(stats.binom.rvs(total, p1, random_state=rng))
            ck = max(c1, int(stats.binom.rvs(total, pk, random_state=rng)))
            recs.append({"schema": "recallbench.result/1", "status": "ok", "config_hash": f"h{v}{d}{ns}",
                         "config": {"task": {"name": "mqar", "vocab_size": v, "seq_len": 64, "num_facts": 16},
                                    "model": {"adapter": "linear-mamba", "d_model": d, "d_state": ns,
                                              "n_layers": 1}, "train": {"top_k": top_k}},
                         "correct": c1, "correct_topk": ck, "total": total, "top_k": top_k,
                         "accuracy": c1 / total, "accuracy_topk": ck / total,
                         "converged": True, "stop_reason": "early_stop"})
    return recs


def test_study_recovers_the_generating_thresholds_and_ratios():
    res = topk.analyse(_records(), n_boot=8)
    for c in res["curves"]:
        # the probit only approximates the model's curves: a bias of ~0.5%, not zero
        assert c["fit"]["threshold"] == pytest.approx(c["theory_threshold"], rel=0.02)
        assert c["theory_gap"]["mean_abs"] < 0.02
    comp = res["comparison"]
    for m in topk.METRICS:
        assert comp[m]["ratio"] == pytest.approx(comp[m]["theory_ratio"], rel=0.03)
    assert res["verdict"].startswith("top-5's threshold grows with V more than top-1's")
    assert res["used"] == 12 and res["bootstrap"]["failed"] == 0


def test_study_leaves_out_unconverged_and_failed_runs():
    recs = _records()
    recs[0]["converged"] = False
    recs[1] = {"status": "failed", "config_hash": recs[1]["config_hash"], "error": "diverged"}
    rows, info = topk.study_rows(recs)
    assert info["used"] == 10 and info["left_out"] == {"failed": 1, "unconverged": 1, "no_topk": 0}
    assert len(rows["x"]) == 10
    rows, info = topk.study_rows(recs, include_unconverged=True)
    assert info["used"] == 11 and info["unconverged_used"] == 1 and info["left_out"]["unconverged"] == 0


@pytest.mark.parametrize("change, match", [
    (lambda r: [x for x in r if x["config"]["task"]["vocab_size"] == 128], "vocab_size: the runs have 1"),
    (lambda r: [dict(x, top_k=3) if i == 0 else x for i, x in enumerate(r)], "top_k: the runs use"),
    (lambda r: [dict(x, converged=False) for x in r], "no usable run"),
])
def test_study_bad_input(change, match):
    with pytest.raises(ValueError, match=match):
        topk.analyse(change(_records()), n_boot=0)


def _write(tmp_path, recs):
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_cli_writes_tables_and_verdict(cli, tmp_path):
    _write(tmp_path, _records())
    rc, out, err = cli("topk", "runs.jsonl", "--bootstrap", "4", "--out", "rep")
    assert rc == 0, err
    assert "**Verdict**: top-5's threshold grows with V more" in out
    data = json.loads((tmp_path / "rep" / "topk.json").read_text())
    assert data["top_k"] == 5 and len(data["curves"]) == 4
    assert (tmp_path / "rep" / "topk.md").read_text().count("| 128 |") >= 2


@pytest.mark.parametrize("args, match", [
    (("--bootstrap", "-1"), "--bootstrap -1 is not allowed"),
    (("--level", "1.5"), "--level 1.5 is not allowed"),
    (("--out", "runs.jsonl"), "is a file"),
])
def test_cli_bad_flags_one_line(cli, tmp_path, args, match):
    _write(tmp_path, _records())
    rc, out, err = cli("topk", "runs.jsonl", *args)
    assert rc == 2 and match in err and len(err.strip().splitlines()) == 1


def test_cli_one_vocabulary_is_one_line(cli, tmp_path):
    _write(tmp_path, _records(vocabs=(128,)))
    rc, out, err = cli("topk", "runs.jsonl", "--bootstrap", "0")
    assert rc == 2 and "vocab_size" in err and "exactly 2" in err
    assert len(err.strip().splitlines()) == 1
