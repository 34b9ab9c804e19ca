"""`python -m pygpuperf.collectives`: the command of pygpuperf.cli.collectives."""

from pygpuperf.cli.collectives import main

if __name__ == "__main__":
    main()
