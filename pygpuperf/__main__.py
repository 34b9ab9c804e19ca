"""`pygpuperf COMMAND ...` (also `python -m pygpuperf`): one entry point for every command.

pygpuperf roofline | explain | predict | compare | collectives | fleet, each the same as its
`python -m pygpuperf.<command>` form; with no command (or only flags) it runs roofline.
"""

from __future__ import annotations

import importlib
import sys

import pygpuperf

COMMANDS = {
    "roofline": ("pygpuperf.cli.roofline", "characterize the device, run a model, place it on the roofline (default)"),
    "explain": ("pygpuperf.cli.explain", "profile a model's steps and attribute them to the roofline"),
    "predict": ("pygpuperf.cli.predict", "re-price an explained step on another card"),
    "compare": ("pygpuperf.cli.compare", "ceilings of measured runs and datasheet cards side by side"),
    "collectives": ("pygpuperf.cli.collectives", "all_reduce/all_gather/reduce_scatter/broadcast bandwidth"),
    "fleet": ("pygpuperf.cli.fleet", "validate every GPU of a node (or of many under torchrun) against the others"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"usage: pygpuperf [COMMAND] [ARGS ...]   (pygpuperf {pygpuperf.__version__})", "", "commands:"]
    lines += [f"  {name:{width}s}  {what}" for name, (_, what) in COMMANDS.items()]
    lines += ["", "pygpuperf COMMAND --help shows a command's flags; with no command, roofline runs."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return
    if argv and argv[0] == "--version":
        print(f"pygpuperf {pygpuperf.__version__}")
        return
    if argv and argv[0] in COMMANDS:
        name = argv.pop(0)
    elif argv and not argv[0].startswith("-"):
        print(f"pygpuperf: error: unknown command {argv[0]!r}; choose one of {', '.join(COMMANDS)} "
              "(pygpuperf --help)", file=sys.stderr)
        sys.exit(2)
    else:
        name = "roofline"
    module = importlib.import_module(COMMANDS[name][0])
    module.main(argv)


if __name__ == "__main__":
    main()
