"""`python -m pygpuperf.explain`: the command of pygpuperf.cli.explain."""

from pygpuperf.cli.explain import main

main()
