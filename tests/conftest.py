import pytest
import torch

from pygpuperf.measure import native


def _cuda_ready() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA GPU visible"
    if not native.cuda_built():
        return "extension built without CUDA"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _cuda_ready()
    few_gpus = torch.cuda.device_count() < 2
    for item in items:
        if reason and ("gpu" in item.keywords or "multigpu" in item.keywords):
            item.add_marker(pytest.mark.skip(reason=reason))
        elif few_gpus and "multigpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="needs two GPUs"))
