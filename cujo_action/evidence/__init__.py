"""Evidence: the ledger and tamper record, stages, timings, seals, the bundle."""
