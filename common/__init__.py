"""Shared schemas, errors and maths of benchfleet; imports nothing else of ours."""

__version__ = "0.1.0"
