"""A quick check of the energy telemetry on a GPU: one sampled span of matmuls and one timed step."""

import torch

from pygpuperf.explain.explainer import measure_throughput
from pygpuperf.facts import nvml

device = torch.device("cuda", 0)
a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
with nvml.sampling(device) as sampler:
    for _ in range(200):
        a @ a
    torch.cuda.synchronize()
t = sampler.telemetry
print(f"span {t.seconds:.3f} s, energy {t.energy_j} J ({t.energy_source}), mean power {t.mean_power_w()} W, "
      f"power samples {len(t.power_w)}")
timed = measure_throughput(lambda: a @ a, device, samples_per_step=1, warmup=3, steps=50)
print(f"step {timed.step_us.median:.1f} us (CV {100 * timed.step_us.cv:.1f} %), {timed.energy_j_per_step} J per step, "
      f"{timed.joules_per_sample} J per sample")
