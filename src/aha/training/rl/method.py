"""method: rl. Online RL (the GRPO family, PPO with GAE): each step samples completions from
the policy, scores them with the reward and updates on them (training/rl/step.py)."""

from __future__ import annotations

import copy
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from aha.config import Config, ConfigError
from aha.models.adapters import trainable_parameters
from aha.models.loading import LoadedModel
from aha.models.value import ValueModel
from aha.rewards import CompositeReward, build_reward
from aha.tasks import Task, check_answers, encode_prompts
from aha.tasks.schedule import build_sampler
from aha.tracking.run_dir import GROUPS_FILE, append_jsonl
from aha.training.alarms import Alarms
from aha.training.diagnosis import FILE as DIAGNOSIS_FILE
from aha.training.diagnosis import Diagnosis
from aha.training.method import Method, Setup, set_hyperparameters
from aha.training.monitor import HackingMonitor, check_format_components, format_flags, replay_monitor
from aha.training.optimizer import build_optimizer
from aha.training.phases import Phases
from aha.training.rl.guidance import Guidance
from aha.training.rl.length import build_length_shaping
from aha.training.rl.likelihood import build_likelihood_reward
from aha.training.rl.online_rm import build_online_rm, learning_reward_model
from aha.training.rl.partial import Launch, PartialRollouts
from aha.training.rl.parts import RLState, StepParts
from aha.training.rl.referee import build_referee
from aha.training.rl.replay import ReplayBuffer
from aha.training.rl.step import maybe_reset_reference, run_step, shared_update
from aha.training.rl.teacher import check_teacher, check_teacher_path, load_teacher
from aha.training.rl.update import Learner, Shape
from aha.training.shards import Shards


def build_learner(model, config: Config, teacher=None, shards: Shards | None = None, whole=None) -> Learner:
    """teacher: algorithm.teacher's frozen model (load_teacher), or None. shards: the learner
    ranks `model` is placed over (whole: rank 0's copy of it); rank 0 alone holds the reference
    and reads the whole policy, the other ranks only train."""
    algo, train, shards = config.algorithm, config.train, shards or Shards()
    # a KL coefficient of 0 means no reference model at all: no memory, no forward pass
    ref_model = copy.deepcopy(model).requires_grad_(False) if algo.kl_coef > 0 and shards.ranks.is_main else None
    # the critic copies the policy's body: before the policy is sharded (a sharded module cannot be copied)
    critic = ValueModel(model) if algo.advantage == "gae" else None
    trained = shards.place("model", model, whole)
    optimizer = build_optimizer(trainable_parameters(trained), train)
    critic_optimizer = None
    if critic is not None:
        shards.place("critic", critic)
        critic_optimizer = build_optimizer(critic.parameters(), train, lr=algo.critic_lr)
    if not shards.ranks.distributed:
        return Learner(model, optimizer, ref_model, critic, critic_optimizer, teacher)
    # rank 0 reads its whole copies (rollouts' log-probs and values); the other ranks hold only the shards
    main = shards.ranks.is_main
    return Learner(shards.whole("model") if main else trained, optimizer, ref_model,
                   shards.whole("critic") if main and critic is not None else critic, critic_optimizer, teacher,
                   trained=trained, trained_critic=critic)


def checkpointed(learner: Learner, config: Config) -> tuple[dict, dict]:
    """The modules and optimizers a checkpoint holds. The reference is saved only when
    ProRL resets can move it away from the initial weights."""
    modules, optimizers = {"model": learner.model}, {"policy": learner.optimizer}
    if learner.critic is not None:
        modules["critic"], optimizers["critic"] = learner.critic, learner.critic_optimizer
    if learner.ref_model is not None and (config.algorithm.ref_reset_every or config.algorithm.ref_reset_kl):
        modules["reference"] = learner.ref_model
    return modules, optimizers


def _apply_hyperparameters(learner: Learner, config: Config) -> None:
    train = config.train
    set_hyperparameters(learner.optimizer, train.lr, train.betas, train.weight_decay)
    if learner.critic_optimizer is not None:
        set_hyperparameters(learner.critic_optimizer, config.algorithm.critic_lr, train.betas, train.weight_decay)


@dataclass
class Ahead:
    """A step's first round, submitted to the rollout workers before it is due."""

    chosen: list[dict] | None  # the prompts' samples (with partial rollouts, the launch holds them)
    submitted: Any  # the engine's handle (RayEngine.submit); None: nothing to sample
    policy_version: int  # optimizer updates behind the weights it is drawn on
    launch: Launch | None = None  # partial rollouts: the round's groups


@dataclass
class Gold:
    """What rl reads before the model loads: the monitor's held-out gold reward and the
    distillation teacher, if any."""

    reward: CompositeReward | None
    teacher: LoadedModel | None = None

    def close(self) -> None:
        if self.reward is not None:  # worker processes of a pooled reward
            self.reward.close()


class RLMethod(Method):
    @classmethod
    def prepare(cls, config: Config, task: Task, reward: CompositeReward) -> Gold:
        check_teacher_path(config)  # a missing teacher fails before anything loads
        if config.algorithm.guidance == "expo":
            check_answers(task, "algorithm.guidance=expo", "algorithm.guidance=none")
        gold = build_reward(config.monitor.gold, config.base_dir, section="monitor.gold", dtype=config.train.dtype,
                            device=config.device, ray=config.ray) if config.monitor.gold else None
        try:
            check_format_components(config.monitor, reward)
            teacher = load_teacher(config)  # before the policy: a folder that does not load fails fast
            learning_reward_model(config, reward)  # reward[i].online on a process reward model fails here too
        except ValueError as err:
            if gold is not None:
                gold.close()
            raise ConfigError(str(err)) from None
        return Gold(gold, teacher)

    def __init__(self, setup: Setup, gold: Gold):
        self.setup, self.gold = setup, gold.reward
        config, ro, algo = setup.config, setup.config.rollout, setup.config.algorithm
        teacher = gold.teacher
        if teacher is not None:
            check_teacher(teacher, setup.model, setup.tokenizer)
        # rank 0 alone reads the teacher (prepare): the other ranks let theirs go
        teacher_model = teacher.model.to(setup.device) if teacher is not None and setup.is_main else None
        self.learner = build_learner(setup.model, config, teacher_model, setup.shards, setup.whole)
        self.sampler = build_sampler(config, setup.task.train)  # epoch order, a curriculum or a difficulty schedule
        self.replay = ReplayBuffer(algo.replay_capacity, algo.replay_alpha, ro.group_size) if algo.replay else None
        self.partial = PartialRollouts(ro.partial_rollouts, ro.group_size, ro.max_new_tokens) \
            if ro.partial_rollouts else None
        shape = Shape(ro.group_size, config.train.micro_batch_size, config.train.share_prompt, ro.temperature,
                      setup.dtype, setup.shards.ranks)
        self.length = build_length_shaping(algo, ro.max_new_tokens, ro.group_size)
        self.online_rm = build_online_rm(config, setup.reward)  # reward[i].online: a reward model that learns
        # config.referee: the policy as its own referee (URPO); it is the policy, so nothing more to checkpoint
        self.referee = build_referee(config, self.learner.model, setup.engine, setup.task, setup.dtype)
        self.parts = StepParts(config, setup.engine, setup.task, self.sampler, setup.reward, self.learner, shape,
                               self.replay, self.partial, setup.env, self.length, online_rm=self.online_rm,
                               referee=self.referee,
                               likelihood=build_likelihood_reward(config, self.learner.model, setup.tokenizer,
                                                                  setup.engine.pad_id, setup.task, setup.dtype),
                               guidance=Guidance(algo, ro.group_size) if algo.guidance == "expo" else None)
        self.run_state = RLState(algo.length_coef, HackingMonitor(config.monitor, self.gold))
        self.modules, self.optimizers = checkpointed(self.learner, config)
        if self.online_rm is not None:  # the reward the policy trains on is part of the run's state
            self.modules["online_rm"] = self.online_rm.learned.model
            self.optimizers["online_rm"] = self.online_rm.optimizer
        self.alarms = Alarms(config.train.max_idle_steps)
        self.diagnosis = Diagnosis(config.diagnosis)
        self.ahead: deque[Ahead] = deque()  # asynchronous RL: rounds submitted for later steps
        # asynchronous RL after a resume: the prompts of the rounds that were in flight at the
        # checkpoint, sampled again (on the restored weights) before any new prompt
        self.resumed_rounds: deque[list[dict]] = deque()

    def step(self, step: int, phases: Phases) -> tuple[dict, list[dict]]:
        if not self.setup.is_main:  # another learner rank: its share of rank 0's update
            with phases("update"):
                update = shared_update(self.parts, None)
            maybe_reset_reference(self.parts, step, None, trained=False)  # rank 0 decides; every rank takes part
            return {"step": step, **update}, []
        if not self.config.rollout.max_staleness:
            return run_step(self.parts, self.run_state, step, phases)
        # asynchronous: this step trains on the oldest round sampled ahead (none at the first
        # step; after a resume, a round that was in flight, sampled now), and the next rounds
        # are submitted before the update
        ahead = self.ahead.popleft() if self.ahead else None
        if ahead is None and self.resumed_rounds:
            ahead = self._submit(self.resumed_rounds.popleft(), step - 1)
        first, staleness = None, 0
        if ahead is not None:
            # the weights at the start of step s are version s - 1 (s - 1 updates)
            staleness = (step - 1) - ahead.policy_version
            if staleness > self.config.rollout.max_staleness:  # cannot happen with the queue's depth; guarded
                raise RuntimeError(f"a round sampled {staleness} policy versions ago reached step {step} "
                                   f"(rollout.max_staleness {self.config.rollout.max_staleness})")
            waited = time.time()
            with phases("generate"):  # the wait for the round sampled ahead is part of this step's generation
                out = None if ahead.submitted is None else self.setup.engine.collect(ahead.submitted)
            waited = time.time() - waited
            first = (ahead.chosen, out) if ahead.launch is None else \
                self.partial.land(ahead.launch, out, self.setup.engine, ahead.policy_version)
        else:
            waited = 0.0
        record, examples = run_step(self.parts, self.run_state, step, phases, first, lambda: self._sample_ahead(step))
        record["async/wait_s"] = waited
        record["async/staleness"] = float(staleness)
        record["async/ahead"] = len(self.ahead)
        return record, examples

    def _sample_ahead(self, step: int) -> None:
        """Submit rounds for the steps after this one, up to max_staleness of them, on the
        weights the workers will hold (this step's, before its update)."""
        ro, engine = self.config.rollout, self.setup.engine
        # none for steps the run will not reach: they would only hold up the evaluation and the end
        while len(self.ahead) < min(ro.max_staleness, self.config.train.steps - step):
            if self.partial is not None:
                launch = self.partial.launch(engine.tokenizer, self.setup.task, self.sampler, ro.prompts_per_step)
                submitted = engine.submit_partial(launch.prompts, launch.plan) if launch.prompts else None
                self.ahead.append(Ahead(None, submitted, step - 1, launch))
            else:
                chosen = (self.resumed_rounds.popleft() if self.resumed_rounds
                          else self.sampler.next(ro.prompts_per_step))
                self.ahead.append(self._submit(chosen, step - 1))

    def _submit(self, chosen: list[dict], version: int) -> Ahead:
        prompts = encode_prompts(self.setup.engine.tokenizer, self.setup.task, chosen)
        return Ahead(chosen, self.setup.engine.submit(prompts, self.config.rollout.group_size), version)

    def state(self) -> dict:
        state = {"sampler": self.sampler.state(), "length_coef": self.run_state.length_coef}
        if self.length is not None:
            state["length_shaping"] = self.length.state()
        return state

    def extra_state(self) -> dict | None:
        """Beside the replay buffer: the rounds in flight (asynchronous RL), not trained on yet.
        Their prompts are saved and sampled again after a resume (the data cursor is past
        them, and past whatever later rounds drew); with partial rollouts their groups are
        saved with the carried ones."""
        extra = {}
        if self.replay is not None:
            extra["replay"] = self.replay.state()
        if self.partial is not None:  # completions started on the saved weights continue after a resume
            extra["partial"] = self.partial.state([ahead.launch for ahead in self.ahead])
        elif self.ahead or self.resumed_rounds:
            extra["in_flight"] = [ahead.chosen for ahead in self.ahead] + list(self.resumed_rounds)
        return extra or None

    def restore(self, state: dict, extra: dict, metrics: list[dict]) -> None:
        self.sampler.load_state(state["sampler"])
        if self.replay is not None and "replay" in extra:  # absent when replay was turned on by a config change
            self.replay.load_state(extra["replay"])
        if self.partial is not None and "partial" in extra:
            self.partial.load_state(extra["partial"])
        self.resumed_rounds = deque(extra.get("in_flight", []))
        self.run_state.length_coef = state.get("length_coef", self.config.algorithm.length_coef)
        if self.length is not None and "length_shaping" in state:  # absent when turned on by a config change
            self.length.load_state(state["length_shaping"])
        self.run_state.monitor = replay_monitor(self.config.monitor, metrics)  # its series are all in the metrics
        self.run_state.monitor.gold = self.gold
        self.diagnosis = Diagnosis.replay(self.config.diagnosis, metrics)

    def apply_hyperparameters(self) -> None:
        _apply_hyperparameters(self.learner, self.config)
        if self.online_rm is not None:
            train = self.config.train
            set_hyperparameters(self.online_rm.optimizer, self.online_rm.cfg.lr, train.betas, train.weight_decay)

    def after_step(self, record: dict, echo) -> None:
        self.sampler.end_step()  # before the checkpoint: a difficulty schedule's next level is in it
        append_jsonl(self.setup.run_path / GROUPS_FILE, self.sampler.outcomes)  # for aha select
        self.sampler.outcomes = []
        self.alarms.observe(record, self.setup.reward.first_errors, echo)
        self.run_state.monitor.write(self.setup.run_path / "monitor.json")
        self.diagnosis.observe(record, echo)
        self.diagnosis.write(self.setup.run_path / DIAGNOSIS_FILE)

    def postfix(self, record: dict) -> dict:
        shown = {"reward": f"{record['reward/mean']:.2f}",
                 "kl": f"{record.get('kl/ref', record.get('kl/old', 0.0)):.4f}",
                 "len": f"{record['length/mean']:.0f}", "s/step": f"{record['time/step_s']:.1f}"}
        if "distill/reverse_kl" in record:  # what distillation drives down
            shown["teacher_kl"] = f"{record['distill/reverse_kl']:.3f}"
        return shown

    def finish(self, echo) -> None:
        for line in self.alarms.summary():
            echo(line)
        if self.run_state.monitor.flags:
            echo(format_flags(self.run_state.monitor) + f" (details: {self.setup.run_path / 'monitor.json'})")
        if self.diagnosis.flags:
            echo("diagnosis: " + ", ".join(f"{f.name} from step {f.step}" for f in self.diagnosis.flags.values())
                 + f" (details: {self.setup.run_path / DIAGNOSIS_FILE})")
