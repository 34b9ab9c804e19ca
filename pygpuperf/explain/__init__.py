"""The explainer: profile real steps and attribute every microsecond to the measured roofline.

model: the records (kernels, timeline, waterfall); trace: capture a profiled step; classify:
kernel classes and precisions; costs: FLOPs and bytes per op; timeline: busy vs idle;
attribution: roofline bounds, the waterfall, the self-check and A/B comparison.
"""

from pygpuperf.explain.explainer import Explanation, explain, explain_captured  # noqa: E402

__all__ = ["Explanation", "explain", "explain_captured"]
