"""The explainer: profile real steps and attribute every microsecond to the measured roofline.

model: the records (kernels, timeline, waterfall); trace: capture a profiled step; classify:
kernel classes and precisions; costs: FLOPs and bytes per op; attribution: roofline bounds, the
waterfall and the self-check; timeline: busy vs idle; queue: the host's and the device's queues.

The package is callable: ``pygpuperf.explain(step_fn, machine_model, "cuda")`` explains the step and
diagnoses it (:func:`pygpuperf.diagnose.explain`).
"""

import sys
import types

from pygpuperf.explain.explainer import explain_built, explain_captured  # noqa: E402
from pygpuperf.explain.model import Explanation, Throughput


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from pygpuperf.diagnose import explain  # the one call that reaches above this layer: the public API

        return explain(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["Explanation", "Throughput", "explain_built", "explain_captured"]
