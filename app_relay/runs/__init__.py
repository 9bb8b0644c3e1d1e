"""Runs: the state machine, the coordinator, runners, effects, bundles and tamper."""
