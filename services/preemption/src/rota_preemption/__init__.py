"""Rota's preemption service."""
