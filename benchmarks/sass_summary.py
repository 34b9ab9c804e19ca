"""Which machine instructions the compute kernels compiled to, from the built extension.

Disassembles the extension's device code with cuobjdump and counts, per kernel, the
tensor-core and FMA opcodes (HGMMA, QGMMA, IGMMA, HMMA, IMMA, QMMA, HFMA2, HFMA2.MMA,
FFMA, DFMA, IMAD). It is the evidence that a probe times the instruction it names.

    python benchmarks/sass_summary.py [--arch sm_90a] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import re
import shutil
import subprocess
import sys

OPCODES = ("HGMMA", "QGMMA", "IGMMA", "HMMA", "IMMA", "QMMA", "HFMA2.MMA", "HFMA2", "FFMA", "DFMA", "IMAD")
_FUNCTION = re.compile(r"^\s*Function : (\S+)")
# An instruction line: /*0040*/  OPCODE.MODIFIERS operands ;
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_KERNELS_OF_INTEREST = ("wgmma", "mma", "core_peak")


def opcode_family(opcode: str) -> str | None:
    """HGMMA.64x128x16.F32 -> HGMMA; HFMA2.MMA -> HFMA2.MMA; FFMA.FTZ -> FFMA."""
    if opcode.startswith("HFMA2.MMA"):
        return "HFMA2.MMA"
    head = opcode.split(".", 1)[0]
    return head if head in OPCODES else None


def summarize(sass: str) -> dict[str, dict[str, int]]:
    counts: dict[str, collections.Counter] = {}
    current = None
    for line in sass.splitlines():
        match = _FUNCTION.match(line)
        if match:
            current = match.group(1)
            counts[current] = collections.Counter()
            continue
        if current is None:
            continue
        match = _INSTRUCTION.search(line)
        if match and (family := opcode_family(match.group(1))):
            counts[current][family] += 1
    return {name: dict(c) for name, c in counts.items() if c}


def demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if not tool or not names:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=False).stdout
    lines = out.splitlines()
    return dict(zip(names, lines)) if len(lines) == len(names) else {n: n for n in names}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90a", help="device code to disassemble (default sm_90a)")
    parser.add_argument("--json", help="also write the counts here")
    args = parser.parse_args()
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is None:
        print("cuobjdump not found (it ships with the CUDA toolkit)", file=sys.stderr)
        return 2
    # Located, not imported: loading it would need torch's libraries first.
    spec = importlib.util.find_spec("pygpuperf._C")
    if spec is None or not spec.origin:
        print("pygpuperf._C is not built; install the package first", file=sys.stderr)
        return 2
    run = subprocess.run([cuobjdump, "-sass", "-arch", args.arch, spec.origin], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"cuobjdump failed: {run.stderr.strip()}", file=sys.stderr)
        return 1
    counts = summarize(run.stdout)
    names = demangle(sorted(counts))
    rows = {names[k]: v for k, v in counts.items() if any(key in names[k] for key in _KERNELS_OF_INTEREST)}
    for name in sorted(rows):
        ops = ", ".join(f"{op} {n}" for op, n in sorted(rows[name].items(), key=lambda kv: -kv[1]))
        print(f"{name[:150]}\n    {ops}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arch": args.arch, "kernels": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
