"""Phase 2, nominate: the order in which pending jobs get their turn (strict tiers, then the
multifactor score or a baseline's order) and the fair-share factors that score reads."""
