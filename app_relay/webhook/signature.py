"""Check a webhook delivery's signature: the HMAC GitHub sends with every delivery.

https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
"""

from __future__ import annotations

import hashlib
import hmac


def signature_of(secret: bytes, body: bytes) -> str:
    """Return the ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signature_matches(secret: bytes, body: bytes, header: str | None) -> bool:
    """Say whether ``header`` is the HMAC-SHA256 of the raw ``body`` under ``secret``.

    Compared in constant time, as GitHub asks:
    https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
    """
    if not secret or not header or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(signature_of(secret, body).encode(), header.encode())
