"""One RL step, start to finish: collect, prepare the batch, update, maybe reset the reference."""

from __future__ import annotations

from collections.abc import Callable

from aha.algorithms import adapt_length_coef, importance_weights, masked_mean, outside_fractions
from aha.rewards.judge_http import endpoint_metrics
from aha.rewards.judge_http import usage as endpoint_usage
from aha.tracking.faults import kill_point
from aha.training.alarms import check_reward_failures
from aha.training.checkpoint import rng_state, set_rng_state
from aha.training.distributed import shared
from aha.training.phases import Phases
from aha.training.rl.batch import Batch, group_rows
from aha.training.rl.collect import collect
from aha.training.rl.estimate import add_teacher_term, estimate_advantages
from aha.training.rl.parts import RLState, StepParts
from aha.training.rl.update import forward_logprobs, forward_values, policy_update
from aha.training.shards import gather_state


def importance_correction(batch: Batch, algo) -> dict:
    """Weights for the engine-vs-trainer mismatch (algorithm.tis_cap, is_level, is_mode, is_low)
    into batch.is_weights, and what they did: the share of tokens and of sequences whose ratio
    fell outside the band (truncated, or with is_mode=mask masked), and the mean weight."""
    mask = batch.rollouts.completion_mask
    batch.is_weights, outside = importance_weights(batch.old_logprobs, batch.rollouts.sampling_logprobs, mask,
                                                   algo.tis_cap, algo.is_low, algo.is_level, algo.is_mode)
    tokens, seqs = outside_fractions(outside, mask)
    kind = "masked" if algo.is_mode == "mask" else "truncated"
    return {f"is/{kind}_frac": tokens, f"is/{kind}_seq_frac": seqs,
            "is/weight_mean": float(masked_mean(batch.is_weights, mask))}


def own_logprobs_of_guided(batch: Batch, model, shape) -> None:
    """ExPO's guided rows were sampled with the answer shown: the engine's log-probs are of the
    hinted prompt. Their "sampling" log-probs become the policy's own on the prompt the row is
    trained on, so the ratio starts at 1 and any KL or importance weight reads the policy that
    is trained (forward over the guided rows' whole groups only)."""
    G = shape.group_size
    groups = batch.guided.view(-1, G).any(dim=1).nonzero().view(-1)
    rows = group_rows(groups, G)
    own = forward_logprobs(model, batch.select(rows), shape)
    guided = batch.guided[rows]
    batch.rollouts.sampling_logprobs[rows[guided]] = own[guided].to(batch.rollouts.sampling_logprobs.dtype)


def prepare(parts: StepParts, batch: Batch | None) -> tuple[Batch | None, dict]:
    """Compute everything the update needs that does not change during it: advantages (with a
    distillation teacher's term), replayed groups, the ratio's denominator, reference and
    teacher log-probs, critic values.
    batch is None when no fresh group was kept; replay may still fill the step."""
    algo, learner, shape = parts.config.algorithm, parts.learner, parts.shape
    stats = {}
    if batch is not None and batch.guided is not None and bool(batch.guided.any()):
        own_logprobs_of_guided(batch, learner.model, shape)
    if batch is not None:
        if learner.ref_model is not None and algo.kl_in == "reward":
            batch.ref_logprobs = forward_logprobs(learner.ref_model, batch, shape)
        if learner.teacher is not None:  # the teacher scores the policy's own samples, at the sampling temperature
            batch.teacher_logprobs = forward_logprobs(learner.teacher, batch, shape)
        if learner.critic is not None:
            batch.old_values = forward_values(learner.critic, batch, shape)
        stats.update(estimate_advantages(batch, algo, shape.group_size))
    if parts.replay is not None:
        fresh = batch
        batch, replayed = parts.replay.fill(fresh, parts.config.rollout.prompts_per_step, parts.engine.pad_id)
        if fresh is not None:  # after filling, so a step never replays its own groups
            parts.replay.add(fresh)
        stats["replay/groups"] = replayed
        stats["replay/buffer"] = len(parts.replay.groups)
    if batch is None:
        return None, stats
    engine_logp = batch.rollouts.sampling_logprobs
    if algo.old_logprobs == "trainer":
        batch.old_logprobs = forward_logprobs(learner.model, batch, shape)
        diff = (batch.old_logprobs - engine_logp).abs()
        stats["logprobs/engine_trainer_abs_diff"] = float(masked_mean(diff, batch.rollouts.completion_mask))
        if algo.tis_cap is not None:
            stats.update(importance_correction(batch, algo))
    else:
        batch.old_logprobs = engine_logp
    if learner.ref_model is not None and algo.kl_in == "loss":
        batch.ref_logprobs = forward_logprobs(learner.ref_model, batch, shape)
    if batch.teacher_logprobs is not None:  # after old_logprobs: the term is log pi_old - log pi_teacher
        stats.update(add_teacher_term(batch, algo))
    return batch, stats


def shared_update(parts: StepParts, batch: Batch | None) -> dict:
    """policy_update on the batch (None: nothing to train this step, {}), on every learner rank:
    rank 0 prepared it and hands it, with its random state, to the others first (the update's
    shuffles then agree), and each trains its share of the micro-batches."""
    config, ranks = parts.config, parts.shape.ranks
    if ranks.distributed:
        batch, rng = shared((batch, rng_state()) if ranks.is_main else None, ranks)
        set_rng_state(rng)
    kill_point("update")  # the kill tests' rank lost in the middle of a step
    if batch is None:
        return {}
    constant = config.algorithm.loss_agg_constant or config.rollout.max_new_tokens
    return policy_update(parts.learner, batch, config.algorithm, parts.shape, config.train.max_grad_norm, constant)


def maybe_reset_reference(parts: StepParts, step: int, kl_to_ref: float | None, trained: bool = True) -> bool:
    """ProRL (Liu et al. 2025): every N steps, or once the KL to the reference exceeds a
    threshold, the policy becomes the new reference (and the optimizer starts afresh); only
    after a step that trained. With several learner ranks rank 0 (which holds the reference, the
    KL and the step's batch) decides, the policy's shards are gathered into it, and every rank's
    optimizer starts afresh."""
    algo, learner, ranks = parts.config.algorithm, parts.learner, parts.shape.ranks
    if not ranks.distributed:
        if not trained or learner.ref_model is None or not _reset_due(algo, step, kl_to_ref):
            return False
        learner.ref_model.load_state_dict(learner.model.state_dict())
    else:
        if not (algo.kl_coef > 0 and (algo.ref_reset_every or algo.ref_reset_kl is not None)):
            return False  # no reset can come (the config is every rank's): no collective
        if not shared(trained and _reset_due(algo, step, kl_to_ref) if ranks.is_main else None, ranks):
            return False
        policy = gather_state(learner.updated, ranks)  # collective; whole on rank 0 only
        if learner.ref_model is not None:
            learner.ref_model.load_state_dict(policy)
    if algo.ref_reset_optimizer:
        learner.optimizer.state.clear()
    return True


def _reset_due(algo, step: int, kl_to_ref: float | None) -> bool:
    due = bool(algo.ref_reset_every) and step % algo.ref_reset_every == 0
    return due or (algo.ref_reset_kl is not None and kl_to_ref is not None and kl_to_ref > algo.ref_reset_kl)


def run_step(parts: StepParts, state: RLState, step: int, phases: Phases, first=None,
             after_collect: Callable[[], None] | None = None) -> tuple[dict, list[dict]]:
    """Returns the step's metrics record and example completions; updates state. The phases:
    generate and score (collect), referee (the policy's verdicts on the step's answers, which
    join the batch: config.referee), prepare (advantages, reference and old log-probs), update,
    reward_model (a reward model that learns during RL, reward[i].online).
    first: the first round's (prompts, rollouts) sampled ahead; after_collect runs once the
    step's samples are in, before the update (asynchronous RL submits the next step's there)."""
    config, algo = parts.config, parts.config.algorithm
    synced = parts.engine.sync_seconds
    endpoint_start = endpoint_usage()  # a judge endpoint's calls and tokens before this step's
    batch, stats, examples, seen = collect(parts, phases, state.length_coef, first, version=step - 1)
    # an engine that takes new weights at its first generate counts that in time/sync_s
    phases.exclude("generate", parts.engine.sync_seconds - synced)
    if after_collect is not None:
        after_collect()
    # before anything is trained on scores that are mostly failures
    check_reward_failures(stats, config.train.max_reward_failure_rate, parts.reward.first_errors, step)
    if state.monitor is not None:
        stats.update(state.monitor.measure(seen.texts, seen.samples))
    stats.update(endpoint_metrics(endpoint_start))  # judge_http/*: the step's calls, failures and tokens
    if algo.length_coef or algo.length_adaptive:
        stats["length/penalty_coef"] = state.length_coef  # the one this step's rewards were shaped with
    if algo.length_adaptive and algo.length_adaptive_per == "batch":
        state.length_coef = adapt_length_coef(state.length_coef, stats["reward/correct_frac"], algo.length_target_acc,
                                              algo.length_coef_rate, algo.length_coef_max)
    if parts.length is not None:  # per-prompt coefficients and LASER-D targets learn from the step's groups
        stats.update(parts.length.update())
    if parts.referee is not None:  # URPO: verdicts on the step's answers join the batch (the verifier's labels)
        gold = state.monitor.gold_result if state.monitor is not None else None
        with phases("referee"):
            judged, referee_stats = parts.referee.groups(step, seen, gold)
        stats.update(referee_stats)
        batch = parts.referee.join(batch, judged, parts.engine.pad_id)
    with phases("prepare"):
        batch, prepared = prepare(parts, batch)
    stats.update(prepared)
    with phases("update"):
        update = shared_update(parts, batch)
    if maybe_reset_reference(parts, step, update.get("kl/ref", stats.get("kl/ref")), trained=batch is not None):
        update["ref/reset"] = 1
    if parts.online_rm is not None:  # the reward model learns from the verifier's labels of the step's samples
        with phases("reward_model"):
            update.update(parts.online_rm.update(step, seen, state.monitor.gold_result if state.monitor else None))
    # no sample with a non-zero advantage: the reward taught nothing this step (flat groups
    # without dynamic sampling, or none kept with it); a KL term alone may still move the weights
    no_signal = batch is None or batch.advantages is None or not bool(batch.advantages.any())
    record = {"step": step, **stats, **update, "train/nothing_to_train": float(no_signal)}
    if state.monitor is not None:
        record.update(state.monitor.update(record))
    return record, examples
