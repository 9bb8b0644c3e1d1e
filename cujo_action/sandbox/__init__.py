"""Confine pull-request code: the boundary, bubblewrap, uids, limits, helper processes."""
