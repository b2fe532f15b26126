"""Benchmarks that need the whole stack (`rota bench e2e`)."""
