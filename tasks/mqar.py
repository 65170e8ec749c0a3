"""Multi-query associative recall (MQAR), Zoology's generator, vectorized.

Example: ``sample(1, torch.Generator().manual_seed(5))`` with ``vocab_size=12,
num_facts=2, seq_len=16, random_non_queries=False``::

                 k1   v1   k2   v2   query region (L - 2·N_f tokens, queries at even slots)
    inputs:      5   10    3    8    0    0    0    0    0    0    3    0    0    0    5    0
    targets:  -100 -100 -100 -100 -100 -100 -100 -100 -100 -100    8 -100 -100 -100   10 -100

Keys are distinct tokens from ``1 .. V/2-1``, values distinct tokens from
``V/2 .. V-1``.  Every key is queried exactly once, at slot ``2N_f + 2·gap`` where
the gaps are drawn one after another without replacement from ``range((L - 2N_f) // 2)``
with Zoology's power law ``p(gap) ∝ a·(gap+1)^(a-1)`` (``power_a = 1``: uniform, the
paper's setting); as in Zoology the i-th context key takes the i-th gap drawn, so with
``power_a < 1`` the keys given first tend to be asked first.  With
``random_non_queries`` every other position holds a random token of the whole
vocabulary.  The label sits at the query key's own position: the model must emit the
value as it reads the key.

The law describes it as the task family "mqar" (docs/theory.md, 'The law'); the
queries ask for ``info_bits`` = N_f·log2(V/2) bits, the Fano bound's requirement
(docs/theory.md, 'Fano').
"""
from __future__ import annotations

import dataclasses

from recallbench.api.fields import check_range, fail
from recallbench.api.registry import TASKS
from recallbench.api.task import Task, distinct, numbers, recall_sequences


@TASKS.register("mqar")
@dataclasses.dataclass
class MQAR(Task):
    """Zoology's MQAR: N_f key-value pairs, then each key queried once."""

    description = "multi-query associative recall (Zoology), every key queried once"
    law_family = "mqar"

    vocab_size: int = 128
    seq_len: int = 64
    num_facts: int = 16
    power_a: float = 1.0
    random_non_queries: bool = True

    def validate(self) -> None:
        super().validate()
        self.check_layout()
        if not self.power_a > 0:
            fail("task.power_a", self.power_a, "must be > 0 (1.0 is uniform placement)")

    def check_layout(self) -> None:
        """The facts and their queries must fit in the sequence."""
        check_range("task.seq_len", self.seq_len, 4 * self.num_facts,
                    why=f"(MQAR needs L >= 4·num_facts = {4 * self.num_facts})")

    @classmethod
    def infeasible(cls, params):
        got = numbers(params, ("seq_len", "num_facts"))
        if got is not None and got[0] < 4 * got[1]:
            return "seq_len_lt_4nf"
        return None

    @property
    def num_queries(self) -> int:
        return self.num_facts

    def sample(self, batch_size, generator=None, device=None):
        B, Nf, V = batch_size, self.num_facts, self.vocab_size
        keys = distinct(B, Nf, self.num_keys, generator, device) + 1
        values = distinct(B, Nf, self.num_values, generator, device) + V // 2
        return recall_sequences((keys, values), (keys, values), seq_len=self.seq_len,
                                vocab_size=V, power_a=self.power_a,
                                random_non_queries=self.random_non_queries,
                                generator=generator, device=device)
