"""`python -m pygpuperf.explain TARGET`: profile a workload's steps and explain them on the roofline.

TARGET is a registered workload name (e.g. resnet50-train-amp) or user code,
``path/to/file.py:make_step`` where make_step(device=..., batch_size=...) returns a
callable doing one step. The roofline comes from --machine-model (a results.json of
`python -m pygpuperf.roofline` on the same device), else a quick probe run now.

--compare-config A B ... explains one run per knob set (e.g. memory_format=nchw
memory_format=channels_last) and says where the step-time difference goes;
--batch-sweep 32,64,128 times steps over batch sizes, fits t = t_fixed + bs x t_sample
and finds the largest batch that fits in memory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from pygpuperf import diagnose
from pygpuperf.cli import common as cli
from pygpuperf.core import documents
from pygpuperf.core import validation
from pygpuperf.facts.device import device_slug, resolve_device
from pygpuperf.core.errors import UsageError
from pygpuperf.trials import batch, fixes
from pygpuperf.compare import explained as compare
from pygpuperf.explain import explainer
from pygpuperf.core.results import MachineModel
from pygpuperf.workloads.knobs import AMP, COMPILE, CUDA_GRAPHS, CUDNN_BENCHMARK, FP16_ACCUMULATION, MEMORY_FORMAT, TF32
from pygpuperf.report import explained

# Knobs with a flag of their own (batch size has --batch-size; --compare-config takes any).
_KNOBS = (AMP, MEMORY_FORMAT, CUDNN_BENCHMARK, TF32, FP16_ACCUMULATION, COMPILE, CUDA_GRAPHS)


def build_parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m pygpuperf.explain", description=__doc__.splitlines()[0])
    p.add_argument("target", help="workload name, or path/to/file.py:make_step")
    p.add_argument("--device", help="cuda, cuda:N, cpu (default: first GPU, else CPU)")
    p.add_argument("--batch-size", type=int, help="batch size passed to the workload")
    p.add_argument("--machine-model", type=Path, help="results.json whose machine model is the roofline")
    p.add_argument("--steps", type=int, default=3, help="profiled steps (default 3)")
    cli.add_folder_flags(p, "output folder (default ./pygpuperf-results/explain-<device>-<time>-<run id>)")
    p.add_argument("--json", action="store_true", help="print explain.json on stdout (the waterfall goes to stderr)")
    for spec in _KNOBS:
        p.add_argument("--" + spec.name.replace("_", "-"), dest=spec.name, metavar="|".join(spec.choices) or
                       ("on|off" if spec.kind == "bool" else "VALUE"), help=spec.help)
    _add_comparison_flags(p)
    p.add_argument("--try-fixes", nargs="?", const="all", metavar="FIX,FIX,...",
                   help="after explaining, apply each fix the tool can apply (" + ", ".join(fixes.FIX_NAMES) +
                   "; default all), time it without the profiler and report it beside the kernel model's prediction")
    return p


def _given_knobs(args: argparse.Namespace) -> dict[str, str]:
    """The knob flags given on the command line (the rest keep the workload's defaults)."""
    return {spec.name: getattr(args, spec.name) for spec in _KNOBS if getattr(args, spec.name, None) is not None}


def _machine_model(args: argparse.Namespace, device: torch.device) -> MachineModel:
    if args.machine_model is not None:
        try:
            model = documents.load_results(args.machine_model).machine_model
            if model is not None:
                validation.check_machine_model(model, validation.one_line(args.machine_model, 120))
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise UsageError(f"--machine-model: {validation.one_line(exc)}") from None
        if model is None:
            raise UsageError(f"--machine-model {args.machine_model}: the file has no machine model; "
                             "use a results.json written by python -m pygpuperf.roofline")
        if not validation.same_kind(model, str(device)):
            raise UsageError(f"--machine-model {validation.one_line(args.machine_model, 80)} was measured on "
                             f"{validation.one_line(model.device, 40)}, but the step runs on {device}: give the "
                             "results.json of this device, or leave --machine-model out to measure it now")
        return model
    return explainer.quick_machine_model(device)


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


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.steps < 1:
        raise UsageError(f"--steps {args.steps}: needs at least 1")
    device = resolve_device(args.device)
    _check_target(args.target)
    if args.compare_config or args.batch_sweep:
        return _run_comparison_flags(args, device)
    knobs = _given_knobs(args)
    _check_knobs(args.target, [knobs])
    model = _machine_model(args, device)
    with cli.claim_output(args.out, f"explain-{device_slug(device)}", "explain.json",
                          overwrite=args.overwrite) as folder:
        built = _build_with(args.target, device, args.batch_size, knobs)
        with built:
            diagnosed = diagnose.explain_built(built, model, device, steps=args.steps)
        explanation, diagnosis = diagnosed.explanation, diagnosed.diagnosis
        trials = None
        if args.try_fixes:
            trials = fixes.try_fixes(explanation, model, _fix_target(args, device, knobs, built), device,
                                     only=_fix_names(args.try_fixes), found=diagnosis.causes)
            # The findings again with what the trials measured, on the causes already named.
            diagnosis = diagnose.diagnose(explanation, model, causes=diagnosis.causes, trials=trials.fixes)
        paths = explained.write_explained(explanation, diagnosis, model, folder.path, echo=_echo(args),
                                          trials=trials).paths
    if args.json:
        sys.stdout.write(paths[0].read_text(encoding="utf-8") + "\n")
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return _exit_code(diagnosis.findings)


def _fix_names(text: str) -> list[str] | None:
    if text == "all":
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(fixes.FIX_NAMES))
    if unknown:
        raise UsageError(f"--try-fixes {text}: no fix {', '.join(unknown)}; the fixes: {', '.join(fixes.FIX_NAMES)}")
    return names


def _fix_target(args: argparse.Namespace, device: torch.device, knobs: dict[str, str], built) -> fixes.Target:
    """How --try-fixes rebuilds the step with a fix."""
    batch = args.batch_size or int(getattr(built, "samples_per_step", 0) or 0) or None
    build = lambda size, given: _build_with(args.target, device, size, dict(given))  # noqa: E731
    if _is_user_code(args.target):
        from pygpuperf.workloads import user

        accepted = user.step_keywords(args.target)
        user_build = lambda size, given: _build_with(  # noqa: E731
            args.target, device, size, {k: v for k, v in given.items() if k not in fixes.FLAG_KNOBS})
        return fixes.Target(user_build, lambda k: accepted is None or k in accepted, batch, dict(knobs), True)
    from pygpuperf.workloads import get_workload

    names = {spec.name for spec in get_workload(args.target).knob_specs()}
    return fixes.Target(build, lambda k: k in names, batch, dict(knobs), False)


def _echo(args: argparse.Namespace):
    """Where the text goes: stdout, or stderr when stdout carries --json."""
    return (lambda text: print(text, file=sys.stderr)) if args.json else print


def _exit_code(findings) -> int:
    return cli.EXIT_FAILED if any(f.severity == "error" for f in findings) else cli.EXIT_OK


# --------------------------------------------------------------------------- findings, --compare-config, --batch-sweep


def _add_comparison_flags(p: argparse.ArgumentParser) -> None:
    what = p.add_mutually_exclusive_group()
    what.add_argument("--compare-config", nargs="+", metavar="KNOB=VALUE[,KNOB=VALUE]",
                      help="explain one run per knob set and compare them, e.g. memory_format=nchw "
                      "memory_format=channels_last, or batch_size=64 batch_size=256")
    what.add_argument("--batch-sweep", metavar="BS,BS,...",
                      help="time steps at these batch sizes (e.g. 32,64,128,256), fit t = t_fixed + bs x t_sample "
                      "and find the largest batch that fits in memory")


def parse_knob_set(text: str) -> dict[str, str]:
    """"memory_format=nchw,batch_size=64" -> {"memory_format": "nchw", "batch_size": "64"}."""
    knobs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, value = item.partition("=")
        if not eq or not name.strip() or not value.strip():
            raise UsageError(f"--compare-config {text!r}: write each knob as NAME=VALUE, several joined by commas")
        knobs[name.strip()] = value.strip()
    if not knobs:
        raise UsageError(f"--compare-config {text!r}: no knob given; write NAME=VALUE")
    return knobs


def parse_batch_sizes(text: str) -> list[int]:
    """"32,64,128" -> [32, 64, 128]."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--batch-sweep {text!r}: give batch sizes as integers joined by commas, e.g. 32,64,128") \
            from None
    if not sizes or min(sizes) < 1:
        raise UsageError(f"--batch-sweep {text!r}: give positive batch sizes, e.g. 32,64,128")
    return sorted(set(sizes))


def _build_with(target: str, device: torch.device, batch_size: int | None, knobs: dict[str, str]):
    from pygpuperf.workloads import get_workload
    from pygpuperf.workloads.user import load_user_step

    if _is_user_code(target):
        return load_user_step(target, device, batch_size, **knobs)
    return get_workload(target).build(device, batch_size, **knobs)


def _check_knobs(target: str, knob_sets: list[dict[str, str]]) -> None:
    """Before any measuring: every knob set parses for a registered workload (user code takes any keywords)."""
    from pygpuperf.workloads import get_workload
    from pygpuperf.workloads.knobs import parse_knobs

    if _is_user_code(target):
        return
    workload = get_workload(target)
    specs = workload.knob_specs()
    for knobs in knob_sets:
        parse_knobs(workload.name, specs, knobs)


def _labels(knob_sets: list[dict[str, str]]) -> list[str]:
    """Each knob set as "name=value,...", leaving out knobs every set gives the same value."""
    shared = {k: v for k, v in knob_sets[0].items() if all(s.get(k) == v for s in knob_sets)}
    labels = [",".join(f"{k}={v}" for k, v in knobs.items() if k not in shared) for knobs in knob_sets]
    if not all(labels):
        labels = [",".join(f"{k}={v}" for k, v in knobs.items()) for knobs in knob_sets]
    return labels


def _config_batch(value: str | None, default: int | None) -> int | None:
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise UsageError(f"--compare-config batch_size={value}: give a positive integer")
    return number


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in label).strip("-") or "config"


def _run_comparison_flags(args: argparse.Namespace, device: torch.device) -> int:
    if args.batch_sweep:
        return _run_batch_sweep(args, device)
    return _run_compare(args, device)


def _run_compare(args: argparse.Namespace, device: torch.device) -> int:
    knob_sets = [parse_knob_set(text) for text in args.compare_config]
    if len(knob_sets) < 2:
        raise UsageError("--compare-config needs two or more knob sets, e.g. memory_format=nchw "
                         "memory_format=channels_last")
    labels = _labels(knob_sets)
    if len(set(labels)) != len(labels):
        raise UsageError(f"--compare-config: the knob sets repeat ({' '.join(labels)}); give different ones")
    _check_knobs(args.target, knob_sets)
    model = _machine_model(args, device)
    with cli.claim_output(args.out, f"explain-compare-{device_slug(device)}", "compare.json",
                          overwrite=args.overwrite) as folder:
        return _compare_into(folder.path, args, device, model, labels, knob_sets)


def _compare_into(out: Path, args: argparse.Namespace, device: torch.device, model: MachineModel,
                  labels: list[str], knob_sets: list[dict[str, str]]) -> int:
    configs: list[compare.Config] = []
    paths: list[Path] = []
    say = _echo(args)
    for label, knobs in zip(labels, knob_sets):
        knobs = {**_given_knobs(args), **knobs}
        built = _build_with(args.target, device, _config_batch(knobs.pop("batch_size", None), args.batch_size), knobs)
        with built:
            diagnosed = diagnose.explain_built(built, model, device, steps=args.steps)
        explanation = diagnosed.explanation
        say(f"== {label}")
        paths += explained.write_explained(explanation, diagnosed.diagnosis, model, out / _slug(label), echo=say).paths
        configs.append(compare.Config(label, explanation, built.samples_per_step, dict(built.params)))
    comparison = compare.compare(configs)
    say("== comparison")
    say("\n".join(comparison.summary_lines()))
    path = out / "compare.json"
    documents.write_document(path, comparison.to_dict(), "compare", "compare.json")
    if args.json:
        sys.stdout.write(path.read_text(encoding="utf-8") + "\n")
    print("wrote " + ", ".join(str(p) for p in [*paths, path]), file=sys.stderr)
    return 0


def _run_batch_sweep(args: argparse.Namespace, device: torch.device) -> int:
    sizes = parse_batch_sizes(args.batch_sweep)
    if args.batch_size is not None:
        raise UsageError("--batch-size and --batch-sweep both set the batch; give one")
    knobs = _given_knobs(args)
    _check_knobs(args.target, [knobs])
    with cli.claim_output(args.out, f"explain-batch-{device_slug(device)}", "batch_sweep.json",
                          overwrite=args.overwrite) as folder:
        sweep = batch.batch_sweep(lambda size: _build_with(args.target, device, size, dict(knobs)), sizes, device)
        _echo(args)("\n".join(sweep.summary_lines()))
        path = folder.path / "batch_sweep.json"
        documents.write_document(path, sweep.to_dict(), "batch_sweep", "batch_sweep.json")
    if args.json:
        sys.stdout.write(path.read_text(encoding="utf-8") + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> None:
    cli.main_of(run, argv)


if __name__ == "__main__":
    main()
