"""One wrapper, owned by the harness: the embedding, the pre-norm residual blocks, the final
norm and the tied read-out are the same around every adapter's mixer, an adapter changes
a part only by declaring it, and the record shows what was built."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from recallbench import ADAPTERS, Adapter, ConfigError, PreNormResidual, resolve, run
from recallbench.api.adapter import WRAPPER_DEFAULTS
from recallbench.harness.model import RecallModel, resolve_wrapper

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "minimal_adapter.py"
pytest_plugins = ["pytester"]


def _example():
    spec = importlib.util.spec_from_file_location("minimal_adapter", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["minimal_adapter"] = module
    spec.loader.exec_module(module)
    return module


EX = _example()


class Declared(EX.GatedRecurrenceAdapter):
    """The same mixer, every wrapper key declared equal to the harness's default."""
    wrapper = dict(WRAPPER_DEFAULTS)


class Legacy(Adapter):
    """The older contract: whole blocks, nothing else."""

    def build_blocks(self, device):
        return nn.ModuleList(PreNormResidual(EX.GatedRecurrence(self.cfg.d_model, self.cfg.d_state),
                                             self.cfg.d_model) for _ in range(self.cfg.n_layers))

    def state_size(self):  # a positive state: the harness refuses 0
        return self.cfg.n_layers * self.cfg.d_model * self.cfg.d_state


class OldNorm(Legacy):
    embedding_std = None

    def final_norm(self):
        return nn.LayerNorm(self.cfg.d_model)


@pytest.fixture
def adapters():
    names = {"ex-minimal": EX.GatedRecurrenceAdapter, "ex-declared": Declared,
             "ex-legacy": Legacy, "ex-oldnorm": OldNorm}
    for name, cls in names.items():
        ADAPTERS.add(name, cls, origin="ex-dist")
    yield
    for name in names:
        ADAPTERS.remove(name)


def _cfg(adapter, **model):
    return resolve({"task": {"vocab_size": 32, "seq_len": 16, "num_facts": 4},
                    "model": {"adapter": adapter, "d_model": 16, "d_state": 4, **model}})


def test_the_plugin_guide_shows_the_example_verbatim():
    readme = (ROOT / "docs" / "plugins.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert EXAMPLE.read_text() in blocks


def test_a_minimal_adapter_gets_the_harness_wrapper(adapters):
    model = RecallModel(EX.GatedRecurrenceAdapter(_cfg("ex-minimal").model), 32)
    assert all(isinstance(b, PreNormResidual) and isinstance(b.norm, nn.RMSNorm) for b in model.blocks)
    assert isinstance(model.norm, nn.RMSNorm) and model.norm.eps == 1e-5
    assert model.embedding.weight.std().item() == pytest.approx(0.02, rel=0.15)
    assert model.wrapper["overrides"] == [] and model.wrapper["block"] == "prenorm"


def test_declared_and_older_overrides_are_shown(adapters):
    assert resolve_wrapper(Declared(_cfg("ex-declared").model))["overrides"] == []
    old = resolve_wrapper(OldNorm(_cfg("ex-oldnorm").model))
    assert old["block"] == "adapter" and old["final_norm"] == "adapter" and old["norm"] is None
    assert old["overrides"] == ["block", "embedding_std", "final_norm"]
    assert resolve_wrapper(Legacy(_cfg("ex-legacy").model))["overrides"] == ["block"]


def test_the_papers_models_declare_what_keeps_their_numbers():
    lm = RecallModel(ADAPTERS.get("linear-mamba")(_cfg("linear-mamba", n_layers=2).model), 32)
    assert isinstance(lm.norm, nn.Identity) and not any(isinstance(b, PreNormResidual) for b in lm.blocks)
    assert lm.embedding.weight.std().item() == pytest.approx(1.0, rel=0.15)  # torch's N(0, 1)
    assert lm.wrapper["overrides"] == ["block", "embedding_std", "final_norm"]
    designed = resolve_wrapper(ADAPTERS.get("designed")(_cfg("designed").model))
    assert designed["embedding_init"] == "adapter" and designed["final_norm"] is None


@pytest.mark.parametrize("wrapper, message", [
    ({"final_norm": "batch"}, r"wrapper\['final_norm'\] = 'batch' is not allowed: one of 'rms', 'layer', None"),
    ({"norm_eps": 0}, r"wrapper\['norm_eps'\] = 0 is not allowed: a number > 0 or None"),
    ({"dropout": 0.1}, r"wrapper\['dropout'\] is not a wrapper key; allowed: embedding_std"),
])
def test_a_bad_declaration_is_one_line_naming_the_key(wrapper, message):
    bad = type("Bad", (EX.GatedRecurrenceAdapter,), {"wrapper": wrapper})
    with pytest.raises(ConfigError, match=message) as info:
        bad(_cfg("linear-mamba").model)
    assert "\n" not in str(info.value)


def test_a_record_shows_the_wrapper_and_the_provenance(adapters):
    record = run(_cfg("ex-oldnorm").to_dict() | {"train": {"max_steps": 2, "val_every": 1,
                 "val_size": 8, "test_size": 8, "batch_size": 4}}, progress=False)
    assert record["wrapper"]["final_norm"] == "adapter"
    assert record["provenance"]["distribution"] == "ex-dist"
    assert len(record["provenance"]["source_sha256"]) == 64


# the same mixer, three ways: D = 32, N = 8, 300 steps on MQAR V = 128, L = 24, N_f = 6
THREE_WAY = dict(vocab_size=128, seq_len=24, num_facts=6, d_model=32, d_state=8,
                 max_steps=300, val_every=50, val_size=256, test_size=1024, seed=0)


@pytest.mark.slow
def test_the_same_mixer_scores_the_same_whichever_way_it_arrives(adapters, pytester):
    raw = {"task": {k: THREE_WAY[k] for k in ("vocab_size", "seq_len", "num_facts")},
           "model": {"d_model": 32, "d_state": 8},
           "train": {k: THREE_WAY[k] for k in ("max_steps", "val_every", "val_size", "test_size", "seed")}}
    acc = {name: run({**raw, "model": {**raw["model"], "adapter": name}}, progress=False)["accuracy"]
           for name in ("ex-minimal", "ex-declared")}
    out = pytester.path / "factory.json"
    pytester.syspathinsert(str(EXAMPLE.parent))
    pytester.makepyfile(f"""
        import json, pytest
        from minimal_adapter import GatedRecurrence

        @pytest.mark.recall(**{THREE_WAY!r})
        def test_factory(recall):
            r = recall(factory=lambda d_model, d_state: GatedRecurrence(d_model, d_state))
            open({str(out)!r}, "w").write(json.dumps(r.accuracy))
    """)
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    acc["factory"] = json.loads(out.read_text())
    assert acc["ex-minimal"] > 0.15, acc  # it learns: the comparison means something
    assert max(acc.values()) - min(acc.values()) <= 0.02, acc
