"""``--try-fixes``: each fix the diagnosis advises, applied to the step and timed in windows alternating with
the step as given, beside its predicted change.

record: what a run of them measured (Trials: each fix's trial and the op timings), as explain.json keeps it;
fixes: the catalogue, applying a fix, the windows and each fix's prediction; host_clock: the host's own time
per step; norms, convs, sums, matmuls, attention (over dtype_timing): the step's library ops timed per dtype,
the measured prices a fix's prediction uses; batch: the measured batch sweep, the batch model's check.
"""
