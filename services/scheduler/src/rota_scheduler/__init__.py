"""Rota's scheduler service."""
