"""Prepare a run: clone the head, a worktree at base, and settle the plan."""
