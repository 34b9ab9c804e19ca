"""`python -m pygpuperf.fleet`: fleet validation, the command of pygpuperf.cli.fleet (see its docstring)."""
