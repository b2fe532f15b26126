"""Phases 3 and 5, admit and reserve: the admission ladder (`ladder`) and what its rungs ask:
quota, GPU-hour budgets, backfill reservations and gang placement."""
