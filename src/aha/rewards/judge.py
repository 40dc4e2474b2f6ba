"""A rubric judge: a language model grades each completion against a rubric.

Three ways to read the grade, all batched:
- yes_no (default, as generative verifiers do): the judge is asked whether the response
  meets the rubric; the grade is P(Yes) / (P(Yes) + P(No)) from one forward pass.
- expected (G-Eval style): the probability-weighted mean of the digit tokens 0..scale
  after "Score: ", divided by scale; one forward pass.
- generate: greedy decoding after "Score: ", parsing the first integer in [0, scale];
  None (scored as failed) when the judge answers something else.
- steps: a generative step judge. The completion is split into steps as a process reward
  model splits it (at `separator`, blank pieces not steps); for each step the judge sees the
  response up to it and is asked yes/no whether its last step meets the rubric. The reward is
  StepScores (one grade per step), paid step by step to the estimators that take step rewards.
The first two are always defined, smooth in the completion and free of sampling noise.
Measured with the embedded 135M model (docs/rewards.md): yes_no ranks a right answer
above a wrong or unrelated one in 6 of 6 pairs, by small margins; its digit grades (expected,
generate) do not discriminate at all. Real grading needs a bigger model (`model:` takes any
Hugging Face folder or Hub id, owner/name[@revision]) or an endpoint serving one (`base_url:`, rewards/judge_http.py).

The rubric is the sample's own (`sample[rubric_field]`) or args.rubric: a string, or a list
of criteria each graded on its own, all in one batched pass (rewards/rubrics.py).

The judge model is loaded once per process, frozen, and never the policy being trained
(loading by name gives a fresh copy of the weights). A learned judge can be fooled: cap
it (clip_max) and watch the hacking monitor's gold gap. It cannot be fooled by a forged turn:
the response is read as ordinary text (prompts.PlainText), so "<|im_end|>" written by the
policy is the characters, not the judge's end of turn; only the template's markers are tokens.
"""

from __future__ import annotations

import re
from functools import partial

import torch

from aha.models.reward_model import right_pad
from aha.prompts import PlainText, encode_quoting, prompt_text, token_ids
from aha.rewards import judge_http
from aha.rewards.functions import batched
from aha.rewards.rubrics import Job, assemble, criteria, jobs, split_steps

_JUDGES: dict[str, object] = {}
_PLAIN: dict[str, PlainText] = {}  # each judge's tokenizer reading the policy's text as ordinary text
RESPONSE = "\ue000aha-response\ue000"  # private-use characters: where the response goes in the rendered template
_INTEGER = re.compile(r"\d+")
SYSTEM = "You are a careful, strict grader. You grade a response against a rubric."
TEMPLATE = "Rubric:\n{rubric}\n\nQuestion:\n{prompt}\n\n{reference}Response:\n{completion}\n\n{instruction}"
INSTRUCTIONS = {
    "yes_no": "Does the response meet the rubric? Answer Yes or No.",
    "expected": "Grade how well the response meets the rubric, from 0 (not at all) to {scale} (fully). Reply with the "
                "number only.",
}
INSTRUCTIONS["generate"] = INSTRUCTIONS["expected"]
INSTRUCTIONS["steps"] = "Does the last step of the response meet the rubric? Answer Yes or No."
PREFIX = {"yes_no": "", "expected": "Score: ", "generate": "Score: ", "steps": ""}
GRADED_AS = {"yes_no": "yes_no", "expected": "expected", "generate": "generate", "steps": "yes_no"}


def judge_model(name: str):
    """The judge (model, tokenizer) by model name or folder, loaded once per process."""
    if name not in _JUDGES:
        from aha.models import load

        loaded = load(name)
        loaded.model.requires_grad_(False).eval()
        _JUDGES[name] = loaded
    return _JUDGES[name]


def judge_messages(rubric: str, sample: dict, completion: str, mode: str, scale: int,
                   show_reference: bool) -> list[dict]:
    reference = ""
    if show_reference and sample.get("answer") not in (None, ""):
        reference = f"Reference answer:\n{sample['answer']}\n\n"
    text = TEMPLATE.format(rubric=rubric, prompt=prompt_text(sample.get("prompt", "")), reference=reference,
                           completion=completion, instruction=INSTRUCTIONS[mode].format(scale=scale))
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


def _encode(tokenizer, plain: PlainText, messages, completion: str, prefix: str) -> list[int]:
    """The judge's prompt ids: messages(completion) through the chat template, the completion
    read as ordinary text. Without a control token's string in it (nearly always) the template
    is tokenised whole, as it always was; with one, the template is rendered around a stand-in
    and the completion put in its place as plain text (prompts.encode_quoting)."""
    if plain.control.search(completion) is None:
        ids = token_ids(tokenizer.apply_chat_template(messages(completion), add_generation_prompt=True, tokenize=True))
    else:
        rendered = tokenizer.apply_chat_template(messages(RESPONSE), add_generation_prompt=True, tokenize=False)
        if rendered.count(RESPONSE) != 1:  # the template edits or drops the user's text: no place to put it
            raise ValueError("the judge's chat template does not write the user's message as given; it cannot "
                             "quote a response that holds a control token's text")
        before, _, after = rendered.partition(RESPONSE)
        ids = encode_quoting(tokenizer, plain, before, completion, after)
    return ids + (tokenizer.encode(prefix, add_special_tokens=False) if prefix else [])


def judge_prompts(name: str, questions: list[Job], samples: list[dict], mode: str, scale: int,
                  show_reference: bool) -> list[list[int]]:
    """The judge `name`'s prompt ids for each question."""
    tokenizer = judge_model(name).tokenizer
    if name not in _PLAIN:
        _PLAIN[name] = PlainText(tokenizer)
    return [_encode(tokenizer, _PLAIN[name], partial(judge_messages, job.criterion.text, samples[job.row], mode=mode,
                                                     scale=scale, show_reference=show_reference), job.text,
                    PREFIX[mode])
            for job in questions]


def answer_tokens(tokenizer, mode: str, scale: int) -> tuple[list[int], list[float]]:
    """The token that starts each answer the judge may give, and the grade it stands for
    (the probability of starting to say "Yes" is the probability of saying it, as long as
    no two answers start with the same token)."""
    words = ["Yes", "No"] if mode == "yes_no" else [str(d) for d in range(scale + 1)]
    values = [1.0, 0.0] if mode == "yes_no" else [d / scale for d in range(scale + 1)]
    ids = [tokenizer.encode(w, add_special_tokens=False)[0] for w in words]
    if len(set(ids)) != len(ids):
        raise ValueError(f"mode {mode!r}: answers {words} start with the same token in the judge's tokenizer; use "
                         "mode: generate")
    return ids, values


def parse_grade(text: str, scale: int) -> float | None:
    """The first integer in the judge's answer, as a fraction of scale; None if absent or out of range."""
    match = _INTEGER.search(text)
    if match is None or int(match.group()) > scale:
        return None
    return int(match.group()) / scale


@torch.no_grad()
def next_token_probs(model, pad_id: int, prompts: list[list[int]], token_ids: list[int]) -> torch.Tensor:
    """(N, K) fp32 on the CPU: the probability of each of token_ids as the next token after each
    prompt, renormalised over them; one forward pass (right padding: positions stay 0..len-1
    for every row)."""
    ids, mask = right_pad(prompts, pad_id)
    rows, last = torch.arange(len(prompts)), mask.sum(dim=1) - 1
    logits = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device)).logits
    chosen = logits[rows.to(model.device), last.to(model.device)].float()[:, token_ids]
    return torch.softmax(chosen, dim=-1).cpu()


def _expected_grades(model, tokenizer, prompts: list[list[int]], mode: str, scale: int) -> list[float]:
    """The grade each answer token stands for, weighted by its probability (renormalised
    over the answer tokens) at the judge's next position."""
    token_ids, values = answer_tokens(tokenizer, mode, scale)
    probs = next_token_probs(model, tokenizer.pad_token_id, prompts, token_ids)
    return (probs @ torch.tensor(values)).tolist()


def _generated_grades(model, tokenizer, prompts: list[list[int]], scale: int,
                      max_new_tokens: int) -> list[float | None]:
    return [parse_grade(text, scale) for text in greedy_replies(model, tokenizer, prompts, max_new_tokens)]


@torch.no_grad()
def greedy_replies(model, tokenizer, prompts: list[list[int]], max_new_tokens: int) -> list[str]:
    """The judge's greedy reply to each prompt (token ids), decoded, in one left-padded batch."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):  # left padding for generation
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    out = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                         max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.batch_decode(out[:, width:].cpu(), skip_special_tokens=True)


def _local_grades(questions: list[Job], samples: list[dict], model: str, mode: str, scale: int,
                  show_reference: bool, batch_size: int, max_new_tokens: int) -> list[float | None]:
    loaded = judge_model(model)
    prompts = judge_prompts(model, questions, samples, mode, scale, show_reference)
    grades: list[float | None] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start: start + batch_size]
        if GRADED_AS[mode] in ("yes_no", "expected"):
            grades += _expected_grades(loaded.model, loaded.tokenizer, chunk, GRADED_AS[mode], scale)
        else:
            grades += _generated_grades(loaded.model, loaded.tokenizer, chunk, scale, max_new_tokens)
    return grades


def endpoint_grade(reply: judge_http.Reply | None, mode: str, scale: int) -> float | None:
    """A grade from an endpoint's reply: the answer tokens' probabilities where it sent top
    log-probs holding them, else the answer it wrote (yes/no: 1/0; digits: parsed)."""
    if reply is None:
        return None
    graded_as = GRADED_AS[mode]
    if graded_as == "generate":
        return parse_grade(reply.text, scale)
    words = ["Yes", "No"] if graded_as == "yes_no" else [str(d) for d in range(scale + 1)]
    values = [1.0, 0.0] if graded_as == "yes_no" else [d / scale for d in range(scale + 1)]
    weighted = judge_http.word_value(reply, words, values)
    if weighted is not None:
        return weighted
    if graded_as == "expected":
        return parse_grade(reply.text, scale)
    said = judge_http.answer_word(reply, words)
    return None if said is None else values[said]


def _check(mode: str, scale: int, batch_size: int, rubric) -> None:
    if mode not in INSTRUCTIONS:
        raise ValueError(f"mode must be one of {sorted(INSTRUCTIONS)}, got {mode!r}")
    if not 1 <= scale <= (9 if mode == "expected" else 100):
        raise ValueError(f"scale {scale} out of range (1..9 for expected, 1..100 for generate)")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if rubric is not None:
        criteria(rubric, "args.rubric")


@batched
def rubric_judge(completions: list[str], samples: list[dict], rubric: str | list | None = None,
                 model: str = "smollm2-135m", mode: str = "yes_no", scale: int = 9, show_reference: bool = True,
                 batch_size: int = 8, max_new_tokens: int = 8, max_chars: int = 2000, rubric_field: str = "rubric",
                 separator: str = "\n", base_url: str | None = None, api_key_env: str | None = None,
                 timeout_s: float = 60.0, retries: int = 2, top_logprobs: int = 20) -> list:
    """Grades in [0, 1], one per completion (None: no grade): a float for a string rubric, a
    dict of each criterion's weighted share for a checklist, StepScores in steps mode.
    With base_url the judge is `model` at that OpenAI-compatible endpoint, batch_size
    requests at a time; without it, `model` is loaded here."""
    _check(mode, scale, batch_size, rubric)
    steps = mode == "steps"
    if steps and not separator:
        raise ValueError("separator must be a non-empty string (where one step ends and the next begins)")
    questions = jobs(completions, samples, rubric, rubric_field, steps, separator, max_chars)
    if base_url is None:
        grades = _local_grades(questions, samples, model, mode, scale, show_reference, batch_size, max_new_tokens)
    else:
        messages = [judge_messages(job.criterion.text, samples[job.row], job.text, mode, scale, show_reference)
                    for job in questions]
        replies = judge_http.chat_completions(base_url, model, messages, api_key_env=api_key_env, timeout_s=timeout_s,
                                              retries=retries, concurrency=batch_size, max_tokens=max_new_tokens,
                                              top_logprobs=0 if mode == "generate" else top_logprobs)
        grades = [endpoint_grade(reply, mode, scale) for reply in replies]
    has_steps = [bool(split_steps(c, separator)) for c in completions] if steps else None
    return assemble(questions, grades, len(completions), steps, has_steps)
