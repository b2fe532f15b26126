"""What the policy reads and writes: the snapshot of one cycle (`snapshot`: jobs, runs, nodes,
plans and restarts in flight), the cluster's layout and topology, the configuration, and the
decisions it returns. Every other package of the policy builds on this one and nothing here
imports them."""
