"""Run states, pure: the state machine, what ``cujo/guard`` shows, and the caps on runs."""
