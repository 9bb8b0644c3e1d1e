"""Give a sandbox phase a network namespace whose only way out is the logging harness."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cujo_action.net.ns import rootless
from cujo_action.net.ns.dnsstub import stub_ruleset
from cujo_action.net.ns.layout import (
    LINK_PREFIX,
    NAME_PREFIX,
    POOL,
    TABLE_PREFIX,
    Layout,
    new_run_id,
    pick_index,
    subnets_in_use,
)
from cujo_action.net.ns.nftguard import Drops, Redirect, parse_drops, ruleset
from cujo_action.sandbox.phase_namespace import NetnsError, is_rootless, kill_all_in

# One namespace per run and phase (ns/layout.py names it), joined to the host by a veth
# pair, guarded by one nftables table on the host side (ns/nftguard.py: the only way out is
# the harness's listeners, everything else dropped and counted).
#
# DNAT to 127.0.0.1 needs ``route_localnet`` on the host-side veth. IPv6 is off on
# the sandbox side (it would otherwise reach the host over link-local addresses and emit
# solicitations that would count as refused packets).
#
# Inside, one nftables table of the namespace's own sends DNS asked of systemd-resolved's
# stub address (127.0.0.53, as a runner's resolv.conf names it) to the gateway
# (ns/dnsstub.py), which needs ``route_localnet`` on the sandbox-side veth as well. The
# sandbox's resolv.conf is the jail's (sandbox/resolvconf.py); nothing is put in /etc/netns,
# whose files `ip netns exec` would bind over /etc, for the sandbox's mountinfo to show.
#
# A run holds ``<state_dir>/<id>.lock`` (flock) while its namespace lives, so
# ``cleanup_stale`` removes what a killed run left behind and never a live run's.

STATE_DIR = Path("/run/cujo/netns")
# Where `ip netns exec` finds files to bind over /etc: none are put there any more, but a
# stale run's folder is still removed.
NETNS_ETC = Path("/etc/netns")
_ID_RE = re.compile(r"[0-9a-f]{6}")
_LINK_RE = re.compile(rf"{LINK_PREFIX}([0-9a-f]{{6}})[hs]")


def run_in_namespace(name: str, argv: Sequence[str]) -> list[str]:
    """Return ``argv`` prefixed to run inside namespace ``name``."""
    return ["ip", "netns", "exec", name, *argv]


# --------------------------------------------------------------------------- commands


def _run(argv: Sequence[str], *, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _write_sysctl(path: Path, value: str) -> None:
    # A kernel without IPv6 has no such file, and then nothing to switch off.
    with contextlib.suppress(FileNotFoundError):
        path.write_text(value)


def unavailable() -> str | None:
    """Return why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root for network namespaces and nftables"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (iproute2, nftables)"
    return None


def _lock(path: Path, *, wait: bool) -> int | None:
    """Return an fd holding an exclusive flock on ``path``, or None when another holds it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def drops_for(name: str) -> Drops:
    """Return what the guard of namespace ``name`` (``cujo-<id>``) has dropped so far."""
    if is_rootless(name):
        return rootless.drops(name)
    table = TABLE_PREFIX + name.removeprefix(NAME_PREFIX)
    parsed: dict[str, Any] = json.loads(_run(["nft", "-j", "list", "table", "inet", table]))
    return parse_drops(parsed)


def _remove(run_id: str, state_dir: Path) -> None:
    """Remove whatever exists of run ``run_id``'s namespace; absent parts are fine."""
    name = NAME_PREFIX + run_id
    if Path("/run/netns", name).exists():
        kill_all_in(name)
    _run(["nft", "delete", "table", "inet", TABLE_PREFIX + run_id], check=False)
    # Deleting either end deletes the pair, even while something still holds the namespace.
    _run(["ip", "link", "delete", f"{LINK_PREFIX}{run_id}h"], check=False)
    _run(["ip", "netns", "delete", name], check=False)
    shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
    (state_dir / f"{run_id}.lock").unlink(missing_ok=True)


def leftovers() -> set[str]:
    """Return the run ids that own a cujo namespace, veth or table on this host."""
    ids: set[str] = set()
    for line in _run(["ip", "netns", "list"], check=False).splitlines():
        name = line.split(" ", 1)[0]
        if name.startswith(NAME_PREFIX) and _ID_RE.fullmatch(name[len(NAME_PREFIX) :]):
            ids.add(name[len(NAME_PREFIX) :])
    for link in json.loads(_run(["ip", "-j", "link", "show"], check=False) or "[]"):
        if match := _LINK_RE.fullmatch(str(link.get("ifname", ""))):
            ids.add(match.group(1))
    tables = json.loads(_run(["nft", "-j", "list", "tables", "inet"], check=False) or "{}")
    for item in tables.get("nftables", []):
        table = str(item.get("table", {}).get("name", ""))
        if table.startswith(TABLE_PREFIX) and _ID_RE.fullmatch(table[len(TABLE_PREFIX) :]):
            ids.add(table[len(TABLE_PREFIX) :])
    if NETNS_ETC.is_dir():
        for entry in NETNS_ETC.iterdir():
            if entry.name.startswith(NAME_PREFIX) and _ID_RE.fullmatch(
                entry.name[len(NAME_PREFIX) :]
            ):
                ids.add(entry.name[len(NAME_PREFIX) :])
    return ids


def cleanup_stale(state_dir: Path = STATE_DIR) -> list[str]:
    """Remove namespaces, veths and tables of runs no longer alive; return their ids.

    Only runs of ``state_dir``: each took its lock there before it made anything, and the
    lock file stays until its run removed what it made. A namespace without a lock file
    here belongs to runs of another state directory (another install, a test), alive or
    not, and is never touched.
    """
    removed = []
    for run_id in sorted(leftovers()):
        if not (state_dir / f"{run_id}.lock").is_file():
            continue  # another state directory's run
        fd = _lock(state_dir / f"{run_id}.lock", wait=False)
        if fd is None:
            continue  # a live run holds it
        try:
            _remove(run_id, state_dir)
        finally:
            os.close(fd)
        removed.append(run_id)
    return removed


# --------------------------------------------------------------------------- the namespace


class NetNamespace:
    """A run's network namespace whose only reachable listeners are the harness's."""

    def __init__(
        self,
        redirect: Redirect,
        *,
        run_id: str | None = None,
        state_dir: Path = STATE_DIR,
        pool: ipaddress.IPv4Network = POOL,
    ) -> None:
        """Describe the namespace; nothing exists until ``create``."""
        self.redirect = redirect
        self.run_id = run_id or new_run_id()
        if not _ID_RE.fullmatch(self.run_id):
            raise ValueError(f"run id {self.run_id!r} must be 6 lowercase hex digits")
        self.state_dir = state_dir
        self.pool = pool
        self.layout: Layout | None = None
        self._lock_fd: int | None = None

    @property
    def name(self) -> str:
        """Return the namespace name."""
        return NAME_PREFIX + self.run_id

    def _layout(self) -> Layout:
        if self.layout is None:
            raise NetnsError(f"namespace {self.name} was not created")
        return self.layout

    @property
    def host_ip(self) -> str:
        """Return the host-side address (gateway, nameserver, regular proxy address)."""
        return self._layout().host_ip

    @property
    def sandbox_ip(self) -> str:
        """Return the sandbox-side address."""
        return self._layout().sandbox_ip

    def run_in(self, argv: Sequence[str]) -> list[str]:
        """Return ``argv`` prefixed to run inside this namespace."""
        return run_in_namespace(self.name, argv)

    def create(self) -> NetNamespace:
        """Create namespace, veth pair, addresses, routes and the nft tables (host, stub)."""
        reason = unavailable()
        if reason:
            raise NetnsError(reason)
        self._lock_fd = _lock(self.state_dir / f"{self.run_id}.lock", wait=False)
        if self._lock_fd is None:
            raise NetnsError(f"run id {self.run_id} is in use")
        try:
            # Address picking and creation are one step across concurrent runs.
            alloc = _lock(self.state_dir / "alloc.lock", wait=True)
            assert alloc is not None
            try:
                self.layout = Layout(self.run_id, self._free_index(), self.pool)
                self._build(self.layout)
            finally:
                os.close(alloc)
        except BaseException:
            self.destroy()
            raise
        return self

    def _free_index(self) -> int:
        addrs = json.loads(_run(["ip", "-j", "-4", "addr", "show"]) or "[]")
        routes = json.loads(_run(["ip", "-j", "-4", "route", "show", "table", "all"]) or "[]")
        return pick_index(subnets_in_use(addrs, routes, self.pool), self.pool)

    def _build(self, lay: Layout) -> None:
        ns = ["ip", "-n", lay.name]
        _run(["ip", "netns", "add", lay.name])
        # New links in the namespace get IPv6 off before they exist (no solicitations).
        _run(
            self.run_in(["sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6"]),
            check=False,
        )
        # The sandbox's end is made inside the namespace, under the name a runner's
        # interface has (ns/layout.py); its IPv6 is off by the namespace's default above.
        _run(["ip", "link", "add", lay.host_link, "type", "veth",
              "peer", "name", lay.sandbox_link, "netns", lay.name])  # fmt: skip
        _write_sysctl(Path(f"/proc/sys/net/ipv6/conf/{lay.host_link}/disable_ipv6"), "1")
        # DNAT to the listeners on host loopback must be routable from this link only.
        _write_sysctl(Path(f"/proc/sys/net/ipv4/conf/{lay.host_link}/route_localnet"), "1")
        # The stub address (127.0.0.53) leads to the gateway, from loopback and back.
        localnet = f"/proc/sys/net/ipv4/conf/{lay.sandbox_link}/route_localnet"
        _run(self.run_in(["sh", "-c", f"echo 1 > {localnet}"]))
        _run(self.run_in(["nft", "-f", "-"]), stdin=stub_ruleset(lay))
        # The ruleset is in place before either end comes up: no packet goes unguarded.
        _run(["nft", "-f", "-"], stdin=ruleset(lay, self.redirect))
        _run(["ip", "addr", "add", f"{lay.host_ip}/30", "dev", lay.host_link])
        _run(["ip", "link", "set", lay.host_link, "up"])
        _run([*ns, "link", "set", "lo", "up"])
        _run([*ns, "addr", "add", f"{lay.sandbox_ip}/30", "dev", lay.sandbox_link])
        _run([*ns, "link", "set", lay.sandbox_link, "up"])
        _run([*ns, "route", "add", "default", "via", lay.host_ip])

    def drops(self) -> Drops:
        """Return what the guard has dropped so far."""
        self._layout()
        return drops_for(self.name)

    def destroy(self) -> None:
        """Remove everything ``create`` made; safe to call twice or after a failed create."""
        if self._lock_fd is None:
            return
        try:
            _remove(self.run_id, self.state_dir)
        finally:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> NetNamespace:
        """Create the namespace."""
        return self.create()

    def __exit__(self, *exc: object) -> None:
        """Destroy the namespace."""
        self.destroy()


@contextlib.contextmanager
def namespace(redirect: Redirect, **kwargs: Any) -> Iterator[NetNamespace]:
    """Yield a created namespace and destroy it afterwards, whatever happens."""
    ns = NetNamespace(redirect, **kwargs)
    with ns:
        yield ns
