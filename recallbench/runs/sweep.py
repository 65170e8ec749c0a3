"""Sweep definitions: a base run config and axes to vary, expanded into grid points.

A sweep file (YAML, read with ``yaml.safe_load``)::

    base:                       # a run config: sections task, model, train
      task: {name: mqar, vocab_size: 512, seq_len: 64, num_facts: 16}
      model: {adapter: linear-mamba}
      train: {max_steps: 1500}
    axes:                       # dotted config keys → lists of values; the grid is their product
      model.d_model: [4, 8, 16]
      model.d_state: [2, 4, 8]
      train.seed: [0, 1]
    zip:                        # optional: axes varied together (equal lengths), one factor each
      - [model.n_layers, model.d_state]
    skip:                       # the paper's skip rules, both on by default
      n_gt_d: true              #   d_state > d_model
      seq_len_lt_4nf: true      #   the task says L is too short for N_f (Task.infeasible)
    where:                      # optional filters, all must hold: KEY OP KEY|LITERAL
      - model.d_state <= model.d_model
      - model.adapter != designed
      - any: [model.n_heads > 1, model.head_pattern == mva]   # at least one must hold

Expansion order is deterministic: factors in the order their axes first appear, the last
factor varying fastest (``itertools.product``).  Every point that survives the skip rules
and filters is resolved through :func:`recallbench.api.config.resolve`, so a bad value fails
before any work with one line naming the point's axis values.  Points are keyed by their
``config_hash``; two points with the same hash (an axis over an unhashed key such as
``train.threads``) are counted once.

Filters are parsed by a tiny parser (:mod:`recallbench.runs.filters`); nothing in a sweep
file is evaluated as code.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterator, Mapping

from recallbench.api.canonical import config_hash, set_dotted
from recallbench.api.config import SECTIONS, RunConfig, check_sections, resolve
from recallbench.api.errors import ConfigError
from recallbench.api.fields import short
from recallbench.api.yaml_load import read_mapping
from recallbench.runs.filters import KEY, AnyOf, Condition, parse_filter
from recallbench.runs.skip_rules import SKIP_RULES, check_generic, skip_reason, with_defaults

TOP_KEYS = ("base", "axes", "zip", "skip", "where", "name", "description")


# -- points and sweeps ------------------------------------------------------------------

#: the largest grid (cells of the product, before skip rules) a sweep expands unless the
#: caller allows more (``recallbench sweep --max-points N``)
MAX_POINTS = 100_000


@dataclasses.dataclass(eq=False)
class Point:
    """One grid point: its axis values, position, config hash and adapter.

    The config itself is rebuilt from the sweep when asked for (``cfg``, ``config``), so a
    large grid holds only these few fields per point, not a resolved config each.
    """

    sweep: "Sweep" = dataclasses.field(repr=False)
    axes: dict[str, Any]  # this point's value on every axis (dotted key → value)
    index: int  # position in the expansion order
    hash: str
    adapter: str

    @property
    def cfg(self) -> RunConfig:
        return resolve(self.sweep.raw_config(self.axes))

    @property
    def config(self) -> dict[str, Any]:
        """The canonical config dict: ``resolve(config) == cfg``."""
        return self.cfg.to_dict()

    def label(self) -> str:
        if not self.axes:
            return "(base)"
        return " ".join(f"{_short(k)}={_fmt(v)}" for k, v in self.axes.items())


def _short(key: str) -> str:
    return key.split(".", 1)[1] if key.count(".") >= 1 else key


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return _text(v, 40).replace(" ", "") if isinstance(v, (dict, list)) else _text(v, 40)


def _text(value: Any, limit: int) -> str:
    """A value as text for a label or a message, at most ``limit`` characters."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit - 1] + "…"
    return short(value, limit)


@dataclasses.dataclass
class Expansion:
    points: list[Point]
    grid_size: int  # cells of the full product, before skip rules and filters
    skipped: Counter  # rule or filter text → cells dropped
    duplicates: int  # cells whose config_hash equals an earlier cell's


@dataclasses.dataclass
class Sweep:
    base: dict[str, Any]
    axes: dict[str, list]
    zip: list[list[str]]
    skip: dict[str, bool]
    where: list[Condition | AnyOf]
    name: str = "sweep"
    path: Path | None = None

    # -- construction --------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], name: str = "sweep", path: Path | None = None) -> "Sweep":
        if not isinstance(data, Mapping):
            raise ConfigError(f"sweep {name}: expected a mapping with base and axes")
        for key in data:
            if key not in TOP_KEYS:
                raise ConfigError(f"sweep {name}: unknown key {short(key)}; allowed: {', '.join(TOP_KEYS)}")
        base = _parse_base(data.get("base") or {}, name)
        axes = _parse_axes(data.get("axes") or {}, name)
        zips = _parse_zip(data.get("zip") or [], axes, name)
        skip = _parse_skip(data.get("skip", {}), name)
        where_raw = data.get("where") or []
        if isinstance(where_raw, str):
            where_raw = [where_raw]
        if not isinstance(where_raw, list):
            raise ConfigError(f"sweep {name}: where must be a list of comparisons")
        where = [parse_filter(t, f"sweep {name}: where[{i}]") for i, t in enumerate(where_raw)]
        return cls(base=base, axes=axes, zip=zips, skip=skip, where=where,
                   name=_text(data.get("name") or name, 60), path=path)

    # -- size ------------------------------------------------------------------------
    def groups(self) -> list[list[str]]:
        """The axes of each factor of the product, in order: a zip group or one axis."""
        zipped = {k: g for g in self.zip for k in g}
        done: set[str] = set()
        out = []
        for key in self.axes:
            if key not in done:
                group = zipped.get(key, [key])
                done.update(group)
                out.append(group)
        return out

    def size(self) -> int:
        """Cells of the full product, before skip rules and filters: counted, not built."""
        return math.prod(len(self.axes[g[0]]) for g in self.groups())

    def check_size(self, max_points: int | None = MAX_POINTS) -> int:
        """The grid's size; ConfigError, before anything is built, when it exceeds
        ``max_points`` (None: no limit)."""
        n = self.size()
        if max_points is not None and n > max_points:
            dims = " x ".join(str(len(self.axes[g[0]])) for g in self.groups())
            raise ConfigError(f"sweep {self.name}: the grid has {_count(n)} cells "
                              f"({_text(dims, 60)}), more than --max-points "
                              f"{max_points}: split the sweep, or raise --max-points to run it")
        return n

    # -- expansion -------------------------------------------------------------------
    def factors(self) -> list[list[dict[str, Any]]]:
        """One list of assignments (axis → value) per factor of the product, in order."""
        return [[dict(zip(group, values)) for values in zip(*(self.axes[k] for k in group))]
                for group in self.groups()]

    def cells(self) -> Iterator[dict[str, Any]]:
        for combo in itertools.product(*self.factors()):
            cell: dict[str, Any] = {}
            for part in combo:
                cell.update(part)
            yield {k: cell[k] for k in self.axes}  # axis order, whatever the zip grouping

    def raw_config(self, cell: Mapping[str, Any]) -> dict[str, Any]:
        import copy

        raw = copy.deepcopy(self.base)
        for key, value in cell.items():
            set_dotted(raw, key, copy.deepcopy(value), what="axis")
        return raw

    def expand(self, max_points: int | None = MAX_POINTS) -> Expansion:
        """Every point, resolved; ConfigError first if the grid exceeds ``max_points``."""
        self.check_size(max_points)
        out = Expansion([], 0, Counter(), 0)
        out.points = list(self.iter_points(out))
        return out

    def iter_points(self, stats: Expansion | None = None) -> Iterator[Point]:
        """The points one by one, in expansion order (lazily: nothing is held but the hashes
        seen); ``stats`` counts the grid, the skipped cells and the duplicates as it goes."""
        stats = stats if stats is not None else Expansion([], 0, Counter(), 0)
        seen: set[str] = set()
        for cell in self.cells():
            stats.grid_size += 1
            point = self._point(cell, len(seen), stats.skipped)
            if point is None:
                continue
            if point.hash in seen:
                stats.duplicates += 1
                continue
            seen.add(point.hash)
            yield point

    def _point(self, cell: dict[str, Any], index: int, skipped: Counter) -> Point | None:
        """The cell's point, or None (counted in ``skipped``) when a rule or filter drops it."""
        raw = self.raw_config(cell)
        label = _text(" ".join(f"{k}={_fmt(v)}" for k, v in cell.items()) or "(base)", 160)
        cfg, error = None, None
        try:
            cfg = resolve(raw)
            view = cfg.to_dict()
        except ConfigError as exc:
            error = exc
            try:
                check_generic(raw)  # nonsense (D = -1, a typo) is an error, skipped or not
            except ConfigError as bad:
                raise ConfigError(f"sweep {self.name}: point {label}: {bad}") from None
            view = with_defaults(raw)
        try:
            reason = skip_reason(view, self.skip)
            if reason is None:
                reason = next((c.text for c in self.where if not c.holds(view)), None)
        except ConfigError as exc:
            if error is None:
                raise ConfigError(f"sweep {self.name}: point {label}: {exc}") from None
            reason = None  # report the resolve error below, it is the cause
        if reason is not None:
            skipped[reason] += 1
            return None
        if error is not None:
            raise ConfigError(f"sweep {self.name}: point {label}: {error}") from None
        return Point(self, dict(cell), index, config_hash(view), cfg.model.adapter)


def _count(n: int) -> str:
    """A cell count: exact with separators, or its power of ten when it is astronomical."""
    text = str(n)
    return f"{n:,}" if len(text) <= 15 else f"about 10^{len(text) - 1}"


def _parse_base(base: Any, name: str) -> dict[str, dict]:
    if not isinstance(base, Mapping):
        raise ConfigError(f"sweep {name}: base must be a run config (sections task, model, train)")
    try:
        sections = check_sections(base)  # the run config's own rule
    except ConfigError as exc:
        raise ConfigError(f"sweep {name}: base: {exc}") from None
    return {s: dict(v or {}) for s, v in sections.items()}


def _parse_axes(axes_raw: Any, name: str) -> dict[str, list]:
    if not isinstance(axes_raw, Mapping):
        raise ConfigError(f"sweep {name}: axes must map dotted keys to lists of values")
    axes: dict[str, list] = {}
    for key, values in axes_raw.items():
        if not isinstance(key, str) or not re.fullmatch(KEY, key):
            raise ConfigError(f"sweep {name}: axis {short(key)} is not a dotted config key "
                              "such as model.d_model")
        if key.split(".", 1)[0] not in SECTIONS:
            raise ConfigError(f"sweep {name}: axis {_text(key, 80)}: unknown section "
                              f"{short(key.split('.', 1)[0])}; allowed: {', '.join(SECTIONS)}")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"sweep {name}: axis {_text(key, 80)} = {short(values)} is not allowed: "
                              "expected a non-empty list of values")
        axes[key] = list(values)
    return axes


def _parse_zip(zips_raw: Any, axes: Mapping[str, list], name: str) -> list[list[str]]:
    if not isinstance(zips_raw, list) or not all(isinstance(g, list) for g in zips_raw):
        raise ConfigError(f"sweep {name}: zip must be a list of lists of axis names, "
                          "e.g. [[model.n_layers, model.d_state]]")
    zips, seen = [], set()
    for group in zips_raw:
        if len(group) < 2:
            raise ConfigError(f"sweep {name}: zip group {short(group)} needs at least two axes")
        for key in group:
            if not isinstance(key, str) or key not in axes:
                raise ConfigError(f"sweep {name}: zip names {short(key)}, which is not an axis")
            if key in seen:
                raise ConfigError(f"sweep {name}: axis {key} is in two zip groups")
            seen.add(key)
        lengths = {len(axes[k]) for k in group}
        if len(lengths) > 1:
            sizes = ", ".join(f"{k}: {len(axes[k])}" for k in group)
            raise ConfigError(f"sweep {name}: zipped axes must have equal lengths ({sizes})")
        zips.append(list(group))
    return zips


def _parse_skip(skip_raw: Any, name: str) -> dict[str, bool]:
    if skip_raw is None or skip_raw is True:
        skip_raw = {}
    if skip_raw is False:
        skip_raw = {r: False for r in SKIP_RULES}
    if not isinstance(skip_raw, Mapping):
        raise ConfigError(f"sweep {name}: skip must map rule names ({', '.join(SKIP_RULES)}) "
                          "to true/false")
    skip = {r: True for r in SKIP_RULES}
    for rule, on in skip_raw.items():
        if rule not in SKIP_RULES:
            raise ConfigError(f"sweep {name}: unknown skip rule {short(rule)}; "
                              f"known: {', '.join(SKIP_RULES)}")
        if not isinstance(on, bool):
            raise ConfigError(f"sweep {name}: skip.{rule} = {short(on)} is not allowed: "
                              "expected true or false")
        skip[rule] = on
    return skip


def load_sweep(path: str | Path) -> Sweep:
    path = Path(path)
    data = read_mapping(path, "sweep", must="a mapping with base and axes")
    return Sweep.from_dict(data, name=path.name, path=path)


# -- sharding ---------------------------------------------------------------------------

def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"i/n"`` → (i, n) with 0 <= i < n; None for None."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m:
        raise ConfigError(f"--shard {short(text)} is not allowed: expected I/N, e.g. 0/4")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"--shard {short(text)} is not allowed: need 0 <= I < N")
    return i, n


def shard_points(points: list[Point], shard: tuple[int, int] | None) -> list[Point]:
    """The points of shard (i, n): every n-th point in config_hash order, from the i-th.

    Deterministic on every machine for the same sweep file, balanced to within one point,
    and disjoint across shards; returned in expansion order.
    """
    if shard is None:
        return list(points)
    i, n = shard
    mine = {p.hash for rank, p in enumerate(sorted(points, key=lambda p: p.hash)) if rank % n == i}
    return [p for p in points if p.hash in mine]
