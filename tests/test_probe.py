"""The mechanistic probe: exact on the designed circuit, invariant to re-mixing, honest on
a circuit that does not describe its model, and a CLI that refuses bad input in one line."""
from __future__ import annotations

import json

import pytest
import torch

from recallbench.api.config import resolve
from recallbench.api.errors import ConfigError
from recallbench.harness.prepare import build_model
from recallbench.probe import operators
from recallbench.probe.measure import measure

EXACT = {"model": {"adapter": "designed", "d_model": 128, "d_state": 128}}


def _built(over):
    cfg = resolve(over)
    adapter, model = build_model(cfg, torch.device("cpu"))
    return cfg, adapter, model


def test_designed_exact_circuit_scores_one():
    """Thm 3.1's circuit (D = N = V, E = I) is the construction itself: every score is 1."""
    cfg, adapter, model = _built(EXACT)
    scores, arrays = measure(model, adapter, cfg.task, 32)
    for key in ("vv_block_fraction", "kq_block_fraction", "vv_identity", "kq_identity",
                "copy_score", "shift_score", "state_cosine", "state_decode_accuracy"):
        assert scores[key] == pytest.approx(1.0, abs=1e-9), key
    assert scores["circuit_gap"] < 1e-6
    V = cfg.task.vocab_size
    assert arrays["G_vv"].shape == (V, 2 * V) and arrays["G_kq"].shape == (2 * V, 2 * V)


def test_hashed_designed_keeps_blocks_but_loses_identity():
    """At D, N < V the hash is lossy: off-block weight stays exactly 0 (by construction), while
    the identity and the decoding degrade, as the JL noise of Thm 3.2 says."""
    cfg, adapter, model = _built({"model": {"adapter": "designed", "d_model": 64, "d_state": 16}})
    scores, _ = measure(model, adapter, cfg.task, 32)
    assert scores["vv_block_fraction"] == pytest.approx(1.0, abs=1e-9)
    assert scores["kq_block_fraction"] == pytest.approx(1.0, abs=1e-9)
    assert 0.2 < scores["kq_identity"] < 0.9
    assert 0.5 < scores["state_decode_accuracy"] < 1.0


def test_operators_invariant_under_orthogonal_remixing():
    """(P_in Q, Qᵀ E, Qᵀ P_out) is the same model with other weights: G_vv, G_kq unchanged."""
    cfg, adapter, model = _built({"model": {"adapter": "linear-mamba", "d_model": 16, "d_state": 4},
                                  "task": {"vocab_size": 32, "seq_len": 16, "num_facts": 4}})
    c1 = adapter.circuit(model)
    q, _ = torch.linalg.qr(torch.randn(16, 16, generator=torch.Generator().manual_seed(1)))
    layer = model.blocks[0]
    with torch.no_grad():
        model.embedding.weight.copy_(model.embedding.weight @ q)
        layer.in_proj.weight.copy_(layer.in_proj.weight @ q)
        layer.out_proj.weight.copy_(q.t() @ layer.out_proj.weight)
    c2 = adapter.circuit(model)
    assert not torch.allclose(c1.E, c2.E, atol=1e-3)  # the weights did change
    assert torch.allclose(operators.g_vv(c1), operators.g_vv(c2), atol=1e-5)
    assert torch.allclose(operators.g_kq(c1), operators.g_kq(c2), atol=1e-5)


def test_untrained_model_sits_at_chance():
    cfg, adapter, model = _built({"model": {"adapter": "linear-mamba", "d_model": 32, "d_state": 8}})
    scores, _ = measure(model, adapter, cfg.task, 32)
    assert abs(scores["kq_identity"]) < 0.1 and abs(scores["shift_score"]) < 0.1
    assert scores["state_decode_accuracy"] < 0.2


def test_circuit_that_misdescribes_its_model_is_refused(monkeypatch):
    cfg, adapter, model = _built({"model": {"adapter": "linear-mamba", "d_model": 16, "d_state": 4},
                                  "task": {"vocab_size": 32, "seq_len": 16, "num_facts": 4}})
    real = adapter.circuit(model)
    wrong = type(real)(E=real.E, E_in=real.E_in, S_B=real.S_C, S_C=real.S_B, P_out=real.P_out)
    monkeypatch.setattr(adapter, "circuit", lambda m: wrong)
    with pytest.raises(ConfigError, match="does not reproduce its model's logits"):
        measure(model, adapter, cfg.task, 8)


def test_adapter_without_circuit_is_refused():
    cfg, adapter, model = _built({"model": {"adapter": "attention", "d_model": 16},
                                  "task": {"vocab_size": 32, "seq_len": 16, "num_facts": 4}})
    with pytest.raises(ConfigError, match="describes no circuit"):
        measure(model, adapter, cfg.task, 8)


def test_cli_probe_designed_writes_scores_and_figures(cli, tmp_path):
    rc, out, err = cli("probe", "--set", "model.adapter=designed", "--set", "model.d_model=128",
                       "--set", "model.d_state=128", "--sequences", "8", "--out", "p")
    assert rc == 0, err
    result = json.loads((tmp_path / "p" / "probe.json").read_text())
    assert result["scores"]["shift_score"] == pytest.approx(1.0)
    assert sorted(result["figures"]) == ["copy_shift.png", "operators.png", "state.png"]
    assert all((tmp_path / "p" / f).stat().st_size > 1000 for f in result["figures"])


@pytest.mark.parametrize("args, message", [
    (("--set", "model.adapter=linear-mamba"), "is trained: give the record"),
    (("--set", "model.adapter=designed", "--sequences", "0"), "--sequences = 0: must be in 1..4096"),
    (("missing.json",), "does not exist"),
])
def test_cli_probe_bad_input_one_line(cli, args, message):
    rc, out, err = cli("probe", *args)
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_probe_record_without_weights(cli, tmp_path):
    from recallbench.api.record import failed_record

    cfg = resolve({"model": {"adapter": "linear-mamba"}})
    rec = failed_record(cfg, "x") | {"status": "ok"}
    (tmp_path / "r.json").write_text(json.dumps(rec))
    rc, out, err = cli("probe", "r.json")
    assert rc == 2 and "no weights at r.pt" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_probe_of_trained_table8_run_and_conv_ablation(cli, tmp_path):
    """`run --save-weights` then `probe`: the trained Table-8 model learned the designed
    circuit's blocks (Fig. 16) and decodes its state (Fig. 3); without the conv (d_conv = 1,
    Tab. 8) it cannot bind keys to values and the key-query structure is absent."""
    rc, out, err = cli("run", "--quiet", "--out", "t8.json", "--save-weights",
                       "--set", "train.max_steps=800")
    assert rc == 0, err
    assert (tmp_path / "t8.pt").exists()
    record = json.loads((tmp_path / "t8.json").read_text())
    assert record["accuracy"] > 0.95
    rc, out, err = cli("probe", "t8.json", "--sequences", "32")
    assert rc == 0, err
    s = json.loads((tmp_path / "t8.probe" / "probe.json").read_text())["scores"]
    assert s["vv_block_fraction"] > 0.9 and s["kq_block_fraction"] > 0.9
    assert s["copy_score"] > 0.8 and s["state_decode_accuracy"] > 0.9

    rc, out, err = cli("run", "--quiet", "--out", "c1.json", "--save-weights",
                       "--set", "model.d_conv=1", "--set", "train.max_steps=200")
    assert rc == 0, err
    assert json.loads((tmp_path / "c1.json").read_text())["accuracy"] < 0.2
    rc, out, err = cli("probe", "c1.json", "--sequences", "32")
    assert rc == 0, err
    s1 = json.loads((tmp_path / "c1.probe" / "probe.json").read_text())["scores"]
    assert s1["kq_block_fraction"] == 0.0 and s1["state_decode_accuracy"] < 0.2


def test_scores_unchanged_when_query_and_output_flip_sign():
    """(S_C, P_out) → (−S_C, −P_out) is the same model: no score may notice (a table
    decompressed with the key hash S_B would flip sign and decode the wrong values)."""
    cfg, adapter, model = _built({"model": {"adapter": "linear-mamba", "d_model": 16, "d_state": 8},
                                  "task": {"vocab_size": 32, "seq_len": 16, "num_facts": 4}})
    before, _ = measure(model, adapter, cfg.task, 16)
    layer = model.blocks[0]
    with torch.no_grad():
        layer.s_c.weight.neg_()
        layer.out_proj.weight.neg_()
    after, _ = measure(model, adapter, cfg.task, 16)
    for key, value in before.items():
        assert after[key] == pytest.approx(value, abs=1e-9), key


def test_cli_probe_several_records_prints_table(cli, tmp_path):
    for name, d in (("a", 32), ("b", 64)):
        rc, out, err = cli("run", "--quiet", "--out", f"{name}.json", "--set", "model.adapter=designed",
                           "--set", f"model.d_model={d}", "--set", "model.d_state=16",
                           "--set", "train.test_size=64")
        assert rc == 0, err
    rc, out, err = cli("probe", "a.json", "b.json", "--sequences", "8")
    assert rc == 0, err
    rows = [ln for ln in out.splitlines() if ln.startswith("| D=")]
    assert [r.split(" | ")[0] for r in rows] == ["| D=32 N=16 W=2", "| D=64 N=16 W=2"]
    assert (tmp_path / "a.probe" / "probe.json").exists() and (tmp_path / "b.probe" / "probe.json").exists()
    rc, out, err = cli("probe", "a.json", "b.json", "--out", "x")
    assert rc == 2 and "with several records" in err
