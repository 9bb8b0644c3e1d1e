"""Read what code in a CI job can read about where it runs, and print it as one JSON line.

Run as a pull request's test inside Cujo's sandbox (``python fingerprint_probe.py
--network``), this is what malware that checks for a hosted runner before it acts would
look at; ``cujo_action.arm.fingerprint`` compares the line with the runner profile.

Standard library only: it runs under whatever Python the sandbox gives a test. It never
prints an environment variable's value (a decoy printed would itself be evidence), only
names and shapes; never runs ``sudo`` (running it is reported as critical) but looks at
the file; never opens a file in HOME, only asks whether it is there. Network reads (DNS,
the TLS issuer of ``api.github.com``, its ``/zen``, ``/rate_limit`` and ``/meta``) happen
only with ``--network``: inside the sandbox they reach its proxy and resolver, never the
internet; outside it, leave the flag off. The DNS name asked is a random ``.test`` name,
which no public resolver answers.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import socket
import ssl
import stat
import string
import struct
import sys
from collections.abc import Callable
from urllib.parse import urlsplit

MARKER = "cujo-fingerprint "
# Characters of the printed line, marker included: whole readings fit (a runner's
# /etc/passwd and the image's variable names), well under the 8,000-character output tail
# a report keeps of a command (``limits.OUTPUT_TAIL``), where the comparison reads it.
CAP = 6000
TIMEOUT_S = 5.0
FOLDERS = (
    "/opt/hostedtoolcache",
    "/usr/share/dotnet",
    "/usr/local/lib/android",
    "/snap",
    "/var/run/docker.sock",
    "/run/systemd",
    "/home/linuxbrew",
    "/usr/share/miniconda",
    "/usr/local/share/vcpkg",
)
HOME_FILES = (".aws", ".npmrc", ".pypirc", ".env", ".docker")
# The runner's registration files, looked for beside the running Runner.Worker's bin/.
RUNNER_FILES = (".runner", ".credentials", ".credentials_rsaparams")
# Tools looked up on PATH (found or not; none is run).
TOOLS = (
    "docker", "gh", "az", "aws", "gcloud", "kubectl", "helm", "node", "npm", "java",
    "pwsh", "dotnet", "cmake", "clang", "gcc", "jq", "yq", "cargo", "git", "git-lfs",
)  # fmt: skip
SHAPED = ("RUNNER_", "GITHUB_")  # variables printed as prefix -> rest of name -> shape
SHAPES = {"e": "empty", "n": "number", "b": "bool", "u": "url", "p": "path", "l": "path list",
          "t": "text"}  # fmt: skip
PROXY_NAMES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
# Variables that tell a client which CAs to trust. A runner may have one (behind a
# corporate proxy, say) naming the system bundle; one naming any other file is a tell.
CA_NAMES = (
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT",
    "NODE_EXTRA_CA_CERTS", "npm_config_cafile", "NPM_CONFIG_CAFILE", "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH", "AWS_CA_BUNDLE",
)  # fmt: skip
SYSTEM_CERTS = "/etc/ssl/"
Reading = dict[str, object]


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def shape(value: str) -> str:
    """Return what a value looks like, never the value: one letter (``SHAPES``)."""
    if value == "":
        return "e"
    if value.isdigit():
        return "n"
    if value in ("true", "false"):
        return "b"
    if value.startswith(("http://", "https://")):
        return "u"
    if value.startswith("/"):
        return "l" if ":" in value else "p"
    return "t"


def _under(value: str, folder: str) -> bool:
    """Return whether ``value`` is a path inside ``folder`` (``..`` resolved, no link)."""
    return value.startswith("/") and os.path.normpath(value).startswith(folder)


def read_status() -> Reading:
    fields = dict(
        line.split(":", 1) for line in _text("/proc/self/status").splitlines() if ":" in line
    )
    last = _text("/proc/sys/kernel/cap_last_cap").strip()
    bounding = int(fields.get("CapBnd", "0").strip() or "0", 16)
    full = (1 << (int(last) + 1)) - 1 if last.isdigit() else -1
    caps = "full" if bounding == full else "none" if bounding == 0 else "partial"
    return {
        "status.no_new_privs": fields.get("NoNewPrivs", "").strip(),
        "status.cap_bnd": caps,
        "uid_map": " ".join(_text("/proc/self/uid_map").split()),
    }


def read_processes() -> Reading:
    pids = [name for name in os.listdir("/proc") if name.isdigit()]
    return {"pid1": _text("/proc/1/comm").strip(), "processes": len(pids)}


def read_mounts() -> Reading:
    tmpfs: list[str] = []
    files: list[str] = []
    types: set[str] = set()
    nosuid: dict[str, bool] = {}
    lines = _text("/proc/self/mountinfo").splitlines()
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, rest = left.split(), right.split()
        if len(parts) < 6 or not rest:
            continue
        point, options = parts[4], parts[5].split(",")
        types.add(rest[0])
        nosuid[point] = "nosuid" in options
        if rest[0] == "tmpfs":
            tmpfs.append(point)
        if point.startswith("/etc/") and os.path.isfile(point):
            files.append(point)
    # The mount /usr/bin/sudo lives on: the longest mount point above it.
    under = [p for p in nosuid if "/usr/bin/sudo".startswith(p.rstrip("/") + "/") or p == "/"]
    holder = max(under, key=len, default="")
    return {
        "mounts.count": len(lines),
        "mounts.fs_types": sorted(types),
        "mounts.tmpfs": sorted(set(tmpfs))[:16],
        "mounts.etc_files": sorted(set(files))[:16],
        "mounts.mention_cujo": "cujo" in "\n".join(lines).lower(),
        "mounts.mention_netns": "/run/netns" in "\n".join(lines),
        "sudo.nosuid_mount": nosuid.get(holder, False),
    }


def read_users() -> Reading:
    passwd = [line for line in _text("/etc/passwd").splitlines() if line.strip()]
    group = [line for line in _text("/etc/group").splitlines() if line.strip()]
    names = {int(f[2]): f[0] for f in (line.split(":") for line in group) if len(f) > 2
             and f[2].isdigit()}  # fmt: skip
    me = [f[0] for f in (line.split(":") for line in passwd) if len(f) > 2
          and f[2] == str(os.getuid())]  # fmt: skip
    try:
        sudo = os.stat("/usr/bin/sudo")
        exists, setuid = True, bool(sudo.st_mode & stat.S_ISUID)
    except OSError:
        exists, setuid = False, False
    return {
        "passwd.lines": len(passwd),
        "passwd.users": [line.split(":", 1)[0] for line in passwd][:60],
        "group.lines": len(group),
        "user.name": me[0] if me else "",
        "user.uid": os.getuid(),
        "user.groups": sorted({names.get(g, str(g)) for g in os.getgroups()})[:20],
        "sudo.exists": exists,
        "sudo.setuid": setuid,
    }


def read_env() -> Reading:
    env = os.environ
    home = env.get("HOME", "")
    return {
        "env.count": len(env),
        "env.names": sorted(n for n in env if not n.startswith(SHAPED))[:120],
        "env.shapes": {
            prefix: {
                n.removeprefix(prefix): shape(env[n]) for n in sorted(env) if n.startswith(prefix)
            }
            for prefix in SHAPED
        },
        "env.path_entries": len([p for p in env.get("PATH", "").split(":") if p]),
        # The CA variables set to anything but a path under /etc/ssl (names only).
        "env.ca_elsewhere": sorted(
            n for n in CA_NAMES if n in env and not _under(env[n], SYSTEM_CERTS)
        ),
        "env.home_is_runner": home == "/home/runner",
    }


def read_files() -> Reading:
    home = os.environ.get("HOME", "")
    path = os.environ.get("PATH", "")

    def on_path(tool: str) -> bool:
        return any(os.access(os.path.join(d, tool), os.X_OK) for d in path.split(":") if d)

    return {
        "folders.present": [p for p in FOLDERS if os.path.lexists(p)],
        "home.present": [f for f in HOME_FILES if home and os.path.lexists(os.path.join(home, f))],
        "tools.present": [t for t in TOOLS if on_path(t)],
    }


def _runner_root() -> str:
    """Return the folder above the ``bin/`` a running ``Runner.Worker`` was started from."""
    for pid in (name for name in os.listdir("/proc") if name.isdigit()):
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if os.path.basename(exe) == "Runner.Worker":
            return os.path.dirname(os.path.dirname(exe))
    return ""


def read_runner() -> Reading:
    """Return which of the runner's registration files sit in its root (never opened)."""
    root = _runner_root()
    found = [f for f in RUNNER_FILES if root and os.path.lexists(os.path.join(root, f))]
    return {"runner.files": sorted(found)}


def _resolv_words(key: str) -> list[str]:
    """Return the words after ``key`` on every such line of /etc/resolv.conf."""
    words: list[str] = []
    for line in _text("/etc/resolv.conf").splitlines():
        parts = line.split()
        if parts and parts[0] == key:
            words += parts[1:]
    return words


def read_resolver() -> Reading:
    servers = _resolv_words("nameserver")
    return {
        "resolv.nameserver": servers[0] if servers else "",
        "resolv.options": sorted(_resolv_words("options")),
    }


def _edns_payload(server: str, name: str) -> int:
    """Return the EDNS UDP size ``server`` advertises in its answer for ``name`` (0: none)."""
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    # One A question with an OPT record (1232 bytes, no DO), as glibc's edns0 sends it.
    ask = struct.pack("!HHHHHH", 0x4A7E, 0x0100, 1, 0, 0, 1) + qname + b"\0\1\0\1"
    ask += b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(TIMEOUT_S)
        sock.connect((server, 53))
        sock.send(ask)
        reply = sock.recv(65535)
    return _opt_payload(reply)


def _skip_name(data: bytes, at: int) -> int:
    """Return where the name starting at ``at`` ends (a pointer ends it)."""
    while at < len(data):
        size = data[at]
        if size >= 0xC0:
            return at + 2
        at += 1 + size
        if size == 0:
            return at
    raise ValueError("a name runs past the message")


def _opt_payload(reply: bytes) -> int:
    """Return the UDP size in a DNS reply's OPT record (0 without one)."""
    questions, *counts = struct.unpack("!HHHH", reply[4:12])
    at = 12
    for _ in range(questions):
        at = _skip_name(reply, at) + 4
    for _ in range(sum(counts)):
        at = _skip_name(reply, at)
        kind, size, _ttl, length = struct.unpack("!HHIH", reply[at : at + 10])
        if kind == 41:
            return int(size)
        at += 10 + length
    return 0


def read_dns() -> Reading:
    """Ask for a random name under ``.test`` (RFC 6761: never a public name)."""
    label = "".join(secrets.choice(string.ascii_lowercase) for _ in range(10))
    socket.setdefaulttimeout(TIMEOUT_S)
    servers = _resolv_words("nameserver")
    try:
        payload = _edns_payload(servers[0], f"{label}.example.test") if servers else 0
    except (OSError, ValueError, struct.error):
        payload = 0
    try:
        found = socket.getaddrinfo(f"{label}.example.test", 443, type=socket.SOCK_STREAM)
    except OSError:
        return {"dns.random": "nxdomain", "dns.edns_payload": payload}
    address = str(found[0][4][0]) if found else ""
    return {
        "dns.random": "answered " + address.rpartition(".")[0] + ".x",
        "dns.edns_payload": payload,
    }


def _proxy() -> tuple[str, int] | None:
    for name in PROXY_NAMES:
        if value := os.environ.get(name):
            parts = urlsplit(value)
            if parts.hostname:
                return parts.hostname, parts.port or 80
    return None


def _connect(host: str, port: int) -> socket.socket:
    """Open a TCP stream to host:port the way a client would: through the proxy if set."""
    proxy = _proxy()
    if proxy is None:
        return socket.create_connection((host, port), timeout=TIMEOUT_S)
    sock = socket.create_connection(proxy, timeout=TIMEOUT_S)
    sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer and len(answer) < 8192:
        chunk = sock.recv(1024)
        if not chunk:
            break
        answer += chunk
    if answer.split(b" ", 2)[1:2] != [b"200"]:
        sock.close()
        raise OSError("the proxy refused CONNECT")
    return sock


def read_tls() -> Reading:
    """Return who issued the certificate presented for api.github.com, and its names."""
    context = ssl.create_default_context()
    try:
        with (
            _connect("api.github.com", 443) as raw,
            context.wrap_socket(raw, server_hostname="api.github.com") as tls,
        ):
            cert = tls.getpeercert() or {}
            der = tls.getpeercert(binary_form=True) or b""
    except ssl.SSLError:
        return {"tls.issuer": "untrusted"}
    except OSError:
        return {"tls.issuer": "unreachable"}
    issuer = {str(pair[0]): str(pair[1]) for rdn in cert.get("issuer", ()) for pair in rdn}
    # Every name and URL the certificate shows, as a checker reads it for a proxy's name.
    names = [
        str(pair[1]) for key in ("subject", "issuer") for rdn in cert.get(key, ()) for pair in rdn
    ]
    names += [str(pair[1]) for pair in cert.get("subjectAltName", ())]
    for key in ("OCSP", "caIssuers", "crlDistributionPoints"):
        names += [str(url) for url in cert.get(key, ())]
    if b"mitmproxy" in der.lower():
        names.append("mitmproxy (in the certificate's bytes)")
    return {
        "tls.issuer": str(issuer.get("organizationName") or issuer.get("commonName", "")),
        "tls.names": names,
    }


# The headers every answer of GitHub's API carries, looked for in /zen's.
GITHUB_HEADERS = (
    "server", "x-github-request-id", "x-github-media-type", "x-github-api-version-selected",
    "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-used",
    "x-ratelimit-resource",
)  # fmt: skip


def _github(paths: tuple[str, ...]) -> list[tuple[int, dict[str, str], bytes]]:
    """GET each path of https://api.github.com, one after another on one connection."""
    answers = []
    with _connect("api.github.com", 443) as raw:
        context = ssl.create_default_context()
        with context.wrap_socket(raw, server_hostname="api.github.com") as tls:
            conn = http.client.HTTPConnection("api.github.com", timeout=TIMEOUT_S)
            conn.sock = tls
            for path in paths:
                conn.request("GET", path, headers={"User-Agent": "curl/8.5.0"})
                answer = conn.getresponse()
                body = answer.read(65536)
                headers = {k.lower(): v for k, v in answer.getheaders()}
                answers.append((answer.status, headers, body))
    return answers


def _member(body: bytes, *path: str) -> dict[str, object]:
    """Return a JSON object's member at ``path`` ({} when there is no such object)."""
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else {}


def read_zen() -> Reading:
    """Return what https://api.github.com answers: /zen, /rate_limit and /meta's shape."""
    try:
        zen, rate, meta = _github(("/zen", "/rate_limit", "/meta"))
    except (OSError, http.client.HTTPException):
        return {"zen.status": 0, "zen.length": 0}
    status, headers, body = zen
    core = _member(rate[2], "resources", "core")
    return {
        "zen.status": status,
        "zen.length": len(body.strip()),
        "zen.content_type": headers.get("content-type", ""),
        "github.headers": [name for name in GITHUB_HEADERS if name in headers],
        "rate_limit.keys": sorted(_member(rate[2])),
        "rate_limit.core": sorted(core),
        "rate_limit.limit": core.get("limit", 0),
        "meta.keys": sorted(_member(meta[2])),
    }


READS: tuple[Callable[[], Reading], ...] = (
    read_status, read_processes, read_mounts, read_users, read_env, read_files, read_runner,
    read_resolver,
)  # fmt: skip
NETWORK_READS: tuple[Callable[[], Reading], ...] = (read_dns, read_tls, read_zen)


def reading(*, network: bool) -> Reading:
    """Return every field the probe reads (network fields only when asked)."""
    found: Reading = {"probe": 1, "network": network}
    for read in READS + (NETWORK_READS if network else ()):
        try:
            found.update(read())
        except Exception as error:  # one failed read must not hide the others
            found[f"error.{read.__name__}"] = type(error).__name__
    return found


def _halved(value: object) -> object:
    """Return a list or dict with its second half dropped (a dict of dicts: each halved)."""
    if isinstance(value, list):
        return value[: len(value) // 2]
    if isinstance(value, dict):
        if len(value) > 1 and not all(isinstance(v, dict) for v in value.values()):
            return dict(list(value.items())[: len(value) // 2])
        return {k: _halved(v) for k, v in value.items()}
    return value


def line(found: Reading) -> str:
    """Return the printed line, under CAP: the longest lists are cut first, and say so."""
    while True:
        text = MARKER + json.dumps(found, separators=(",", ":"), sort_keys=True)
        cuttable = [k for k, v in found.items() if isinstance(v, list | dict) and v]
        if len(text) <= CAP or not cuttable:
            return text
        longest = max(cuttable, key=lambda k: len(json.dumps(found[k])))
        found = {**found, longest: _halved(found[longest]), "truncated": True}


def main(argv: list[str]) -> int:
    print(line(reading(network="--network" in argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
