"""Write the resolver files a sandboxed command reads, as systemd-resolved writes them.

A hosted ``ubuntu-24.04`` runner (systemd 255) has ``/etc/resolv.conf`` as a symlink to
``../run/systemd/resolve/stub-resolv.conf``, which names resolved's stub (127.0.0.53,
``options edns0 trust-ad``, the VM's ``search`` domain), and beside it resolved's
``resolv.conf`` naming the uplink (Azure's 168.63.129.16). Inside a phase's namespace
127.0.0.53 reaches the logging resolver (ns/dnsstub.py), so the sandbox is given the same
files (``sandbox_files``), placed by the jail:

* where the host's ``/etc/resolv.conf`` leads into a folder the sandbox gets a private
  tmpfs for (``/run`` on a runner), the file is written at that place in the sandbox's
  own tmpfs: ``/etc/resolv.conf`` stays the host's symlink and no mount covers it;
* where it is a plain file (a container, this kind of machine), the file is bound
  read-only over it: a bind mountinfo shows, the one left.

``/run/systemd/resolve/stub-resolv.conf`` and ``resolv.conf`` are written in either case.
The values are the host's where the host runs systemd-resolved (a runner: its own search
domain and uplink); elsewhere an Azure runner's shape, with a search domain made once
per host and kept where only root reads it (``kept_search``), so every command of every
run on one machine reads the same one, as every step on one VM does.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import string
from dataclasses import dataclass
from pathlib import Path

ETC_RESOLV = "/etc/resolv.conf"
RESOLVED_DIR = "/run/systemd/resolve"
STUB_CONF = f"{RESOLVED_DIR}/stub-resolv.conf"
UPLINK_CONF = f"{RESOLVED_DIR}/resolv.conf"
STUB_NAMESERVER = "127.0.0.53"
# Azure's virtual DNS (168.63.129.16): a hosted runner's uplink.
AZURE_DNS = "168.63.129.16"
# Where the made-up search domain is kept (root's, never seen by a sandbox: /run is
# private to each sandbox).
SEARCH_PATH = Path("/run/cujo/resolver-search")

# systemd 255's src/resolve/resolved-resolv-conf.c, word for word.
_STUB_HEAD = """\
# This is /run/systemd/resolve/stub-resolv.conf managed by man:systemd-resolved(8).
# Do not edit.
#
# This file might be symlinked as /etc/resolv.conf. If you're looking at
# /etc/resolv.conf and seeing this text, you have followed the symlink.
#
# This is a dynamic resolv.conf file for connecting local clients to the
# internal DNS stub resolver of systemd-resolved. This file lists all
# configured search domains.
#
# Run "resolvectl status" to see details about the uplink DNS servers
# currently in use.
#
# Third party programs should typically not access this file directly, but only
# through the symlink at /etc/resolv.conf. To manage man:resolv.conf(5) in a
# different way, replace this symlink by a static file or a different symlink.
#
# See man:systemd-resolved.service(8) for details about the supported modes of
# operation for /etc/resolv.conf.

"""
_UPLINK_HEAD = """\
# This is /run/systemd/resolve/resolv.conf managed by man:systemd-resolved(8).
# Do not edit.
#
# This file might be symlinked as /etc/resolv.conf. If you're looking at
# /etc/resolv.conf and seeing this text, you have followed the symlink.
#
# This is a dynamic resolv.conf file for connecting local clients directly to
# all known uplink DNS servers. This file lists all configured search domains.
#
# Third party programs should typically not access this file directly, but only
# through the symlink at /etc/resolv.conf. To manage man:resolv.conf(5) in a
# different way, replace this symlink by a static file or a different symlink.
#
# See man:systemd-resolved.service(8) for details about the supported modes of
# operation for /etc/resolv.conf.

"""
# Azure's internal DNS zone: it holds the names of a network's VMs and nothing else.
AZURE_INTERNAL = "internal.cloudapp.net"
# An Azure VM's internal domain: 26 characters, a two-letter zone ("bx", "cx", …).
_SEARCH_ALPHABET = string.ascii_lowercase + "012345"
_ZONES = ("bx", "cx", "dx", "ex", "gx", "lx", "xx")


@dataclass(frozen=True)
class HostResolver:
    """What the host's own resolver files say, as far as the sandbox's copy needs."""

    # Where the host's /etc/resolv.conf leads (itself when a plain file), and whether
    # anything is there.
    etc_target: str = ETC_RESOLV
    etc_exists: bool = True
    # Where systemd-resolved manages it: its search domains and uplink servers.
    search: tuple[str, ...] = ()
    uplinks: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResolvFile:
    """One file the sandbox reads: its path inside, its bytes, and how it gets there."""

    path: str
    content: bytes
    # True: bound read-only over a host file; False: a file of the sandbox's own tmpfs.
    bind: bool


def stub_resolv_conf(search: tuple[str, ...]) -> str:
    """Return stub-resolv.conf as systemd-resolved 255 writes it."""
    return f"{_STUB_HEAD}nameserver {STUB_NAMESERVER}\noptions edns0 trust-ad\n{_search(search)}"


def uplink_resolv_conf(nameservers: tuple[str, ...], search: tuple[str, ...]) -> str:
    """Return resolved's own resolv.conf (the uplink servers) as systemd 255 writes it."""
    servers = "".join(f"nameserver {server}\n" for server in nameservers)
    return _UPLINK_HEAD + (servers or "# No DNS servers known.\n") + _search(search)


def _search(domains: tuple[str, ...]) -> str:
    # resolved writes "search ." when it knows no domain (so glibc adds none).
    return f"search {' '.join(domains) or '.'}\n"


def made_up_search() -> str:
    """Return a search domain shaped as a hosted runner's (an Azure VM's internal one)."""
    name = "".join(secrets.choice(_SEARCH_ALPHABET) for _ in range(26))
    return f"{name}.{secrets.choice(_ZONES)}.{AZURE_INTERNAL}"


def _under(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def sandbox_files(
    host: HostResolver, fallback_search: str, private: tuple[str, ...]
) -> tuple[ResolvFile, ...]:
    """Return the resolver files the sandbox reads, and how each is placed.

    ``private`` are the folders the sandbox gets an empty tmpfs for (``/run``…): a file
    there is written into it; anywhere else, a host file is bound over.
    """
    search = host.search or (fallback_search,)
    stub = stub_resolv_conf(search).encode()
    files: list[ResolvFile] = []
    if _under(host.etc_target, private):
        files.append(ResolvFile(host.etc_target, stub, bind=False))
    elif host.etc_exists:
        # A bind needs something to cover: a host without the file keeps none.
        files.append(ResolvFile(host.etc_target, stub, bind=True))
    runner = {
        STUB_CONF: stub,
        UPLINK_CONF: uplink_resolv_conf(host.uplinks or (AZURE_DNS,), search).encode(),
    }
    for path, content in runner.items():
        if path != host.etc_target and _under(path, private):
            files.append(ResolvFile(path, content, bind=False))
    return tuple(files)


# --------------------------------------------------------------------------- the host


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _words(text: str, key: str) -> list[str]:
    found: list[str] = []
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == key:
            found += parts[1:]
    return found


def _not_loopback(address: str) -> bool:
    try:
        return not ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def host_resolver(etc: str = ETC_RESOLV, resolved_dir: str = RESOLVED_DIR) -> HostResolver:
    """Return what the host's resolver files say (host files: no pull request writes them)."""
    target = os.path.realpath(etc)
    exists = os.path.exists(target)
    if not _under(target, (resolved_dir,)):
        return HostResolver(target, exists)
    # Managed by systemd-resolved, as on a runner: its own domains and uplink.
    search = tuple(_words(_read(target), "search") + _words(_read(target), "domain"))
    uplinks = tuple(
        s for s in _words(_read(f"{resolved_dir}/resolv.conf"), "nameserver") if _not_loopback(s)
    )
    return HostResolver(target, exists, search, uplinks)


def search_path() -> Path:
    """Return where this user keeps the made-up search domain: root's under /run; an
    ordinary user's (a rootless harness) in its own runtime or cache folder, which every
    sandbox's tmpfs covers (/run, /home, /tmp) as it covers root's."""
    if os.geteuid() == 0:
        return SEARCH_PATH
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path.home() / ".cache"
    return base / "cujo" / "resolver-search"


def kept_search(path: Path | None = None) -> str:
    """Return this host's made-up search domain, making it on first use."""
    path = path or search_path()
    with contextlib.suppress(OSError):
        kept = path.read_text().strip()
        if kept:
            return kept
    made = made_up_search()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f"{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(made + "\n")
    try:
        # A link never replaces: when two commands make one at once, the first one stays.
        os.link(temp, path)
    except FileExistsError:
        made = path.read_text().strip() or made
    finally:
        temp.unlink(missing_ok=True)
    return made


def sandbox_search(host: HostResolver | None = None) -> tuple[str, ...]:
    """Return the search domains a sandbox on this host reads (the resolver's too)."""
    host = host or host_resolver()
    if host.search:
        return host.search
    try:
        return (kept_search(),)
    except OSError:
        return (made_up_search(),)  # kept nowhere: this caller's own


def vm_zones(search: tuple[str, ...]) -> tuple[str, ...]:
    """Return the search domains that are a VM's own zone in Azure's internal DNS."""
    return tuple(d for d in search if d.rstrip(".").endswith("." + AZURE_INTERNAL))


def resolv_files(private: tuple[str, ...]) -> tuple[ResolvFile, ...]:
    """Return the resolver files for a sandbox on this host (``sandbox_files``)."""
    host = host_resolver()
    return sandbox_files(host, sandbox_search(host)[0], private)
