"""Rota's executor service."""
