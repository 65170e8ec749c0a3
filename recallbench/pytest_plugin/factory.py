"""The ``factory=`` adapter: an ``nn.Module`` factory given to ``recall(...)`` as a model.

    label = register_factory(lambda d_model, layer_idx: MyMixer(d_model))
    # config: model.adapter = FACTORY_ADAPTER, model.options = {"factory": label, ...}

The factory is kept in this process under a label (``module:qualname``); the adapter
registered as :data:`FACTORY_ADAPTER` (on first use, so that torch loads only then)
returns ``factory(...)`` as each layer's mixer, (B, L, D) -> (B, L, D), so the harness
builds the same model around it as around any adapter's mixer (pre-norm residual blocks,
final RMSNorm, embedding std 0.02: :mod:`recallbench.harness.model`), and reports the
state size the test gave (``state_size=``).

A record's provenance (``provenance.source_sha256``) is the factory's source: the adapter
registered for a factory is defined, for provenance, in the factory's module, so its hash
is that module's (and of the modules of its own package it imports), as an adapter's is its
module's.  A store's results made by an edited factory are then told apart as stale
(:mod:`recallbench.runs.stale`).  ``model.options.name`` (``capacity --name``) names the
layer on its card.
"""
from __future__ import annotations

import re
from typing import Callable

FACTORY_ADAPTER = "pytest-factory"
#: ``model.options.name`` of a factory's runs (``capacity --name``)
NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
NAME_RULE = "1 to 64 characters of A-Z a-z 0-9 . _ -"

_FACTORIES: dict[str, Callable] = {}  # label -> the factory of the run being built
_FACTORY_CLASS = None
_BY_MODULE: dict[str, type] = {}  # the factory's module -> the adapter registered for it


def register_factory(factory: Callable) -> str:
    """Keep ``factory`` for the run being built, register the adapter (its provenance the
    factory's module); return its label."""
    target = getattr(factory, "func", factory)  # functools.partial
    qual = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None) or "?"
    label = f"{module}:{qual}"
    _FACTORIES[label] = factory
    _register_for(module)  # registered under FACTORY_ADAPTER
    return label


def check_name(name, what: str = "model.options.name") -> None:
    """ConfigError (one line) unless ``name`` is None or matches :data:`NAME_RE`."""
    from recallbench.api.errors import ConfigError

    if name is not None and not (isinstance(name, str) and NAME_RE.fullmatch(name)):
        raise ConfigError(f"{what} {str(name)[:80]!r} is not allowed: {NAME_RULE}")


def _register_for(module: str) -> type:
    """The factory adapter registered as :data:`FACTORY_ADAPTER` for a factory defined in
    ``module``: a subclass of the one adapter class whose ``__module__`` is that module, so
    that :func:`recallbench.api.provenance.provenance` hashes the factory's source (None for
    a module without a source file: not judged).  Runs are built one after another, each
    right after its factory is registered, so the adapter registered is the run's."""
    from recallbench.api.registry import ADAPTERS

    base = _factory_adapter()
    cls = _BY_MODULE.get(module)
    if cls is None:
        cls = _BY_MODULE[module] = type(base.__name__, (base,), {
            "__module__": module, "__qualname__": base.__qualname__})
    if ADAPTERS.get(FACTORY_ADAPTER) is not cls:
        ADAPTERS.remove(FACTORY_ADAPTER)
        ADAPTERS.register(FACTORY_ADAPTER)(cls)
    return cls


def _call_factory(factory: Callable, cfg, layer_idx: int, device):
    """Call ``factory`` with the config values its parameters name, else (d_model, layer_idx)."""
    import inspect

    available = {"d_model": cfg.d_model, "layer_idx": layer_idx, "d_state": cfg.d_state,
                 "n_heads": cfg.n_heads, "expand": cfg.expand, "d_conv": cfg.d_conv,
                 "device": device}
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return factory(cfg.d_model, layer_idx)
    empty = inspect.Parameter.empty
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    required = [p for p in params if p.default is empty and p.kind in
                (*named, inspect.Parameter.POSITIONAL_ONLY)]
    if all(p.kind in named and p.name in available for p in required):
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            kwargs = dict(available)
        else:
            kwargs = {p.name: available[p.name] for p in params
                      if p.kind in named and p.name in available}
        return factory(**kwargs)
    return factory(cfg.d_model, layer_idx)


def _factory_adapter():
    """The ad-hoc adapter that wraps ``recall(factory=...)`` (defined and registered once)."""
    global _FACTORY_CLASS
    if _FACTORY_CLASS is not None:
        return _FACTORY_CLASS
    import dataclasses

    from torch import nn

    from recallbench.api.adapter import Adapter
    from recallbench.api.config import HEAD_PATTERNS
    from recallbench.api.errors import ConfigError
    from recallbench.api.fields import from_mapping
    from recallbench.api.registry import ADAPTERS

    @dataclasses.dataclass
    class FactoryOptions:
        factory: str = ""
        state_size: int | None = None
        name: str | None = None  # the layer's name on its card (capacity --name)

    class FactoryAdapter(Adapter):
        description = "an nn.Module factory given to the recall fixture (pytest plugin)"
        library_class = "recall(factory=...)"
        state_formula = "given by the test (state_size=)"
        head_patterns = HEAD_PATTERNS

        def validate(self) -> None:
            super().validate()
            self.options = from_mapping(FactoryOptions, self.cfg.options, "model.options")
            check_name(self.options.name)
            self.factory = _FACTORIES.get(self.options.factory)
            if self.factory is None:
                raise ConfigError(f"adapter {FACTORY_ADAPTER} is for the pytest plugin's "
                                  f"recall(factory=...) only (no factory "
                                  f"{self.options.factory!r} in this process)")

        def build_mixer(self, layer_idx, device):
            mixer = _call_factory(self.factory, self.cfg, layer_idx, device)
            if not isinstance(mixer, nn.Module):
                raise ConfigError(f"factory {self.options.factory} returned "
                                  f"{type(mixer).__name__}, expected an nn.Module")
            return mixer

        def state_size(self):
            return self.options.state_size

        def state_note(self):
            if self.options.state_size is None:
                return "unknown: pass state_size= to the recall marker"
            return self.state_formula

    ADAPTERS.register(FACTORY_ADAPTER)(FactoryAdapter)
    _FACTORY_CLASS = FactoryAdapter
    return FactoryAdapter
