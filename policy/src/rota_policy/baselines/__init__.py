"""Baseline policies on the same engine, each following its system's documented rules."""

from rota_policy.baselines.fifo import schedule_fifo
from rota_policy.baselines.kueue import schedule_kueue
from rota_policy.baselines.slurm import schedule_slurm

__all__ = ["schedule_fifo", "schedule_kueue", "schedule_slurm"]
