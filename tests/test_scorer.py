"""The scorer, the report and the two CLI commands, on records simulated from the law."""
import argparse
import json
import math

import numpy as np
import pytest
from scipy import special

from recallbench.cli import score as cli_score
from recallbench.cli import theory as cli_theory
from recallbench.law import scorer
from recallbench.law import theory
from recallbench.api.errors import ConfigError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
QUERIES = 2048 * 16


def make_record(adapter, d_model, d_state, seed, p, *, vocab_size=512, num_facts=32, seq_len=128,
                state_size="linear", rng, status="ok", n_layers=1, lr=3e-3):
    cfg = {"task": {"name": "mqar", "vocab_size": vocab_size, "seq_len": seq_len,
                    "num_facts": num_facts, "power_a": 1.0, "random_non_queries": True},
           "model": {"adapter": adapter, "d_model": d_model, "d_state": d_state, "n_layers": n_layers,
                     "d_conv": 2, "n_heads": 1, "head_pattern": None, "expand": 2, "options": {}},
           "train": {"seed": seed, "max_steps": 2000, "lr": lr, "threads": 1}}
    digest = f"{adapter}-{d_model}-{d_state}-{n_layers}-{num_facts}-{seed}-{lr}"
    if status != "ok":
        return {"schema": scorer.SCHEMA, "status": "failed", "error": "diverged", "seed": seed,
                "config": cfg, "config_hash": digest}
    if state_size == "linear":
        state_size = 2 * d_model * d_state * n_layers
    k = int(rng.binomial(QUERIES, p))
    k_top = max(k, int(rng.binomial(QUERIES, min(1.0, p * 1.3))))
    return {"schema": scorer.SCHEMA, "status": "ok", "error": None, "accuracy": k / QUERIES,
            "accuracy_topk": k_top / QUERIES, "top_k": 5, "correct": k, "total": QUERIES,
            "correct_topk": k_top, "state_size": state_size, "state_note": "", "state_bits": 32,
            "params": 1000, "steps": 500, "wall_s": 1.0, "seed": seed, "converged": k / QUERIES > 0.99,
            "info_bits": num_facts * math.log2(vocab_size / 2), "config": cfg, "config_hash": digest,
            "versions": {}, "device": "cpu"}


@pytest.fixture(scope="module")
def records():
    rng = np.random.default_rng(0)
    out = []
    b = math.sqrt(2 * math.log(512))
    for d in (8, 16, 32, 64, 128):
        for n in (2, 4, 8, 16, 32):
            if n > d:
                continue
            p = float(special.ndtr(math.sqrt(n * d / (1.25 * 32 + n)) - b))
            out.append(make_record("linear-mamba", d, n, 0, p, rng=rng))
            out.append(make_record("linear-mamba", d, n, 1, 0.9 * p, rng=rng))
            # a black box that recalls like a linear reference with a quarter of its state,
            # and guesses among the context's 32 values when it does not recall
            q = 1 / 32 + (1 - 1 / 32) * theory.recall_probability(512, 32, d, n / 4, 1.25)
            out.append(make_record("gla", d, n, 0, q, rng=rng, state_size=2 * d * n))
    for d in (16, 32):
        out.append(make_record("attention", d, 1, 0, 0.999, rng=rng, state_size=None))
    out.append(make_record("linear-mamba", 8, 8, 2, 0.0, rng=rng, status="failed"))
    # leaks the answer: 16 facts over 64 values (96 bits) through 2 float32 scalars (64 bits)
    out.append(make_record("leaky", 2, 1, 0, 1.0, rng=rng, vocab_size=128, num_facts=16,
                           seq_len=64, state_size=2))
    return out


@pytest.fixture(scope="module")
def report(records):
    with pytest.warns(scorer.ScoreWarning, match="IMPOSSIBLE"):
        return scorer.score(records)


def group(report, adapter):
    return next(g for g in report["groups"] if g["model"]["adapter"] == adapter)


def test_load_records_store_jsonl_json(tmp_path, records):
    store = tmp_path / "store"
    store.mkdir()
    lines = [json.dumps(r) for r in records[:5]]
    (store / "results.jsonl").write_text("\n".join(lines) + '\n{"schema": "recallbench.res')
    with pytest.warns(scorer.ScoreWarning, match="torn"):
        got = scorer.load_records([store])
    assert got == records[:5]
    (tmp_path / "one.json").write_text(json.dumps(records[5]))
    (tmp_path / "many.json").write_text(json.dumps(records[6:8]))
    (tmp_path / "plain.jsonl").write_text("\n".join(lines[:2]) + "\n")
    got = scorer.load_records([tmp_path / "one.json", tmp_path / "many.json", tmp_path / "plain.jsonl"])
    assert got == [records[5], *records[6:8], *records[:2]]
    # a torn line anywhere (a store resumed after a torn write) is skipped, as the store does
    (tmp_path / "broken.jsonl").write_text(lines[0] + "\n{oops\n" + lines[1] + "\n")
    with pytest.warns(scorer.ScoreWarning, match="broken.jsonl:2: ignoring a torn line"):
        assert scorer.load_records(tmp_path / "broken.jsonl") == records[:2]
    with pytest.raises(ConfigError, match="does not exist"):
        scorer.load_records(tmp_path / "missing")


def test_seeds_best_and_mean(report, records):
    g = group(report, "linear-mamba")
    cell = next(c for c in g["cells"] if c["d_model"] == 64 and c["d_state"] == 16)
    runs = [r for r in records if r["config"]["model"]["adapter"] == "linear-mamba"
            and r["config"]["model"]["d_model"] == 64 and r["config"]["model"]["d_state"] == 16]
    accs = [r["correct"] / r["total"] for r in runs]
    assert cell["best"]["accuracy"] == max(accs)
    assert cell["mean"]["accuracy"] == pytest.approx(np.mean(accs))
    assert cell["mean"]["n_seeds"] == 2 and cell["mean"]["converged_rate"] == pytest.approx(
        np.mean([r["converged"] for r in runs]))
    lo, hi = cell["best"]["ci"]
    assert lo < cell["best"]["accuracy"] < hi
    assert cell["best"]["label"] == "best of seeds" and cell["mean"]["label"] == "mean over seeds"
    failed = next(c for c in g["cells"] if c["d_model"] == 8 and c["d_state"] == 8)
    assert failed["n_failed"] == 1 and failed["n_runs"] == 2


def test_collapse_and_effective_state(report):
    lin = group(report, "linear-mamba")
    col = lin["collapse"]["best"]
    assert col["a"] == pytest.approx(1.25, rel=0.1) and col["paper_a"] == 1.25
    assert col["a_ci"][0] <= col["a"] <= col["a_ci"][1]
    assert lin["collapse"]["mean"]["label"] == "mean over seeds"
    gla = group(report, "gla")
    assert gla["collapse"] is None and gla["model_kind"] is None
    ratio = gla["efficiency"]["best"]
    assert ratio["ratio"] == pytest.approx(0.25, rel=0.05)
    cfg = next(c for c in gla["configs"] if c["d_model"] == 64 and c["d_state"] == 16)
    assert cfg["best"]["n_eff"] == pytest.approx(4.0, rel=0.1)
    assert cfg["best"]["s_eff"] == pytest.approx(2 * 64 * cfg["best"]["n_eff"])
    assert cfg["best"]["ratio"] == pytest.approx(cfg["best"]["s_eff"] / (2 * 64 * 16))
    assert cfg["best"]["bits_ratio"] == pytest.approx(32 * 2 * 64 * 16 / cfg["best"]["fano_min_bits"])
    att = group(report, "attention")
    assert att["state"] == "grows with L" and att["efficiency"] is None
    for c in att["configs"]:
        assert "ratio" not in c["best"] and "bits_ratio" not in c["best"]


def test_auto_collapse_follows_the_declared_law_kind():
    # full Mamba declares law_kind "full": the paper's curve, but no automatic collapse fit;
    # a task that declares no law family gets accuracies only
    rng = np.random.default_rng(4)
    b = math.sqrt(2 * math.log(512))
    cells = [(d, n) for d in (16, 32, 64) for n in (4, 8, 16) if n <= d]
    recs = [make_record(adapter, d, n, 0, float(special.ndtr(math.sqrt(n * d / (0.625 * 32 + n)) - b)),
                        rng=rng) for adapter in ("mamba", "linear-mamba") for d, n in cells]
    black = make_record("linear-mamba", 16, 4, 0, 0.5, rng=rng)
    black["config"]["task"]["name"], black["config_hash"] = "not-a-law-task", "black-box-run"
    rep = scorer.score([*recs, black])
    mamba = group(rep, "mamba")
    assert mamba["model_kind"] == "full" and mamba["paper_a"] == 0.625
    assert mamba["collapse"] is None and mamba["efficiency"]["best"]["ratio"] > 0
    assert "paper_eq19" in mamba["cells"][0]["theory"]
    lin = next(g for g in rep["groups"] if g["model"]["adapter"] == "linear-mamba"
               and g["task"]["name"] == "mqar")
    assert lin["collapse"]["best"]["a"] == pytest.approx(0.625, rel=0.15)
    blind = next(g for g in rep["groups"] if g["task"]["name"] == "not-a-law-task")
    assert blind["model_kind"] is None and blind["collapse"] is None and "has no law" in blind["note"]
    forced = group(scorer.score(recs, collapse=True), "mamba")["collapse"]["best"]
    assert forced["paper_a"] == 0.625 and forced["a"] == pytest.approx(0.625, rel=0.15)


def test_the_laws_own_a_comes_back_from_eq19_counts(tmp_path):
    """Full-Mamba counts drawn from eq. 19 at a = 5/8 (b set by V), with the guess among the
    32 context values where it does not recall: the one-parameter a the report derives from
    S_eff/S recovers 5/8 with an interval that holds it and not the linear 5/4; a group whose
    states are not 2·D·N·Λ, whose adapter declares no law kind, or of several heads, gets
    none."""
    from recallbench.law import report as render

    rng = np.random.default_rng(7)
    cells = [(d, n) for d in (8, 16, 32) for n in (2, 4, 8) if n <= d]
    g32 = 1 / 32
    recs = [make_record("mamba", d, n, seed,
                        g32 + (1 - g32) * theory.recall_probability(512, 32, d, n, 0.625),
                        rng=rng) for d, n in cells for seed in (0,)]  # best of 1: unbiased
    (g,) = scorer.score(recs)["groups"]
    law = g["efficiency"]["best"]["law_a"]
    assert law["a"] == pytest.approx(0.625, rel=0.03) and law["form"] == "eq19"
    assert law["a_ci"][0] < 0.625 < law["a_ci"][1] < 1.25
    assert law["a"] == pytest.approx(1.25 / g["efficiency"]["best"]["ratio"])
    assert "**The law's own a** (eq. 19 with its b set by V" in render.render_markdown(
        scorer.score(recs))
    odd = [{**r, "state_size": 3 * r["state_size"]} for r in recs]
    assert "law_a" not in scorer.score(odd)["groups"][0]["efficiency"]["best"]
    for change in ({"adapter": "gla"}, {"n_heads": 4}):
        other = [{**r, "config": {**r["config"], "model": {**r["config"]["model"], **change}}}
                 for r in recs]
        assert "law_a" not in scorer.score(other)["groups"][0]["efficiency"]["best"], change


def test_impossible_is_flagged(report):
    assert len(report["impossible"]) == 1
    item = report["impossible"][0]
    assert item["implied_bits"] > item["state_bits_total"] == 64
    leaky = group(report, "leaky")
    assert any("IMPOSSIBLE" in f for f in leaky["cells"][0]["flags"])
    assert any("IMPOSSIBLE" in w for w in report["warnings"])
    honest = [c for g in report["groups"] if g["model"]["adapter"] != "leaky" for c in g["cells"]]
    assert not any(c.get("fano") and c["fano"]["impossible"] for c in honest)


def check_png(path):
    import matplotlib.image as mpimg

    data = open(path, "rb").read()
    assert data[:8] == PNG_SIGNATURE
    img = mpimg.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 200
    rgb = img[..., :3].reshape(-1, 3)
    assert rgb.std() > 0.1  # not a blank canvas
    assert len(np.unique((rgb * 255).astype(np.uint8), axis=0)) > 50


def test_write_report(tmp_path, report):
    written = scorer.write_report(report, tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "report.json").read_text(),
                     parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert doc["schema"] == "recallbench.report/1" and len(doc["groups"]) == 4
    md = (tmp_path / "out" / "report.md").read_text()
    assert "IMPOSSIBLE" in md and "| D | N |" in md and "Collapse fit" in md
    names = [p.split("/")[-1] for p in written["figures"]]
    assert any(n.startswith("heatmap_linear-mamba") for n in names)
    assert any(n.startswith("collapse_linear-mamba") for n in names)
    for path in written["figures"]:
        check_png(path)
        assert path.split("/")[-1] in md


@pytest.mark.slow
def test_drawing_leaves_the_users_matplotlib_backend_alone(tmp_path, report):
    """A notebook's backend must survive a report: figures are drawn without pyplot."""
    import os
    import subprocess
    import sys

    from recallbench.api.canonical import plain

    (tmp_path / "report.json").write_text(json.dumps(plain(report)))
    code = ("import json, sys, matplotlib; from recallbench.law import scorer; "
            "scorer.write_report(json.load(open(sys.argv[1])), sys.argv[2]); "
            "print(matplotlib.get_backend())")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "report.json"),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MPLBACKEND": "svg"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "svg"
    assert list((tmp_path / "out" / "figures").glob("*.png"))


def parse(module, argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


def test_cli_score(tmp_path, records, capsys):
    store = tmp_path / "store"
    store.mkdir()
    (store / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    out = tmp_path / "report"
    code = cli_score.command(parse(cli_score, [str(store), "--out", str(out), "--no-figures"]))
    assert code == 1  # the leaky record
    err = capsys.readouterr().err
    assert "IMPOSSIBLE" in err and "warning:" in err
    assert (out / "report.json").is_file() and (out / "report.md").is_file()
    honest = [r for r in records if r["config"]["model"]["adapter"] != "leaky"]
    (tmp_path / "honest.json").write_text(json.dumps(honest))
    code = cli_score.command(parse(cli_score, [str(tmp_path / "honest.json"), "--out", str(out),
                                               "--no-figures", "--collapse", "never"]))
    assert code == 0
    assert all(g["collapse"] is None for g in json.loads((out / "report.json").read_text())["groups"])


def test_cli_theory_text_and_json(capsys):
    argv = ["--task", "mqar", "--vocab-size", "1024", "--num-facts", "16", "--d-model", "32",
            "--d-state", "16", "--a", "1"]
    assert cli_theory.command(parse(cli_theory, argv)) == 0
    text = capsys.readouterr().out
    assert "0.762" in text and "0.609" in text  # docs/theory.md, "Eq. 19 and eq. 20"
    assert cli_theory.command(parse(cli_theory, argv + ["--json", "--target", "0.99"])) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["recall"] == pytest.approx(theory.recall_probability(1024, 16, 32, 16, 1.0))
    assert doc["recall_forms"]["rem43"] == pytest.approx(0.609, abs=0.002)
    req = doc["requirement"]
    assert req["min_d_state"] is None  # D = 32 is too narrow for 0.99: unbounded
    assert req["min_d_model"] > 32
    args = parse(cli_theory, ["--task", "ar", "--vocab-size", "512", "--num-facts", "16",
                              "--model-kind", "designed", "--target", "0.9", "--d-model", "256", "--json"])
    assert cli_theory.command(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["a"] == 2.0
    n = doc["requirement"]["min_d_state"]
    assert theory.recall_probability(512, 16, 256, n, 2.0) == pytest.approx(0.9, abs=1e-6)


def test_cli_theory_takes_the_family_the_task_declares(capsys):
    base = ["--vocab-size", "512", "--num-facts", "16", "--d-model", "64", "--d-state", "16",
            "--model-kind", "designed", "--json"]
    docs = {}
    for task in ("mqar", "mqar-repeated-keys"):
        assert cli_theory.command(parse(cli_theory, ["--task", task, *base])) == 0
        docs[task] = json.loads(capsys.readouterr().out)
    plain_mqar, repeated = docs["mqar"], docs["mqar-repeated-keys"]
    assert plain_mqar["task"] == "mqar" and repeated["task"] == "mqar-repeated-keys"
    assert plain_mqar["a"] == repeated["a"] == 3.0 and plain_mqar["seq_len"] == 64
    # repeated keys: the task's own N_k (2) and its L rule, 2·N_f·(N_k + 1)
    assert repeated["num_key_repeats"] == 2 and repeated["seq_len"] == 96
    # the query-position average follows MQAR's own query slots only
    assert "designed_position_average" in plain_mqar and "designed_position_average" not in repeated
    with pytest.raises(ConfigError, match=r"^--task = 'nope' is not allowed: .*\bar\b.*mqar"):
        cli_theory.command(parse(cli_theory, ["--task", "nope", *base]))


@pytest.mark.parametrize("argv,flag", [
    (["--vocab-size", "2", "--num-facts", "4", "--d-model", "8", "--d-state", "8"], "--vocab-size"),
    (["--vocab-size", "63", "--num-facts", "4", "--d-model", "8", "--d-state", "8"], "--vocab-size"),
    (["--vocab-size", "64", "--num-facts", "0", "--d-model", "8", "--d-state", "8"], "--num-facts"),
    (["--vocab-size", "64", "--num-facts", "32", "--d-model", "8", "--d-state", "8"], "--num-facts"),
    (["--vocab-size", "64", "--num-facts", "4", "--d-model", "8"], "--d-state"),
    (["--vocab-size", "64", "--num-facts", "4", "--d-model", "8", "--d-state", "8", "--target", "1"], "--target"),
    (["--vocab-size", "64", "--num-facts", "4", "--d-model", "8", "--d-state", "8", "--a", "-1"], "--a"),
    (["--vocab-size", "64", "--num-facts", "4", "--d-model", "8", "--d-state", "8", "--seq-len", "8"], "--seq-len"),
])
def test_cli_theory_bad_flags(argv, flag):
    with pytest.raises(ConfigError) as info:
        cli_theory.command(parse(cli_theory, argv))
    message = str(info.value)
    assert message.startswith(flag) and "\n" not in message


@pytest.mark.parametrize("task,extra", [
    ("mqar", {}), ("ar", {}), ("mqar-repeated-keys", {}),
    ("mqar-repeated-keys", {"num_key_repeats": 1}), ("mqar-repeated-keys", {"num_key_repeats": 3})])
def test_cli_theory_accepts_the_lengths_run_accepts(task, extra):
    """theory's L check is the task's: for every L it agrees with resolving a run config."""
    from recallbench import resolve

    nf = 8
    for seq_len in range(2 * nf - 1, 8 * nf + 2):
        argv = ["--task", task, "--vocab-size", "128", "--num-facts", str(nf), "--d-model",
                "16", "--d-state", "4", "--seq-len", str(seq_len)]
        if extra:
            argv += ["--num-key-repeats", str(extra["num_key_repeats"])]
        try:
            resolve({"task": {"name": task, "vocab_size": 128, "num_facts": nf,
                              "seq_len": seq_len, **extra}})
            run_ok = True
        except ConfigError:
            run_ok = False
        try:
            out = cli_theory.compute(parse(cli_theory, argv))
            theory_ok = out["seq_len"] == seq_len
        except ConfigError as exc:
            assert str(exc).startswith("--seq-len"), exc
            theory_ok = False
        assert theory_ok == run_ok, (task, extra, seq_len)


def test_cli_theory_caps_what_it_prints_at_the_keys_the_vocabulary_has(capsys):
    """V = 128 has 63 keys: no state holds more facts, whatever Fano's bits would allow."""
    args = parse(cli_theory, ["--vocab-size", "128", "--num-facts", "16", "--d-model", "64",
                              "--d-state", "16"])
    out = cli_theory.compute(args)
    raw = theory.fano_max_facts(out["state_size"], 32, 128, 0.01)
    assert raw > 1000 and out["fano_max_facts"] == out["num_keys"] == 63
    assert cli_theory.command(parse(cli_theory, ["--vocab-size", "128", "--num-facts", "16",
                                                 "--d-model", "64", "--d-state", "16"])) == 0
    assert "up to N_f = 63 (all V/2 − 1 = 63 keys" in capsys.readouterr().out


def test_cli_theory_marks_required_flags_and_explains_its_output(capsys):
    with pytest.raises(SystemExit):
        parse(cli_theory, ["--d-model", "8", "--d-state", "8"])
    assert "required: --vocab-size, --num-facts" in capsys.readouterr().err
    parser = argparse.ArgumentParser()
    cli_theory.add_arguments(parser)
    text = parser.format_help()
    for term in ("ε_v, ε_k", "m_V", '"condition"', "capacity", "Fano", "docs/theory.md"):
        assert term in text, term
    with pytest.raises(ConfigError, match="^--num-key-repeats is not allowed for --task mqar"):
        cli_theory.compute(parse(cli_theory, ["--vocab-size", "64", "--num-facts", "4",
                                              "--d-model", "8", "--d-state", "8",
                                              "--num-key-repeats", "2"]))


def test_layer_study_gets_an_exchange_figure(tmp_path, report):
    # the fixture's groups are one-layer: no exchange figure there
    assert not any("exchange_" in p for p in scorer.write_report(report, tmp_path / "one")["figures"])
    rng = np.random.default_rng(3)
    b = math.sqrt(2 * math.log(512))
    recs = [make_record("linear-mamba", 16, n, 0,
                        float(special.ndtr(math.sqrt(lam * n * 16 / (1.25 * 32 + lam * n)) - b)),
                        rng=rng, n_layers=lam)
            for lam in (1, 2, 4) for n in (2, 4, 8)]
    written = scorer.write_report(scorer.score(recs), tmp_path / "layers")
    names = [p.split("/")[-1] for p in written["figures"]]
    exchange = [n for n in names if n.startswith("exchange_linear-mamba")]
    assert exchange == [n for n in names if "_d16" in n and n.startswith("exchange_")]
    assert len(exchange) == 1
    check_png(next(p for p in written["figures"] if p.endswith(exchange[0])))
