//! Analyses (phases, schedule, liveness, memory simulation, ledger) and the recompute rewrite.
