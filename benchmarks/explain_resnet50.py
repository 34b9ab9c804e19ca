"""Explain ResNet-50 AMP training on a GPU against a measured machine model, in plain PyTorch.

Each configuration is the textbook loop (torchvision ResNet-50, synthetic batch, fp16 autocast,
GradScaler, SGD with momentum). It is timed without the profiler first (warm-up, then CUDA
events per step), then profiled and explained. Writes, per configuration, explain.json,
kernels.csv and summary.txt under OUT, plus kernel_names.json (every distinct kernel with
its op, dtypes, class and precision) for the classifier's fixtures.

    python benchmarks/explain_resnet50.py MODEL_RESULTS.json OUT [batch:format ...]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch
import torchvision

from pygpuperf.core import documents
from pygpuperf.explain import explainer
from pygpuperf.report import explained


def make_step(batch: int, channels_last: bool):
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50(weights=None).cuda()
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    images = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=memory_format)
    labels = torch.randint(0, 1000, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step, model


def plain_throughput(step, batch: int, warmup: int = 10, steps: int = 30) -> dict[str, float]:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    median = statistics.median(times)
    return {"step_ms": median * 1e3, "images_per_s": batch / median,
            "cv": statistics.pstdev(times) / statistics.mean(times)}


def main() -> int:
    model_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    configs = sys.argv[3:] or ["256:channels_last"]
    machine = documents.load_results(model_path).machine_model
    names: dict[str, dict[str, object]] = {}
    for config in configs:
        batch_text, layout = config.split(":")
        batch = int(batch_text)
        step, model = make_step(batch, layout == "channels_last")
        throughput = plain_throughput(step, batch)
        explanation = explainer.explain(step, machine, "cuda", steps=3, warmup=2, module=model)
        folder = out / f"resnet50-amp-bs{batch}-{layout}"
        explained.write_outputs(explanation, folder)
        lines = [f"ResNet-50 AMP fp16 training, batch {batch}, {layout}: {throughput['images_per_s']:,.0f} img/s, "
                 f"step {throughput['step_ms']:.2f} ms (CV {100 * throughput['cv']:.1f}%) without the profiler"]
        lines += explainer.summary_lines(explanation)
        (folder / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (folder / "throughput.json").write_text(json.dumps(throughput), encoding="utf-8")
        print("\n".join(lines), flush=True)
        for k in explanation.median.kernels:
            names.setdefault(k.name, {"op": k.op, "dtypes": k.dtypes, "class": k.kernel_class,
                                      "precision": k.precision})
        del step, model, explanation
        torch.cuda.empty_cache()
    (out / "kernel_names.json").write_text(json.dumps(names, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
