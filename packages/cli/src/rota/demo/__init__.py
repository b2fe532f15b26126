"""`rota demo`: the whole preemption story on a small simulated cluster, in under 2 minutes."""
