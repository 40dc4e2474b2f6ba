"""Red team: KTO's mismatched sequences at dpo.max_length, the sequences' fingerprint, pair
micro-batches, and the PRM's solution-level held-out metrics over cut solutions."""

from types import SimpleNamespace

import pytest
import torch

from aha.models.tiny import tiny_tokenizer
from aha.tasks.base import Task
from aha.training.supervised.kto import encode_labelled
from aha.training.supervised.prm import PRMMethod, Solution
from aha.training.supervised.sequences import Pairs, Sequence, pair_micro_batches, sequences_id

TOKENIZER = tiny_tokenizer()
TASK = Task("t", [], [])
EOS = TOKENIZER.eos_token_id
P = 21  # tokens of the templated prompts "ab" and "cd"


def _kto_rows():
    # two desirable rows with other prompts: each one's mismatched partner is the other
    return [{"prompt": "ab", "completion": "xyz", "desirable": True, "where": "kto.jsonl:1"},
            {"prompt": "cd", "completion": "uvw", "desirable": True, "where": "kto.jsonl:2"}]


@pytest.mark.parametrize("max_length, truncated", [(P + 5, False), (P + 4, False), (P + 3, True)])
def test_a_mismatched_sequence_is_flagged_truncated_only_past_max_length(max_length, truncated):
    """Catches encode_labelled's truncation flag for the mismatched sequences made >= (a
    partner's completion that fills the room exactly is whole, stop token included)."""
    setup = SimpleNamespace(tokenizer=TOKENIZER, task=TASK, model=None)
    data = encode_labelled(setup, _kto_rows(), max_length, "kto.jsonl", with_mismatched=True)
    assert [len(s.prompt) for s in data.sequences] == [P, P]
    first, second = data.mismatched
    assert first.prompt == data.sequences[0].prompt and second.prompt == data.sequences[1].prompt
    room = max_length - P
    assert first.completion == data.sequences[1].completion[:room] == (33, 34, 35, EOS)[:room]
    assert second.completion == (36, 37, 38, EOS)[:room]
    assert first.truncated is truncated and second.truncated is truncated


def test_the_sequences_fingerprint_covers_the_prompts():
    """Catches sequences_id hashing only the completions: a resume over data whose prompts
    changed (another system prompt, an edited question) would reuse cached reference log-probs."""
    base = sequences_id({"train": [Sequence((1, 2), (3, EOS), False)]}, "dpo")
    assert base == sequences_id({"train": [Sequence((1, 2), (3, EOS), False)]}, "dpo")
    assert sequences_id({"train": [Sequence((1, 5), (3, EOS), False)]}, "dpo") != base
    assert sequences_id({"train": [Sequence((1,), (2, 3, EOS), False)]}, "dpo") != base  # where the prompt ends


@pytest.mark.parametrize("micro_batch_size, sizes", [(4, [2, 2, 1]), (2, [1, 1, 1, 1, 1]), (1, [1, 1, 1, 1, 1]),
                                                     (6, [3, 2])])
def test_a_pair_micro_batch_holds_micro_batch_size_sequences(micro_batch_size, sizes):
    """Catches pair_micro_batches putting micro_batch_size pairs (twice the sequences) in one
    forward: train.micro_batch_size bounds the sequences, and a pair is two of them."""
    chosen = [Sequence((1,) * (k + 1), (3, EOS), False) for k in range(5)]
    rejected = [Sequence((1,) * (k + 1), (4, 4, EOS), False) for k in range(5)]
    groups = pair_micro_batches(Pairs([{}] * 5, chosen, rejected), [4, 0, 3, 1, 2], micro_batch_size)
    assert [len(g) for g in groups] == sizes
    assert [i for g in groups for i in g] == [0, 1, 2, 3, 4]  # like lengths together, every pair once


def test_prm_solution_level_accuracy_counts_only_solutions_whose_steps_all_fit():
    """Catches the PRM's held-out solution metrics computed over solutions cut by
    prm.max_length: their labels of the cut steps are gone, so 'all steps right' cannot be
    judged (docs: over the solutions all of whose steps fit)."""
    whole = Solution(list(range(12)), [5, 9], torch.tensor([1.0, 0.0]), 0)  # the model calls both steps right
    cut = Solution(list(range(8)), [5], torch.tensor([1.0]), 1)  # its second step (labelled 0) did not fit
    logits = {0: torch.tensor([3.0, 3.0]), 1: torch.tensor([3.0])}
    method = SimpleNamespace(solutions={"eval": [whole, cut]}, prm=SimpleNamespace(eval=lambda: None),
                             _groups=lambda solutions, picked: [picked],
                             _logits=lambda solutions, group: torch.cat([logits[i] for i in group]))
    out = PRMMethod.held_out(method, 1)
    assert out["prm_eval/solutions"] == 1
    assert out["prm_eval/solution_accuracy_min"] == 0.0
    assert out["prm_eval/solution_accuracy_sum"] == 0.0
    assert out["prm_eval/first_error_accuracy"] == 0.0
    assert out["prm_eval/step_accuracy"] == pytest.approx(2 / 3)  # every scored step counts here
