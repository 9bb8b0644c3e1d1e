"""Watch what pull-request code does: decoy reads, execs, processes, persistence."""
