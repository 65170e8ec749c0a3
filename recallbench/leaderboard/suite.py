"""Suites: what every model on a leaderboard is measured on (``leaderboards/<suite>/suite.yaml``).

Schema ``recallbench.suite/1``, keys :data:`SUITE_KEYS`: ``name`` (= the folder), ``title``,
``description``; ``task`` (fixed parameters); ``num_facts`` (the N_f grid) or ``capacity``;
``seq_len_per_fact`` (L = k·N_f instead of ``task.seq_len``); ``budgets`` (state-size budgets:
``{name, model, adapters, description}``); ``adapters`` (per-adapter model settings); ``train``
(the recipe); ``seeds``; ``device``; ``threads``; ``tolerance: {accuracy}`` (``verify``);
``scoring`` (``scorer.score``'s; ``guess`` false if absent); ``retired`` (why it is closed).

A **capacity suite** (``capacity`` set, no ``num_facts``) measures each (adapter, budget) by
the search of ``recallbench capacity`` (method 1, :mod:`recallbench.runs.capacity`: ``{max_cells,
cpu_budget_min, max_step, fit_budget}``; method 2, :mod:`recallbench.leaderboard.capacity.method2`:
``{method: 2, work_budget_mtok, max_batches, max_step}``), MQAR at L = 4·N_f with N_f from 2 to
V/2 − 1; each budget carries the card its points make.  The learning rate is ``train.lr`` (a
number, a list searched in each run, or ``auto``) or, in the first suites, a top-level ``lr``
list (one run per lr, the best mean test accuracy kept).  A point's run config: ``task`` =
suite.task + {num_facts} (+ seq_len); ``model`` = {adapter} + suite.adapters[adapter] +
budget.model + budget.adapters[adapter]; ``train`` = suite.train + {seed, threads, device,
progress: false} (+ {lr}).  Submissions live in ``<suite>/submissions/*.yaml``.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping

from recallbench.api.canonical import sha256_of, strip_execution
from recallbench.api.errors import ConfigError
from recallbench.leaderboard.checks import check_name, is_count, is_int, is_num, need, short
from recallbench.leaderboard.yaml_io import read_yaml_data
from recallbench.runs.card_search import DEFAULT_STEP, MAX_BATCHES

SUITE_SCHEMA = "recallbench.suite/1"
MAX_SUITE_BYTES = 256 << 10
SUITE_FILE = "suite.yaml"
SUBMISSIONS_DIR = "submissions"
SUITE_KEYS = {"schema", "name", "title", "description", "task", "num_facts", "budgets", "adapters",
              "train", "lr", "seeds", "device", "threads", "tolerance", "scoring", "retired",
              "seq_len_per_fact", "capacity"}
RECIPE_KEYS = ("task", "num_facts", "budgets", "adapters", "train", "lr", "seeds", "seq_len_per_fact",
               "capacity")
SUITE_BUDGET_KEYS = {"name", "model", "adapters", "description"}


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
        """The grid's N_f (a capacity suite has none: its search places them)."""
        return list(self.data.get("num_facts") or [])

    @property
    def is_capacity(self) -> bool:
        """A capacity suite: cards from ``recallbench capacity``'s search, no fixed grid."""
        return self.data.get("capacity") is not None

    @property
    def capacity_method(self) -> int:
        """The card method of a capacity suite: 1 (cpu-v3's, when unsaid) or 2."""
        return int((self.data.get("capacity") or {}).get("method", 1))

    @property
    def capacity(self) -> dict:
        """A capacity suite's search settings: max_cells, cpu_budget_min (method 1), or
        method, work_budget_mtok, max_batches, max_step (method 2)."""
        if self.capacity_method == 2:
            return {"max_batches": MAX_BATCHES, "max_step": DEFAULT_STEP, **self.data["capacity"]}
        return {"max_cells": 12, "cpu_budget_min": 60.0, **(self.data.get("capacity") or {})}

    def facts_range(self) -> tuple[int, int]:
        """The N_f a capacity suite's points may take: 2 to V/2 − 1 (the keys of V)."""
        from recallbench.runs.capacity import MIN_FACTS

        return MIN_FACTS, int(self.data["task"]["vocab_size"]) // 2 - 1

    @property
    def searches_lr(self) -> bool:
        """True when ``train.lr`` is part of every run's config (a list: searched inside
        each run by validation); False for a top-level ``lr`` grid (one run per lr)."""
        return "lr" in (self.data.get("train") or {})

    @property
    def train_lr(self) -> float | list[float] | None:
        """``train.lr`` resolved as a run config resolves it (None for a top-level grid)."""
        from recallbench.api.config import check_lr

        return check_lr(self.data["train"]["lr"]) if self.searches_lr else None

    @property
    def lrs(self) -> list[float]:
        """Every learning rate the suite tries (searched in each run, or one run each)."""
        lr = self.train_lr if self.searches_lr else self.data["lr"]
        return [float(x) for x in (lr if isinstance(lr, list) else [lr])]

    def lr_text(self) -> str:
        """How the suite sets the learning rate, for its README and page."""
        lrs = ", ".join(f"{x:g}" for x in self.lrs)
        if not self.searches_lr:
            return f"lr ∈ {lrs} (one run each; the best mean over seeds kept)"
        if len(self.lrs) == 1:
            return f"lr {lrs}"
        return f"lr searched in each run over {lrs} (the best by validation accuracy kept)"

    @property
    def retired(self) -> str | None:
        return self.data.get("retired")

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
        recipe = {k: self.data.get(k) for k in RECIPE_KEYS if k != "adapters"
                  and (k in self.data or k not in ("seq_len_per_fact", "capacity"))}
        # (keys added later are hashed only when present: older suites' hashes stay)
        recipe["budgets"] = [{"name": b["name"], "model": b["model"]} for b in self.budgets]
        return sha256_of(recipe)

    def points(self) -> list[dict]:
        """The grid: one dict per (budget, N_f, seed), with ``lr`` for a top-level lr grid,
        in a fixed order (empty for a capacity suite: the search places its points)."""
        lrs = [{}] if self.searches_lr else [{"lr": lr} for lr in self.lrs]
        return [{"budget": b["name"], "num_facts": nf, **lr, "seed": seed}
                for b in self.budgets for nf in self.num_facts for lr in lrs
                for seed in self.seeds]

    def key(self, p: Mapping) -> tuple:
        """A point's place on the grid, typed for comparison: (budget, N_f, seed), or
        (budget, N_f, lr, seed) for a top-level lr grid.  ``p`` is a grid point or a
        submission's point (whose ``lr``, where the suite searches, is the one chosen: not
        part of the key)."""
        lr = () if self.searches_lr else (float(p["lr"]),)
        return (p["budget"], int(p["num_facts"]), *lr, int(p["seed"]))

    def label(self, p: Mapping) -> str:
        """A point for a message: ``D32-N8 N_f=4 seed=0`` (with ``lr=`` for an lr grid)."""
        lr = "" if self.searches_lr else f" lr={float(p['lr']):g}"
        return f"{p['budget']} N_f={p['num_facts']}{lr} seed={p['seed']}"

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
        train = {**copy.deepcopy(self.data.get("train") or {}), "seed": point["seed"],
                 "progress": False}
        train["lr"] = self.train_lr if self.searches_lr else point["lr"]
        if self.is_capacity:
            from recallbench.runs.capacity import protocol_lr

            train["lr"] = protocol_lr(adapter, train["lr"])
        if self.data.get("device") is not None:
            train["device"] = self.data["device"]
        if self.data.get("threads") is not None:
            train["threads"] = self.data["threads"]
        task = {**copy.deepcopy(self.data["task"]), "num_facts": point["num_facts"]}
        if self.data.get("seq_len_per_fact") is not None:  # L = c·N_f, as the paper's MQAR
            task["seq_len"] = self.data["seq_len_per_fact"] * point["num_facts"]
        return {"task": task, "model": model, "train": train}

    def fixed_values(self, adapter: str, point: Mapping, model: Mapping | None = None) -> dict:
        """The keys the suite fixes for a point (execution keys left out): what must match;
        ``model`` (a state shape's model config) overrides the budget's where given."""
        return strip_execution(self.point_config(adapter, point, model))


# -- checking suite.yaml ----------------------------------------------------------------

def _check_header(data: Any, where: str, directory: Path) -> None:
    """Schema, known keys, and a name equal to the folder's."""
    need(isinstance(data, dict), where, "must be a mapping")
    need(data.get("schema") == SUITE_SCHEMA, where,
         f"schema must be {SUITE_SCHEMA!r} (got {short(data.get('schema'))})")
    unknown = sorted(short(k) for k in set(data) - SUITE_KEYS)
    need(not unknown, where, f"unknown key {unknown[0] if unknown else ''}; allowed: "
         f"{', '.join(sorted(SUITE_KEYS))}")
    check_name(data.get("name"), f"{where}: name")
    need(data["name"] == directory.name, where,
         f"name {data['name']!r} must equal its folder name {directory.name!r}")


def _check_task(data: Mapping, where: str) -> None:
    task = data.get("task")
    need(isinstance(task, dict) and isinstance(task.get("name"), str), where,
         "task must be a mapping with a name")
    need("num_facts" not in task, where, "task.num_facts is the grid: use the top-level num_facts list")
    if data.get("capacity") is not None:
        from recallbench.leaderboard.capacity.keys import check_capacity

        check_capacity(data, task, where)
        return
    nf = data.get("num_facts")
    need(isinstance(nf, list) and nf and all(is_count(x, 1) for x in nf)
         and len(set(nf)) == len(nf), where, "num_facts must be a list of distinct positive integers")
    per = data.get("seq_len_per_fact")
    if per is not None:
        need(is_count(per, 3) and per <= 64, where,
             "seq_len_per_fact must be an integer from 3 to 64 (L = seq_len_per_fact · N_f > 2·N_f)")
        need("seq_len" not in task, where,
             "give task.seq_len or seq_len_per_fact, not both")


def _check_budgets(data: Mapping, where: str) -> None:
    budgets = data.get("budgets")
    need(isinstance(budgets, list) and budgets, where, "budgets must be a non-empty list")
    names = []
    for i, b in enumerate(budgets):
        bw = f"{where}: budgets[{i}]"
        need(isinstance(b, dict), bw, "must be a mapping with name and model")
        names.append(check_name(b.get("name"), f"{bw}.name"))
        need(isinstance(b.get("model"), dict) and b["model"], bw, "model must be a non-empty mapping")
        need("adapter" not in b["model"], bw, "model.adapter is chosen per run, not by the budget")
        need(isinstance(b.get("adapters") or {}, dict), bw, "adapters must be a mapping")
        need(set(b) <= SUITE_BUDGET_KEYS, bw, f"unknown key(s) {sorted(set(b) - SUITE_BUDGET_KEYS)}")
    need(len(set(names)) == len(names), where, "budget names must be distinct")


def _check_recipe(data: Mapping, where: str) -> None:
    """Per-adapter settings, train, the lr and seed grid, tolerance and scoring."""
    need(isinstance(data.get("adapters") or {}, dict), where, "adapters must be a mapping")
    train = data.get("train") or {}
    need(isinstance(train, dict), where, "train must be a mapping")
    need("seed" not in train, where, "train.seed is the grid: use the top-level seeds list")
    _check_lr(data, train, where)
    seeds = data.get("seeds")
    need(isinstance(seeds, list) and seeds and all(is_int(s) and 0 <= s < 2 ** 32 for s in seeds)
         and len(set(seeds)) == len(seeds), where, "seeds must be a list of distinct integers in [0, 2**32)")
    tol = (data.get("tolerance") or {}).get("accuracy", 0.02)
    need(is_num(tol) and 0 <= tol <= 1, where, "tolerance.accuracy must be in [0, 1]")
    need(isinstance(data.get("scoring") or {}, dict)
         and set(data.get("scoring") or {}) <= {"delta", "form", "level", "guess"}, where,
         "scoring may set delta, form, level and guess only")
    need(isinstance((data.get("scoring") or {}).get("guess", False), bool), where,
         "scoring.guess must be true or false")
    retired = data.get("retired")
    need(retired is None or (isinstance(retired, str) and 0 < len(retired) <= 500), where,
         "retired must be a text of 1 to 500 characters (why, and what replaces the suite)")


def _check_lr(data: Mapping, train: Mapping, where: str) -> None:
    """Exactly one of train.lr (in every run: a number, a searched list, auto) and a
    top-level lr grid."""
    from recallbench.api.config import check_lr

    need(("lr" in train) != ("lr" in data), where, "give the learning rate once: train.lr "
         "(in every run's config; a list is searched by validation inside each run) or a "
         "top-level lr list (one run per lr)")
    if "lr" in train:
        try:
            check_lr(copy.deepcopy(train["lr"]))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {str(exc)[:300]}") from None
        return
    lr = data.get("lr")
    lrs = lr if isinstance(lr, list) else [lr]
    need(lrs and all(is_num(x) and x > 0 for x in lrs), where, "lr must be a number or a list of numbers > 0")


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
    where = f"suite {file}"
    _check_header(data, where, directory.resolve())
    _check_task(data, where)
    _check_budgets(data, where)
    _check_recipe(data, where)
    return Suite(data, directory)


# -- the folder layout ------------------------------------------------------------------

def submission_files(suite_dir: str | Path) -> list[Path]:
    """The suite's ``submissions/*.yaml`` (a symbolically linked folder is refused)."""
    d = Path(suite_dir) / SUBMISSIONS_DIR
    need(not d.is_symlink(), str(d), "the submissions folder is a symbolic link; not accepted")
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.suffix in (".yaml", ".yml"))


def suite_dirs(root: str | Path) -> list[Path]:
    root = Path(root)
    return sorted(p for p in root.iterdir() if (p / SUITE_FILE).is_file()) if root.is_dir() else []
