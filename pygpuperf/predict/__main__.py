"""`python -m pygpuperf.predict`: the command of pygpuperf.cli.predict."""

import sys

from pygpuperf.cli.predict import main

main(sys.argv[1:])
