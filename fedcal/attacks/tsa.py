"""The Temperature Scaling Attack (TSA), SPEC §2 (flwr-free).

A malicious client follows the normal protocol (same local steps E, batch size B and
optimiser) but trains on the temperature-scaled cross-entropy and scales its learning rate::

    ℓ_τ(θ) = CE(softmax(z_θ(x) / τ), y)          η = β·τ   (coupled; the default)
                                                 η = β     (the "uncoupled" ablation)

where z_θ(x) are the model's logits and β is the benign learning rate. Benign clients use
τ = 1, η = β; evaluation and deployment always use τ = 1.

Why it works, and why it is stealthy: the logit gradient is ∂ℓ_τ/∂z = (softmax(z/τ) − e_y)/τ,
so with η = β·τ the 1/τ cancels and a step moves θ by −β·(softmax(z/τ) − e_y)·∂z/∂θ — the
benign step size, towards a target that only differs in temperature. The updates therefore
stay nearly collinear with benign ones (cosine ≥ ~0.9, see
:func:`fedcal.analysis.update_cosine_curves`), while the model learns logits that are
τ times too large (τ > 1: over-confident at τ = 1, sECE < 0) or too small (τ < 1:
under-confident, sECE > 0), with accuracy within about ±2 points of the benign run.
Uncoupled (η = β), the steps are 1/τ times the benign ones and drift away as local steps
accumulate.

**Adaptive variants** (against a defense that watches confidence, docs/defense.md):
``tsa-step-frac`` trains only the first share of the local steps at τ; ``tsa-blend`` = λ sends
benign + λ·(TSA − benign), both trained from the global model on the same batches — λ < 1 moves
the reply's confidence signature towards the benign ones by as much as the attacker wants;
``tsa-duty`` = p attacks in a seeded share p of its rounds and trains benignly in the others —
against a test that accumulates a client's evidence over rounds (docs/defense.md), it dilutes the
evidence per round without changing what an attacking round does.

Source: the project's SPEC §2 (shared/SPEC.md), "Temperature Scaling Attack". The loss and
the η = β·τ coupling are implemented once, in :func:`fedcal.local_training.local_train` (``tau``,
``coupled``) and :func:`fedcal.local_training.effective_lr`; this module is the behaviour that turns
them on. Run config: ``attack=tsa``, ``tau``, ``coupled``.
"""

from __future__ import annotations

import math

import torch

from fedcal.attacks.behaviour import AttackSpec, Behaviour, BehaviourKind, round_generator


class TemperatureScalingAttack(BehaviourKind):
    """The TSA client: local loss CE(softmax(z/τ), y) with η = β·τ (or β uncoupled)."""

    kind = "tsa"
    attack = "tsa"
    defaults = {"tau": 1.0, "coupled": True, "step_frac": 1.0, "blend": 1.0, "duty": 1.0}

    def from_spec(self, spec: AttackSpec) -> Behaviour:
        return Behaviour("tsa", tau=spec.tau, coupled=spec.coupled, step_frac=spec.tsa_step_frac,
                         blend=spec.tsa_blend, duty=spec.tsa_duty)

    def variants(self) -> dict[str, Behaviour]:
        """Coupled and uncoupled, at τ ∈ {0.2, 5}."""
        out: dict[str, Behaviour] = {}
        for coupled in (True, False):
            for tau in (0.2, 5.0):
                out[f"tsa_{'coupled' if coupled else 'uncoupled'}_tau{tau:g}"] = Behaviour("tsa", tau=tau, coupled=coupled)
        return out

    def check(self, behaviour: Behaviour) -> None:
        tau, step_frac, blend, duty = (self.param(behaviour, n) for n in ("tau", "step_frac", "blend", "duty"))
        if not (tau > 0 and math.isfinite(tau)):
            raise ValueError(f"tau must be a finite number > 0, got {tau}")
        if not 0 < step_frac <= 1:
            raise ValueError(f"step_frac must lie in (0, 1], got {step_frac}")
        if not (blend > 0 and math.isfinite(blend)):
            raise ValueError(f"blend must be a finite number > 0, got {blend}")
        if not 0 < duty <= 1:
            raise ValueError(f"duty must lie in (0, 1], got {duty}")

    def loss_temperature(self, behaviour: Behaviour) -> tuple[float, bool]:
        return self.param(behaviour, "tau"), self.param(behaviour, "coupled")

    def temperature_steps(self, behaviour: Behaviour, steps: int) -> int:
        """The adaptive attacker's ``tsa-step-frac``: the first round(frac · E) steps, at least one."""
        frac = self.param(behaviour, "step_frac")
        return steps if frac >= 1 else max(1, min(steps, round(frac * steps)))

    def attacks_in_round(self, behaviour: Behaviour, seed: int, server_round: int, client_id: int) -> bool:
        """The adaptive attacker's ``tsa-duty`` = p: it attacks when a uniform draw of the round's own
        ``duty`` stream (:func:`~fedcal.attacks.behaviour.round_generator`) falls below p. A draw per
        (seed, round, client) rather than a strict alternation over the client's own rounds: a
        client does not know how often it was sampled (fedcal's clients keep no state across
        rounds), and a draw makes the attacked rounds the same wherever the round runs."""
        duty = self.param(behaviour, "duty")
        if duty >= 1:
            return True
        u = torch.rand((), generator=round_generator(seed, server_round, client_id, stream="duty"), dtype=torch.float64)
        return float(u) < duty

    def blend(self, behaviour: Behaviour) -> float:
        """The adaptive attacker's ``tsa-blend``."""
        return self.param(behaviour, "blend")
