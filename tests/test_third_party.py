"""A third-party task and adapter, registered with the public API, get what built-ins get.

The task declares the law family "mqar" and a skip rule for cells it cannot build; the
adapter declares the law kind "linear" and the distribution that runs its mixer.  Through
them alone (no name is known to the core): a sweep drops the infeasible cell, the law
gives the linear-MQAR prediction, the scorer fits the collapse on records whose counts
are drawn from the law, and records credit the declared distribution.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch import nn

from recallbench import ADAPTERS, IGNORE, TASKS, Adapter, ConfigError, PreNormResidual, Task, resolve, run
from recallbench.api.canonical import config_hash
from recallbench.api.record import adapter_distribution, versions
from recallbench.law import declared, scorer, theory
from recallbench.runs.sweep import Sweep

TASK, ADAPTER = "tp-recall", "tp-linear"
V, NUM_FACTS, SEQ_LEN, QUERIES = 256, 16, 64, 4096 * 16


@dataclasses.dataclass
class PairRecall(Task):
    """Key-value pairs, then every key asked once at the fixed even slots after them."""

    num_facts: int = 4  # the law's N_f, V and L, under the names the scorer reads
    vocab_size: int = 64
    seq_len: int = 32
    law_family = "mqar"

    @property
    def num_queries(self) -> int:
        return self.num_facts

    @classmethod
    def infeasible(cls, params):
        nf, length = params.get("num_facts"), params.get("seq_len")
        too_short = isinstance(nf, int) and isinstance(length, int) and length < 4 * nf
        return "seq_len_lt_4nf" if too_short else None

    def validate(self) -> None:
        super().validate()
        if self.seq_len < 4 * self.num_facts:
            raise ConfigError(f"task.seq_len = {self.seq_len} is not allowed: must be >= "
                              f"4·num_facts = {4 * self.num_facts}")

    def sample(self, batch_size, generator=None, device=None):
        B, nf, half = batch_size, self.num_facts, self.vocab_size // 2
        keys = torch.rand(B, half - 1, generator=generator).argsort(dim=1)[:, :nf] + 1
        values = torch.rand(B, half, generator=generator).argsort(dim=1)[:, :nf] + half
        inputs = torch.zeros(B, self.seq_len, dtype=torch.long)
        targets = torch.full((B, self.seq_len), IGNORE, dtype=torch.long)
        inputs[:, 0:2 * nf:2], inputs[:, 1:2 * nf:2] = keys, values
        asked = 2 * nf + 2 * torch.arange(nf)
        inputs[:, asked], targets[:, asked] = keys, values
        return inputs.to(device), targets.to(device)


class Cumulative(nn.Module):
    """A linear recurrence: the running mean of a projection, (B, L, D) -> (B, L, D)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        steps = torch.arange(1, x.shape[1] + 1, device=x.device).view(1, -1, 1)
        return self.proj(x).cumsum(dim=1) / steps


class CumulativeAdapter(Adapter):
    description = "third-party linear recurrence (test)"
    law_kind = "linear"
    distribution = "numpy"  # any installed distribution: records credit its version

    def build_blocks(self, device):
        return nn.ModuleList(PreNormResidual(Cumulative(self.cfg.d_model), self.cfg.d_model)
                             for _ in range(self.cfg.n_layers)).to(device)

    def state_size(self):
        return 2 * self.cfg.d_model * self.cfg.d_state * self.cfg.n_layers


@pytest.fixture
def third_party():
    TASKS.add(TASK, PairRecall, origin="tp-plugins")
    ADAPTERS.add(ADAPTER, CumulativeAdapter, origin="tp-plugins")
    yield
    TASKS.remove(TASK)
    ADAPTERS.remove(ADAPTER)


def test_sweep_skips_the_cell_the_task_calls_infeasible(third_party):
    sweep = Sweep.from_dict({
        "base": {"task": {"name": TASK, "vocab_size": 64, "num_facts": 4},
                 "model": {"adapter": ADAPTER, "d_model": 8, "d_state": 4}},
        "axes": {"task.seq_len": [8, 16, 32]}})
    expansion = sweep.expand()
    assert [p.cfg.task.seq_len for p in expansion.points] == [16, 32]
    assert dict(expansion.skipped) == {"seq_len_lt_4nf": 1}
    # with the rule off the same cell reaches the task, which refuses it
    sweep.skip["seq_len_lt_4nf"] = False
    with pytest.raises(ConfigError, match="task.seq_len = 8 is not allowed"):
        sweep.expand()


def test_the_law_reads_what_the_plugins_declare(third_party):
    assert TASKS.origin(TASK) == ADAPTERS.origin(ADAPTER) == "tp-plugins"
    assert declared.task_family(TASK) == "mqar" and declared.model_kind(ADAPTER) == "linear"
    assert theory.coefficient_a(declared.model_kind(ADAPTER), declared.task_family(TASK)) == 1.25
    assert "numpy" in versions(adapter_distribution(ADAPTER))
    # once removed, the same names are black boxes
    TASKS.remove(TASK)
    ADAPTERS.remove(ADAPTER)
    try:
        assert declared.task_family(TASK) is None and declared.model_kind(ADAPTER) is None
    finally:
        TASKS.add(TASK, PairRecall, origin="tp-plugins")
        ADAPTERS.add(ADAPTER, CumulativeAdapter, origin="tp-plugins")


def test_a_run_trains_them_and_credits_the_declared_distribution(third_party):
    import numpy

    record = run(resolve({
        "task": {"name": TASK, "vocab_size": 32, "seq_len": 16, "num_facts": 4},
        "model": {"adapter": ADAPTER, "d_model": 8, "d_state": 4},
        "train": {"max_steps": 4, "val_every": 2, "val_size": 16, "test_size": 16,
                  "batch_size": 8}}), progress=False)
    assert record["status"] == "ok" and record["total"] == 16 * 4 and record["state_size"] == 64
    assert record["versions"]["numpy"] == numpy.__version__
    assert "mamba-ssm" not in record["versions"]  # only the adapter's own library


def law_records(rng) -> list[dict]:
    """One record per D-N cell, correct ~ Binomial(QUERIES, eq. 20 at the linear-MQAR a)."""
    records = []
    for d in (8, 16, 32, 64, 128):
        for n in (2, 4, 8, 16, 32):
            if n > d:
                continue
            p = theory.recall_probability(V, NUM_FACTS, d, n, 1.25, form="eq20")
            k = int(rng.binomial(QUERIES, p))
            cfg = {"task": {"name": TASK, "vocab_size": V, "seq_len": SEQ_LEN, "num_facts": NUM_FACTS},
                   "model": {"adapter": ADAPTER, "d_model": d, "d_state": n, "n_layers": 1},
                   "train": {"seed": 0}}
            records.append({"schema": scorer.SCHEMA, "status": "ok", "correct": k,
                            "total": QUERIES, "accuracy": k / QUERIES, "seed": 0,
                            "state_size": 2 * d * n, "state_bits": 32, "config": cfg,
                            "config_hash": config_hash(cfg)})
    return records


def test_the_scorer_fits_the_collapse_for_them(third_party):
    report = scorer.score(law_records(np.random.default_rng(7)))
    (group,) = report["groups"]
    assert group["model_kind"] == "linear" and group["paper_a"] == 1.25
    fit = group["collapse"]["best"]
    assert fit["a_ci"][0] <= 1.25 <= fit["a_ci"][1] and abs(fit["a"] / 1.25 - 1) < 0.1
    assert fit["b_ci"][0] <= theory.m_v(V) <= fit["b_ci"][1]
    assert group["efficiency"]["best"]["ratio"] > 0
    cell = next(c for c in group["cells"] if (c["d_model"], c["d_state"]) == (32, 8))
    assert cell["theory"]["paper_eq19"] == pytest.approx(
        theory.recall_probability(V, NUM_FACTS, 32, 8, 1.25))
    assert math.isfinite(cell["theory"]["collapse_fit"])


ZOO = '''
import torch
from torch import nn
from recallbench import Adapter

class Shift(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.proj = nn.Linear(2 * d_model, d_model)

    def forward(self, x):
        prev = nn.functional.pad(x, (0, 0, 1, 0))[:, :-1]
        return self.proj(torch.cat([x, prev], -1))

class ShiftAdapter(Adapter):
    distribution = "numpy"

    def build_mixer(self, layer_idx, device):
        return Shift(self.cfg.d_model)

    def state_size(self):
        return self.cfg.n_layers * self.cfg.d_model
'''


def test_a_record_of_an_entry_point_adapter_names_its_package_and_version(plugin_dist, monkeypatch):
    import numpy

    plugin_dist({"recallbench.adapters": [("tp-shift", "tp_zoo_adapter:ShiftAdapter")]},
                {"tp_zoo_adapter": ZOO}, dist="tp_zoo")
    monkeypatch.setattr(ADAPTERS, "_scanned", False)  # find the new entry point
    try:
        record = run(resolve({
            "task": {"vocab_size": 16, "seq_len": 16, "num_facts": 4},
            "model": {"adapter": "tp-shift", "d_model": 8, "d_state": 4},
            "train": {"max_steps": 2, "val_every": 1, "val_size": 8, "test_size": 8,
                      "batch_size": 4}}), progress=False)
    finally:
        ADAPTERS.remove("tp-shift")
    prov = record["provenance"]
    assert (prov["distribution"], prov["version"]) == ("tp_zoo", "0.1")
    assert (prov["library"], prov["library_version"]) == ("numpy", numpy.__version__)
    assert len(prov["source_sha256"]) == 64
    assert record["wrapper"]["overrides"] == [] and record["wrapper"]["final_norm"] == "rms"
