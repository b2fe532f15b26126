"""One scheduling cycle: phase 1 and the run of the phases (`engine`), the state they share
(`state`), the reference walk of phases 2-5 (`walk`), restarts in flight and growing elastic
runs. The walk's shortcuts live in `fast`, behind one seam (`walkstate.FastPath`)."""
