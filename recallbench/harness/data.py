"""Data for one run: an online training stream and fixed evaluation sets.

- Training: :class:`TrainStream` yields a fresh batch every step, forever.  Its
  generator is seeded from (run seed, rank, worker), so no two data-loader
  workers or distributed ranks ever repeat each other's data.
- Validation and test: generated once, from seeds that depend only on the task
  and the set's size (never on the run seed), so every run of a task is scored
  on the same sequences and numbers compare across runs and seeds.
- Fresh validation (``train.recipe: paper``, as the paper's code): :class:`FreshSets`
  draws new validation sequences at every validation, from a stream seeded by the run
  seed; the test set stays the fixed one.
"""
from __future__ import annotations

import collections

import numpy as np
import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from recallbench.api.task import Task

VAL_STREAM, TEST_STREAM, TRAIN_STREAM, MODEL_STREAM = 1, 2, 3, 4  # seed namespaces


def make_generator(*key: int) -> torch.Generator:
    """A torch.Generator seeded from a tuple of non-negative ints (SeedSequence mixing)."""
    seed = int(np.random.SeedSequence(list(key)).generate_state(1, dtype=np.uint64)[0])
    return torch.Generator().manual_seed(seed % (2**63 - 1))


def fixed_set(task: Task, size: int, stream: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A reproducible evaluation set: (inputs, targets), each (size, L)."""
    return task.sample(size, make_generator(stream, size))


class FreshSets:
    """New evaluation sequences at every call: ``size`` sequences drawn from one stream
    seeded by (stream, size, run seed), so a run's n-th validation set is reproducible and
    never the same as its others."""

    def __init__(self, task: Task, size: int, seed: int, stream: int = VAL_STREAM):
        self.task, self.size = task, size
        self.gen = make_generator(stream, size, seed)

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.task.sample(self.size, self.gen)


class TrainStream(IterableDataset):
    """The training batches of one run, forever.  In-process (no data-loader workers), it
    remembers where it stood before each of its latest batches (:meth:`position`), and
    ``resume_from`` (such a position) makes a new stream go on from there: a run continued
    from its checkpoint sees the batches it would have seen had it never stopped."""

    def __init__(self, task: Task, batch_size: int, seed: int, rank: int = 0,
                 resume_from: tuple[int, torch.Tensor] | None = None):
        self.task, self.batch_size, self.seed, self.rank = task, batch_size, seed, rank
        self.resume_from = resume_from
        # (index, generator state before that batch) of the latest batches drawn; more
        # than one, as the training loop fetches a batch ahead of the step it trains
        self._recent: collections.deque = collections.deque(maxlen=8)

    def __iter__(self):
        info = get_worker_info()
        worker = info.id if info is not None else 0
        gen = make_generator(TRAIN_STREAM, self.seed, self.rank, worker)
        index = 0
        if self.resume_from is not None:
            if info is not None:
                raise RuntimeError("a resumed training stream runs in-process only")
            index, state = self.resume_from
            gen.set_state(state)
        while True:
            if info is None:
                self._recent.append((index, gen.get_state()))
            yield self.task.sample(self.batch_size, gen)
            index += 1

    def position(self, index: int) -> tuple[int, torch.Tensor]:
        """(index, generator state) before batch ``index`` (0-based), for ``resume_from``;
        LookupError unless it is one of the latest batches drawn in this process."""
        for i, state in self._recent:
            if i == index:
                return i, state
        raise LookupError(f"batch {index} is not among the latest drawn in this process")


class RecallDataModule(LightningDataModule):
    def __init__(self, task: Task, batch_size: int, seed: int, val_size: int, test_size: int,
                 eval_batch_size: int = 512, num_workers: int = 0):
        super().__init__()
        self.task, self.batch_size, self.seed = task, batch_size, seed
        self.val_size, self.test_size = val_size, test_size
        self.eval_batch_size, self.num_workers = eval_batch_size, num_workers
        self.val_set = self.test_set = None

    def setup(self, stage: str | None = None) -> None:
        if self.val_set is None:
            self.val_set = fixed_set(self.task, self.val_size, VAL_STREAM)
            self.test_set = fixed_set(self.task, self.test_size, TEST_STREAM)

    def train_dataloader(self):
        rank = self.trainer.global_rank if self.trainer is not None else 0
        return DataLoader(TrainStream(self.task, self.batch_size, self.seed, rank),
                          batch_size=None, num_workers=self.num_workers)

    def _fixed_loader(self, data):
        dataset = torch.utils.data.TensorDataset(*data)
        return DataLoader(dataset, batch_size=self.eval_batch_size, shuffle=False)

    def val_dataloader(self):
        return self._fixed_loader(self.val_set)

    def test_dataloader(self):
        return self._fixed_loader(self.test_set)
