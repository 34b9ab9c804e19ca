"""The commands: argument parsing, output folders, exit codes; one module per command."""
