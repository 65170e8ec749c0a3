"""The task contract: what every recall task plugin provides, and the sampling pieces they share.

A task is a dataclass of its parameters (named after the paper's symbols, see
the glossary in README.md), validated when it is built, with a vectorized
sampler::

    task = TASKS.get("mqar").from_params({"vocab_size": 128, "num_facts": 16})
    inputs, targets = task.sample(batch_size=64, generator=torch.Generator().manual_seed(0))
    # inputs, targets: long tensors (B, L); targets == IGNORE where nothing is asked

and the information the queries ask for, ``info_bits``, used by the Fano bound.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Mapping, Sequence

import torch

from recallbench.api.fields import check_range, fail, from_mapping

IGNORE = -100  # label of a position where nothing is asked (PyTorch's ignore_index)


@dataclasses.dataclass
class Task:
    """Base class. Subclasses are dataclasses whose fields are the task's parameters."""

    name: ClassVar[str] = "task"
    description: ClassVar[str] = ""
    #: the law's task family (``recallbench.law.theory.TASK_FAMILIES``: "ar" or "mqar"),
    #: which picks the coefficient a; None when the law does not describe the task.
    law_family: ClassVar[str | None] = None

    @classmethod
    def infeasible(cls, params: Mapping[str, Any]) -> str | None:
        """Why a sweep cell with these task parameters cannot be built, or None.

        ``params`` is the task section with every unset field at its default, not yet
        validated (values may have any type).  The answer names the sweep skip rule that
        drops the cell (for example ``"seq_len_lt_4nf"``); sweeps skip such cells instead
        of failing on them.
        """
        return None

    # -- construction -------------------------------------------------------
    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None = None) -> "Task":
        """Build and validate from a mapping (a config's ``task`` section, less ``name``)."""
        task = from_mapping(cls, params, "task")
        task.validate()
        return task

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        return True, ""

    def params(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def validate(self) -> None:
        """Raise ConfigError naming the first bad field. Subclasses extend this."""
        v = self.vocab_size  # type: ignore[attr-defined]
        check_range("task.vocab_size", v, 4)
        if v % 2:
            fail("task.vocab_size", v, "must be even (keys and values take one half each)")
        check_range("task.num_facts", self.num_facts, 1, self.num_keys,  # type: ignore[attr-defined]
                    f"(the key vocabulary holds vocab_size/2 - 1 = {self.num_keys} keys)")

    # -- the vocabulary split (Zoology's): token 0 is never a key ------------
    @property
    def num_keys(self) -> int:
        """V_k as Zoology draws it: keys are tokens 1 .. V/2 - 1."""
        return self.vocab_size // 2 - 1  # type: ignore[attr-defined]

    @property
    def num_values(self) -> int:
        """V_v: values are tokens V/2 .. V - 1."""
        return self.vocab_size // 2  # type: ignore[attr-defined]

    # -- what subclasses implement -----------------------------------------
    @property
    def length(self) -> int:
        """The sequence length L the sampler produces."""
        return self.seq_len  # type: ignore[attr-defined]

    @property
    def num_queries(self) -> int:
        """Labelled positions per sequence."""
        raise NotImplementedError

    @property
    def context_values(self) -> int:
        """Distinct values a sequence's context holds (N_f for MQAR and AR): the bag a model
        that knows which values occur, but not which key owns each, guesses from."""
        return self.num_facts  # type: ignore[attr-defined]

    def guess_level(self, top_k: int = 1) -> float:
        """The accuracy of the bag-of-values guess (the paper's Table 8 level): uniform over
        the context's values, so 1/N_f for MQAR and AR, and min(k, M)/M for a top-k answer
        among M context values.  Accuracy at or below it is no evidence of recall."""
        m = self.context_values
        return min(int(top_k), m) / m

    @property
    def info_bits(self) -> float:
        """Bits the state must carry to answer every possible query: N_f · log2(V_v)."""
        return self.num_facts * math.log2(self.num_values)  # type: ignore[attr-defined]

    def sample(self, batch_size: int, generator: torch.Generator | None = None,
               device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


# -- shared vectorized pieces --------------------------------------------------

def distinct(batch: int, k: int, n: int, generator, device=None) -> torch.Tensor:
    """(batch, k) distinct integers from range(n) per row, uniformly, in random order.

    When k is small against n, draw a few more than k integers with replacement
    and keep the first k distinct ones in order of appearance: that is exactly
    sequential sampling without replacement, and far cheaper than ranking all n.
    Rows that drew too few distinct values (rare) are drawn again.  Otherwise rank
    n random scores and keep the top k.
    """
    if n < 4 * k:
        scores = torch.rand(batch, n, generator=generator, device=device)
        return scores.topk(k, dim=1).indices
    m = k + 8 + (2 * k * k) // n  # expected repeats ≈ m²/2n, so m - k leaves ample room
    cand = torch.randint(n, (batch, m), generator=generator, device=device)
    ordered, where = cand.sort(dim=1, stable=True)
    repeat_sorted = torch.zeros_like(cand, dtype=torch.bool)
    repeat_sorted[:, 1:] = ordered[:, 1:] == ordered[:, :-1]  # later copies of a value
    repeat = torch.empty_like(repeat_sorted).scatter_(1, where, repeat_sorted)
    rank = repeat.long() * m + torch.arange(m, device=device)  # first copies, in order
    out = cand.gather(1, rank.argsort(dim=1)[:, :k])
    short = repeat.sum(dim=1) > m - k
    if short.any():
        out[short] = distinct(int(short.sum()), k, n, generator, device)
    return out


def query_slots(batch: int, k: int, space: int, power_a: float, generator,
                device=None) -> torch.Tensor:
    """(batch, k) distinct gaps from range(space) drawn like Zoology's power law.

    Zoology samples ``np.random.choice(space, k, replace=False, p)`` with
    ``p_i ∝ a · i^(a-1)`` (i = 1..space).  Sequential sampling without replacement
    equals taking the top k of ``log p + Gumbel`` noise, which vectorizes.
    ``power_a = 1`` is uniform (the paper's setting).
    """
    if power_a == 1.0:
        return distinct(batch, k, space, generator, device)
    i = torch.arange(1, space + 1, dtype=torch.float64, device=device)
    logp = (power_a - 1.0) * torch.log(i)
    u = torch.rand(batch, space, generator=generator, device=device, dtype=torch.float64)
    gumbel = -torch.log(-torch.log(u.clamp_min(1e-300)))
    return (logp + gumbel).topk(k, dim=1).indices


def fillers(batch: int, length: int, vocab_size: int, random_non_queries: bool, generator,
            device=None) -> torch.Tensor:
    """The background of a sequence: random tokens from the whole vocabulary, or zeros."""
    if random_non_queries:
        return torch.randint(vocab_size, (batch, length), generator=generator, device=device)
    return torch.zeros(batch, length, dtype=torch.long, device=device)


def recall_sequences(context: tuple[torch.Tensor, torch.Tensor],
                     asked: tuple[torch.Tensor, torch.Tensor], *, seq_len: int, vocab_size: int,
                     power_a: float, random_non_queries: bool, generator,
                     device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets), each (B, L): context pairs, then each asked key queried once.

    ``context`` = (keys, values), each (B, M): written as pairs at slots 0 .. 2M-1.
    ``asked`` = (keys, answers), each (B, N_q): the keys to query, **in order of their first
    occurrence in the context**, and their labels.  The query region has
    ``(L - 2M) // 2`` even slots; the i-th asked key goes to the i-th gap that
    :func:`query_slots` draws, as Zoology pairs its i-th context key with its i-th drawn
    gap, so with ``power_a < 1`` the keys seen first tend to be asked first.  The label
    sits at the query key's own position; every other position holds a filler.
    """
    keys, values = context
    query_keys, answers = asked
    B, M = keys.shape
    gaps = query_slots(B, query_keys.shape[1], (seq_len - 2 * M) // 2, power_a, generator,
                       device)
    inputs = fillers(B, seq_len, vocab_size, random_non_queries, generator, device)
    inputs[:, 0:2 * M:2] = keys
    inputs[:, 1:2 * M:2] = values
    qpos = 2 * M + 2 * gaps
    inputs.scatter_(1, qpos, query_keys)
    targets = torch.full((B, seq_len), IGNORE, dtype=torch.long, device=device)
    targets.scatter_(1, qpos, answers)
    return inputs, targets


def numbers(params: Mapping[str, Any], names: Sequence[str]) -> tuple | None:
    """The values of ``names`` in ``params`` if every one is a number (bools are not), else
    None: :meth:`Task.infeasible` sees unvalidated values and leaves bad ones to validate."""
    values = tuple(params.get(name) for name in names)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return values
    return None
