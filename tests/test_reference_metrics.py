"""Reference metrics as rewards: BLEU, chrF, ROUGE-L with one or several references."""

import pytest

from aha.rewards import bleu, chrf, rouge_l


def test_identical_and_disjoint():
    sample = {"answer": "the quick brown fox jumps over the lazy dog"}
    for metric in (bleu, chrf, rouge_l):
        assert metric("the quick brown fox jumps over the lazy dog", sample) == pytest.approx(1.0)
        assert metric("zzz yyy", sample) < 0.05


def test_rouge_l_by_hand():
    # LCS("the cat sat", "the cat is here") = "the cat": P = 2/3, R = 2/4, F = 4/7
    assert rouge_l("the cat sat", {"answer": "the cat is here"}) == pytest.approx(4 / 7)


def test_several_references_take_the_best_match():
    refs = {"answer": "unused", "references": ["a completely different sentence here", "the cat sat on the mat today"]}
    single = {"answer": "a completely different sentence here"}
    hyp = "the cat sat on the mat today"
    for metric in (bleu, chrf, rouge_l):
        assert metric(hyp, refs) == pytest.approx(1.0)
        assert metric(hyp, single) < 0.3
