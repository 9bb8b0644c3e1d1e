"""Say which isolation this machine gives a review, why, and the one command that changes it.

Pure: ``local_isolation`` reasons over ``Readings`` (the kernel's switches, the tools
found, bubblewrap's version), which ``host.read_isolation()`` takes from the machine. As
root (an Actions runner) full isolation needs ``ip``, ``nft`` and ``setpriv``; as any
other user it needs unprivileged user namespaces (docs/design.md section 6.7 and
``docs/isolation.md``, "Without root": ``net/ns/rootless.py``), bubblewrap 0.8 or later
(``--disable-userns``), and
``unshare``, ``nsenter``, ``ip`` and ``nft`` (util-linux, iproute2, nftables).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# bubblewrap's --disable-userns (no nested user namespaces) came in 0.8.0.
BWRAP_MIN = (0, 8, 0)
ROOT_TOOLS = {"ip": "iproute2", "nft": "nftables", "setpriv": "util-linux"}
ROOTLESS_TOOLS = {
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "ip": "iproute2",
    "nft": "nftables",
}


@dataclass(frozen=True)
class Readings:
    """What the machine says, read by ``host.read_isolation``; None: could not be read."""

    root: bool
    # /proc/sys values as read (None: the file does not exist on this kernel).
    unprivileged_userns_clone: str | None = None  # kernel.unprivileged_userns_clone
    max_user_namespaces: str | None = None  # user.max_user_namespaces
    apparmor_restrict: str | None = None  # kernel.apparmor_restrict_unprivileged_userns
    bwrap_version: str | None = None  # "0.8.0"; None: no bubblewrap found
    tools: frozenset[str] = field(default_factory=frozenset)  # tools found on PATH
    asked_partial: bool = False  # CUJO_ISOLATION=partial


@dataclass(frozen=True)
class LocalIsolation:
    """Which isolation a review gets here: the mode, how, why not full, and the fix."""

    isolation: Literal["full", "partial"]
    how: str  # "root" | "rootless" | "proxy variables only"
    why: str  # empty when full
    fix: str  # the one command that makes it full (empty: full, or none known)


def _version(text: str) -> tuple[int, ...] | None:
    parts = text.strip().split(".")
    try:
        return tuple(int(p) for p in parts[:3])
    except ValueError:
        return None


def _missing(tools: frozenset[str], needed: dict[str, str]) -> tuple[str, str] | None:
    for tool, package in needed.items():
        if tool not in tools:
            return tool, package
    return None


def _partial(why: str, fix: str) -> LocalIsolation:
    return LocalIsolation("partial", "proxy variables only", why, fix)


def local_isolation(r: Readings) -> LocalIsolation:
    """Return which isolation a review gets on a machine that reads as ``r``."""
    if r.asked_partial:
        why = "CUJO_ISOLATION=partial asked for proxy variables only"
        return _partial(why, "unset CUJO_ISOLATION")
    if r.root:
        if gone := _missing(r.tools, ROOT_TOOLS):
            tool, package = gone
            why = f"`{tool}` is not installed ({package})"
            return _partial(why, f"sudo apt-get install {package}")
        return LocalIsolation("full", "root", "", "")
    if r.unprivileged_userns_clone is not None and r.unprivileged_userns_clone.strip() == "0":
        return _partial(
            "unprivileged user namespaces are off (kernel.unprivileged_userns_clone=0)",
            "sudo sysctl -w kernel.unprivileged_userns_clone=1",
        )
    if r.max_user_namespaces is not None and r.max_user_namespaces.strip() == "0":
        return _partial(
            "user namespaces are off (user.max_user_namespaces=0)",
            "sudo sysctl -w user.max_user_namespaces=15000",
        )
    if r.apparmor_restrict is not None and r.apparmor_restrict.strip() == "1":
        return _partial(
            "AppArmor restricts unprivileged user namespaces "
            "(kernel.apparmor_restrict_unprivileged_userns=1)",
            "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
        )
    if r.bwrap_version is None:
        return _partial("`bwrap` is not installed (bubblewrap)", "sudo apt-get install bubblewrap")
    version = _version(r.bwrap_version)
    if version is None or version < BWRAP_MIN:
        return _partial(
            f"bubblewrap {r.bwrap_version.strip() or '?'} is older than 0.8 (no --disable-userns)",
            "sudo apt-get install --only-upgrade bubblewrap",
        )
    if gone := _missing(r.tools, ROOTLESS_TOOLS):
        tool, package = gone
        return _partial(f"`{tool}` is not installed ({package})", f"sudo apt-get install {package}")
    return LocalIsolation("full", "rootless", "", "")
