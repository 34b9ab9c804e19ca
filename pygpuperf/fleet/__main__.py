"""`python -m pygpuperf.fleet`: the command of pygpuperf.cli.fleet."""

from pygpuperf.cli.fleet import main

main()
