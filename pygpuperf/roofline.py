"""`python -m pygpuperf.roofline`: the command of pygpuperf.cli.roofline."""

from pygpuperf.cli.roofline import main

if __name__ == "__main__":
    main()
