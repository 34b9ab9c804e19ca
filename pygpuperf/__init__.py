"""pygpuperf: measure what a GPU or CPU really delivers, and explain model speed on that roofline."""

__version__ = "0.1.0"
