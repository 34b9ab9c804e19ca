"""An explained step written out: explain.json, kernels.csv, findings.json, its charts and explain.html."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

from pygpuperf.core import documents
from pygpuperf.core.results import MachineModel
from pygpuperf.explain import explainer
from pygpuperf.diagnose import Diagnosis, findings
from pygpuperf.trials import fixes
from pygpuperf.trials.record import Trials
from pygpuperf.explain.model import Explanation
from pygpuperf.explain.model import KernelRecord
from pygpuperf.report.explain_html import ExplainReport, write_explain_report


def explain_document(explanation: Explanation, diagnosis: Diagnosis | None,
                     trials: Trials | None = None) -> dict[str, Any]:
    """explain.json: the explained step's record, with what --try-fixes measured (`trials`: the fixes, the
    library ops timed, then the host's own time per step) and its diagnosis' findings and causes."""
    doc = {**explanation.to_dict(), **(trials.to_dict() if trials is not None else {})}
    return {**doc, **diagnosis.to_dict()} if diagnosis is not None else {**doc, "findings": []}


def write_outputs(explanation: Explanation, out: Path, diagnosis: Diagnosis | None = None,
                  trials: Trials | None = None) -> list[Path]:
    """explain.json (median step, waterfall, timeline, kernels, fixes tried, findings and causes) and
    kernels.csv."""
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "explain.json"
    documents.write_document(json_path, explain_document(explanation, diagnosis, trials), "explain", "explain.json")
    csv_path = out / "kernels.csv"
    columns = [f.name for f in dataclasses.fields(KernelRecord)]
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for record in explanation.median.kernels:
            writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v
                             for k, v in dataclasses.asdict(record).items()})
    return [json_path, csv_path]


def write_explained(explanation: Explanation, diagnosis: Diagnosis, model: MachineModel | Any, out: Path,
                    echo: Callable[[str], None] = print, echo_findings: bool = True,
                    trials: Trials | None = None) -> ExplainReport:
    """Write everything about a diagnosed step (:func:`pygpuperf.diagnose.diagnose`) into `out`: explain.json
    (settings, the fixes --try-fixes tried (`trials`) and findings included), kernels.csv, findings.json,
    waterfall.png/.svg, kernel_roofline.png/.svg and explain.html, with the charts' markup for report.html.
    `model` is the machine model or the Results holding it; `echo` gets the waterfall, the fixes (and, with
    `echo_findings`, the findings) as text."""
    echo("\n".join(explainer.summary_lines(explanation) + fixes.fix_lines(trials.fixes if trials else (), trials)
                   + (findings.finding_lines(diagnosis.findings) if echo_findings else [])))
    paths = write_outputs(explanation, out, diagnosis, trials)
    written, charts = write_explain_report(explanation, out, model, diagnosis, trials)
    paths += written
    path = out / "findings.json"
    documents.write_document(path, [dataclasses.asdict(f) for f in diagnosis.findings], "findings", "findings.json")
    return ExplainReport([*paths, path], charts)
