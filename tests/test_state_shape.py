"""The state's shape (``Adapter.state_shape``, ``api.adapter.realisable``): every built-in
adapter's shape multiplies to its state size, and the shapes it realises at one S keep S."""
from __future__ import annotations

import math

import pytest

from recallbench.api.adapter import realisable, shape_product
from recallbench.api.config import ModelConfig
from recallbench.api.errors import ConfigError
from recallbench.api.registry import ADAPTERS

# a few configs per adapter: (d_model, d_state, n_layers, n_heads, expand, options)
CONFIGS = {
    "linear-mamba": [(32, 4, 1, 1, 2, {}), (32, 8, 2, 4, 1, {}), (16, 4, 1, 2, 3, {})],
    "mamba-ladder": [(32, 4, 1, 1, 2, {}), (16, 8, 2, 1, 1, {})],
    "mamba": [(32, 4, 1, 1, 2, {}), (16, 8, 2, 1, 3, {})],
    "mamba2": [(32, 4, 1, 1, 2, {}), (32, 8, 2, 4, 2, {})],
    "designed": [(16, 4, 1, 1, 2, {}), (32, 8, 1, 1, 2, {})],
    "gla": [(32, 4, 1, 1, 2, {}), (32, 8, 2, 2, 1, {}), (32, 16, 1, 2, 1, {"value_dim": 16})],
    "simple-gla": [(32, 8, 1, 2, 2, {})],
    "retnet": [(32, 4, 1, 1, 2, {}), (32, 32, 1, 1, 1, {"value_dim": 8})],
    "rwkv6": [(32, 8, 1, 2, 2, {})],
    "deltanet": [(32, 4, 1, 1, 2, {}), (32, 32, 1, 1, 1, {"value_dim": 8}), (32, 8, 2, 4, 1, {})],
    "gated-deltanet": [(32, 8, 1, 2, 2, {}), (32, 16, 1, 1, 1, {"value_dim": 16})],
    "linear-attention": [(32, 8, 1, 2, 2, {}), (32, 4, 1, 1, 1, {"feature_map": "hedgehog"})],
    "based": [(32, 4, 1, 2, 1, {})],
    "gsa": [(32, 4, 1, 2, 1, {}), (32, 8, 2, 1, 1, {"expand_k": 0.5})],
    "hgrn2": [(32, 8, 1, 1, 1, {}), (32, 4, 2, 8, 1, {})],
}
MAMBA_SSM = {"mamba", "mamba2"}


def _adapter(name, d, n, layers, heads, expand, options):
    cls = ADAPTERS.require(name)
    ok, why = cls.availability()
    if not ok and name not in MAMBA_SSM:  # mamba-ssm's sizes need no import
        pytest.skip(f"{name}: {why}")
    return cls(ModelConfig(adapter=name, d_model=d, d_state=n, n_layers=layers, n_heads=heads,
                           expand=expand, options=dict(options)))


def test_every_adapter_with_a_fixed_state_is_covered():
    """CONFIGS names every built-in adapter whose state does not grow with L."""
    names = {n for n in ADAPTERS.names() if n != "pytest-factory"}
    assert names - set(CONFIGS) == {"attention"}


@pytest.mark.parametrize("name,cfg", [(n, c) for n, cs in CONFIGS.items() for c in cs])
def test_the_shape_multiplies_to_the_state_size(name, cfg):
    adapter = _adapter(name, *cfg)
    shape = adapter.state_shape()
    assert shape and all(isinstance(v, int) and v >= 1 for v in shape.values())
    assert shape_product(shape) == adapter.state_size()
    assert shape["layers"] == cfg[2]


def test_attention_has_no_shape():
    a = ADAPTERS.require("attention")(ModelConfig(adapter="attention", d_model=32))
    assert a.state_size() is None and a.state_shape() is None and realisable(a, "key") == {}


def test_fla_shape_is_read_from_the_built_layer():
    """deltanet keys 32, values 8 (options.value_dim): fla's built layer has head_k_dim 32
    and head_v_dim 8, as the hand-written delta rule of examples/delta_rule.py."""
    a = _adapter("deltanet", 32, 32, 1, 1, 1, {"value_dim": 8})
    layer = a.make_layer(0)
    assert (layer.head_k_dim, layer.head_v_dim) == (32, 8)
    assert a.state_shape() == {"layers": 1, "heads": 1, "key": 32, "value": 8}


@pytest.mark.parametrize("name", ["linear-mamba", "deltanet", "gla"])
def test_realised_shapes_keep_the_state_size(name):
    """At S = 256 (D = 32): each realised key has its own config with S = 256 and that key;
    the key-value layers reach keys 4 to 32 (value widths below D), linear-mamba's integer
    expand only 1 to 8."""
    base = _adapter(name, 32, 4, 1, 1, 2, {})
    got = realisable(base, "key")
    for key, cfg in got.items():
        other = ADAPTERS.require(name)(cfg)
        assert other.state_size() == 256 and other.state_shape()["key"] == key
        assert cfg.d_model == 32 and cfg.n_layers == 1
    want = {1, 2, 4, 8} if name == "linear-mamba" else {4, 8, 16, 32}
    assert want <= set(got) and all(256 % k == 0 for k in got)
    if name == "linear-mamba":
        assert max(got) == 8


def test_value_dim_is_refused_where_the_layer_has_no_value_expansion():
    with pytest.raises(ConfigError, match="model.options.value_dim.*hgrn2 has no value"):
        _adapter("hgrn2", 32, 8, 1, 1, 1, {"value_dim": 16})
    with pytest.raises(ConfigError, match="model.options.value_dim"):
        _adapter("deltanet", 48, 8, 1, 1, 1, {"value_dim": 0})


def test_designed_shapes_change_its_width_and_respect_n_at_most_d():
    """The designed model's value is its width 2D: key k at S = 2·16·4 = 128 sets D = 64/k,
    refused once N > D (k = 16 would need D = 4)."""
    got = realisable(_adapter("designed", 16, 4, 1, 1, 2, {}), "key")
    assert {k: c.d_model for k, c in got.items()} == {1: 64, 2: 32, 4: 16, 8: 8}
    assert all(2 * c.d_model * c.d_state == 128 for c in got.values())


def test_heads_keep_the_state_of_a_key_value_layer():
    got = realisable(_adapter("linear-mamba", 32, 4, 1, 1, 2, {}), "heads")
    assert {1, 2, 4, 8, 16, 32, 64} <= set(got)
    assert all(math.prod(ADAPTERS.require("linear-mamba")(c).state_shape().values()) == 256
               for c in got.values())
