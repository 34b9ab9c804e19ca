"""The diagnosis of an explained step: why each stretch of it ran above its bound (causes, each with its id,
waterfall part, evidence, words and fix) and what a person should know (findings).

``diagnose(explanation, model)`` names the causes of the median step and the findings once; a newcomer adds a
cause in :mod:`pygpuperf.diagnose.causes` and a finding in :mod:`pygpuperf.diagnose.findings`.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from pygpuperf.core.results import Finding, MachineModel
from pygpuperf.diagnose.findings import explain_findings
from pygpuperf.explain import explainer
from pygpuperf.explain.model import Explanation


def diagnose(explanation: Explanation, model: MachineModel | None) -> list[Finding]:
    """The causes (with `model`, the roofline the step was explained against) and findings of `explanation`'s
    median step, set on it and returned."""
    explanation.findings = explain_findings(explanation, explanation.settings, model)
    return explanation.findings


def explain(step_fn: Callable[[], Any], model: MachineModel | None = None, device: torch.device | str = "cuda",
            **options: Any) -> Explanation:
    """:func:`pygpuperf.explain.explainer.explain` with its diagnosis (None `model`: a quick probe run first)."""
    model = model if model is not None else explainer.quick_machine_model(device)
    explanation = explainer.explain(step_fn, model, device, **options)
    diagnose(explanation, model)
    return explanation


def explain_built(built: Any, model: MachineModel | None, device: torch.device | str, steps: int = 3,
                  throughput: Any = None) -> Explanation:
    """:func:`pygpuperf.explain.explainer.explain_built` with its diagnosis."""
    model = model if model is not None else explainer.quick_machine_model(device)
    explanation = explainer.explain_built(built, model, device, steps=steps, throughput=throughput)
    diagnose(explanation, model)
    return explanation


def explain_again(explanation: Explanation, model: MachineModel) -> list[Finding]:
    """A recorded explanation costed, bounded and diagnosed again on `model` by the current code."""
    explainer.explain_again(explanation, model)
    return diagnose(explanation, model)


__all__ = ["diagnose", "explain", "explain_again", "explain_built"]
