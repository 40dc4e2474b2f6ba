"""On-policy distillation from a teacher: the per-token reverse KL to the teacher, on the
policy's own samples, as a term of each token's advantage (GKD, Agarwal et al. 2024; MiniLLM,
Gu et al. 2024; Thinking Machines' "on-policy distillation", 2025).

Why an advantage term and not a KL term in the loss. With y ~ pi and the detached advantage
A(y) = -(log pi(y) - log q(y)), the policy-gradient loss -A(y) * log pi(y) has the expected
gradient

    E_pi[(log pi(y) - log q(y)) grad log pi(y)] = grad KL(pi || q),

because grad KL(pi || q) = sum_y grad pi(y) (log pi(y) - log q(y)) + sum_y pi(y) grad log pi(y)
and the last sum is grad sum_y pi(y) = 0. So this term descends the reverse KL (mode-seeking:
the student stops putting mass where the teacher puts none), and through the usual policy
loss it is clipped, aggregated and importance-weighted like the task's advantage.

Schulman's k3 = r - 1 - log r (r = q / pi) put into the loss would not do this: its gradient at
a sampled y is (1 - q(y) / pi(y)) grad log pi(y), whose expectation is sum_y (pi - q) grad log pi
= -sum_y q(y) grad log pi(y) = grad KL(q || pi), the forward KL's gradient (mass-covering), not
the reverse KL's. tests/test_distillation.py checks both identities exactly on a small
categorical distribution.
"""

from __future__ import annotations

import torch


def distillation_advantages(student_logp: torch.Tensor, teacher_logp: torch.Tensor, mask: torch.Tensor,
                            coef: float) -> torch.Tensor:
    """(N, T) per-token advantage term -coef * (log pi_student - log pi_teacher) at the sampled
    tokens; 0 outside the mask (padding, environment tokens), whatever the log-probs hold there.

    student_logp: the log-probs of the policy that sampled the tokens (the ratio's denominator);
    teacher_logp: the teacher's log-probs of the same tokens, at the same temperature. Both are
    treated as constants: the gradient reaches the policy through the policy loss only."""
    if student_logp.shape != teacher_logp.shape or mask.shape != student_logp.shape:
        raise ValueError(f"student_logp {tuple(student_logp.shape)}, teacher_logp {tuple(teacher_logp.shape)} and "
                         f"mask {tuple(mask.shape)} must have one shape")
    log_ratio = (student_logp - teacher_logp).detach()
    return torch.where(mask.bool(), -coef * log_ratio, torch.zeros_like(log_ratio))


def advantage_share(task_advantages: torch.Tensor, teacher_term: torch.Tensor, mask: torch.Tensor) -> float:
    """How much of the advantage the teacher's term makes: sum |teacher| / (sum |task| + sum |teacher|)
    over the masked tokens, in [0, 1]; 0 when both are 0 (nothing to share)."""
    valid = mask.bool()
    teacher = teacher_term.abs()[valid].sum()
    total = task_advantages.abs()[valid].sum() + teacher
    return float(teacher / total) if float(total) > 0 else 0.0
