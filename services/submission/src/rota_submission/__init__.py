"""Rota's submission service."""
