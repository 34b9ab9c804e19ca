"""The diagnosis of an explained step: why each stretch of it ran above its bound (causes, each with its id,
waterfall part, evidence, words and fix) and what a person should know (findings).

:func:`diagnose` writes one :class:`Diagnosis` of an explained step; a newcomer adds a cause in
:mod:`pygpuperf.diagnose.causes` and a finding in :mod:`pygpuperf.diagnose.findings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from pygpuperf.core.results import Finding, MachineModel
from pygpuperf.diagnose.causes import Causes
from pygpuperf.diagnose.findings import Diagnosis, Trial, diagnose_step
from pygpuperf.explain import explainer
from pygpuperf.explain.model import Explanation


def diagnose(explanation: Explanation, model: MachineModel | None, *, causes: Causes | None = None,
             trials: Sequence[Trial] = ()) -> Diagnosis:
    """The causes (with `model`, the roofline the step was explained against) and findings of `explanation`'s
    median step under its own settings. `causes` already named are kept, and the fixes --try-fixes tried
    (`trials`) say what they measured (see :func:`diagnose_step`)."""
    return diagnose_step(explanation, explanation.settings, model, step_causes=causes, trials=trials)


@dataclass(frozen=True)
class DiagnosedStep:
    """An explained step and its diagnosis, as the public ``pygpuperf.explain(...)`` returns them."""

    explanation: Explanation
    diagnosis: Diagnosis

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.diagnosis.findings

    @property
    def causes(self) -> Causes | None:
        return self.diagnosis.causes


def explain(step_fn: Callable[[], Any], model: MachineModel | None = None, device: torch.device | str = "cuda",
            **options: Any) -> DiagnosedStep:
    """:func:`pygpuperf.explain.explainer.explain` and its diagnosis (None `model`: a quick probe run first)."""
    model = model if model is not None else explainer.quick_machine_model(device)
    explanation = explainer.explain(step_fn, model, device, **options)
    return DiagnosedStep(explanation, diagnose(explanation, model))


def explain_built(built: Any, model: MachineModel | None, device: torch.device | str, steps: int = 3,
                  throughput: Any = None) -> DiagnosedStep:
    """:func:`pygpuperf.explain.explainer.explain_built` and its diagnosis."""
    model = model if model is not None else explainer.quick_machine_model(device)
    explanation = explainer.explain_built(built, model, device, steps=steps, throughput=throughput)
    return DiagnosedStep(explanation, diagnose(explanation, model))


def explain_again(explanation: Explanation, model: MachineModel) -> Diagnosis:
    """A recorded explanation costed, bounded and diagnosed again on `model` by the current code."""
    explainer.explain_again(explanation, model)
    return diagnose(explanation, model)


__all__ = ["Diagnosis", "DiagnosedStep", "Trial", "diagnose", "explain", "explain_again", "explain_built"]
