"""Rota's notifier service."""
