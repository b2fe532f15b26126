"""Shortcuts of the walk: each answers for many turns at once what the reference walk would
decide turn by turn (DECISIONS 20); the tests compare both."""
