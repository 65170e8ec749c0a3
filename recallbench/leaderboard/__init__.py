"""Leaderboards: suites, submissions, and their validation, verification and rendering.

A **suite** (``leaderboards/<suite>/suite.yaml``, schema ``recallbench.suite/1``) fixes
what every model is measured on::

    schema: recallbench.suite/1
    name: cpu-small                      # = the folder name
    title: ...; description: ...
    task: {name: mqar, vocab_size: 128, seq_len: 64}    # fixed task parameters
    num_facts: [4, 8, 12, 16]            # the grid over N_f
    budgets:                             # state-size budgets to compare at
      - name: D32-N8
        model: {d_model: 32, d_state: 8, n_layers: 1}
        adapters: {mamba2: {n_heads: 2}} # optional per-adapter settings in this budget
    adapters: {}                         # optional per-adapter model settings, all budgets
    train: {max_steps: 800, batch_size: 64, ...}        # the recipe (any train.* key)
    lr: [0.003]                          # one or several (a sweep: best variant per point)
    seeds: [0, 1]
    device: cpu                          # where `leaderboard run` trains
    threads: 1
    tolerance: {accuracy: 0.02}          # `verify`: largest |accuracy difference| allowed
    scoring: {delta: 0.01, form: eq19, level: 0.95}     # passed to scorer.score

A point of the grid is (budget, N_f, lr, seed); for an adapter its run config is::

    task  = suite.task + {num_facts}
    model = {adapter} + suite.adapters[adapter] + budget.model + budget.adapters[adapter]
    train = suite.train + {lr, seed, threads, device, progress: false}

A **submission** (``leaderboards/<suite>/submissions/<name>.yaml``, schema
``recallbench.submission/1``) is data: the model, its per-point counts, the scorer's
fitted effective state, capacity and Fano ratio, the environment, and a ``sha256`` over
the canonical JSON of everything else (an integrity check against accidental or careless
edits, not a signature).  Each point carries its ``config_hash``; the full config of a
point is its budget's ``config`` updated with the point's ``delta`` (per section), and
the hash is recomputed from it on validation.

Submissions are read with a size limit checked before parsing, with PyYAML's safe loader
(no Python tags; aliases are refused too), and nothing in them is executed or used as a
path outside the leaderboard folder.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import random
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

from recallbench.api.canonical import EXECUTION_KEYS as UNHASHED
from recallbench.api.config import SECTIONS, config_hash
from recallbench.api.errors import ConfigError
from recallbench.runs.store import Store, read_store

SUITE_SCHEMA = "recallbench.suite/1"
SUBMISSION_SCHEMA = "recallbench.submission/1"
MAX_BYTES = 1 << 20  # 1 MiB: larger files are refused before parsing
MAX_SUITE_BYTES = 256 << 10
SUITE_FILE = "suite.yaml"
SUBMISSIONS_DIR = "submissions"
README = "README.md"
PLOT = "accuracy_vs_state.png"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
RUNTIME_TRAIN = ("threads", "device", "progress")
SUITE_KEYS = {"schema", "name", "title", "description", "task", "num_facts", "budgets", "adapters",
              "train", "lr", "seeds", "device", "threads", "tolerance", "scoring"}
RECIPE_KEYS = ("task", "num_facts", "budgets", "adapters", "train", "lr", "seeds")
POINT_COUNTS = ("correct", "total", "correct_topk")


# -- safe YAML ----------------------------------------------------------------------

class _SafeNoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors/aliases (no billion-laughs expansion)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ConfigError(f"YAML aliases are not allowed in leaderboard files "
                              f"(line {event.start_mark.line + 1})")
        return super().compose_node(parent, index)


def _duplicate_check(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dup = sorted({str(k) for k in keys if keys.count(k) > 1})
    if dup:
        raise ConfigError(f"duplicate key {dup[0]!r} (line {node.start_mark.line + 1})")
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_SafeNoAliasLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _duplicate_check)


def read_yaml_data(path: str | Path, what: str = "submission", limit: int = MAX_BYTES) -> Any:
    """Parse a YAML data file safely: size checked first, safe loader, one-line errors."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read ({exc.strerror})") from None
    if not path.is_file():
        raise ConfigError(f"{what} {path}: not a regular file")
    if size > limit:
        raise ConfigError(f"{what} {path}: {size} bytes, larger than the {limit}-byte limit")
    with open(path, "rb") as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise ConfigError(f"{what} {path}: larger than the {limit}-byte limit")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path}: not UTF-8 text") from None
    try:
        return yaml.load(text, Loader=_SafeNoAliasLoader)  # noqa: S506 (a SafeLoader subclass)
    except ConfigError as exc:
        raise ConfigError(f"{what} {path}: {exc}") from None
    except yaml.constructor.ConstructorError as exc:
        tag = getattr(exc, "problem", "") or "unsupported tag"
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        raise ConfigError(f"{what} {path}: rejected at line {line}: {tag.strip()} "
                          "(only plain YAML data is allowed; no Python tags)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{what} {path}: not valid YAML{where}") from None


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def content_sha256(submission: Mapping) -> str:
    """sha256 of the canonical JSON of a submission without its ``sha256`` field."""
    body = {k: v for k, v in submission.items() if k != "sha256"}
    try:
        text = canonical_json(body)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"submission holds a value that is not plain data ({exc})") from None
    return hashlib.sha256(text.encode()).hexdigest()


class _NoAliasDumper(yaml.SafeDumper):
    """Safe dumper that writes shared objects out in full (the reader refuses aliases)."""

    def ignore_aliases(self, data):
        return True


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, default_flow_style=None,
                     width=100, allow_unicode=False)


# -- small checks ---------------------------------------------------------------------

def _need(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{where}: {msg}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_name(value: Any, where: str) -> str:
    _need(isinstance(value, str) and bool(NAME_RE.match(value)) and ".." not in value,
          where, f"{value!r} is not a plain name (letters, digits, . _ + -; no '/', no '..')")
    return value


def check_relative_path(value: Any, where: str) -> str:
    """A path-like field: relative, inside the leaderboard folder, no '..', no drive."""
    _need(isinstance(value, str) and value != "", where, "a relative path is required")
    p = value.replace("\\", "/")
    _need(not p.startswith("/") and not re.match(r"^[A-Za-z]:", p) and "\x00" not in p,
          where, f"{value!r} is an absolute path; only paths inside the leaderboard folder")
    _need(".." not in p.split("/"), where, f"{value!r} escapes the leaderboard folder ('..')")
    return value


def slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-.")[:64]
    return s or "model"


# -- suites ---------------------------------------------------------------------------

class Suite:
    """A parsed, validated ``suite.yaml``."""

    def __init__(self, data: Mapping, directory: Path):
        self.data = dict(data)
        self.dir = Path(directory)
        self.name: str = data["name"]

    # the grid -----------------------------------------------------------------
    @property
    def budgets(self) -> list[dict]:
        return self.data["budgets"]

    @property
    def num_facts(self) -> list[int]:
        return list(self.data["num_facts"])

    @property
    def lrs(self) -> list[float]:
        lr = self.data["lr"]
        return [float(x) for x in (lr if isinstance(lr, list) else [lr])]

    @property
    def seeds(self) -> list[int]:
        return list(self.data["seeds"])

    @property
    def tolerance(self) -> float:
        return float((self.data.get("tolerance") or {}).get("accuracy", 0.02))

    @property
    def scoring(self) -> dict:
        return {"delta": 0.01, "form": "eq19", "level": 0.95, **(self.data.get("scoring") or {})}

    def recipe_sha256(self) -> str:
        """sha256 of what every adapter shares: task grid, budgets' sizes, recipe, seeds.

        Per-adapter settings are left out (adding one for a new adapter must not invalidate
        the others' submissions); validation checks them point by point instead.
        """
        recipe = {k: self.data.get(k) for k in RECIPE_KEYS if k != "adapters"}
        recipe["budgets"] = [{"name": b["name"], "model": b["model"]} for b in self.budgets]
        return hashlib.sha256(canonical_json(recipe).encode()).hexdigest()

    def points(self) -> list[dict]:
        """The grid: one dict per (budget, N_f, lr, seed), in a fixed order."""
        return [{"budget": b["name"], "num_facts": nf, "lr": lr, "seed": seed}
                for b in self.budgets for nf in self.num_facts for lr in self.lrs
                for seed in self.seeds]

    def budget(self, name: str) -> dict:
        for b in self.budgets:
            if b["name"] == name:
                return b
        raise ConfigError(f"suite {self.name}: no budget named {name!r}")

    def point_config(self, adapter: str, point: Mapping, model_extra: Mapping | None = None
                     ) -> dict:
        """The raw run config of one point for one adapter (what `leaderboard run` runs)."""
        b = self.budget(point["budget"])
        model = {"adapter": adapter, **copy.deepcopy((self.data.get("adapters") or {}).get(adapter) or {}),
                 **copy.deepcopy(b["model"]),
                 **copy.deepcopy((b.get("adapters") or {}).get(adapter) or {}),
                 **copy.deepcopy(dict(model_extra or {}))}
        train = {**copy.deepcopy(self.data.get("train") or {}), "lr": point["lr"],
                 "seed": point["seed"], "progress": False}
        if self.data.get("device") is not None:
            train["device"] = self.data["device"]
        if self.data.get("threads") is not None:
            train["threads"] = self.data["threads"]
        task = {**copy.deepcopy(self.data["task"]), "num_facts": point["num_facts"]}
        return {"task": task, "model": model, "train": train}

    def fixed_values(self, adapter: str, point: Mapping) -> dict:
        """The keys the suite fixes for a point (runtime keys left out): what must match."""
        cfg = self.point_config(adapter, point)
        return {s: {k: v for k, v in cfg[s].items() if k not in UNHASHED.get(s, ())}
                for s in SECTIONS}


def _check_suite(data: Any, where: str, directory: Path) -> None:
    _need(isinstance(data, dict), where, "must be a mapping")
    _need(data.get("schema") == SUITE_SCHEMA, where,
          f"schema must be {SUITE_SCHEMA!r} (got {data.get('schema')!r})")
    unknown = sorted(set(data) - SUITE_KEYS)
    _need(not unknown, where, f"unknown key {unknown[0] if unknown else ''!r}; allowed: "
          f"{', '.join(sorted(SUITE_KEYS))}")
    check_name(data.get("name"), f"{where}: name")
    _need(data["name"] == directory.name, where,
          f"name {data['name']!r} must equal its folder name {directory.name!r}")
    task = data.get("task")
    _need(isinstance(task, dict) and isinstance(task.get("name"), str), where,
          "task must be a mapping with a name")
    _need("num_facts" not in task, where, "task.num_facts is the grid: use the top-level num_facts list")
    nf = data.get("num_facts")
    _need(isinstance(nf, list) and nf and all(_is_int(x) and x > 0 for x in nf)
          and len(set(nf)) == len(nf), where, "num_facts must be a list of distinct positive integers")
    budgets = data.get("budgets")
    _need(isinstance(budgets, list) and budgets, where, "budgets must be a non-empty list")
    names = []
    for i, b in enumerate(budgets):
        bw = f"{where}: budgets[{i}]"
        _need(isinstance(b, dict), bw, "must be a mapping with name and model")
        names.append(check_name(b.get("name"), f"{bw}.name"))
        _need(isinstance(b.get("model"), dict) and b["model"], bw, "model must be a non-empty mapping")
        _need("adapter" not in b["model"], bw, "model.adapter is chosen per run, not by the budget")
        _need(isinstance(b.get("adapters") or {}, dict), bw, "adapters must be a mapping")
        _need(set(b) <= {"name", "model", "adapters", "description"}, bw,
              f"unknown key(s) {sorted(set(b) - {'name', 'model', 'adapters', 'description'})}")
    _need(len(set(names)) == len(names), where, "budget names must be distinct")
    _need(isinstance(data.get("adapters") or {}, dict), where, "adapters must be a mapping")
    _need(isinstance(data.get("train") or {}, dict), where, "train must be a mapping")
    for k in ("lr", "seed"):
        _need(k not in (data.get("train") or {}), where, f"train.{k} is the grid: use the top-level "
              f"{'lr' if k == 'lr' else 'seeds'} list")
    lr = data.get("lr")
    lrs = lr if isinstance(lr, list) else [lr]
    _need(lrs and all(_is_num(x) and x > 0 for x in lrs), where, "lr must be a number or a list of numbers > 0")
    seeds = data.get("seeds")
    _need(isinstance(seeds, list) and seeds and all(_is_int(s) and s >= 0 for s in seeds)
          and len(set(seeds)) == len(seeds), where, "seeds must be a list of distinct integers >= 0")
    tol = (data.get("tolerance") or {}).get("accuracy", 0.02)
    _need(_is_num(tol) and 0 <= tol <= 1, where, "tolerance.accuracy must be in [0, 1]")
    _need(isinstance(data.get("scoring") or {}, dict)
          and set(data.get("scoring") or {}) <= {"delta", "form", "level"}, where,
          "scoring may set delta, form and level only")


def load_suite(path: str | Path) -> Suite:
    """A suite from its folder (or its suite.yaml)."""
    path = Path(path)
    if path.is_dir():
        directory, file = path, path / SUITE_FILE
    else:
        directory, file = path.parent, path
    if not file.is_file():
        raise ConfigError(f"suite {path}: no {SUITE_FILE} found")
    data = read_yaml_data(file, "suite", MAX_SUITE_BYTES)
    _check_suite(data, f"suite {file}", directory.resolve())
    return Suite(data, directory)


# -- running a suite into a store -------------------------------------------------------

def load_store_records(paths: Iterable[str | Path]) -> list[dict]:
    """Records of stores (all their files) and of .jsonl/.json files (scorer.load_records)."""
    from recallbench.law.scorer import load_records

    return load_records(list(paths))


def run_suite(suite: Suite, adapter: str, store: str | Path, *, model_extra: Mapping | None = None,
              limit: int | None = None, log: Callable[[str], None] = print,
              runner: Callable | None = None) -> dict[str, int]:
    """Run every point of ``suite`` for ``adapter`` not yet in ``store`` (ok runs skipped).

    Records are appended to ``STORE/results.jsonl`` as each run finishes; a run that
    raises is stored as a failed record (and retried next time).
    """
    from recallbench.api.config import resolve
    from recallbench.api.errors import UnavailableError
    from recallbench.api.registry import ADAPTERS
    from recallbench.api.record import failed_record

    if runner is None:
        from recallbench.harness.train import run as runner
    ok, why = ADAPTERS.get(adapter).availability()
    if not ok:
        raise UnavailableError(f"adapter {adapter} cannot run here: {why}")
    store = Path(store)
    done = read_store(store).hashes("ok") if Path(store).exists() else set()
    todo = []
    for p in suite.points():
        cfg = resolve(suite.point_config(adapter, p, model_extra))
        if cfg.hash() not in done:
            todo.append((p, cfg))
    counts = {"points": len(suite.points()), "skipped": len(suite.points()) - len(todo), "ran": 0,
              "failed": 0}
    if limit is not None:
        todo = todo[:limit]
    log(f"suite {suite.name}, adapter {adapter}: {counts['points']} points, "
        f"{counts['skipped']} already in {store}, {len(todo)} to run")
    if not todo:
        return counts
    with Store(store) as out:
        for i, (p, cfg) in enumerate(todo, 1):
            t0 = time.perf_counter()
            try:
                record = runner(cfg, progress=False)
            except (ConfigError, UnavailableError):
                raise
            except Exception as exc:  # noqa: BLE001 (a run that crashes is data: a failed record)
                first = str(exc).splitlines()[0] if str(exc) else ""
                record = failed_record(cfg, f"{type(exc).__name__}: {first}")
            out.append(record)
            if record.get("status") == "ok":
                counts["ran"] += 1
                msg = f"accuracy {record['accuracy']:.4f} ({record['correct']}/{record['total']})"
            else:
                counts["failed"] += 1
                msg = f"FAILED: {record.get('error')}"
            log(f"[{i}/{len(todo)}] {p['budget']} N_f={p['num_facts']} lr={p['lr']:g} "
                f"seed={p['seed']}: {msg} in {time.perf_counter() - t0:.1f}s")
    return counts


# -- building a submission ------------------------------------------------------------

def _contains(full: Mapping, fixed: Mapping) -> str | None:
    """None if every value of ``fixed`` equals the one in ``full``; else the first mismatch."""
    for section, values in fixed.items():
        have = full.get(section) or {}
        for k, v in values.items():
            if k not in have:
                return f"{section}.{k} missing"
            hv = have[k]
            same = (math.isclose(hv, v, rel_tol=1e-12, abs_tol=0.0)
                    if _is_num(hv) and _is_num(v) and not (_is_int(hv) and _is_int(v)) else hv == v)
            if not same:
                return f"{section}.{k} = {hv!r}, the suite fixes {v!r}"
    return None


def _diff(base: Mapping, cfg: Mapping) -> dict:
    out: dict[str, dict] = {}
    for section in SECTIONS:
        b, c = base.get(section) or {}, cfg.get(section) or {}
        d = {k: v for k, v in c.items() if k not in b or b[k] != v}
        removed = [k for k in b if k not in c]
        if removed:
            raise ConfigError(f"config keys {removed} missing from a record; records of "
                              "different recallbench versions cannot share a submission")
        if d:
            out[section] = d
    return out


# what may differ between the points of one budget: the grid's own keys and runtime keys
DELTA_ALLOWED = {"task": {"num_facts"}, "model": set(),
                 "train": {"lr", "seed", *RUNTIME_TRAIN}}


def _check_delta(delta: Mapping, where: str) -> None:
    for section, values in delta.items():
        extra = sorted(set(values) - DELTA_ALLOWED.get(section, set()))
        _need(not extra, where, f"{section}.{extra[0] if extra else ''} differs between the points "
              "of one budget; only N_f, lr and seed may (one model config per submission)")


def merge_config(base: Mapping, delta: Mapping) -> dict:
    out = copy.deepcopy(dict(base))
    for section, values in (delta or {}).items():
        out[section] = {**(out.get(section) or {}), **values}
    return out


def _delta_checked(base: Mapping, record: Mapping) -> dict:
    delta = _diff(base, record["config"])
    _check_delta(delta, f"submit: run {str(record.get('config_hash'))[:12]}")
    return delta


def _library(adapter: str, versions: Mapping) -> dict:
    """Which library the adapter wraps, and its version from the records."""
    lib_class = ""
    try:
        from recallbench.api.registry import ADAPTERS

        lib_class = getattr(ADAPTERS.get(adapter), "library_class", "") or ""
    except Exception:  # noqa: BLE001 (an adapter not installed here: fall back)
        pass
    top = lib_class.split(".")[0]
    dist = {"mamba_ssm": "mamba-ssm", "fla": "flash-linear-attention"}.get(top, "recallbench")
    return {"name": dist, "version": versions.get(dist), "class": lib_class or None}


def match_points(suite: Suite, records: Iterable[Mapping], adapter: str | None) -> tuple[str, dict]:
    """(adapter, {point key: record}) of the records that fill the suite's grid."""
    recs = [r for r in records if r.get("status") == "ok" and isinstance(r.get("config"), dict)]
    adapters = sorted({(r["config"].get("model") or {}).get("adapter") for r in recs} - {None})
    if adapter is None:
        _need(len(adapters) == 1, "submit", f"the store holds runs of {len(adapters)} adapters "
              f"({', '.join(adapters) or 'none'}): choose one with --adapter")
        adapter = adapters[0]
    by_point: dict[tuple, dict[str, Mapping]] = {}
    for r in recs:
        if (r["config"].get("model") or {}).get("adapter") != adapter:
            continue
        for p in suite.points():
            if _contains(r["config"], suite.fixed_values(adapter, p)) is None:
                by_point.setdefault(_pkey(p), {})[r.get("config_hash")] = r  # last wins
                break
    missing = [p for p in suite.points() if _pkey(p) not in by_point]
    if missing:
        p = missing[0]
        raise ConfigError(f"submit: the store lacks {len(missing)} of {len(suite.points())} points "
                          f"of suite {suite.name} for adapter {adapter}, e.g. budget {p['budget']} "
                          f"N_f={p['num_facts']} lr={p['lr']:g} seed={p['seed']} (run `recallbench "
                          f"leaderboard run --suite {suite.dir} --adapter {adapter} --store ...`)")
    out = {}
    for key, found in by_point.items():
        if len(found) > 1:
            raise ConfigError(f"submit: {len(found)} different runs fill point {key} "
                              f"(configs {', '.join(h[:12] for h in found)}); keep one model "
                              "config per store")
        out[key] = next(iter(found.values()))
    return adapter, out


def _pkey(p: Mapping) -> tuple:
    return (p["budget"], int(p["num_facts"]), float(p["lr"]), int(p["seed"]))


def _score_records(records: list[Mapping], suite: Suite) -> dict:
    from recallbench.law.scorer import score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return score(records, collapse=False, **suite.scoring)


def _budget_scores(report: Mapping, budget_model: Mapping) -> dict:
    """The scorer's per-configuration entry matching a budget (one group expected)."""
    for g in report.get("groups", []):
        for entry in g.get("configs", []):
            if (entry.get("d_model") == budget_model.get("d_model")
                    and entry.get("d_state") == budget_model.get("d_state")
                    and entry.get("n_layers") == budget_model.get("n_layers", 1)):
                out = {}
                for view in ("mean", "best"):
                    e = entry.get(view) or {}
                    if "error" in e:
                        out[view] = {"error": e["error"]}
                        continue
                    out[view] = {k: e.get(k) for k in ("s_eff", "s_eff_ci", "n_eff", "ratio", "capacity",
                                                      "fano_min_bits", "state_bits_total", "bits_ratio")}
                return out
    return {"mean": {"error": "no score"}, "best": {"error": "no score"}}


def _round(x: Any, digits: int = 6) -> Any:
    if isinstance(x, float):
        return float(f"{x:.{digits}g}") if math.isfinite(x) else None
    if isinstance(x, list):
        return [_round(v, digits) for v in x]
    if isinstance(x, dict):
        return {k: _round(v, digits) for k, v in x.items()}
    return x


def point_records(submission: Mapping) -> list[dict]:
    """Minimal result records rebuilt from a submission's counts (for the scorer)."""
    from recallbench.law.scorer import SCHEMA

    out = []
    for b in submission["budgets"]:
        for p in b["points"]:
            cfg = merge_config(b["config"], p.get("delta") or {})
            acc = p["correct"] / p["total"] if p["total"] else 0.0
            out.append({"schema": SCHEMA, "status": "ok", "error": None, "accuracy": acc,
                        "accuracy_topk": (p["correct_topk"] / p["total"]) if p["total"] else 0.0,
                        "top_k": cfg["train"].get("top_k"), "correct": p["correct"],
                        "correct_topk": p["correct_topk"], "total": p["total"],
                        "converged": p.get("converged"), "steps": p.get("steps"),
                        "state_size": b["state_size"], "state_bits": b["state_bits"],
                        "info_bits": p["info_bits"], "seed": p["seed"], "config": cfg,
                        "config_hash": p["config_hash"]})
    return out


def build_submission(suite: Suite, records: Iterable[Mapping], model_name: str, *,
                     adapter: str | None = None, description: str | None = None,
                     url: str | None = None) -> dict:
    """A submission dict from result records that fill the suite's grid for one adapter."""
    check_name(model_name, "--model-name")
    adapter, matched = match_points(suite, records, adapter)
    chosen = [matched[_pkey(p)] for p in suite.points()]
    first = chosen[0]
    versions = dict(first.get("versions") or {})
    devices = sorted({str(r.get("device")) for r in chosen})
    threads = sorted({r.get("threads") for r in chosen if r.get("threads") is not None})
    vset = {canonical_json(r.get("versions") or {}) for r in chosen}
    budgets = []
    model_cfg = None
    for b in suite.budgets:
        pts = [(p, matched[_pkey(p)]) for p in suite.points() if p["budget"] == b["name"]]
        base = copy.deepcopy(pts[0][1]["config"])
        if model_cfg is None:
            model_cfg = {k: v for k, v in base["model"].items()
                         if k not in ("d_model", "d_state", "n_layers")}
        sizes = {r.get("state_size") for _, r in pts}
        _need(len(sizes) == 1, "submit", f"budget {b['name']}: runs report different state sizes {sizes}")
        points = []
        for p, r in pts:
            for k in POINT_COUNTS:
                _need(_is_int(r.get(k)), "submit", f"record {r.get('config_hash', '?')[:12]} lacks {k}")
            points.append({
                "num_facts": p["num_facts"], "lr": p["lr"], "seed": p["seed"],
                "config_hash": r["config_hash"], "delta": _delta_checked(base, r),
                "correct": r["correct"], "total": r["total"], "correct_topk": r["correct_topk"],
                "accuracy": _round(r["correct"] / r["total"]), "info_bits": _round(r.get("info_bits"), 12),
                "steps": r.get("steps"), "best_step": r.get("best_step"),
                "converged": bool(r.get("converged")), "train_s": r.get("train_s"),
                "wall_s": r.get("wall_s")})
        budgets.append({
            "name": b["name"], "state_size": pts[0][1].get("state_size"),
            "state_bits": pts[0][1].get("state_bits") or 32,
            "state_note": pts[0][1].get("state_note"), "params": pts[0][1].get("params"),
            "config": base, "points": points})
    sub: dict[str, Any] = {
        "schema": SUBMISSION_SCHEMA,
        "suite": suite.name,
        "suite_recipe_sha256": suite.recipe_sha256(),
        "model": {"name": model_name, "adapter": adapter, "description": description,
                  "url": url, "library": _library(adapter, versions),
                  "config": model_cfg, "config_hash": config_hash({"model": model_cfg})},
        "budgets": budgets,
    }
    report = _score_records(point_records(sub), suite)
    for bsub, b in zip(sub["budgets"], suite.budgets):
        bsub["score"] = _round(_budget_scores(report, bsub["config"]["model"]))
    sub["scoring"] = {**suite.scoring, "view": "mean", "views": {
        "mean": "mean over seeds (counts pooled)", "best": "best of seeds (paper convention)"}}
    sub["impossible"] = [{k: i.get(k) for k in ("d_model", "d_state", "n_layers", "num_facts",
                                                  "config_hash", "implied_bits", "state_bits_total")}
                         for i in report.get("impossible", [])]
    sub["environment"] = {"versions": versions, "versions_consistent": len(vset) == 1,
                          "devices": devices, "threads": threads,
                          "python_platform": sys.platform,
                          "wall_s_total": _round(sum(float(r.get("wall_s") or 0) for r in chosen), 6)}
    sub["created"] = time.strftime("%Y-%m-%d", time.gmtime())
    sub["sha256"] = content_sha256(sub)
    return sub


def write_submission(sub: Mapping, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = ("# recallbench leaderboard submission (data only; validate with\n"
            "# `recallbench leaderboard validate FILE`). Do not edit by hand: the sha256 covers it.\n"
            + dump_yaml(dict(sub)))
    if len(text.encode()) > MAX_BYTES:
        raise ConfigError(f"submission would be {len(text.encode())} bytes, over the {MAX_BYTES}-byte limit")
    path.write_text(text, encoding="utf-8")
    return path


# -- validation -----------------------------------------------------------------------

SUB_KEYS = {"schema", "suite", "suite_recipe_sha256", "model", "budgets", "scoring", "impossible",
            "environment", "created", "sha256", "artifacts"}
MODEL_KEYS = {"name", "adapter", "description", "url", "library", "config", "config_hash"}
BUDGET_KEYS = {"name", "state_size", "state_bits", "state_note", "params", "config", "points", "score"}
POINT_KEYS = {"num_facts", "lr", "seed", "config_hash", "delta", "correct", "total", "correct_topk",
              "accuracy", "info_bits", "steps", "best_step", "converged", "train_s", "wall_s"}


def _keys(obj: Any, allowed: set, required: set, where: str) -> None:
    _need(isinstance(obj, dict), where, "must be a mapping")
    unknown = sorted(str(k) for k in set(obj) - allowed)
    _need(not unknown, where, f"unknown field {unknown[0] if unknown else ''!r}")
    missing = sorted(required - set(obj))
    _need(not missing, where, f"missing field {missing[0] if missing else ''!r}")


def find_suite_for(path: Path) -> Path:
    """The suite folder of a submission file: .../<suite>/submissions/<file>.yaml."""
    p = Path(os.path.abspath(path))
    _need(p.is_file(), str(path), "no such file")
    _need(p.parent.name == SUBMISSIONS_DIR and (p.parent.parent / SUITE_FILE).is_file(), str(path),
          f"submissions must live in <leaderboards>/<suite>/{SUBMISSIONS_DIR}/ next to the "
          f"suite's {SUITE_FILE}")
    return p.parent.parent


def check_submission(sub: Any, suite: Suite, where: str, *, check_scores: bool = True) -> list[str]:
    """Raise ConfigError on the first problem; returns notes (non-fatal remarks)."""
    notes: list[str] = []
    _keys(sub, SUB_KEYS, SUB_KEYS - {"artifacts", "created"}, where)
    _need(sub["schema"] == SUBMISSION_SCHEMA, where,
          f"schema must be {SUBMISSION_SCHEMA!r} (got {sub['schema']!r})")
    _need(isinstance(sub["sha256"], str) and bool(re.fullmatch(r"[0-9a-f]{64}", sub["sha256"])),
          where, "sha256 must be 64 hex digits")
    got = content_sha256(sub)
    _need(got == sub["sha256"], where, f"content sha256 mismatch: the file says {sub['sha256'][:12]}…, "
          f"its content hashes to {got[:12]}… (edited after submit?)")
    check_name(sub["suite"], f"{where}: suite")
    _need(sub["suite"] == suite.name, where, f"suite {sub['suite']!r} is not this folder's suite {suite.name!r}")
    _need(sub["suite_recipe_sha256"] == suite.recipe_sha256(), where,
          "suite recipe changed since this submission was made (suite_recipe_sha256 differs): re-run it")
    for i, a in enumerate(sub.get("artifacts") or []):
        check_relative_path(a, f"{where}: artifacts[{i}]")
    m = sub["model"]
    _keys(m, MODEL_KEYS, {"name", "adapter", "config", "config_hash", "library"}, f"{where}: model")
    check_name(m["name"], f"{where}: model.name")
    check_name(m["adapter"], f"{where}: model.adapter")
    _need(isinstance(m["config"], dict), where, "model.config must be a mapping")
    _need(config_hash({"model": m["config"]}) == m["config_hash"], where,
          "model.config_hash does not match model.config")
    for k in ("description", "url"):
        _need(m.get(k) is None or isinstance(m.get(k), str), where, f"model.{k} must be text")
    _need(isinstance(sub["budgets"], list), where, "budgets must be a list")
    names = [b.get("name") if isinstance(b, dict) else None for b in sub["budgets"]]
    want = [b["name"] for b in suite.budgets]
    _need(sorted(map(str, names)) == sorted(want), where,
          f"budgets {names} do not match the suite's {want}")
    for b in sub["budgets"]:
        bw = f"{where}: budget {b['name']}"
        _keys(b, BUDGET_KEYS, BUDGET_KEYS - {"state_note", "params"}, bw)
        _need(b["state_size"] is None or (_is_int(b["state_size"]) and b["state_size"] > 0), bw,
              "state_size must be a positive integer or null")
        _need(_is_int(b["state_bits"]) and b["state_bits"] > 0, bw, "state_bits must be a positive integer")
        cfg = b["config"]
        _need(isinstance(cfg, dict) and set(cfg) == set(SECTIONS)
              and all(isinstance(cfg[s], dict) for s in SECTIONS), bw,
              f"config must be a mapping with sections {', '.join(SECTIONS)}")
        _need(cfg["model"].get("adapter") == m["adapter"], bw,
              f"config.model.adapter {cfg['model'].get('adapter')!r} is not model.adapter {m['adapter']!r}")
        _need({k: v for k, v in cfg["model"].items() if k not in ("d_model", "d_state", "n_layers")}
              == m["config"], bw, "config.model differs from model.config (beyond the budget's sizes)")
        _need(isinstance(b["points"], list), bw, "points must be a list")
        want_pts = {_pkey(p) for p in suite.points() if p["budget"] == b["name"]}
        seen = set()
        for j, p in enumerate(b["points"]):
            pw = f"{bw} point {j + 1}"
            _keys(p, POINT_KEYS, {"num_facts", "lr", "seed", "config_hash", "correct", "total",
                                  "correct_topk", "info_bits"}, pw)
            _need(_is_int(p["num_facts"]) and _is_num(p["lr"]) and _is_int(p["seed"]), pw,
                  "num_facts, lr, seed must be numbers")
            key = (b["name"], p["num_facts"], float(p["lr"]), p["seed"])
            _need(key in want_pts, pw, f"N_f={p['num_facts']} lr={p['lr']} seed={p['seed']} is not "
                  f"a point of suite {suite.name}")
            _need(key not in seen, pw, "duplicate point")
            seen.add(key)
            _need(all(_is_int(p[k]) for k in POINT_COUNTS) and p["total"] > 0
                  and 0 <= p["correct"] <= p["correct_topk"] <= p["total"], pw,
                  "counts must satisfy 0 <= correct <= correct_topk <= total, total > 0")
            _need(isinstance(p.get("delta") or {}, dict) and set(p.get("delta") or {}) <= set(SECTIONS)
                  and all(isinstance(v, dict) for v in (p.get("delta") or {}).values()), pw,
                  "delta must map sections to mappings")
            _check_delta(p.get("delta") or {}, pw)
            full = merge_config(cfg, p.get("delta") or {})
            _need(config_hash(full) == p["config_hash"], pw,
                  "config_hash does not match the point's config (budget config + delta)")
            point = {"budget": b["name"], "num_facts": p["num_facts"], "lr": p["lr"], "seed": p["seed"]}
            bad = _contains(full, suite.fixed_values(m["adapter"], point))
            _need(bad is None, pw, f"config does not follow the suite: {bad}")
            _need(_is_num(p["info_bits"]) and p["info_bits"] > 0, pw, "info_bits must be > 0")
            if p.get("accuracy") is not None:
                _need(abs(p["accuracy"] - p["correct"] / p["total"]) < 1e-5, pw,
                      "accuracy does not equal correct/total")
            if b["state_size"] is not None:
                from recallbench.law.fit import fano_check

                level = suite.scoring["level"]
                chk = fano_check(p["correct"], p["total"], b["state_size"], b["state_bits"],
                                 p["info_bits"], level)
                _need(not chk.impossible, pw,
                      f"IMPOSSIBLE: accuracy >= {chk.accuracy_lower:.4f} at N_f={p['num_facts']} needs "
                      f"{chk.implied_bits:.0f} bits, the state holds b*S = {chk.state_bits_total:.0f} "
                      "(Fano bound, Lem 4.5): a leak or a bug")
        missing = sorted(want_pts - seen)
        if missing:
            raise ConfigError(f"{bw}: {len(missing)} point(s) of the suite missing, e.g. "
                              f"N_f={missing[0][1]} lr={missing[0][2]:g} seed={missing[0][3]}")
    _need(isinstance(sub["impossible"], list) and not sub["impossible"], where,
          "flagged impossible by the scorer (beats the Fano bound): a leak or a bug")
    if check_scores:
        report = _score_records(point_records(sub), suite)
        for b in sub["budgets"]:
            fresh = _round(_budget_scores(report, b["config"]["model"]))
            stored = b["score"] or {}
            for view in ("mean", "best"):
                for k in ("s_eff", "capacity"):
                    a, c = (stored.get(view) or {}).get(k), (fresh.get(view) or {}).get(k)
                    if a is None and c is None:
                        continue
                    ok = (a is not None and c is not None and _is_num(a) and _is_num(c)
                          and math.isclose(a, c, rel_tol=0.02, abs_tol=1e-6))
                    _need(ok, f"{where}: budget {b['name']}", f"score.{view}.{k} = {a} does not match "
                          f"the scorer's {c} recomputed from the counts")
    if not sub["environment"].get("versions_consistent", True):
        notes.append("runs were made with different library versions")
    return notes


def validate_file(path: str | Path, suite_dir: str | Path | None = None, *,
                  check_scores: bool = True) -> tuple[dict, Suite, list[str]]:
    """Read and check one submission file; (submission, suite, notes) or ConfigError."""
    path = Path(path)
    where = str(path)
    _need(path.suffix in (".yaml", ".yml"), where, "submission files are .yaml")
    if suite_dir is None:
        suite_dir = find_suite_for(path)
    else:
        sd = Path(os.path.abspath(suite_dir))
        _need(Path(os.path.abspath(path)).parent == sd / SUBMISSIONS_DIR, where,
              f"not inside {sd / SUBMISSIONS_DIR}")
    _need(not path.is_symlink(), where, "symbolic links are not accepted as submissions")
    suite = load_suite(suite_dir)
    sub = read_yaml_data(path, "submission")
    notes = check_submission(sub, suite, where, check_scores=check_scores)
    return sub, suite, notes


def submission_files(suite_dir: str | Path) -> list[Path]:
    d = Path(suite_dir) / SUBMISSIONS_DIR
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.suffix in (".yaml", ".yml"))


def suite_dirs(root: str | Path) -> list[Path]:
    root = Path(root)
    return sorted(p for p in root.iterdir() if (p / SUITE_FILE).is_file()) if root.is_dir() else []


# -- verification ---------------------------------------------------------------------

def sample_points(sub: Mapping, k: int) -> list[tuple[dict, dict]]:
    """K points chosen deterministically (seeded by the submission's sha256)."""
    all_pts = [(b, p) for b in sub["budgets"] for p in b["points"]]
    rng = random.Random(int(sub["sha256"][:16], 16))
    idx = sorted(rng.sample(range(len(all_pts)), min(k, len(all_pts))))
    return [all_pts[i] for i in idx]


def verify(sub: Mapping, suite: Suite, k: int, *, runner: Callable | None = None,
           log: Callable[[str], None] = print, device: str | None = None) -> list[dict]:
    """Re-run K sampled points; returns one row per point with ``ok`` set."""
    if runner is None:
        from recallbench.harness.train import run as runner
    rows = []
    for b, p in sample_points(sub, k):
        cfg = merge_config(b["config"], p.get("delta") or {})
        cfg["train"] = {**cfg["train"], "progress": False}
        if suite.data.get("threads") is not None:
            cfg["train"]["threads"] = suite.data["threads"]
        if device:
            cfg["train"]["device"] = device
        t0 = time.perf_counter()
        rec = runner(cfg, progress=False)
        _need(rec.get("status", "ok") == "ok", "verify", f"re-run failed: {rec.get('error')}")
        _need(rec["config_hash"] == p["config_hash"], "verify",
              "the re-run's config hash differs from the submission's (another recallbench version?)")
        old = p["correct"] / p["total"]
        new = rec["correct"] / rec["total"]
        row = {"budget": b["name"], "num_facts": p["num_facts"], "lr": p["lr"], "seed": p["seed"],
               "submitted": old, "rerun": new, "diff": new - old,
               "ok": abs(new - old) <= suite.tolerance + 1e-12, "wall_s": time.perf_counter() - t0}
        log(f"{b['name']} N_f={p['num_facts']} lr={p['lr']:g} seed={p['seed']}: submitted {old:.4f}, "
            f"re-run {new:.4f}, diff {new - old:+.4f} (tolerance {suite.tolerance}) "
            f"{'ok' if row['ok'] else 'DISAGREES'}")
        rows.append(row)
    return rows


# -- rendering ------------------------------------------------------------------------

def _acc_by_nf(budget: Mapping) -> dict[int, float]:
    """Mean over seeds of the best learning rate's accuracy, per N_f."""
    out: dict[int, float] = {}
    by: dict[int, dict[float, list[float]]] = {}
    for p in budget["points"]:
        by.setdefault(p["num_facts"], {}).setdefault(float(p["lr"]), []).append(p["correct"] / p["total"])
    for nf, lrs in by.items():
        out[nf] = max(sum(v) / len(v) for v in lrs.values())
    return out


def leaderboard_rows(suite: Suite, subs: list[tuple[Path, Mapping]]) -> list[dict]:
    rows = []
    for path, sub in subs:
        for b in sub["budgets"]:
            sc = (b.get("score") or {}).get("mean") or {}
            S, bits = b["state_size"], b["state_bits"]
            cap = sc.get("capacity")
            per_bit = (cap / (bits * S)) if (cap is not None and S) else None
            rows.append({"file": path.name, "model": sub["model"]["name"], "adapter": sub["model"]["adapter"],
                         "library": sub["model"].get("library") or {}, "budget": b["name"],
                         "state_size": S, "state_bits": bits, "state_note": b.get("state_note"),
                         "s_eff": sc.get("s_eff"), "ratio": sc.get("ratio"), "capacity": cap,
                         "bits_ratio": sc.get("bits_ratio"), "per_bit": per_bit,
                         "acc": _acc_by_nf(b), "sha": sub["sha256"][:12]})
    rows.sort(key=lambda r: (r["per_bit"] is None, -(r["per_bit"] or 0), -(r["capacity"] or 0),
                             r["model"], r["budget"]))
    return rows


def _fmt(x: Any, spec: str = ".3g") -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return format(x, spec)


def render_markdown(suite: Suite, rows: list[dict]) -> str:
    d = suite.data
    nfs = suite.num_facts
    sc = suite.scoring
    tr = d.get("train") or {}
    lines = [f"# Leaderboard: {d.get('title') or suite.name}", "",
             "<!-- generated by `recallbench leaderboard render`; do not edit by hand -->", ""]
    if d.get("description"):
        lines += [str(d["description"]).strip(), ""]
    task = ", ".join(f"{k}={v}" for k, v in d["task"].items())
    lines += [
        f"- **task**: {task}; N_f ∈ {{{', '.join(map(str, nfs))}}}",
        "- **budgets**: " + "; ".join(f"{b['name']} ({', '.join(f'{k}={v}' for k, v in b['model'].items())})"
                                      for b in suite.budgets),
        f"- **recipe**: {', '.join(f'{k}={v}' for k, v in tr.items())}; lr ∈ {suite.lrs}; seeds {suite.seeds}",
        f"- **scoring**: mean over seeds (best learning rate); S_eff fitted with the law "
        f"({sc['form']}), capacity N_f*(δ={sc['delta']}), {int(sc['level'] * 100)}% intervals",
        "",
        "Ranked by **recall capacity per state bit**, N_f* / (b·S): how many facts the model "
        "recalls with probability ≥ 1 − δ per bit of recurrent state (shown per 1000 bits). S is the number of state "
        "scalars per sequence, b the bits per scalar; S_eff is the state of the simplified linear "
        "Mamba that the recall law says reproduces the measured accuracies. "
        "The Fano ratio is b·S divided by the Fano minimum (1 − δ)·N_f*·log2(V/2) − 1 "
        "(Lem 4.5): how many times more bits the state holds than the demonstrated recall needs "
        "(below 1 would contradict the bound). N_f* comes from the fitted law (continuous; it may "
        "lie below the smallest N_f measured when no point reaches 1 − δ). `acc N_f=k`: top-1 "
        "test accuracy, mean over seeds at the better learning rate. Models whose state grows "
        "with L (attention) have no S and are listed last.", ""]
    head = ["#", "model", "adapter", "budget", "state S (scalars)", "S_eff", "S_eff/S", "N_f*",
            "N_f* per kbit", "Fano ratio"] + [f"acc N_f={nf}" for nf in nfs]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] * len(head)) + "|")
    for i, r in enumerate(rows, 1):
        state = str(r["state_size"]) if r["state_size"] is not None else "grows with L"
        cells = [str(i), r["model"], r["adapter"], r["budget"], state, _fmt(r["s_eff"], ".4g"),
                 _fmt(r["ratio"], ".3f"), _fmt(r["capacity"], ".3g"),
                 _fmt(None if r["per_bit"] is None else r["per_bit"] * 1e3, ".3f"),
                 _fmt(r["bits_ratio"], ".3g")]
        cells += [_fmt(r["acc"].get(nf), ".3f") for nf in nfs]
        lines.append("| " + " | ".join(cells) + " |")
    if not rows:
        lines.append("| " + " | ".join(["–"] * len(head)) + " |")
    lines += ["", f"![accuracy against state size]({PLOT})", "",
              "Submissions (in `submissions/`; check with `recallbench leaderboard validate`):", ""]
    for r in rows:
        lib = r["library"]
        lines.append(f"- `{r['file']}`: {r['model']} ({lib.get('name')} {lib.get('version') or ''}"
                     f"{', ' + lib['class'] if lib.get('class') else ''}), sha256 {r['sha']}…")
    if not rows:
        lines.append("- none yet")
    lines += ["", "To add a model: `recallbench leaderboard run --suite leaderboards/"
              f"{suite.name} --adapter NAME --store STORE`, then `recallbench submit --suite "
              f"leaderboards/{suite.name} --store STORE --model-name NAME`, then "
              f"`recallbench leaderboard render leaderboards/{suite.name}`.", ""]
    return "\n".join(lines)


def render_plot(suite: Suite, rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    nfs = suite.num_facts
    V = suite.data["task"].get("vocab_size", 2)
    log2vv = math.log2(max(V / 2, 2))
    finite = [r for r in rows if r["state_size"]]
    bits_all = [r["state_size"] * r["state_bits"] for r in finite] or [1024.0]
    xmin = min(1.0, min(bits_all) / 100)
    xmax = max(bits_all) * 10
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    cmap = plt.get_cmap("viridis")
    colors = {nf: cmap(i / max(1, len(nfs) - 1)) for i, nf in enumerate(nfs)}
    xs = np.logspace(math.log10(xmin), math.log10(xmax), 400)
    for nf in nfs:
        # Lem 4.5: accuracy p needs b·S >= p·N_f·log2(V/2) − 1, so p <= (b·S + 1)/(N_f·log2 V_v)
        bound = np.minimum(1.0, (xs + 1) / (nf * log2vv))
        ax.plot(xs, bound, color=colors[nf], lw=1.2, ls="--")
        ax.fill_between(xs, bound, 1.0, where=bound < 1.0, color=colors[nf], alpha=0.10, lw=0)
    markers = "osD^v<>pPX*h"
    models = sorted({r["model"] for r in finite})
    for mi, name in enumerate(models):
        for r in (r for r in finite if r["model"] == name):
            x = r["state_size"] * r["state_bits"]
            jitter = 1.0 + 0.06 * (mi - (len(models) - 1) / 2)
            for nf in nfs:
                if nf in r["acc"]:
                    ax.scatter([x * jitter], [r["acc"][nf]], color=colors[nf], marker=markers[mi % len(markers)],
                               s=40, edgecolors="black", linewidths=0.5, zorder=3)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[nf], ls="--", label=f"Fano bound, N_f={nf}") for nf in nfs]
    handles += [Line2D([], [], color="0.3", marker=markers[i % len(markers)], ls="", label=m)
                for i, m in enumerate(models)]
    grows = sorted({r["model"] for r in rows if not r["state_size"]})
    ax.set_xscale("log")
    ax.set_xlim(xmin, xmax)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("recurrent state size b·S (bits per sequence; log scale)")
    ax.set_ylabel("test accuracy (top-1, mean over seeds)")
    title = f"{suite.name}: accuracy vs state size ({suite.data['task'].get('name')} V={V}"
    title += f", L={suite.data['task'].get('seq_len')})" if suite.data["task"].get("seq_len") else ")"
    ax.set_title(title)
    ax.legend(handles=handles, fontsize=7, loc="center", ncol=2)  # the empty middle of the plot
    note = ("Dashed: Fano bound (Lem 4.5), accuracy <= (b·S + 1) / (N_f·log2(V/2)); the shaded "
            "region above each curve is impossible for that N_f. Points: one per model and N_f.")
    if grows:
        note += f"\nNot shown (state grows with L): {', '.join(grows)}."
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.text(0.01, 0.01, note, fontsize=7, va="bottom", wrap=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path


def render(suite_dir: str | Path, *, check: bool = False, plot: bool = True
           ) -> tuple[bool, list[str]]:
    """Write (or with ``check``, compare) the suite's README.md and plot.

    Returns (up_to_date, messages).  Every submission is validated first (without the
    score recomputation) so that nothing invalid is rendered.
    """
    suite = load_suite(suite_dir)
    subs = []
    for f in submission_files(suite.dir):
        sub, _, _ = validate_file(f, suite.dir, check_scores=False)
        subs.append((f, sub))
    rows = leaderboard_rows(suite, subs)
    text = render_markdown(suite, rows)
    readme = suite.dir / README
    msgs = []
    if check:
        current = readme.read_text(encoding="utf-8") if readme.is_file() else None
        fresh = current == text
        if not fresh:
            msgs.append(f"{readme} is stale: run `recallbench leaderboard render {suite.dir}`")
        if rows and not (suite.dir / PLOT).is_file():
            fresh = False
            msgs.append(f"{suite.dir / PLOT} is missing: run `recallbench leaderboard render {suite.dir}`")
        return fresh, msgs
    readme.write_text(text, encoding="utf-8")
    msgs.append(f"wrote {readme} ({len(rows)} row(s))")
    if plot:
        render_plot(suite, rows, suite.dir / PLOT)
        msgs.append(f"wrote {suite.dir / PLOT}")
    return True, msgs
