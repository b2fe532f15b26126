"""The scheduler's lease: `rota.lease.Lease` on its own bucket and key (one active scheduler)."""

from __future__ import annotations

from rota.lease import BUCKET, KEY, Lease

__all__ = ["BUCKET", "KEY", "Lease"]
