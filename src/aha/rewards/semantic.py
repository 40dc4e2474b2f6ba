"""Semantic similarity as a reward (GreenMind-style, with a local encoder in place of a
Sentence-Transformer): the cosine between the mean-pooled hidden states of the completion and
of the reference answer.

The encoder is any local causal or encoder model (`model:` a Hugging Face folder, or the
embedded SmolLM2-135M by default), loaded once per process, frozen, and never the policy being
trained (rewards.judge.judge_model: loading by name gives a fresh copy of the weights). Each
text is read as ordinary text (prompts.PlainText: a "<|im_end|>" the policy wrote is its
characters), as a reader sees it (extract.strip_hidden, code blocks kept): a reference hidden
in a comment earns nothing.

Pooling: the mean over the text's tokens (attention mask) of one layer's hidden states
(`layer`, default the last; hidden_states[0] is the embeddings). A decoder's mean-pooled
states are anisotropic: unrelated texts already score a cosine of 0.5-0.9, so the raw cosine
ranks completions but is no probability. `rescale` maps it:
- none: the cosine, in [-1, 1];
- unit: (cosine + 1) / 2, in [0, 1];
- baseline: (cosine - baseline) / (1 - baseline), BERTScore's rescaling by the cosine that
  unrelated texts get (measure it on your data: docs/rewards.md); below the baseline it is
  negative, not clipped, so a group still ranks its completions.
A text with nothing visible to compare (an empty completion or reference) scores 0.0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aha.prompts import PlainText
from aha.rewards.extract import strip_hidden
from aha.rewards.functions import batched
from aha.rewards.judge import judge_model

RESCALES = ("none", "unit", "baseline")
_PLAIN: dict[str, PlainText] = {}


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, H) the mean of hidden (N, T, H) over each row's unmasked positions (zeros for none)."""
    mask = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def rescaled(cosine: float, rescale: str, baseline: float) -> float:
    """A cosine mapped by `rescale` (see the module docstring)."""
    if rescale == "unit":
        return (cosine + 1.0) / 2.0
    if rescale == "baseline":
        return (cosine - baseline) / (1.0 - baseline)
    return cosine


def _ids(model: str, texts: list[str], max_tokens: int) -> list[list[int]]:
    tokenizer = judge_model(model).tokenizer
    if model not in _PLAIN:
        _PLAIN[model] = PlainText(tokenizer)
    return [_PLAIN[model](text)["input_ids"][:max_tokens] for text in texts]


@torch.no_grad()
def embed(model: str, texts: list[str], layer: int = -1, batch_size: int = 16, max_tokens: int = 512) -> torch.Tensor:
    """(N, H) fp32 mean-pooled hidden states of layer `layer` of the encoder `model` for each
    text, batch_size texts a forward pass (right padding: a causal model's states at a text's
    tokens do not see the padding after them). A text with no token gives a zero vector."""
    loaded = judge_model(model)
    ids = _ids(model, texts, max_tokens)
    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else 0
    out = []
    for start in range(0, len(ids), batch_size):
        chunk = ids[start:start + batch_size]
        width = max(1, max(len(row) for row in chunk))
        batch = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, tokens in enumerate(chunk):
            batch[row, :len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            mask[row, :len(tokens)] = 1
        # the body only (no LM head): its hidden_states are the embeddings, then each layer's output
        body = getattr(loaded.model, "base_model", loaded.model)
        hidden = body(input_ids=batch, attention_mask=mask, output_hidden_states=True).hidden_states[layer]
        out.append(mean_pool(hidden.float(), mask))
    return torch.cat(out) if out else torch.zeros(0)


def _reference(sample: dict, reference_field: str) -> str:
    if reference_field not in sample:
        raise ValueError(f"embedding_similarity: the sample has no {reference_field!r} field (args.reference_field)")
    return str(sample[reference_field])


@batched
def embedding_similarity(completions: list[str], samples: list[dict], model: str = "smollm2-135m", layer: int = -1,
                         rescale: str = "none", baseline: float = 0.0, reference_field: str = "answer",
                         batch_size: int = 16, max_tokens: int = 512) -> list[float]:
    """The cosine between the encoder's pooled states of each completion (visible text) and of
    its sample's reference (sample[reference_field]), rescaled; one forward pass a batch."""
    if rescale not in RESCALES:
        raise ValueError(f"rescale must be one of {list(RESCALES)}, got {rescale!r}")
    if rescale == "baseline" and not -1.0 <= baseline < 1.0:
        raise ValueError(f"baseline must be in [-1, 1) (a cosine below 1), got {baseline}")
    texts = [strip_hidden(c, keep_code=True).strip() for c in completions]
    references = [_reference(s, reference_field).strip() for s in samples]
    vectors = embed(model, texts + references, layer, batch_size, max_tokens)
    ours, theirs = vectors[:len(texts)], vectors[len(texts):]
    cosines = F.cosine_similarity(ours, theirs, dim=-1).clamp(-1.0, 1.0).tolist()  # 1.0000001 is 1
    return [rescaled(cos, rescale, baseline) if text and ref else 0.0
            for cos, text, ref in zip(cosines, texts, references)]
