"""Name the sandbox process that asked the resolver, also when it asked the stub address.

The resolver sees each query from the sandbox's address and a port, and names the asker
by the socket bound there (``procinfo.socket_owner``). A query to 127.0.0.53 (ns/dnsstub.py)
leaves the namespace with its loopback source rewritten to the sandbox's address, the
port kept: its socket is bound to 127.0.0.1 (a connected one, as glibc's) or to no
address at all (a datagram sent with ``sendto``). Those are looked for too, and a process
found is taken only if its namespace is the one holding the address the query came from,
so a socket of another phase on the same port is never named instead.
"""

from __future__ import annotations

import re

from cujo_action.watch.procinfo import Proc, sandbox_namespaces, socket_owner

# A socket's own address when the query went to the stub, or when it was never bound.
_LOOPBACK = "127.0.0.1"
_UNBOUND = "0.0.0.0"  # noqa: S104 - a socket's address in /proc, not a listener


def holds_address(pid: int, address: str) -> bool:
    """Return whether ``pid``'s network namespace has ``address`` as one of its own."""
    try:
        with open(f"/proc/{pid}/net/fib_trie", encoding="ascii", errors="replace") as fh:
            trie = fh.read()
    except OSError:
        return False
    return re.search(rf"\|-- {re.escape(address)}\n\s*/32 host LOCAL\b", trie) is not None


def asker(address: str, port: int, protocol: str) -> Proc | None:
    """Return the sandbox process whose query came from ``address:port`` (``udp``, ``tcp``)."""
    among = sandbox_namespaces()  # one pass over /proc for every address tried
    found = socket_owner(address, port, protocol, among)
    if found is not None:
        return found
    locals_ = (_LOOPBACK, _UNBOUND) if protocol == "udp" else (_LOOPBACK,)
    for local in locals_:
        found = socket_owner(local, port, protocol, among)
        if found is not None and holds_address(found.pid, address):
            return found
    return None
