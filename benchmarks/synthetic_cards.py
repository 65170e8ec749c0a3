"""Synthetic capacity cards: training runs drawn from a known N50, so that a card's interval
can be checked against the truth (benchmarks/card_coverage.py).

A :class:`Truth` is the run-level model that ``recallbench.law.runfit`` fits.  A run at
N_f facts (guess level g = 1/N_f) recalls a share q of the queries above the guess,

    q = Φ(slope·(ln n50 − ln N_f) + tau·ε + u_seed),   ε ~ N(0, 1) per run,

u_seed ~ N(0, seed_sd²) drawn once per seed (0 by default): a seed fixes a run's initial
weights and data, so runs that share one share u (``runner(shared=True)`` keys u by the
seed's card seed and batch, s + 1000·j, as if every cell's j-th batch reused one seed).
With probability ``failure_rate`` a run is an optimisation failure, q = 0.  Its test
accuracy has mean p = g + (1 − g)·q and is scored as the harness scores it: ``test_size``
sequences of N_f queries each, the queries of a sequence sharing one state, so each
sequence's accuracy is drawn from a beta with mean p and concentration 50 and its N_f
answers are binomial on it (as ``simulated`` in tests/test_capacity.py does).

:func:`runner` returns a ``run_cell(cfgs) -> records`` for the card search, in place of
training: one record per resolved config, with every field the search reads (``correct``,
``total``, ``converged``, ``stop_reason``, ``steps``, ``lr``, ``lr_search``, ...).  The
steps follow the cpu-v3 runs' (its 226 learning-rate searches): a candidate per rate of
``train.lr`` (the protocol's three: 0.003, 0.01, 0.03), each of 2,000 steps, the chosen
one extended to a median of about 2,300 (a long tail to the 8,000 cap), and every
candidate stopping early, after 600-1,900 steps, when the run reaches q ≥ 0.999.  The
training work of a run is Σ steps × batch_size × seq_len over its candidates
(:func:`work_tokens`, as ``recallbench.law.run_card`` counts it).  :func:`sample_truth`
draws a truth over the ranges the cpu-v3 cards show at V = 512, D = 32, N = 8.

Example: a layer with N50 = 20 facts, slope 1.3, run-to-run scatter 0.3 on the probit
scale and one run in twenty failing, measured at N_f = 20 (where q is 1/2 on average):

    >>> import numpy as np
    >>> from synthetic_cards import Truth, runner, work_tokens
    >>> truth = Truth(n50=20.0, slope=1.3, tau=0.3, failure_rate=0.05)
    >>> run_cell = runner(truth, np.random.default_rng(4))
    >>> cfg = {"task": {"name": "mqar", "vocab_size": 512, "num_facts": 20, "seq_len": 80},
    ...        "model": {"adapter": "linear-mamba", "d_model": 32, "d_state": 8},
    ...        "train": {"seed": 0, "batch_size": 32, "test_size": 1024}}
    >>> rec, = run_cell([cfg])
    >>> rec["total"], rec["correct"], round(rec["accuracy"], 3)   # 1,024 sequences × 20
    (20480, 10430, 0.509)
    >>> [(c["lr"], c["steps"]) for c in rec["lr_search"]], rec["lr"]
    ([(0.003, 2000), (0.01, 2000), (0.03, 2400)], 0.03)
    >>> work_tokens(rec) / 1e6          # (2,000 + 2,000 + 2,400) × 32 × 80 tokens
    16.384
    >>> run_cell.runs, run_cell.work_mtok
    (1, 16.384)

Its share above the guess, (0.509 − 0.05)/0.95 = 0.483, is 0.04 below q = 1/2 on the
probit scale (its ε was about −0.14); the chosen rate, 0.03, was extended past the cap.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import special

from recallbench.api.canonical import config_hash
from recallbench.law import run_card, scorer
from recallbench.runs.card_search import CELL_STRIDE  # a run's seed: s + 1000·j + 100000·N_f

#: the candidates' learning rates, and how often each won on cpu-v3 (106, 74, 46 of 226)
LRS = (0.003, 0.01, 0.03)
LR_WINS = (46 / 226, 106 / 226, 74 / 226)
#: steps of a candidate, its cap, the step cap of an extension and the validation interval
MAX_STEPS, STEP_LIMIT, VAL_EVERY = 2000, 8000, 50
#: share of chosen candidates extended past the cap on cpu-v3 (190 of 226)
EXTENDED = 0.84
#: a run whose share above the guess reaches this stops early (train.early_stop)
EARLY_Q = 0.999
#: concentration of a sequence's accuracy around the run's (the queries' correlation)
CONCENTRATION = 50.0
#: defaults of the resolved configs (recallbench.runs.capacity.TRAIN)
TEST_SIZE, BATCH_SIZE = 1024, 32
#: the ranges of :func:`sample_truth`
#: the truths' ranges; slope, tau and failure rate are the card's own SIMULATED, which a card
#: whose fit lies outside them names
RANGES = {"n50": (5.0, 60.0), **run_card.SIMULATED}
D_MODEL, D_STATE = 32, 8


@dataclasses.dataclass(frozen=True)
class Truth:
    """The run-level model of a synthetic layer (see the module)."""

    n50: float  # N_f where a run's q is 1/2 (its median run's)
    slope: float  # −dΦ⁻¹(q)/d ln N_f
    tau: float  # run-to-run SD on the probit scale
    failure_rate: float  # probability that a run stays at the guess
    seed_sd: float = 0.0  # SD of a seed's effect on the probit scale, shared by its runs

    def q(self, num_facts, eps=0.0, u=0.0):
        """The share above the guess of a learned run with noise ``eps`` (in SDs) and
        seed effect ``u`` (probit)."""
        z = (self.slope * (math.log(self.n50) - np.log(num_facts)) + self.tau * np.asarray(eps)
             + u)
        return special.ndtr(z)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def sample_truth(rng: np.random.Generator, seed_share: float = 0.0) -> Truth:
    """A truth over the cpu-v3 cards' ranges (V = 512, D = 32, N = 8): slope uniform in
    [1.0, 1.9], a run-to-run SD uniform in [0, 0.7], failure rate uniform in [0, 0.1], n50
    log-uniform in [5, 60]; ``seed_share`` of the run-to-run variance is the seed's
    (seed_sd² = share·SD², tau² = (1 − share)·SD²)."""
    lo, hi = RANGES["n50"]
    n50 = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    slope, sd = float(rng.uniform(*RANGES["slope"])), float(rng.uniform(*RANGES["tau"]))
    failure = float(rng.uniform(*RANGES["failure_rate"]))
    return Truth(n50=n50, slope=slope, tau=sd * math.sqrt(1.0 - seed_share),
                 failure_rate=failure, seed_sd=sd * math.sqrt(seed_share))


def work_tokens(record: dict) -> int:
    """Training tokens of a record: Σ steps × batch_size × seq_len over its candidates."""
    cfg = record["config"]
    per_step = int(cfg["train"].get("batch_size", BATCH_SIZE)) * int(cfg["task"]["seq_len"])
    steps = ([c["steps"] for c in record["lr_search"]] if record.get("lr_search")
             else [record["steps"]])
    return int(sum(steps)) * per_step


def _steps(rng, early: bool, chosen: bool) -> tuple[int, int]:
    """(steps, doublings of the cap) of one candidate."""
    if early:  # validation reached early_stop: 600-1,900 steps (cpu-v3's runs at ~1.0)
        return VAL_EVERY * int(rng.integers(12, 39)), 0
    if not chosen or rng.random() > EXTENDED:
        return MAX_STEPS, 0
    # extended: median ~300 more steps, a tail to the limit (cpu-v3: 90th percentile 4,125)
    extra = VAL_EVERY * max(1, round(300.0 * math.exp(1.5 * rng.standard_normal()) / VAL_EVERY))
    steps = min(MAX_STEPS + extra, STEP_LIMIT)
    return steps, max(1, math.ceil(math.log2(steps / MAX_STEPS)))


def _record(truth: Truth, cfg: dict, rng: np.random.Generator, u: float = 0.0) -> dict:
    task, train = cfg["task"], cfg["train"]
    nf = int(task["num_facts"])
    units = int(train.get("test_size", TEST_SIZE))
    g = 1.0 / nf
    failed = rng.random() < truth.failure_rate
    eps = float(rng.standard_normal())
    q = 0.0 if failed else float(truth.q(nf, eps, u))
    p = g + (1.0 - g) * q
    per = rng.beta(max(p, 1e-6) * CONCENTRATION, max(1.0 - p, 1e-6) * CONCENTRATION, size=units)
    k, n = int(rng.binomial(nf, per).sum()), units * nf
    early = q >= EARLY_Q
    lr_cfg = train.get("lr", list(LRS))
    lrs = [float(x) for x in lr_cfg] if isinstance(lr_cfg, (list, tuple)) else [float(lr_cfg)]
    wins = LR_WINS if len(lrs) == len(LR_WINS) else [1.0 / len(lrs)] * len(lrs)
    pick = int(rng.choice(len(lrs), p=wins))
    search = []
    for i, lr in enumerate(lrs):
        steps, doubled = _steps(rng, early, i == pick)
        if i == pick:
            val = p
            chosen_steps, extended = steps, doubled
        else:  # a runner-up: below the winner by a few validation SDs or more
            val = g + (p - g) * float(rng.uniform(0.6, 1.0)) if not failed else g
        val = float(np.clip(val + rng.normal(0.0, 0.005), 0.0, 1.0))
        search.append({"lr": lr, "val_accuracy": round(val, 6), "steps": steps,
                       "converged": True, "error": None})
    search[pick]["val_accuracy"] = max(c["val_accuracy"] for c in search)
    return {"schema": scorer.SCHEMA, "status": "ok", "error": None,
            "correct": k, "total": n, "accuracy": k / n,
            "val_accuracy": search[pick]["val_accuracy"],
            "converged": True, "stop_reason": "early_stop" if early else "plateau",
            "state_size": 2 * int(cfg["model"].get("d_model", D_MODEL))
            * int(cfg["model"].get("d_state", D_STATE)),
            "state_bits": 32, "steps": chosen_steps, "extended": extended,
            "max_steps_reached": MAX_STEPS * 2 ** extended,
            "seed": train.get("seed"), "config": cfg, "config_hash": config_hash(cfg),
            "cpu_s": 0.0, "wall_s": 0.0, "lr": lrs[pick],
            "lr_search": search if len(lrs) > 1 else None}


def runner(truth: Truth, rng: np.random.Generator, shared: bool = False):
    """A ``run_cell(cfgs) -> records`` whose runs follow ``truth`` (see the module); a
    seed's effect is drawn at its first run (its own stream: the other draws do not move),
    ``shared``: keyed by s + 1000·j, the seed's value with its N_f part dropped.

    It counts what it was asked for: ``run_cell.runs`` (records made), ``run_cell.work_mtok``
    (their training work, millions of tokens), ``run_cell.calls`` (the N_f of each call),
    ``run_cell.records`` (every record)."""
    seed_rng = np.random.default_rng(rng.integers(2**63)) if truth.seed_sd else None
    effects: dict[int, float] = {}

    def effect(cfg) -> float:
        if not truth.seed_sd:
            return 0.0
        seed = int(cfg["train"]["seed"])
        key = seed % CELL_STRIDE if shared else seed
        if key not in effects:
            effects[key] = float(seed_rng.normal(0.0, truth.seed_sd))
        return effects[key]

    def run_cell(cfgs):
        out = [_record(truth, c, rng, effect(c)) for c in cfgs]
        run_cell.calls.append([c["task"]["num_facts"] for c in cfgs])
        run_cell.records.extend(out)
        run_cell.runs += len(out)
        run_cell.work_mtok += sum(work_tokens(r) for r in out) / 1e6
        return out

    run_cell.calls, run_cell.records, run_cell.runs, run_cell.work_mtok = [], [], 0, 0.0
    return run_cell
