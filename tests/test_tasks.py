"""Statistics of the generated data, over many sampled batches, and the errors on bad input."""
from __future__ import annotations

import dataclasses
import math
import re
import sys

import numpy as np
import pytest
import torch
from scipy import stats

from recallbench.api.errors import ConfigError
from recallbench.api.registry import TASKS
from recallbench.api.task import IGNORE


def make(name, **params):
    return TASKS.get(name).from_params(params)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def pairs(inputs, n_pairs):
    return inputs[:, 0:2 * n_pairs:2], inputs[:, 1:2 * n_pairs:2]


@pytest.mark.parametrize("V,L,Nf", [(128, 64, 16), (512, 128, 32), (64, 64, 8)])
def test_mqar_structure(V, L, Nf):
    task = make("mqar", vocab_size=V, seq_len=L, num_facts=Nf)
    for seed in range(5):
        x, y = task.sample(256, gen(seed))
        assert x.shape == y.shape == (256, L) and x.dtype == y.dtype == torch.long
        keys, values = pairs(x, Nf)
        assert ((keys >= 1) & (keys < V // 2)).all()
        assert ((values >= V // 2) & (values < V)).all()
        assert (keys.sort(1).values.diff(dim=1) > 0).all(), "keys must be distinct"
        assert (values.sort(1).values.diff(dim=1) > 0).all(), "values must be distinct"
        asked = y != IGNORE
        assert (asked.sum(1) == Nf).all()
        assert not asked[:, :2 * Nf].any(), "nothing is asked in the context"
        assert not asked[:, 2 * Nf + 1::2].any(), "queries sit at even slots of the query region"
        # every key is queried exactly once, and the label is that key's value
        queried = torch.where(asked, x, torch.zeros_like(x)).sort(1).values[:, -Nf:]
        assert torch.equal(queried, keys.sort(1).values)
        answer = {}
        for b in range(8):
            answer = dict(zip(keys[b].tolist(), values[b].tolist()))
            for pos in asked[b].nonzero().flatten().tolist():
                assert y[b, pos].item() == answer[x[b, pos].item()]
        assert 0 <= x.min() and x.max() < V


def test_mqar_fillers_random_or_zero():
    task = make("mqar", vocab_size=128, seq_len=64, num_facts=8)
    x, y = task.sample(2000, gen())
    filler = x[:, 16:][y[:, 16:] == IGNORE]
    # fillers are uniform over the whole vocabulary: chi-square over 8 bins
    counts = torch.bincount(filler // 16, minlength=8).numpy()
    assert stats.chisquare(counts).pvalue > 1e-4
    quiet = make("mqar", vocab_size=128, seq_len=64, num_facts=8, random_non_queries=False)
    x, y = quiet.sample(100, gen())
    assert (x[:, 16:][y[:, 16:] == IGNORE] == 0).all()


@pytest.mark.parametrize("power_a", [1.0, 0.3, 0.01])
def test_mqar_query_placement_follows_power_law(power_a):
    """Gap distribution vs Zoology's sequential weighted sampling without replacement."""
    V, L, Nf = 256, 64, 4
    task = make("mqar", vocab_size=V, seq_len=L, num_facts=Nf, power_a=power_a)
    x, y = task.sample(20000, gen(3))
    gaps = ((y[:, 2 * Nf:] != IGNORE).nonzero()[:, 1]) // 2
    space = (L - 2 * Nf) // 2
    observed = torch.bincount(gaps, minlength=space).double()
    # expected inclusion frequency: simulate numpy's sequential sampler exactly
    rng = np.random.default_rng(0)
    p = power_a * np.arange(1, space + 1) ** (power_a - 1)
    p /= p.sum()
    sims = np.stack([rng.choice(space, Nf, replace=False, p=p) for _ in range(20000)])
    expected = np.bincount(sims.ravel(), minlength=space).astype(float)
    # two-sample chi-square on the inclusion counts (bins with enough mass)
    keep = expected > 20
    table = np.stack([observed.numpy()[keep], expected[keep]])
    assert stats.chi2_contingency(table).pvalue > 1e-4
    if power_a < 1:
        assert observed[0] > 2 * observed[-1], "small power_a puts queries close to the context"


def test_ar_structure():
    task = make("ar", vocab_size=64, num_facts=10)
    assert task.length == 21
    x, y = task.sample(4000, gen())
    keys, values = pairs(x, 10)
    assert (y[:, :-1] == IGNORE).all() and (y[:, -1] != IGNORE).all()
    which = (keys == x[:, -1:]).float()
    assert (which.sum(1) == 1).all(), "the query is one of the context keys"
    assert torch.equal(y[:, -1], values[which.bool()])
    # the queried pair is uniform over the N_f pairs
    counts = which.sum(0).numpy()
    assert stats.chisquare(counts).pvalue > 1e-4


@pytest.mark.parametrize("Nk", [1, 2, 4])
def test_repeated_keys_label_is_latest_value(Nk):
    Nf, L = 6, 2 * 6 * (4 + 1)
    task = make("mqar-repeated-keys", vocab_size=128, seq_len=L, num_facts=Nf, num_key_repeats=Nk)
    x, y = task.sample(500, gen(Nk))
    M = Nf * Nk
    pk, pv = pairs(x, M)
    assert ((pk >= 1) & (pk < 64)).all() and ((pv >= 64) & (pv < 128)).all()
    assert (pv.sort(1).values.diff(dim=1) > 0).all(), "every occurrence has a fresh value"
    assert not (y[:, :2 * M] != IGNORE).any(), "earlier occurrences are never labelled"
    for b in range(500):
        counts = torch.bincount(pk[b], minlength=64)
        assert set(counts[counts > 0].tolist()) == {Nk}, "each key appears N_k times"
        latest = {}
        for k, v in zip(pk[b].tolist(), pv[b].tolist()):
            latest[k] = v
        asked = (y[b] != IGNORE).nonzero().flatten().tolist()
        assert len(asked) == Nf
        assert {x[b, p].item() for p in asked} == set(latest)
        for p in asked:
            assert y[b, p].item() == latest[x[b, p].item()]


def test_repeated_keys_order_is_random():
    """Which occurrence comes last is uniform: the latest value is not always the last drawn."""
    task = make("mqar-repeated-keys", vocab_size=512, seq_len=128, num_facts=10, num_key_repeats=2)
    x, _ = task.sample(2000, gen())
    first_key = x[:, 0]
    # position of the second occurrence of the first pair's key is spread over the context
    second = torch.stack([(x[b, 2:40:2] == first_key[b]).nonzero()[0, 0] for b in range(2000)])
    assert len(torch.unique(second)) > 10


# -- query order: keys are asked in order of first occurrence, as Zoology's MQAR does ------

def gaps_by_first_occurrence(x, y, n_pairs, n_facts):
    """(B, N_f) the query gap of each key, keys in order of first occurrence in the context."""
    B = x.shape[0]
    pair_keys = x[:, 0:2 * n_pairs:2]
    first = torch.full((B, int(x.max()) + 1), n_pairs).scatter_reduce(
        1, pair_keys, torch.arange(n_pairs).expand_as(pair_keys), reduce="amin")
    asked = y[:, 2 * n_pairs:] != IGNORE
    gaps = (asked.nonzero()[:, 1] // 2).view(B, n_facts)  # nonzero() lists rows in order
    queried = x[:, 2 * n_pairs:][asked].view(B, n_facts)
    return gaps.gather(1, first.gather(1, queried).argsort(dim=1))


def two_sample_p(a, b, bins):
    """p-value of a chi-square test that integer samples a, b in range(bins) share a law."""
    table = np.stack([np.bincount(a.flatten().numpy(), minlength=bins),
                      np.bincount(b.flatten().numpy(), minlength=bins)])
    return stats.chi2_contingency(table[:, table.sum(0) >= 10]).pvalue


@pytest.mark.parametrize("name,params", [
    ("mqar", {}), ("mqar-repeated-keys", {"num_key_repeats": 1}),
    ("mqar-repeated-keys", {"num_key_repeats": 2, "seq_len": 96})])
@pytest.mark.parametrize("power_a", [0.01, 0.3])
def test_first_key_is_asked_at_zoologys_first_draw(name, params, power_a):
    """The first context key's query gap follows the first draw of Zoology's sequential
    sampler, p(gap) ∝ (gap+1)^(a-1): at a = 0.01, slot 0 with probability ≈ 0.29."""
    Nf = 16
    task = make(name, **{"vocab_size": 128, "seq_len": 64, "num_facts": Nf, "power_a": power_a,
                         **params})
    M = Nf * task.params().get("num_key_repeats", 1)
    x, y = task.sample(20000, gen(5))
    first = gaps_by_first_occurrence(x, y, M, Nf)[:, 0]
    space = (task.seq_len - 2 * M) // 2
    p = np.arange(1, space + 1) ** (power_a - 1.0)
    observed = np.bincount(first.numpy(), minlength=space)
    assert stats.chisquare(observed, 20000 * p / p.sum()).pvalue > 1e-4


@pytest.mark.parametrize("power_a", [0.01, 0.3, 1.0])
def test_repeated_keys_with_one_repeat_is_mqar(power_a):
    """N_k = 1 draws MQAR's distribution: where each context key is asked, and where queries sit."""
    V, L, Nf = 128, 64, 16
    mqar = make("mqar", vocab_size=V, seq_len=L, num_facts=Nf, power_a=power_a)
    rep = make("mqar-repeated-keys", vocab_size=V, seq_len=L, num_facts=Nf, num_key_repeats=1,
               power_a=power_a)
    (xm, ym), (xr, yr) = mqar.sample(20000, gen(1)), rep.sample(20000, gen(2))
    space = (L - 2 * Nf) // 2
    gm, gr = gaps_by_first_occurrence(xm, ym, Nf, Nf), gaps_by_first_occurrence(xr, yr, Nf, Nf)
    assert two_sample_p(gm[:, 0], gr[:, 0], space) > 1e-4, "first key's query slot"
    assert two_sample_p((ym != IGNORE).nonzero()[:, 1], (yr != IGNORE).nonzero()[:, 1], L) > 1e-4
    rank = torch.arange(Nf) * space  # the joint law of (context rank, query gap)
    assert two_sample_p(gm + rank, gr + rank, Nf * space) > 1e-4, "(key rank, gap)"


def test_repeated_keys_ask_in_first_occurrence_order():
    """With N_k = 2 the i-th key to appear is asked like MQAR's i-th key (same query region)."""
    Nf, space = 8, 16
    mqar = make("mqar", vocab_size=128, seq_len=2 * Nf + 2 * space, num_facts=Nf, power_a=0.3)
    rep = make("mqar-repeated-keys", vocab_size=128, seq_len=4 * Nf + 2 * space, num_facts=Nf,
               num_key_repeats=2, power_a=0.3)
    (xm, ym), (xr, yr) = mqar.sample(20000, gen(1)), rep.sample(20000, gen(2))
    rank = torch.arange(Nf) * space
    gm = gaps_by_first_occurrence(xm, ym, Nf, Nf) + rank
    gr = gaps_by_first_occurrence(xr, yr, 2 * Nf, Nf) + rank
    assert two_sample_p(gm, gr, Nf * space) > 1e-4


# -- the worked examples in the task docstrings are real samples --------------------------

@pytest.mark.parametrize("name,params,seed", [
    ("mqar", dict(vocab_size=12, num_facts=2, seq_len=16, random_non_queries=False), 5),
    ("mqar-repeated-keys", dict(vocab_size=12, num_facts=2, num_key_repeats=2, seq_len=16,
                                random_non_queries=False), 1),
    ("ar", dict(vocab_size=12, num_facts=2), 1),
])
def test_docstring_example_is_a_sample(name, params, seed):
    doc = sys.modules[TASKS.get(name).__module__].__doc__
    assert f"manual_seed({seed})" in doc
    assert all(f"{k}={v}" in " ".join(doc.split()) for k, v in params.items())
    rows = {m[1]: [int(t) for t in m[2].split()]
            for m in re.finditer(r"^\s*(inputs|targets):(.*)$", doc, re.M)}
    x, y = make(name, **params).sample(1, gen(seed))
    assert rows == {"inputs": x[0].tolist(), "targets": y[0].tolist()}


# -- infeasible sweep cells ---------------------------------------------------------------

def defaulted(name, **params):
    """A task section the way sweeps hand it to ``infeasible``: defaults filled, unvalidated."""
    return {**dataclasses.asdict(TASKS.get(name)()), **params}


@pytest.mark.parametrize("name", ["mqar", "mqar-repeated-keys"])
def test_infeasible_agrees_with_validation(name):
    """A cell is declared infeasible exactly when building it fails on seq_len."""
    repeats = [{"num_key_repeats": k} for k in (1, 2, 3)] if name != "mqar" else [{}]
    for L in range(8, 100, 3):
        for Nf in (1, 2, 5, 8, 13):
            for extra in repeats:
                params = {"vocab_size": 1024, "seq_len": L, "num_facts": Nf, **extra}
                try:
                    make(name, **params)
                    refused = False
                except ConfigError as err:
                    assert str(err).startswith("task.seq_len"), str(err)
                    refused = True
                reason = TASKS.get(name).infeasible(defaulted(name, **params))
                assert reason == ("seq_len_lt_4nf" if refused else None), params


@pytest.mark.parametrize("name,params", [
    ("mqar", {"seq_len": "long"}), ("mqar", {"num_facts": None}), ("mqar", {"seq_len": True}),
    ("mqar-repeated-keys", {"num_key_repeats": "2"}), ("mqar-repeated-keys", {"seq_len": [8]}),
    ("ar", {"num_facts": 64, "seq_len": 3}),
])
def test_infeasible_leaves_bad_values_to_validation(name, params):
    assert TASKS.get(name).infeasible(defaulted(name, **params)) is None


def test_infeasible_reads_the_defaults():
    assert TASKS.get("mqar").infeasible(defaulted("mqar", num_facts=17)) == "seq_len_lt_4nf"
    cell = defaulted("mqar-repeated-keys", num_facts=22)  # L = 128 < 2·22·3
    assert TASKS.get("mqar-repeated-keys").infeasible(cell) == "seq_len_lt_4nf"


@pytest.mark.parametrize("name", ["mqar", "ar", "mqar-repeated-keys"])
def test_deterministic_per_generator(name):
    task = make(name)
    a = task.sample(64, gen(7))
    b = task.sample(64, gen(7))
    c = task.sample(64, gen(8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_info_bits():
    task = make("mqar", vocab_size=512, seq_len=64, num_facts=16)
    assert task.info_bits == pytest.approx(16 * math.log2(256))
    assert make("ar", vocab_size=1024, num_facts=16).info_bits == pytest.approx(16 * 9)


@pytest.mark.parametrize("name,params,message", [
    ("mqar", {"vocab_size": 127}, "task.vocab_size = 127 is not allowed: must be even"),
    ("mqar", {"vocab_size": 0}, "task.vocab_size = 0 is not allowed: must be >= 4"),
    ("mqar", {"vocab_size": 64, "num_facts": 32, "seq_len": 128},
     "task.num_facts = 32 is not allowed: must be in [1, 31]"),
    ("mqar", {"num_facts": -1}, "task.num_facts = -1 is not allowed: must be in [1, 63]"),
    ("mqar", {"seq_len": 60}, "task.seq_len = 60 is not allowed: must be >= 64"),
    ("mqar", {"power_a": 0}, "task.power_a = 0.0 is not allowed: must be > 0"),
    ("mqar", {"num_keys": 3}, "unknown key task.num_keys"),
    ("mqar", {"seq_len": "long"}, "task.seq_len = 'long' is not allowed: expected an integer"),
    ("mqar", {"random_non_queries": 1}, "task.random_non_queries = 1 is not allowed: expected true"),
    ("ar", {"num_facts": 8, "seq_len": 64}, "task.seq_len = 64 is not allowed: AR has L = 2"),
    ("mqar-repeated-keys", {"num_key_repeats": 0}, "task.num_key_repeats = 0 is not allowed"),
    ("mqar-repeated-keys", {"num_key_repeats": 6}, "task.seq_len = 128 is not allowed: must be >= 140"),
    ("mqar-repeated-keys", {"vocab_size": 64, "num_facts": 10, "num_key_repeats": 4, "seq_len": 200},
     "task.num_facts = 10 is not allowed: must be in [1, 8]"),
])
def test_bad_parameters_name_the_field(name, params, message):
    with pytest.raises(ConfigError) as err:
        make(name, **params)
    text = str(err.value)
    assert message in text and "\n" not in text
