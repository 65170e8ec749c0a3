"""Single-query associative recall (AR): all N_f pairs, then one query.

Example: ``sample(1, torch.Generator().manual_seed(1))`` with ``vocab_size=12,
num_facts=2``, so L = 2·N_f + 1 = 5::

    inputs:      1    6    4    8    4
    targets:  -100 -100 -100 -100    8

Keys and values are drawn as in MQAR (distinct, from the two halves of the
vocabulary); the queried key is uniform over the N_f context keys.  The law describes
it as the task family "ar" (docs/theory.md, 'The law').
"""
from __future__ import annotations

import dataclasses

import torch

from recallbench.api.fields import fail
from recallbench.api.registry import TASKS
from recallbench.api.task import IGNORE, Task, distinct


@TASKS.register("ar")
@dataclasses.dataclass
class AR(Task):
    """Associative recall with one query at the end: L = 2·N_f + 1."""

    description = "single-query associative recall, L = 2*num_facts + 1"
    law_family = "ar"

    vocab_size: int = 128
    num_facts: int = 16
    seq_len: int | None = None  # always 2*num_facts + 1; may be given to be explicit

    def validate(self) -> None:
        super().validate()
        want = 2 * self.num_facts + 1
        if self.seq_len is None:
            self.seq_len = want
        elif self.seq_len != want:
            fail("task.seq_len", self.seq_len,
                 f"AR has L = 2·num_facts + 1 = {want} (omit seq_len or set it to {want})")

    @property
    def num_queries(self) -> int:
        return 1

    def sample(self, batch_size, generator=None, device=None):
        B, Nf, V = batch_size, self.num_facts, self.vocab_size
        keys = distinct(B, Nf, self.num_keys, generator, device) + 1
        values = distinct(B, Nf, self.num_values, generator, device) + V // 2
        pick = torch.randint(Nf, (B, 1), generator=generator, device=device)
        inputs = torch.empty(B, 2 * Nf + 1, dtype=torch.long, device=device)
        inputs[:, 0:2 * Nf:2] = keys
        inputs[:, 1:2 * Nf:2] = values
        inputs[:, -1:] = keys.gather(1, pick)
        targets = torch.full_like(inputs, IGNORE)
        targets[:, -1:] = values.gather(1, pick)
        return inputs, targets
