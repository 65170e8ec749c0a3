"""MQAR with repeated keys: every key appears N_k times, the answer is its latest value.

Example: ``sample(1, torch.Generator().manual_seed(1))`` with ``vocab_size=12,
num_facts=2, num_key_repeats=2, seq_len=16, random_non_queries=False``::

                 k1   va   k2   vb   k2   vc   k1   vd   query region
    inputs:      1    9    4    7    4    8    1   11    0    0    4    0    0    0    1    0
    targets:  -100 -100 -100 -100 -100 -100 -100 -100 -100 -100    8 -100 -100 -100   11 -100

The N_f · N_k occurrences come in a fresh random order, each with a fresh value
(all values in a sequence distinct, from ``V/2 .. V-1``).  Each key is then
queried once, placed like MQAR's queries with the keys in order of first occurrence
(the i-th key to appear takes the i-th gap drawn); its label is the value of its last
occurrence.  Earlier occurrences are never labelled.  Needs ``2·N_f·(N_k + 1) <= L``.
With ``num_key_repeats = 1`` this is MQAR: the same distribution for every ``power_a``.

The law takes MQAR's coefficient for it, task family "mqar" (docs/theory.md, 'The law'):
only the latest binding of each key must be kept, ``info_bits`` = N_f·log2(V/2)
(docs/theory.md, 'Fano').  One layer scores about 1/N_k, two layers solve it
(docs/theory.md, 'Published reference points').
"""
from __future__ import annotations

import dataclasses

import torch

from recallbench.api.fields import check_range
from recallbench.api.registry import TASKS
from recallbench.api.task import distinct, numbers, recall_sequences
from recallbench.tasks.mqar import MQAR


@TASKS.register("mqar-repeated-keys")
@dataclasses.dataclass
class RepeatedKeyMQAR(MQAR):
    """MQAR where each key is rebound N_k times; recall the most recent binding.

    Its parameters are MQAR's (other defaults) and ``num_key_repeats`` N_k; queries,
    ``power_a`` and ``random_non_queries`` behave as in MQAR.
    """

    description = "MQAR with each key repeated num_key_repeats times; answer = latest value"

    vocab_size: int = 512
    seq_len: int = 128
    num_facts: int = 10
    num_key_repeats: int = 2

    def check_layout(self) -> None:
        check_range("task.num_key_repeats", self.num_key_repeats, 1)
        check_range("task.num_facts", self.num_facts, 1, self.num_values // self.num_key_repeats,
                    f"(num_facts·num_key_repeats distinct values must fit in V/2 = {self.num_values})")
        need = 2 * self.num_facts * (self.num_key_repeats + 1)
        check_range("task.seq_len", self.seq_len, need,
                    why=f"(needs L >= 2·num_facts·(num_key_repeats+1) = {need})")

    @property
    def context_values(self) -> int:
        """N_f·N_k: every occurrence carries a fresh value, so the bag holds all of them."""
        return self.num_facts * self.num_key_repeats

    @classmethod
    def infeasible(cls, params):
        got = numbers(params, ("seq_len", "num_facts", "num_key_repeats"))
        if got is not None and got[0] < 2 * got[1] * (got[2] + 1):
            return "seq_len_lt_4nf"
        return None

    def sample(self, batch_size, generator=None, device=None):
        B, Nf, Nk, V = batch_size, self.num_facts, self.num_key_repeats, self.vocab_size
        M = Nf * Nk
        keys = distinct(B, Nf, self.num_keys, generator, device) + 1
        # owner[b, j] = which key sits at context pair j: each of the N_f keys N_k times
        owner = torch.rand(B, M, generator=generator, device=device).argsort(dim=1) // Nk
        pair_value = distinct(B, M, self.num_values, generator, device) + V // 2
        # each key's first and last context pair: a scatter-min / -max of pair indices
        pair = torch.arange(M, device=device).expand(B, M)
        first = torch.full((B, Nf), M, dtype=torch.long, device=device).scatter_reduce(
            1, owner, pair, reduce="amin")
        last = torch.zeros(B, Nf, dtype=torch.long, device=device).scatter_reduce(
            1, owner, pair, reduce="amax")
        by_first = first.argsort(dim=1)  # the keys in order of first occurrence, as MQAR asks
        latest = pair_value.gather(1, last.gather(1, by_first))
        return recall_sequences((keys.gather(1, owner), pair_value),
                                (keys.gather(1, by_first), latest), seq_len=self.seq_len,
                                vocab_size=V, power_a=self.power_a,
                                random_non_queries=self.random_non_queries,
                                generator=generator, device=device)
