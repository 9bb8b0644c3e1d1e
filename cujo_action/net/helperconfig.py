"""Describe what both network helpers (the proxy, the resolver) are told: decoys, labels."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from cujo_action.net.egress import split_label
from cujo_action.schema import MAX_SHORT


class DecoySpec(BaseModel):
    """One decoy as a helper's config carries it: its name and the value to look for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=MAX_SHORT)
    value: str = Field(min_length=1)


def checked_labels(labels: list[str]) -> list[str]:
    """Return ``labels`` if each is "check/phase" and none repeats, else raise ValueError."""
    for label in labels:
        split_label(label)
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels repeat: {labels}")
    return labels
