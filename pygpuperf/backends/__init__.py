"""Measurement backends: native (C++/CUDA extension) and portable (torch ops)."""
