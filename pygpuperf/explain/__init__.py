"""The explainer: profile real steps and attribute every microsecond to the measured roofline.

model: the records (kernels, timeline, waterfall); trace: capture a profiled step; classify:
kernel classes and precisions; costs: FLOPs and bytes per op; timeline: busy vs idle;
attribution: roofline bounds, the waterfall, the self-check and A/B comparison.

The package is callable: ``pygpuperf.explain(step_fn, machine_model, "cuda")`` is
:func:`pygpuperf.explain.explainer.explain`.
"""

import sys
import types

from pygpuperf.explain.explainer import explain, explain_built, explain_captured  # noqa: E402
from pygpuperf.explain.model import Explanation, Throughput


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return explain(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["Explanation", "Throughput", "explain", "explain_built", "explain_captured"]
