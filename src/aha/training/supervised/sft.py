"""method: sft. Supervised fine-tuning on (prompt, response) pairs: the loss is the mean
negative log-likelihood of the response tokens (and the stop token after them); prompt
tokens are context only. Its checkpoints are model folders, so an SFT run's
checkpoints/step-N is the `model:` of the RL run that follows it."""

from __future__ import annotations

from aha.config import Config
from aha.config.paths import resolve_path
from aha.errors import TaskError
from aha.models.adapters import trainable_parameters
from aha.models.compute import stop_token
from aha.prompts import prompt_text
from aha.rewards import CompositeReward
from aha.tasks import PromptSampler, Task
from aha.tasks.synthetic import sft_record
from aha.training.method import CursorMethod, Setup
from aha.training.optimizer import accumulated_step, build_optimizer
from aha.training.phases import Phases
from aha.training.supervised.sequences import encode_sequences, micro_batches, read_examples, token_logprobs


def sft_examples(config: Config, task: Task) -> list[dict]:
    """sft.data; or, for the built-in arithmetic task, a verified worked answer to each of its
    training problems (the `aha data` generator's sft_train rows, made on the fly); or the
    task's training samples that carry a response."""
    if config.sft.data is not None:
        return read_examples(resolve_path(config.sft.data, config.base_dir), ("response",))
    if config.task.data is None and task.name == "arithmetic":
        return [{**sft_record(s, config.seed), "where": f"task arithmetic, sample {s['id']}"} for s in task.train]
    rows = [{**s, "where": f"task {task.name}, sample {s['id']}"} for s in task.train
            if isinstance(s.get("response"), str)]
    if not rows:
        raise TaskError(f"method=sft needs sft.data (a JSONL of {{prompt, response}}) or a task whose training samples "
                        f"carry a response; task {task.name!r} has none. `aha data --out DIR` writes sft_train.jsonl "
                        "for the arithmetic task")
    return rows


class SFTMethod(CursorMethod):
    @classmethod
    def prepare(cls, config: Config, task: Task, reward: CompositeReward) -> list[dict]:
        return sft_examples(config, task)

    def __init__(self, setup: Setup, rows: list[dict]):
        self.setup = setup
        config, tokenizer = setup.config, setup.tokenizer
        self.pad_id = setup.engine.pad_id
        self.rows = rows
        self.sequences = encode_sequences(tokenizer, setup.task, [r["prompt"] for r in rows],
                                          [r["response"] for r in rows],
                                          stop_token(tokenizer, setup.model), config.sft.max_length,
                                          [r["where"] for r in rows],
                                          "sft.max_length")
        self.lengths = [len(s) for s in self.sequences]  # for length buckets, fixed for the run
        self.sampler = PromptSampler(list(range(len(rows))), config.seed)
        train = config.train
        model = setup.shards.place("model", setup.model, setup.whole)
        self.optimizer = build_optimizer(trainable_parameters(model), train)
        self.modules, self.optimizers = {"model": setup.whole}, {"policy": self.optimizer}

    def step(self, step: int, phases: Phases) -> tuple[dict, list[dict]]:
        config = self.config
        picked = self.sampler.next(config.sft.batch_size)
        seqs = self.sequences
        tokens = sum(len(seqs[i].completion) for i in picked)  # the loss is a mean over the batch's response tokens
        groups = micro_batches(picked, self.lengths, self.setup.step_micro_batch, config.sft.bucket_by_length)

        def loss_of(group):
            logprobs, mask = token_logprobs(self.setup.model, [seqs[i] for i in group], self.pad_id, self.setup.dtype)
            per_row = -(logprobs * mask).sum(dim=1)
            return per_row.sum() / tokens, (per_row / mask.sum(dim=1)).tolist()

        with phases("update"):
            update = accumulated_step(self.setup.model, self.optimizer, groups, loss_of, config.train.max_grad_norm,
                                      self.setup.shards.ranks)
        nll = [loss for losses in update.pop("results") for loss in losses]
        order = [i for g in groups for i in g]
        record = {"step": step, "sft/loss": update.pop("loss/total"), **update, "sft/tokens": tokens,
                  "sft/truncated": sum(seqs[i].truncated for i in picked), "length/mean": tokens / len(picked),
                  "sft/epoch": self.sampler.epoch}
        examples = [{"prompt": prompt_text(self.rows[i]["prompt"]), "completion": self.rows[i]["response"],
                     "nll_per_token": loss} for i, loss in zip(order, nll)]
        return record, examples

    def postfix(self, record: dict) -> dict:
        return {"loss": f"{record['sft/loss']:.3f}", "epoch": record["sft/epoch"],
                "s/step": f"{record['time/step_s']:.1f}"}
