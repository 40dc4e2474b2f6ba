"""Rewards beyond string match: embedding similarity (a local encoder's pooled states) and
language consistency (the share of letters in the expected script)."""

import pytest
import torch

from aha.config import load_config
from aha.rewards import build_reward
from aha.rewards.language import expected_scripts, language_consistency, language_text, letter_script
from aha.rewards.semantic import embedding_similarity, mean_pool, rescaled

REFERENCE = {"answer": "The cat sat on the mat."}
PARAPHRASE = "A cat was sitting on the rug."
UNRELATED = "Stock prices fell sharply on Monday."


def test_mean_pool_ignores_masked_positions():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    assert mean_pool(hidden, torch.tensor([[1, 1, 0]])).tolist() == [[2.0, 3.0]]
    assert mean_pool(hidden, torch.tensor([[0, 0, 0]])).tolist() == [[0.0, 0.0]]


def test_rescales():
    assert rescaled(0.5, "none", 0.0) == 0.5
    assert rescaled(0.5, "unit", 0.0) == 0.75
    assert rescaled(-1.0, "unit", 0.0) == 0.0
    assert rescaled(0.9, "baseline", 0.8) == pytest.approx(0.5)  # (0.9 - 0.8) / (1 - 0.8)
    assert rescaled(0.7, "baseline", 0.8) == pytest.approx(-0.5)  # below the baseline: negative, not clipped


def test_identical_text_scores_one_and_batching_changes_nothing():
    completions = [REFERENCE["answer"], PARAPHRASE, UNRELATED, "Short.", "<!-- The cat sat on the mat. --> Dogs bark."]
    samples = [REFERENCE] * len(completions)
    one = [embedding_similarity([c], [s], model="tiny")[0] for c, s in zip(completions, samples)]
    many = embedding_similarity(completions, samples, model="tiny", batch_size=8)
    assert one[0] == pytest.approx(1.0, abs=1e-6)
    assert many == pytest.approx(one, abs=1e-5)
    assert all(-1.0 <= v <= 1.0 for v in many) and max(many[1:]) < 0.999
    # the reference hidden in a comment is not read: the visible text differs from it
    assert many[4] < 0.999


def test_tiny_encoder_prefers_a_paraphrase_to_unrelated_text():
    """A random tiny model knows no meaning, but shared words share token embeddings: the
    paraphrase (which repeats "cat", "on the") scores above the unrelated sentence."""
    scores = embedding_similarity([PARAPHRASE, UNRELATED], [REFERENCE] * 2, model="tiny")
    assert scores[0] > scores[1]


def test_empty_text_and_bad_arguments():
    assert embedding_similarity(["", "  "], [REFERENCE] * 2, model="tiny") == [0.0, 0.0]
    assert embedding_similarity(["x"], [{"answer": ""}], model="tiny") == [0.0]
    with pytest.raises(ValueError, match="rescale"):
        embedding_similarity(["x"], [REFERENCE], model="tiny", rescale="zscore")
    with pytest.raises(ValueError, match="baseline"):
        embedding_similarity(["x"], [REFERENCE], model="tiny", rescale="baseline", baseline=1.0)
    with pytest.raises(ValueError, match="reference_field"):
        embedding_similarity(["x"], [REFERENCE], model="tiny", reference_field="gold")
    other = embedding_similarity([PARAPHRASE], [{"gold": PARAPHRASE}], model="tiny", reference_field="gold")
    assert other[0] == pytest.approx(1.0, abs=1e-6)


def test_short_names_build_from_a_config():
    config = load_config(None, ['reward=[{fn: embedding_similarity, args: {model: tiny, rescale: unit}}, '
                                '{fn: language_consistency, args: {language: en}, weight: 0.5}]'])
    result = build_reward(config.reward).score([REFERENCE["answer"], "Кот сидел"], [REFERENCE] * 2)
    assert result.components["embedding_similarity"][0] == pytest.approx(1.0, abs=1e-6)
    assert result.components["language_consistency"].tolist() == [1.0, 0.0]


@pytest.mark.slow
def test_embedded_encoder_ranks_a_paraphrase_above_unrelated_text():
    """SmolLM2-135M's last layer, mean-pooled (measured: 0.95 against 0.75)."""
    pairs = [(REFERENCE, PARAPHRASE, UNRELATED),
             ({"answer": "Water boils at 100 degrees Celsius."}, "At 100 °C water starts to boil.",
              "My favourite band released a new album."),
             ({"answer": "Paris is the capital of France."}, "The French capital is Paris.", "I like eating apples.")]
    for sample, paraphrase, unrelated in pairs:
        same, close, far = embedding_similarity([sample["answer"], paraphrase, unrelated], [sample] * 3)
        assert same == pytest.approx(1.0, abs=1e-5)
        assert close > far, (paraphrase, close, far)


def test_letter_scripts():
    assert [letter_script(c) for c in "aЖλب中ひカ한é"] == ["latin", "cyrillic", "greek", "arabic", "han", "hiragana",
                                                         "katakana", "hangul", "latin"]
    assert letter_script("Ａ") == "latin"  # fullwidth A
    assert letter_script("5") is None and letter_script("!") is None


def test_mixed_script_counted_by_hand():
    # letters: H e l l o (5 latin) + м и р (3 cyrillic) = 8
    assert language_consistency("Hello мир!", {}, script="latin") == 5 / 8
    assert language_consistency("Hello мир!", {}, script="cyrillic") == 3 / 8
    assert language_consistency("Hello мир!", {}, script=["latin", "cyrillic"]) == 1.0
    # code, inline code and math are no language: only П р и в е т (6) + м и р (3) count, all cyrillic
    text = "Привет `print(x)` мир $x^2 + y$ \\(a+b\\)\n```python\nfor item in items: pass\n```"
    assert language_text(text).split() == ["Привет", "мир"]
    assert language_consistency(text, {}, language="ru") == 1.0
    # Japanese: kanji (日本語), hiragana (を, で) and katakana (カタカナ) all count: 9 letters; "abc" does not
    assert language_consistency("日本語をカタカナでabc", {}, language="ja") == 9 / 12
    # digits and punctuation are not letters; nothing to count scores `empty`
    assert language_consistency("42 + 7 = 49.", {}, script="latin") == 0.0
    assert language_consistency("42", {}, script="latin", empty=1.0) == 1.0


def test_words_unit_counted_by_hand():
    # words: "The" "answer" "ответ" "is" "fortytwoсорок" -> 3 all-latin of 5 (the mixed run is not)
    assert language_consistency("The answer, ответ, is fortytwoсорок 42.", {}, script="latin", unit="words") == 3 / 5
    # letters of the same text: 3+6+2+8 = 19 latin, 5+5 = 10 cyrillic
    assert language_consistency("The answer, ответ, is fortytwoсорок 42.", {}, script="latin") == 19 / 29


def test_hidden_text_is_not_counted():
    assert language_consistency("Bonjour <!-- привет привет привет -->", {}, language="fr") == 1.0


def test_language_arguments_are_checked():
    assert expected_scripts(None, "ja") == {"han", "hiragana", "katakana"}
    with pytest.raises(ValueError, match="exactly one"):
        language_consistency("x", {}, script="latin", language="en")
    with pytest.raises(ValueError, match="exactly one"):
        language_consistency("x", {})
    with pytest.raises(ValueError, match="klingon"):
        language_consistency("x", {}, script="klingon")
    with pytest.raises(ValueError, match="language 'xx'"):
        language_consistency("x", {}, language="xx")
    with pytest.raises(ValueError, match="unit"):
        language_consistency("x", {}, script="latin", unit="bytes")
