"""MQAR with repeated keys: every key appears N_k times, the answer is its latest value.

Example (``vocab_size=12, num_facts=2, num_key_repeats=2, seq_len=12,
random_non_queries=False``)::

                 k1   va   k2   vb   k1   vc   k2   vd   query region
    inputs:      2    8    4    7    2    9    4   10    4    0    2    0
    targets:  -100 -100 -100 -100 -100 -100 -100 -100   10 -100    9 -100

The N_f · N_k occurrences come in a fresh random order, each with a fresh value
(all values in a sequence distinct, from ``V/2 .. V-1``).  Each key is then
queried once, placed like MQAR's queries; its label is the value of its last
occurrence.  Earlier occurrences are never labelled.  Needs
``2·N_f·(N_k + 1) <= L``.  With ``num_key_repeats = 1`` this is MQAR.
"""
from __future__ import annotations

import dataclasses

import torch

from recallbench.api.fields import check_range, fail
from recallbench.api.registry import TASKS
from recallbench.api.task import IGNORE, Task, distinct, fillers, query_slots


@TASKS.register("mqar-repeated-keys")
@dataclasses.dataclass
class RepeatedKeyMQAR(Task):
    """MQAR where each key is rebound N_k times; recall the most recent binding."""

    description = "MQAR with each key repeated num_key_repeats times; answer = latest value"
    law_family = "mqar"

    vocab_size: int = 512
    seq_len: int = 128
    num_facts: int = 10
    num_key_repeats: int = 2
    power_a: float = 1.0
    random_non_queries: bool = True

    def validate(self) -> None:
        super().validate()
        check_range("task.num_key_repeats", self.num_key_repeats, 1)
        check_range("task.num_facts", self.num_facts, 1, self.num_values // self.num_key_repeats,
                    f"(num_facts·num_key_repeats distinct values must fit in V/2 = {self.num_values})")
        need = 2 * self.num_facts * (self.num_key_repeats + 1)
        check_range("task.seq_len", self.seq_len, need,
                    why=f"(needs L >= 2·num_facts·(num_key_repeats+1) = {need})")
        if not self.power_a > 0:
            fail("task.power_a", self.power_a, "must be > 0 (1.0 is uniform placement)")

    @property
    def num_queries(self) -> int:
        return self.num_facts

    def sample(self, batch_size, generator=None, device=None):
        B, Nf, Nk, L, V = (batch_size, self.num_facts, self.num_key_repeats, self.seq_len,
                           self.vocab_size)
        M = Nf * Nk
        keys = distinct(B, Nf, self.num_keys, generator, device) + 1
        # order[b, j] = which occurrence sits at context pair j; occurrence o belongs to key o // Nk
        order = torch.rand(B, M, generator=generator, device=device).argsort(dim=1)
        pair_key = keys.gather(1, order // Nk)
        pair_value = distinct(B, M, self.num_values, generator, device) + V // 2
        # the last context pair holding each key: a scatter-max of pair indices by key
        pair = torch.arange(M, device=device).expand(B, M)
        last = torch.zeros(B, Nf, dtype=torch.long, device=device).scatter_reduce(
            1, order // Nk, pair, reduce="amax")  # (B, Nf)
        latest = pair_value.gather(1, last)

        inputs = fillers(B, L, V, self.random_non_queries, generator, device)
        inputs[:, 0:2 * M:2] = pair_key
        inputs[:, 1:2 * M:2] = pair_value
        gaps = query_slots(B, Nf, (L - 2 * M) // 2, self.power_a, generator, device)
        qpos = 2 * M + 2 * gaps
        inputs.scatter_(1, qpos, keys)
        targets = torch.full((B, L), IGNORE, dtype=torch.long, device=device)
        targets.scatter_(1, qpos, latest)
        return inputs, targets
