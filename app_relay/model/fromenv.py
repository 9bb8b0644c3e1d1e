"""Pick the model client the environment asks for, loading the Anthropic SDK only then.

No ``ANTHROPIC_API_KEY``: no client, and callers use the deterministic judge
(docs/design.md section 7). The SDK takes about a second to import, so a review without a key never
imports it (``claude.py`` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app_relay.model.claude import ModelClient, ModelConfig


def model_client_from_env(
    env: Mapping[str, str], config: ModelConfig | None = None
) -> ModelClient | None:
    """Return a client when ``ANTHROPIC_API_KEY`` is set, else None (the deterministic judge).

    ``ANTHROPIC_BASE_URL`` (the SDK's own setting) points it elsewhere, as tests do.
    """
    key = env.get("ANTHROPIC_API_KEY", "").strip()
    if not key:
        return None
    from app_relay.model.claude import ModelClient  # noqa: PLC0415  (the SDK)

    base_url = env.get("ANTHROPIC_BASE_URL", "").strip() or None
    return ModelClient(key, base_url=base_url, config=config)
