"""Phase 4, preempt: which runs a job may stop (`victimrules`, `victimpool`), the reference
search for the cheapest plan (`search`) and its early-exit twin (`cheapest`), shrinking elastic
victims, GPU shares as victims, and the stops a node drain asks for."""
