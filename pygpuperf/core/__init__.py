"""The vocabulary every layer speaks: units, statistics, result records, precisions and ceiling
keys, documents and their checks, the timing loop, stop signals and errors. Imports nothing above it."""
