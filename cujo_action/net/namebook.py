"""Keep the sink's made-up addresses: which name the resolver gave each one out for."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

# The logging resolver (dns/resolver.py) answers names with addresses of this network (RFC 2544
# benchmarking: never a real host), one per name when it keeps a names file; the proxy
# reads the pairs back to name a connection to such an address.
SINK_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")
SINK_ADDRESS = "198.18.0.1"  # the one address every name gets without a names file


class NameBook:
    """The address → name pairs the logging resolver appends to its names file."""

    def __init__(self, path: Path) -> None:
        """Read nothing yet; ``name_of`` reads what was appended when it must."""
        self.path = Path(path)
        self.names: dict[str, str] = {}
        self._offset = 0

    def refresh(self) -> None:
        """Read the whole lines appended since the last call."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # a line still being written waits for next time
        self._offset += end
        for line in data[:end].splitlines():
            try:
                pair = json.loads(line)
                self.names[str(pair["address"])] = str(pair["name"])
            except (ValueError, KeyError, TypeError):
                continue

    def name_of(self, address: str) -> str | None:
        """Return the name the resolver gave ``address`` out for, if it did."""
        if address not in self.names:
            try:
                made_up = ipaddress.ip_address(address) in SINK_NETWORK
            except ValueError:
                return None
            if not made_up:
                return None
            # The resolver writes the pair before it answers: it is there by now.
            self.refresh()
        return self.names.get(address)
