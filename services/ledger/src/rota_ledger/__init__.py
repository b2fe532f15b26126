"""Rota's ledger service."""
