"""tinyzoo's recall tests: recallbench trains its layer on a tiny MQAR and checks recall.

Each config trains once per pytest session (and once across CI runs with
``--recall-cache``); ``tests/recall-baseline.json`` holds the accuracies CI compares with.
"""
import pytest

# MQAR with 16 keys and values, 4 facts in 16 tokens, about a second of training on a CPU
TINY = dict(task="mqar", vocab_size=32, seq_len=16, num_facts=4,
            adapter="tiny-linear-attention", d_model=16, max_steps=150, val_every=25,
            val_size=128, test_size=256)


# min_accuracy holds at the full budget; on pull requests (--recall-budget 0.25, a quarter
# of the steps) the floor is min_accuracy_reduced, and the baseline's 0.25 numbers
@pytest.mark.recall(**TINY, d_state=16, min_accuracy=0.9, min_accuracy_reduced=0.8)
def test_full_state_recalls(recall):
    recall()


@pytest.mark.recall(**TINY, d_state=16)
def test_state_size_is_n_times_d(recall):
    assert recall().state_size == 16 * 16  # the same config: measured once


@pytest.mark.recall(**TINY, d_state=4)
def test_smaller_state_recalls_less(recall):
    small, full = recall(), recall(d_state=16)
    assert small.state_size < full.state_size and small.accuracy < full.accuracy
