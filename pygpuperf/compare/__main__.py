"""`python -m pygpuperf.compare`: the command of pygpuperf.cli.compare."""

from pygpuperf.cli.compare import main

main()
