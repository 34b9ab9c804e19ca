"""Measuring: the probe backends (native extension, portable torch, collectives), the suite that
plans and runs them, and the run's meta record."""
