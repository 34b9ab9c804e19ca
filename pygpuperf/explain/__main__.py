"""`python -m pygpuperf.explain TARGET`: profile a workload's steps and explain them on the roofline.

TARGET is a registered workload name (e.g. resnet50-train-amp) or user code,
``path/to/file.py:make_step`` where make_step(device=..., batch_size=...) returns a
callable doing one step. The roofline comes from --machine-model (a results.json of
`python -m pygpuperf.roofline` on the same device), else a quick probe run now.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from pygpuperf import analysis, cli, io, meta, suite
from pygpuperf.backends.base import RunSettings
from pygpuperf.device import UsageError, device_slug, resolve_device
from pygpuperf.explain import explainer
from pygpuperf.results import MachineModel, Results


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise UsageError(f"{message}; see --help")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m pygpuperf.explain", description=__doc__.splitlines()[0])
    p.add_argument("target", help="workload name, or path/to/file.py:make_step")
    p.add_argument("--device", help="cuda, cuda:N, cpu (default: first GPU, else CPU)")
    p.add_argument("--batch-size", type=int, help="batch size passed to the workload")
    p.add_argument("--machine-model", type=Path, help="results.json whose machine model is the roofline")
    p.add_argument("--steps", type=int, default=3, help="profiled steps (default 3)")
    p.add_argument("--out", type=Path, help="output folder (default ./pygpuperf-results/explain-<device>-<time>)")
    return p


def _machine_model(args: argparse.Namespace, device: torch.device) -> MachineModel:
    if args.machine_model is not None:
        try:
            model = io.load_results(args.machine_model).machine_model
        except io.ResultsFileError as exc:
            raise UsageError(f"--machine-model: {exc}") from None
        if model is None:
            raise UsageError(f"--machine-model {args.machine_model}: the file has no machine model; "
                             "use a results.json written by python -m pygpuperf.roofline")
        return model
    results = Results(meta=meta.collect(device, ["pygpuperf.explain"]))
    settings = RunSettings(warmup=1, samples=5, quick=True)
    suite.run(suite.plan(device, "all", ["memory", "compute"], quick=True), device, settings, results.measurements)
    analysis.conclude(results, str(device))
    assert results.machine_model is not None
    return results.machine_model


def _is_user_code(target: str) -> bool:
    return ":" in target and target.split(":", 1)[0].endswith(".py")


def _check_target(target: str) -> None:
    """Before any measuring: a known workload name or an existing user file."""
    from pygpuperf.workloads import WORKLOADS

    if _is_user_code(target):
        path = Path(target.split(":", 1)[0])
        if not path.is_file():
            raise UsageError(f"{target}: {path} does not exist; give path/to/file.py:make_step")
    elif target not in WORKLOADS:
        raise UsageError(f"{target}: not a workload ({', '.join(sorted(WORKLOADS))}) nor path/to/file.py:make_step")


def _build(target: str, device: torch.device, batch_size: int | None):
    from pygpuperf.workloads import get_workload
    from pygpuperf.workloads.user import load_user_step

    if _is_user_code(target):
        return load_user_step(target, device, batch_size)
    return get_workload(target).build(device, batch_size)


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.steps < 1:
        raise UsageError(f"--steps {args.steps}: needs at least 1")
    device = resolve_device(args.device)
    _check_target(args.target)
    out = cli.output_dir(args.out, f"explain-{device_slug(device)}")
    model = _machine_model(args, device)
    built = _build(args.target, device, args.batch_size)
    with built:
        explanation = explainer.explain(built.step, model, device, steps=args.steps,
                                        module=(built.modules[0] if getattr(built, "modules", None) else None))
    paths = explainer.write_outputs(explanation, out)
    print("\n".join(explainer.summary_lines(explanation)))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> None:
    cli.main_of(run, argv)


if __name__ == "__main__":
    main()
