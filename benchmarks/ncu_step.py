"""One training step of a workload for Nsight Compute: warm-up steps outside the profiled range, then one
step between cudaProfilerStart and cudaProfilerStop.

    ncu --profile-from-start off --clock-control none --cache-control none \\
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum \\
        --csv --log-file OUT.csv python benchmarks/ncu_step.py resnet50-train-amp 256

--cache-control none keeps what one kernel leaves in L2 for the next, as in a real step: the
counters then show the reuse the kernel-time model estimates.
"""

from __future__ import annotations

import sys

import torch

from pygpuperf.workloads import get_workload


def main() -> int:
    name, batch = sys.argv[1], int(sys.argv[2])
    with get_workload(name).build("cuda", batch) as built:
        for _ in range(5):
            built.step()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        built.step()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
