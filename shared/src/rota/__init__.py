"""Rota: a queue for GPU training jobs on shared clusters."""

__version__ = "0.1.0"
