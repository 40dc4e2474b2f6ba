"""On-policy distillation: the teacher's per-token reverse-KL advantage term, by hand; its
policy gradient is exactly the reverse KL's (and a k3 loss term's is the forward KL's); the
learner's prepare() adds it on the teacher's own log-probs; the config rules around it."""

import copy

import pytest
import torch
import torch.nn.functional as F

from aha.algorithms import (
    advantage_share,
    clipped_surrogate,
    distillation_advantages,
    grpo_advantages,
    kl_estimate,
    policy_gradient_loss,
)
from aha.config import AlgorithmConfig, Config, ConfigError, RolloutConfig, load_config
from aha.models import load
from aha.rollout import Rollouts
from aha.training.rl.batch import Batch
from aha.training.rl.update import Learner, Shape

# ---------------------------------------------------------------- the pure functions, by hand


def test_distillation_advantages_by_hand():
    student = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, 0.0]])
    teacher = torch.tensor([[-1.5, -1.0, -0.5], [-0.1, -2.0, float("nan")]])  # NaN at padding changes nothing
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    # student - teacher = [[0.5, -1.0, 0.0], [-0.2, 0.8, padding]]; times -0.5
    expected = torch.tensor([[-0.25, 0.5, 0.0], [0.1, -0.4, 0.0]])
    got = distillation_advantages(student, teacher, mask, 0.5)
    torch.testing.assert_close(got, expected, atol=1e-7, rtol=0)
    assert not got.requires_grad
    with pytest.raises(ValueError, match="one shape"):
        distillation_advantages(student, teacher[:, :2], mask, 0.5)


def test_teacher_equal_to_student_gives_exactly_zero():
    logp = torch.tensor([[-0.7, -3.1, -0.01], [-12.0, -0.2, 0.0]])
    got = distillation_advantages(logp, logp.clone(), torch.ones(2, 3), 3.0)
    assert torch.equal(got, torch.zeros(2, 3))


def test_advantage_share_by_hand():
    task = torch.tensor([[1.0, 1.0, 1.0], [-0.5, -0.5, -0.5]])
    term = torch.tensor([[-0.25, 0.5, 0.0], [0.1, -0.4, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    # |teacher| = 0.25 + 0.5 + 0 + 0.1 + 0.4 = 1.25; |task| = 3 + 0.5 + 0.5 = 4 (padding left out)
    assert advantage_share(task, term, mask) == pytest.approx(1.25 / 5.25)
    assert advantage_share(torch.zeros(2, 3), term, mask) == 1.0
    assert advantage_share(task, torch.zeros(2, 3), mask) == 0.0
    assert advantage_share(torch.zeros(2, 3), torch.zeros(2, 3), mask) == 0.0


# ---------------------------------------------------------------- the gradient, exactly


def _expected_gradient(theta: torch.Tensor, per_outcome_loss) -> torch.Tensor:
    """sum_y pi(y) grad loss(y): the expected gradient of a loss on one sampled outcome,
    enumerating every outcome (no sampling noise); pi(y) is the sampling probability, a constant."""
    probs = F.softmax(theta, dim=0).detach()
    total = torch.zeros_like(theta)
    for y in range(len(theta)):
        th = theta.detach().clone().requires_grad_(True)
        per_outcome_loss(F.log_softmax(th, dim=0), y).backward()
        total += probs[y] * th.grad
    return total


def _exact_gradient(theta: torch.Tensor, divergence) -> torch.Tensor:
    th = theta.detach().clone().requires_grad_(True)
    divergence(F.log_softmax(th, dim=0)).backward()
    return th.grad


def test_teacher_term_gradient_is_the_reverse_kl_gradient():
    """A categorical policy over 5 outcomes (one token), a fixed teacher. The teacher's advantage
    term through the plain policy-gradient loss, and through PPO's surrogate on its first step
    (ratio 1), has the expected gradient of KL(pi || teacher), times teacher_coef. Schulman's k3
    put into the loss instead has the gradient of the forward KL(teacher || pi), which differs."""
    theta = torch.tensor([0.3, -0.2, 1.0, 0.1, -1.1])
    log_q = F.log_softmax(torch.tensor([-0.5, 0.4, 0.2, 0.0, 0.9]), dim=0)
    one = torch.ones(1, 1)

    def via(loss_kind: str, coef: float):
        def loss(log_pi, y):
            logp = log_pi[y].view(1, 1)
            advantage = distillation_advantages(logp.detach(), log_q[y].view(1, 1), one, coef)
            if loss_kind == "pg":
                return policy_gradient_loss(logp, advantage)[0].sum()
            return clipped_surrogate(logp, logp.detach(), advantage, 0.2, 0.28)[0].sum()
        return loss

    reverse = _exact_gradient(theta, lambda log_pi: (log_pi.exp() * (log_pi - log_q)).sum())
    forward = _exact_gradient(theta, lambda log_pi: (log_q.exp() * (log_q - log_pi)).sum())
    assert reverse.abs().max() > 0.05 and (reverse - forward).abs().max() > 0.05  # the two differ here
    for kind in ("pg", "ppo"):
        torch.testing.assert_close(_expected_gradient(theta, via(kind, 1.0)), reverse, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(_expected_gradient(theta, via(kind, 0.3)), 0.3 * reverse, atol=1e-6, rtol=1e-5)
    k3_in_loss = lambda log_pi, y: kl_estimate(log_pi[y].view(1, 1), log_q[y].view(1, 1), "k3").sum()
    torch.testing.assert_close(_expected_gradient(theta, k3_in_loss), forward, atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------- prepare(): the learner's side

G, T = 4, 5
LENGTHS = (5, 3, 4, 1, 2, 5, 5, 3)


@pytest.fixture(scope="module")
def tiny():
    return load("tiny", seed=0)


def _rollouts(vocab: int) -> Rollouts:
    g = torch.Generator().manual_seed(3)
    n = len(LENGTHS)
    prompt_ids = torch.randint(3, vocab, (n // G, 4), generator=g).repeat_interleave(G, dim=0)
    completion_ids = torch.zeros(n, T, dtype=torch.long)
    mask = torch.zeros(n, T)
    for i, length in enumerate(LENGTHS):
        completion_ids[i, :length] = torch.randint(3, vocab, (length,), generator=g)
        mask[i, :length] = 1.0
    sampling = -torch.rand(n, T, generator=g) * 3 * mask
    return Rollouts(prompt_ids, torch.ones_like(prompt_ids), completion_ids, mask, sampling, torch.arange(n) // G,
                    ["x"] * n, torch.tensor([length == T for length in LENGTHS]))


def _plain_logprobs(model, ro: Rollouts, temperature: float) -> torch.Tensor:
    """log pi(completion_t | ...) at a temperature, from one plain forward pass of each sequence."""
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], dim=1)
    attention = torch.cat([ro.prompt_mask, ro.completion_mask.long()], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits.float()
    P = ro.prompt_ids.shape[1]
    log_pi = F.log_softmax(logits[:, P - 1:-1] / temperature, dim=-1)
    return log_pi.gather(2, ro.completion_ids.unsqueeze(2)).squeeze(2) * ro.completion_mask


def _prepare(config: Config, policy, teacher, ro: Rollouts, rewards: torch.Tensor, temperature: float):
    from aha.training.rl.parts import StepParts
    from aha.training.rl.step import prepare

    learner = Learner(policy, torch.optim.SGD(policy.parameters(), lr=0.0), teacher=teacher)
    shape = Shape(G, 8, True, temperature, torch.float32)
    return prepare(StepParts(config, None, None, None, None, learner, shape, None), Batch(ro, rewards))


@pytest.mark.parametrize("task_reward", [True, False])
def test_prepare_adds_the_teacher_term_to_the_advantage(tiny, task_reward):
    """The teacher's log-probs are its own forward pass at the sampling temperature; the term is
    -coef * (old - teacher) on every completion token, added to GRPO's advantage (or alone
    without the task reward); the logged reverse KL and share are those of these numbers."""
    ro = _rollouts(len(tiny.tokenizer))
    teacher = load("tiny", seed=1).model.requires_grad_(False)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0, 1.0])
    algo = AlgorithmConfig(teacher="tiny", teacher_coef=0.7, task_reward=task_reward, dynamic_sampling=task_reward)
    config = Config(model="tiny", rollout=RolloutConfig(group_size=G, temperature=0.8), algorithm=algo)
    batch, stats = _prepare(config, copy.deepcopy(tiny.model), teacher, ro, rewards, 0.8)

    mask = ro.completion_mask
    teacher_lp = _plain_logprobs(teacher, ro, 0.8)
    torch.testing.assert_close(batch.teacher_logprobs, teacher_lp, atol=1e-5, rtol=0)
    assert torch.equal(batch.old_logprobs, ro.sampling_logprobs)  # old_logprobs=engine: the sampling log-probs
    term = -0.7 * (ro.sampling_logprobs - teacher_lp) * mask
    task = grpo_advantages(rewards.view(-1, G)).view(-1, 1) * mask if task_reward else torch.zeros_like(mask)
    torch.testing.assert_close(batch.advantages, task + term, atol=1e-5, rtol=0)
    reverse_kl = float(((ro.sampling_logprobs - teacher_lp) * mask).sum() / mask.sum())
    assert stats["distill/reverse_kl"] == pytest.approx(reverse_kl, abs=1e-5)
    share = float(term.abs().sum() / (task.abs().sum() + term.abs().sum()))
    assert stats["distill/advantage_share"] == pytest.approx(share, abs=1e-6)
    assert (stats["distill/advantage_share"] == 1.0) is (not task_reward)
    assert stats["advantage/abs_mean"] == pytest.approx(float((task + term).abs().sum() / mask.sum()), abs=1e-5)


def test_a_teacher_equal_to_the_policy_adds_exactly_nothing(tiny):
    """old_logprobs=trainer: the policy's and the teacher's log-probs are the same forward pass
    of the same weights (loaded apart), so the term is exactly 0 and the advantages are GRPO's."""
    ro = _rollouts(len(tiny.tokenizer))
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0, 1.0])
    algo = AlgorithmConfig(teacher="tiny", old_logprobs="trainer")
    config = Config(model="tiny", rollout=RolloutConfig(group_size=G), algorithm=algo)
    teacher = load("tiny", seed=0).model.requires_grad_(False)
    batch, stats = _prepare(config, copy.deepcopy(tiny.model), teacher, ro, rewards, 1.0)
    assert torch.equal(batch.teacher_logprobs, batch.old_logprobs)
    assert stats["distill/reverse_kl"] == 0.0 and stats["distill/advantage_share"] == 0.0
    assert torch.equal(batch.advantages, grpo_advantages(rewards.view(-1, G)).view(-1, 1) * ro.completion_mask)


# ---------------------------------------------------------------- config rules


@pytest.mark.parametrize("overrides, says", [
    (["algorithm.task_reward=false", "algorithm.dynamic_sampling=false"], "task_reward=false trains on a teacher"),
    (["algorithm.teacher=tiny", "algorithm.task_reward=false"], "set algorithm.dynamic_sampling=false"),
    (["algorithm.teacher=tiny", "method=sft"], "algorithm.teacher scores the policy's own samples: method=rl only"),
    (["algorithm.teacher=tiny", "algorithm.replay=true"], "algorithm.teacher does not work with algorithm.replay"),
    (["algorithm.teacher=tiny", "algorithm.teacher_coef=-1"], "teacher_coef"),
])
def test_distillation_settings_that_cannot_work_are_rejected_at_load(overrides, says):
    with pytest.raises(ConfigError, match=says):
        load_config(None, ["model=tiny", *overrides])
    load_config(None, ["model=tiny", "algorithm.teacher=tiny", "algorithm.task_reward=false",
                       "algorithm.dynamic_sampling=false"])  # the setting they break, set right
