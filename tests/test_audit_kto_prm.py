"""Audit: KTO's data fingerprint covers the labels, and the length budget of supervised
sequences (encode_sequences) and of PRM solutions (PRMMethod._encode) at its exact
boundaries, on the tiny model's tokenizer (one token a character, so every length below is
counted by hand: the chat-templated prompt "ab" is 21 tokens)."""

import json
from types import SimpleNamespace

import pytest
import torch

from aha.models.tiny import tiny_tokenizer
from aha.tasks import TaskError, encode_prompts
from aha.tasks.base import Task
from aha.training.supervised.kto import KTOMethod, Labelled, encode_labelled, read_labelled
from aha.training.supervised.prm import PRMMethod
from aha.training.supervised.sequences import Sequence, encode_sequences

TOKENIZER = tiny_tokenizer()
TASK = Task("t", [], [])
EOS = TOKENIZER.eos_token_id
P = 21  # tokens of the templated prompt "ab"
X, Y, Z = TOKENIZER("xyz", add_special_tokens=False)["input_ids"]


def test_the_token_counts_these_tests_rely_on():
    """Guards the hand counts below (not a planted bug): prompt "ab" -> 21 tokens, "xyz" -> 3."""
    assert len(encode_prompts(TOKENIZER, TASK, [{"prompt": "ab"}])[0]) == P
    assert (X, Y, Z) == (36, 37, 38) and EOS == 2


# ---------------------------------------------------------------- KTO fingerprint


def _fingerprint(data: dict) -> str:
    return KTOMethod.data_id(SimpleNamespace(data=data))


def _labelled(labels: list[bool], mismatched_completion=(7,)) -> Labelled:
    sequences = [Sequence((1, 2, k), (3, k), False) for k in range(len(labels))]
    mismatched = [Sequence((1, 2, k), mismatched_completion, False) for k in range(len(labels))]
    return Labelled([{} for _ in labels], sequences, torch.tensor(labels), mismatched)


def test_kto_fingerprint_changes_when_one_label_flips_in_either_split():
    """Catches a KTO data_id that leaves the labels out (or only some splits' labels): a resume
    over a file whose desirable/undesirable labels were edited would reuse reference log-probs
    while training on other labels."""
    base = {"train": _labelled([True, False, True]), "eval": _labelled([True, False])}
    same = {"train": _labelled([True, False, True]), "eval": _labelled([True, False])}
    assert _fingerprint(base) == _fingerprint(same)  # a pure function of the data
    seen = {_fingerprint(base)}
    for split, labels in (("train", [True, False, True]), ("eval", [True, False])):
        for k in range(len(labels)):
            flipped = dict(base, **{split: _labelled([not d if j == k else d for j, d in enumerate(labels)])})
            seen.add(_fingerprint(flipped))
    assert len(seen) == 1 + 3 + 2  # every single flip gives its own fingerprint


def test_kto_fingerprint_covers_the_mismatched_sequences():
    """Catches a data_id that hashes only the rows' own sequences: the reference log-probs of
    the mismatched sequences (z0's) are cached too."""
    a = {"train": _labelled([True, False], mismatched_completion=(7,)), "eval": _labelled([True])}
    b = {"train": _labelled([True, False], mismatched_completion=(8,)), "eval": _labelled([True])}
    assert _fingerprint(a) != _fingerprint(b)


def test_a_label_flipped_in_the_file_changes_the_fingerprint(tmp_path):
    """Catches a label lost between the file and the fingerprint (read_labelled or data_id):
    the same file with one row's label flipped must not pass a resume's check."""
    rows = [{"prompt": "ab", "completion": "xyz", "label": True}, {"prompt": "cd", "completion": "uv", "label": False},
            {"prompt": "ef", "completion": "w", "label": True}]
    setup = SimpleNamespace(tokenizer=TOKENIZER, task=TASK, model=None)

    def fingerprint(file_rows, name):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in file_rows))
        read = read_labelled(path)
        assert [r["desirable"] for r in read] == [r["label"] for r in file_rows]
        eval_split = encode_labelled(setup, read, 64, str(path), with_mismatched=False)  # held out: no mismatched
        train_split = encode_labelled(setup, read_labelled(tmp_path / "train.jsonl"), 64, "train.jsonl", True)
        return _fingerprint({"train": train_split, "eval": eval_split})

    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = fingerprint(rows, "a.jsonl")
    assert fingerprint(rows, "b.jsonl") == before
    flipped = [dict(rows[1], label=True) if k == 1 else r for k, r in enumerate(rows)]
    assert fingerprint(flipped, "c.jsonl") != before


# ---------------------------------------------------------------- encode_sequences at max_length


def _encode(max_length: int, completion: str = "xyz") -> Sequence:
    return encode_sequences(TOKENIZER, TASK, ["ab"], [completion], EOS, max_length, ["pairs.jsonl:3"],
                            "dpo.max_length")[0]


@pytest.mark.parametrize("max_length, completion, truncated", [
    (26, (X, Y, Z, EOS), False),  # prompt + completion + stop = 25 = max_length - 1
    (25, (X, Y, Z, EOS), False),  # exactly max_length: kept whole, stop token included
    (24, (X, Y, Z), True),  # one over: the stop token is cut, and the flag says so
    (23, (X, Y), True),
    (22, (X,), True),  # the prompt is max_length - 1: one completion token fits
])
def test_a_sequence_is_cut_only_past_max_length(max_length, completion, truncated):
    """Catches off-by-ones in encode_sequences' budget: a sequence of exactly max_length tokens
    cut or flagged truncated (>= for >), one over it kept whole, or room miscounted by one."""
    seq = _encode(max_length)
    assert seq.prompt == tuple(encode_prompts(TOKENIZER, TASK, [{"prompt": "ab"}])[0])
    assert seq.completion == completion and seq.truncated is truncated
    assert len(seq) == min(max_length, P + 4)


def test_a_completion_of_only_its_stop_token_fits_the_last_free_position():
    """Catches a truncation flag raised when the completion fills the room exactly (room 1)."""
    seq = _encode(22, completion="")
    assert seq.completion == (EOS,) and seq.truncated is False and len(seq) == 22


@pytest.mark.parametrize("max_length", [21, 20])
def test_a_prompt_of_max_length_or_more_tokens_is_refused_naming_where_and_the_key(max_length):
    """Catches a prompt of exactly max_length tokens let through with an empty completion
    (> for >=): it leaves no room for a single completion token."""
    with pytest.raises(TaskError) as err:
        _encode(max_length)
    assert str(err.value) == (f"pairs.jsonl:3: the prompt is 21 tokens, leaving no room for a completion within "
                              f"dpo.max_length={max_length}; raise dpo.max_length or shorten the prompt")


# ---------------------------------------------------------------- PRM solutions at prm.max_length


def _prm_encode(max_length: int, steps=("ab", "cd"), labels=(1, 0)):
    method = SimpleNamespace(setup=SimpleNamespace(tokenizer=TOKENIZER, task=TASK, model=None),
                             cfg=SimpleNamespace(max_length=max_length, step_separator="\n"))
    row = {"prompt": "ab", "steps": list(steps), "labels": list(labels), "where": "steps.jsonl:1"}
    return PRMMethod._encode(method, [row])[0]


# the solution "ab\ncd" + EOS after the 21 prompt tokens: 27 tokens; step 1 closes at its "\n"
# (position 23), step 2 at the EOS (position 26)
@pytest.mark.parametrize("max_length, ends, labels, cut", [
    (28, [23, 26], [1.0, 0.0], 0),  # 27 tokens = max_length - 1
    (27, [23, 26], [1.0, 0.0], 0),  # exactly max_length: every step closes within it
    (26, [23], [1.0], 1),  # one over: the last step's closing EOS is cut, so it is not scored
    (24, [23], [1.0], 1),  # the first step's closing token is the last that fits
    (23, [], [], 2),  # ... and here it is one past
    (22, [], [], 2),  # the prompt is max_length - 1: no step closes
])
def test_prm_scores_only_the_steps_that_close_within_max_length(max_length, ends, labels, cut):
    """Catches off-by-ones in the PRM's budget: a step whose closing token sits exactly at
    position max_length - 1 dropped, one at max_length kept (< for <=), the tokens cut one
    short or long, the labels not cut with the steps, or the cut-steps count off."""
    solution = _prm_encode(max_length)
    prompt = encode_prompts(TOKENIZER, TASK, [{"prompt": "ab"}])[0]
    whole = prompt + TOKENIZER("ab\ncd", add_special_tokens=False)["input_ids"] + [EOS]
    assert len(whole) == 27
    assert solution.tokens == whole[:max_length]
    assert solution.ends == ends and solution.labels.tolist() == labels and solution.cut == cut
    assert all(solution.tokens[e] in (TOKENIZER.convert_tokens_to_ids("\n"), EOS) for e in solution.ends)


@pytest.mark.parametrize("max_length", [21, 20])
def test_prm_refuses_a_prompt_of_max_length_or_more_tokens(max_length):
    """Catches a PRM prompt of exactly prm.max_length tokens accepted (> for >=)."""
    with pytest.raises(TaskError) as err:
        _prm_encode(max_length)
    assert str(err.value) == (f"steps.jsonl:1: the prompt is 21 tokens, leaving no room for a solution within "
                              f"prm.max_length={max_length}; raise it or shorten the prompt")
