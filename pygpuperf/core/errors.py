"""The errors a command turns into one line and an exit code."""


class UsageError(Exception):
    """Bad user input. The message is one line that names the fix; the CLI exits with code 2."""
