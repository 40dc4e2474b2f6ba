"""Reference metrics as rewards (BLEUBERI-style): BLEU, chrF, ROUGE-L of the completion
against one or more references, scaled to [0, 1]. References are sample["references"]
(a list) when present, else [sample["answer"]]. The completion is read as a reader sees it
(extract.strip_hidden, code blocks kept): reference text hidden in a comment or a white span
earns nothing."""

from __future__ import annotations

from functools import lru_cache

from aha.rewards.extract import strip_hidden


def _references(sample: dict) -> list[str]:
    refs = sample.get("references") or [sample["answer"]]
    if isinstance(refs, str):
        refs = [refs]
    return [str(r) for r in refs]


def bleu(completion: str, sample: dict, lowercase: bool = False) -> float:
    """Sentence BLEU (sacrebleu, exponential smoothing) against all references at once."""
    import sacrebleu

    text = strip_hidden(completion, keep_code=True).strip()
    return sacrebleu.sentence_bleu(text, _references(sample), lowercase=lowercase).score / 100.0


def chrf(completion: str, sample: dict) -> float:
    """Sentence chrF (sacrebleu): character n-gram F-score, best over the references."""
    import sacrebleu

    return sacrebleu.sentence_chrf(strip_hidden(completion, keep_code=True).strip(), _references(sample)).score / 100.0


@lru_cache(maxsize=2)
def _rouge_scorer(use_stemmer: bool):
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer)


def rouge_l(completion: str, sample: dict, use_stemmer: bool = True) -> float:
    """ROUGE-L F-measure (rouge-score): longest common subsequence of words, best over the references."""
    scores = _rouge_scorer(use_stemmer).score_multi(_references(sample), strip_hidden(completion, keep_code=True))
    return scores["rougeL"].fmeasure
