"""Phase 6, explain: why each pending job waits, in words (`reasons`, `wording`), its ETA
(`eta`, `eta_quota`, `eta_shape`), the rules that hold a preemptor back (`holds`,
`protection`), GPU-hour budgets, and queue-level diagnoses. Nothing here decides."""
