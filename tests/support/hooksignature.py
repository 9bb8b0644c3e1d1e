"""Sign webhook bodies as GitHub does, written apart from the relay's own code.

The relay's tests sign with this, never with ``app_relay.webhook.signature.signature_of`` (the code
under test); ``test_web`` checks it, and the relay, against GitHub's published example.
"""

from __future__ import annotations

import hashlib
import hmac

# GitHub's example in "Validating webhook deliveries":
# https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries#testing-the-webhook-payload-validation
EXAMPLE_SECRET = "It's a Secret to Everybody"
EXAMPLE_PAYLOAD = b"Hello, World!"
EXAMPLE_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def github_signature(secret: str, body: bytes) -> str:
    """Return the X-Hub-Signature-256 header GitHub sends with ``body``."""
    digest = hmac.new(secret.encode("utf-8"), msg=body, digestmod=hashlib.sha256)
    return f"sha256={digest.hexdigest()}"
