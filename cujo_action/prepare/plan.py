"""Clone head, add a worktree at base, read base's policy and head's build files → Plan.

The policy is read from the base commit's git objects and never from head; the build
files are read from the head checkout. ``settle`` is the pure part: the files present at
head (and their text) plus the policy → the install, test and smoke commands.

Settling rules (the policy's non-empty ``install``/``test``/``smoke`` win over these):

========  =========================================  ==========================================
side      recognised by (at the repository root)     commands
========  =========================================  ==========================================
python    pyproject.toml, setup.py, setup.cfg,       install ``python -m pip install`` with
          *requirements*.txt, requirements/*.txt     ``-e .`` (plus dev/test extras) when
                                                     buildable, ``-r`` for requirements.txt and
                                                     dev/test requirement files, ``pytest``
                                                     when the project uses pytest.
                                                     test ``python -m pytest -q -p
                                                     no:cacheprovider`` (pytest), else
                                                     ``python -m unittest discover -v [-s D]``
                                                     when there are ``test*.py`` files.
                                                     smoke ``python -m pip wheel`` when
                                                     buildable, else ``python -m compileall``.
node      package.json (+ package-lock.json or       install ``npm ci`` with a lockfile, else
          npm-shrinkwrap.json)                       ``npm install``; test ``npm test`` unless
                                                     the script is absent or npm's placeholder;
                                                     smoke ``npm run build`` or ``npm pack
                                                     --dry-run``.
========  =========================================  ==========================================

The test environment is what the project declares (``testenv.py``): PEP 735 dependency
groups, dev/test extras and requirement files; else its tox or nox test environments,
else the ``pip install`` lines of its CI workflows read at base. pytest runs with the
arguments tox, nox or CI give it, when they are plain. The plan's ``test_sources`` and a
note say which sources were used.

Buildable means setup.py, or a pyproject.toml with ``[project]`` or ``[build-system]``.
When both sides are present, the side with tests is run (Python when both or neither
have tests), never a side whose tool (npm) is missing. The plan's ``unproven_reason``
says so, as it says when nothing was recognised, a build file is malformed or a build
tool is missing; those reasons are dropped when the policy sets all three commands.
"""

from __future__ import annotations

import base64
import configparser
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import tomllib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import annotated_types

from cujo_action.prepare import testenv
from cujo_action.sandbox.boundary import open_no_follow
from cujo_action.schema import (
    MAX_SHORT,
    MAX_TEXT,
    SHA,
    Plan,
    Policy,
    PolicyError,
    clip,
    load_policy,
)

__all__ = ["PrepareError", "Settled", "prepare", "settle"]

Ecosystem = Literal["python", "node", "unknown"]
Which = Callable[[str], str | None]

POLICY_FILE = ".cujo.yml"
WORKFLOWS = ".github/workflows"
MAX_WORKFLOWS = 20
LOOKED_FOR = (
    "pyproject.toml, setup.py, setup.cfg, requirements*.txt, requirements/*.txt, package.json"
)
FIX_HINT = "Set install, test and smoke in .cujo.yml on the base branch to choose the commands."

PYTEST = "python -m pytest -q -p no:cacheprovider"
UNITTEST = "python -m unittest discover -v"
WHEEL = 'python -m pip wheel --no-deps -w "$RUNNER_TEMP/wheel" .'
COMPILEALL = "python -m compileall -q ."
NPM_CI = "npm ci --no-audit --no-fund"
NPM_INSTALL = "npm install --no-audit --no-fund"
NPM_TEST = "npm test"
NPM_BUILD = "npm run build"
NPM_PACK = "npm pack --dry-run"
NPM_PLACEHOLDER = "Error: no test specified"  # what `npm init` writes as scripts.test

# A build file larger than this is read only this far (and so usually fails to parse):
# head is untrusted and must not be able to make prepare read gigabytes.
READ_CAP = 1024 * 1024

_REMOTE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|[\w.-]+@[\w.-]+:)")
_PYTEST_REQ = re.compile(r"^\s*pytest(?:[-_.][a-z0-9]+)*\s*(?:[\[<>=!~;@(]|$)", re.IGNORECASE)
_PYTEST_QUOTED = re.compile(
    r"[\"']\s*pytest(?:[-_.][a-z0-9]+)*\s*(?:[\[<>=!~;@(\"'])", re.IGNORECASE
)
_EXTRA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class PrepareError(Exception):
    """A repository or ref that cannot be prepared; the message says what to fix."""


@dataclass(frozen=True)
class Settled:
    """The commands settled from head's build files and base's policy."""

    ecosystem: Ecosystem
    build_files: tuple[str, ...] = ()
    install: str = ""
    test: str = ""
    smoke: str = ""
    unproven_reason: str = ""
    notes: tuple[str, ...] = ()
    test_sources: tuple[str, ...] = ()  # where the test environment was settled from


@dataclass(frozen=True)
class _Side:
    """What one ecosystem's build files alone settle to."""

    ecosystem: Ecosystem
    build_files: tuple[str, ...]
    install: str
    test: str
    smoke: str
    tool: str | None = None  # the executable its commands need, checked with `which`
    problems: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


# --------------------------------------------------------------------------- settle


def settle(
    files: Mapping[str, str],
    policy: Policy,
    *,
    which: Which = shutil.which,
    ci: Mapping[str, str] | None = None,
) -> Settled:
    """Settle install, test and smoke from head's files (path → text) and base's policy.

    ``ci`` holds the repository's CI workflows read at base (path → text): how the
    project runs its own tests, when its build files do not say.
    """
    sides = [side for side in (_python_side(files, ci or {}), _node_side(files)) if side]
    reasons: list[str] = []
    notes: list[str] = []
    if not sides:
        reasons.append(f"No build files were found at head (looked for {LOOKED_FOR}).")
    runnable = [side for side in sides if side.tool is None or which(side.tool) is not None]
    for side in sides:
        if side not in runnable:
            reasons.append(
                f"{side.tool} is not on PATH, so the {side.ecosystem} project cannot be "
                "installed, tested or built."
            )
    if runnable:
        # Python comes first, so a tie (both or neither have tests) goes to Python.
        chosen = next((side for side in runnable if side.test), runnable[0])
        if len(runnable) == 2:
            # A choice, not a gap: the plan says which side ran, the verdict is not touched.
            notes.append(_both_reason(chosen, next(s for s in runnable if s is not chosen)))
        reasons.extend(chosen.problems)
    elif sides:
        chosen = replace(sides[0], install="", test="", smoke="")
        reasons.extend(chosen.problems)
    else:
        chosen = _Side("unknown", (), "", "", "")
    install, test, smoke = (_set(policy.install), _set(policy.test), _set(policy.smoke))
    if install and test and smoke:
        reasons = []
    elif reasons:
        reasons.append(FIX_HINT)
    build_files = sorted({name for side in sides for name in side.build_files})
    sources = chosen.sources if not (install and test) else ()
    if sources:
        notes.append("The test environment was settled from " + "; ".join(sources) + ".")
    return Settled(
        ecosystem=chosen.ecosystem,
        build_files=tuple(build_files),
        install=install or chosen.install,
        test=test or chosen.test,
        smoke=smoke or chosen.smoke,
        unproven_reason=clip(" ".join(reasons), MAX_TEXT),
        notes=tuple(clip(n, MAX_TEXT) for n in notes),
        test_sources=tuple(clip(source, MAX_SHORT) for source in sources),
    )


def _set(command: str) -> str:
    """Return a policy command, or '' when it is blank (and so left to settling)."""
    return command if command.strip() else ""


def _both_reason(chosen: _Side, other: _Side) -> str:
    why = (
        "only it has tests"
        if chosen.test and not other.test
        else "Python is picked when both or neither have tests"
    )
    return (
        f"Both Python and Node build files are at head ({', '.join(sorted(chosen.build_files))}"
        f" and {', '.join(sorted(other.build_files))}); the {chosen.ecosystem} side was run "
        f"because {why}, so the {other.ecosystem} side is not installed, tested or built."
    )


def _python_side(files: Mapping[str, str], ci: Mapping[str, str]) -> _Side | None:
    paths = list(files)
    requirements = sorted(p for p in paths if _is_requirements(p))
    manifests = [name for name in ("pyproject.toml", "setup.py", "setup.cfg") if name in files]
    if not manifests and not requirements:
        return None
    problems: list[str] = []
    buildable = "setup.py" in files
    uses_pytest = (
        "pytest.ini" in files
        or ".pytest.ini" in files
        or any(p.rpartition("/")[2] == "conftest.py" for p in paths)
    )
    extras: set[str] = set()
    sources: list[str] = []
    groups = testenv.Found()

    if "pyproject.toml" in files:
        text = _text(files, "pyproject.toml")
        try:
            data = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            problems.append(
                f"pyproject.toml at head is not valid TOML ({exc}); the commands were settled "
                "from its raw text and the install will likely fail."
            )
            buildable |= bool(re.search(r"(?m)^\s*\[\s*(?:project|build-system)\s*\]", text))
            uses_pytest |= bool(
                re.search(r"(?m)^\s*\[\s*tool\.pytest", text) or _PYTEST_QUOTED.search(text)
            )
        else:
            buildable |= "project" in data or "build-system" in data
            uses_pytest |= _toml_mentions_pytest(data)
            project = data.get("project")
            if isinstance(project, dict):
                optional = project.get("optional-dependencies")
                if isinstance(optional, dict):
                    extras.update(_dev_extras(optional))
            groups = testenv.dependency_groups(data)
            sources += groups.sources
    if "setup.py" in files:
        uses_pytest |= bool(_PYTEST_QUOTED.search(_text(files, "setup.py")))
    if "setup.cfg" in files:
        text = _text(files, "setup.cfg")
        uses_pytest |= _cfg_mentions_pytest(text)
        extras.update(_dev_extras(_cfg_extras(text)))
    if "tox.ini" in files:
        uses_pytest |= bool(re.search(r"\bpy\.?test\b", _text(files, "tox.ini")))
    uses_pytest |= any(_requirements_mention_pytest(_text(files, r)) for r in requirements)
    sources += [f"extra {e} (project metadata)" for e in sorted(extras)]
    chosen_requirements = _requirements_to_install(requirements, buildable=buildable)
    sources += [f"{r}" for r in chosen_requirements if r != "requirements.txt"]

    # What tox, nox or the CI workflow install is used only when the project's own
    # metadata says nothing of its tests: theirs is how, not what.
    fallback = testenv.Found()
    readers: list[Callable[[], testenv.Found]] = [
        lambda: testenv.tox(_text(files, "tox.ini")) if "tox.ini" in files else testenv.Found(),
        lambda: (
            testenv.nox(_text(files, "noxfile.py")) if "noxfile.py" in files else testenv.Found()
        ),
        lambda: testenv.workflows(ci),
    ]
    how: list[str] | None = None
    for read in readers:
        found = read()
        if how is None and found.pytest_args is not None:
            how = found.pytest_args
            uses_pytest = True
        if not fallback and found and not sources:
            fallback = found
            sources += found.sources
    extras.update(e for e in (*groups.extras, *fallback.extras) if _EXTRA_NAME.fullmatch(e))
    wanted = [*groups.args, *fallback.args]
    uses_pytest |= any(_PYTEST_REQ.match(a) for a in wanted)

    install_args: list[str] = []
    if buildable:
        install_args += ["-e", f".[{','.join(sorted(extras))}]" if extras else "."]
    for name in chosen_requirements:
        install_args += ["-r", name]
    install_args += [a for a in wanted if a not in install_args or a.startswith("-")]
    if uses_pytest and not any(_PYTEST_REQ.match(a) for a in install_args):
        install_args.append("pytest")
    install = shlex.join(["python", "-m", "pip", "install", *install_args]) if install_args else ""

    test = testenv.pytest_command(PYTEST, how) if uses_pytest else _unittest_command(paths)
    return _Side(
        ecosystem="python",
        build_files=(*manifests, *requirements),
        install=install,
        test=test,
        smoke=WHEEL if buildable else COMPILEALL,
        problems=tuple(problems),
        sources=tuple(sources),
    )


def _node_side(files: Mapping[str, str]) -> _Side | None:
    if "package.json" not in files:
        return None
    lockfile = next((n for n in ("package-lock.json", "npm-shrinkwrap.json") if n in files), None)
    build_files = ("package.json", lockfile) if lockfile else ("package.json",)
    install = NPM_CI if lockfile else NPM_INSTALL
    try:
        data = json.loads(_text(files, "package.json"))
    except (ValueError, RecursionError) as exc:
        reason = f"is not valid JSON ({exc})"
    else:
        if isinstance(data, dict):
            scripts = data.get("scripts")
            scripts = scripts if isinstance(scripts, dict) else {}
            test_script, build_script = scripts.get("test"), scripts.get("build")
            has_test = (
                isinstance(test_script, str)
                and bool(test_script.strip())
                and NPM_PLACEHOLDER not in test_script
            )
            has_build = isinstance(build_script, str) and bool(build_script.strip())
            return _Side(
                ecosystem="node",
                build_files=build_files,
                install=install,
                test=NPM_TEST if has_test else "",
                smoke=NPM_BUILD if has_build else NPM_PACK,
                tool="npm",
            )
        reason = "is not a JSON object"
    problem = f"package.json at head {reason}, so its scripts could not be read."
    return _Side("node", build_files, install, "", "", tool="npm", problems=(problem,))


def _text(files: Mapping[str, str], name: str) -> str:
    # A byte-order mark is legal in these files for most tools but not for tomllib/json.
    return files[name].removeprefix("\ufeff")


def _is_requirements(path: str) -> bool:
    folder, _, name = path.rpartition("/")
    if not name.endswith(".txt"):
        return False
    return (folder == "" and "requirements" in name) or folder == "requirements"


def _is_dev_name(name: str) -> bool:
    return any(t.startswith(("dev", "test")) for t in re.split(r"[-_.\s]+", name.lower()))


def _requirements_to_install(requirements: list[str], *, buildable: bool) -> list[str]:
    """Return the requirement files to install: requirements.txt first, then dev/test ones."""
    dev = [r for r in requirements if _is_dev_name(r.rpartition("/")[2].removesuffix(".txt"))]
    chosen = (["requirements.txt"] if "requirements.txt" in requirements else []) + dev
    if not chosen and not buildable:
        # Nothing is named like the usual files, and nothing else says what to install.
        chosen = requirements
    return chosen


def _dev_extras(extras: Iterable[object]) -> set[str]:
    return {
        e for e in extras if isinstance(e, str) and _EXTRA_NAME.fullmatch(e) and _is_dev_name(e)
    }


def _toml_mentions_pytest(data: dict[str, object]) -> bool:
    """Say whether pytest is configured or named as a requirement anywhere in the TOML."""
    stack: list[object] = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if _PYTEST_REQ.match(str(key)):
                    return True
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and _PYTEST_REQ.match(node):
            return True
    return False


def _cfg_mentions_pytest(text: str) -> bool:
    return any(
        re.match(r"\s*\[tool:pytest\]", line)
        or _PYTEST_REQ.match(re.sub(r"^\s*[\w.-]+\s*=", "", line))
        for line in text.splitlines()
    )


def _cfg_extras(text: str) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    if not parser.has_section("options.extras_require"):
        return []
    return list(parser["options.extras_require"])


def _requirements_mention_pytest(text: str) -> bool:
    return any(_PYTEST_REQ.match(line.split(" #")[0]) for line in text.splitlines())


def _unittest_command(paths: Collection[str]) -> str:
    """Return the unittest command that discovers the most ``test*.py`` files, or ''."""
    packages = {p.rpartition("/")[0] for p in paths if p.rpartition("/")[2] == "__init__.py"}
    starts: dict[str, int] = {}
    for path in paths:
        folder, _, name = path.rpartition("/")
        if not (name.startswith("test") and name.endswith(".py")):
            continue
        # unittest only descends into packages, so start at the first non-package folder.
        while folder and folder in packages:
            folder = folder.rpartition("/")[0]
        starts[folder] = starts.get(folder, 0) + 1
    if not starts:
        return ""
    if "" in starts:
        return UNITTEST
    start = min(starts, key=lambda s: (-starts[s], s))
    return f"{UNITTEST} -s {shlex.quote(start)}"


# --------------------------------------------------------------------------- git


# Every git call gets these: no hook from any repository ever runs, no submodule is
# touched, no credential helper is asked, and only these transports are allowed (the
# `ext::` transport runs commands).
_GIT_CONFIG = (
    f"core.hooksPath={os.devnull}",
    "core.fsmonitor=false",
    "submodule.recurse=false",
    "protocol.allow=never",
    "protocol.file.allow=always",
    "protocol.https.allow=always",
    "protocol.ssh.allow=always",
    "protocol.git.allow=always",
    "credential.helper=",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
)

# Passed through from the harness: what git needs to find itself and reach the network
# (and the certificate bundle of a server whose CA is not the system's, as on some GHES).
_ENV_PASS = (
    "PATH",
    "TMPDIR",
    "GIT_SSL_CAINFO",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
)


def _git_env(home: Path) -> dict[str, str]:
    """Return a scrubbed environment for git: no harness secrets, no user or system config."""
    env = {name: os.environ[name] for name in _ENV_PASS if name in os.environ}
    env.update(
        HOME=str(home),
        LC_ALL="C",  # git's messages, which PrepareError quotes, in one language
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_SSH_COMMAND="ssh -o BatchMode=yes",
    )
    return env


@dataclass
class _GitResult:
    code: int
    out: bytes
    err: str


class _Git:
    """Run git under one deadline with a scrubbed environment and the safe settings."""

    def __init__(self, env: dict[str, str], timeout: float, shown: str, raw: str) -> None:
        self.env, self.timeout, self.shown, self.raw = env, timeout, shown, raw
        self.deadline = time.monotonic() + timeout

    def run(self, *args: str, cwd: Path, env: Mapping[str, str] | None = None) -> _GitResult:
        """Run one git command in ``cwd`` and return its exit code and output."""
        argv = ["git"]
        for setting in _GIT_CONFIG:
            argv += ["-c", setting]
        argv += args
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self._late(args[0])
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env={**self.env, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # so a timeout kills git's helpers too
            )
        except FileNotFoundError:
            raise PrepareError("git is not on PATH; install git where Cujo runs.") from None
        with proc:
            try:
                out, err = proc.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise self._late(args[0]) from None
        return _GitResult(proc.returncode, out, err.decode("utf-8", "replace"))

    def check(self, *args: str, cwd: Path, what: str) -> bytes:
        """Run git and return stdout, or raise PrepareError saying ``what`` failed."""
        result = self.run(*args, cwd=cwd)
        if result.code != 0:
            raise PrepareError(f"Could not {what}: {self.why(result)}")
        return result.out

    def why(self, result: _GitResult) -> str:
        """Return git's telling stderr line, with any credentials in the URL hidden."""
        lines = [line.strip() for line in result.err.splitlines() if line.strip()]
        # The first fatal/error line names the cause; later lines are generic advice.
        line = next(
            (x for x in lines if x.startswith(("fatal:", "error:"))),
            lines[-1] if lines else f"git exited with code {result.code}",
        )
        return clip(line.replace(self.raw, self.shown), MAX_SHORT)

    def _late(self, command: str) -> PrepareError:
        return PrepareError(
            f"git {command} did not finish within the {self.timeout:g} s allowed to prepare "
            f"{self.shown}; check that the repository is reachable, or raise the deadline."
        )


def _redact(repo: str) -> str:
    """Return ``repo`` with any user or token in a URL replaced by ***."""
    if "://" not in repo:
        return repo
    parts = urlsplit(repo)
    if "@" not in parts.netloc:
        return repo
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def _check_ref(ref: str) -> None:
    if not ref or ref.startswith("-") or ":" in ref or any(c.isspace() for c in ref):
        raise PrepareError(f"{ref!r} is not a valid ref; give a branch, tag or commit SHA.")


def _is_sha(ref: str) -> bool:
    return bool(SHA.fullmatch(ref))


def _has_commit(git: _Git, clone: Path, sha: str) -> bool:
    return git.run("cat-file", "-e", f"{sha}^{{commit}}", cwd=clone).code == 0


def _rev_parse(git: _Git, cwd: Path, ref: str, env: Mapping[str, str] | None = None) -> str:
    result = git.run(
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        f"{ref}^{{commit}}",
        cwd=cwd,
        env=env,
    )
    return result.out.decode().strip() if result.code == 0 else ""


def _unknown_ref(ref: str, shown: str) -> PrepareError:
    return PrepareError(f"{ref!r} is not a branch, tag or commit in {shown}.")


def _resolve_local(git: _Git, source: Path, ref: str) -> str:
    # The ceiling keeps git from finding an enclosing repository above `source`.
    sha = _rev_parse(git, source, ref, env={"GIT_CEILING_DIRECTORIES": str(source.parent)})
    if not sha:
        raise _unknown_ref(ref, git.shown)
    return sha


def _resolve_remote(git: _Git, clone: Path, ref: str) -> str:
    """Resolve ``ref`` against the remote, fetching it (e.g. refs/pull/7/head) if needed."""
    if _is_sha(ref):
        if not _has_commit(git, clone, ref):
            fetched = git.run("fetch", "--quiet", "--no-tags", "origin", ref, cwd=clone)
            if fetched.code != 0 or not _has_commit(git, clone, ref):
                raise _unknown_ref(ref, git.shown)
        return ref
    fetched = git.run("fetch", "--quiet", "--no-tags", "origin", ref, cwd=clone)
    sha = _rev_parse(git, clone, "FETCH_HEAD") if fetched.code == 0 else ""
    # Not a name the remote has: maybe an abbreviated SHA or origin/<branch> in the clone.
    sha = sha or _rev_parse(git, clone, ref)
    if not sha:
        raise _unknown_ref(ref, git.shown)
    return sha


def _auth_env(repo: str, token: str) -> dict[str, str]:
    """Return git's environment for sending ``token`` to ``repo``'s host, and only there."""
    parts = urlsplit(repo)
    if parts.scheme != "https" or not parts.hostname:
        raise PrepareError(
            f"a token is sent only over https; {_redact(repo)} would carry it in clear text."
        )
    if "@" in parts.netloc:
        raise PrepareError(f"{_redact(repo)} carries credentials of its own and a token.")
    if not token or any(not 0x21 <= ord(c) <= 0x7E for c in token):
        # A newline would add a header of its own to every request git makes.
        raise PrepareError("the token is empty or holds spaces or control characters.")
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    # As actions/checkout authenticates (an extra header, not the URL), scoped to this
    # origin, with redirects refused so the header never follows one elsewhere.
    origin = f"{parts.scheme}://{parts.netloc}/"
    return {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": f"http.{origin}.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
        "GIT_CONFIG_KEY_1": "http.followRedirects",
        "GIT_CONFIG_VALUE_1": "false",
    }


def _fetch_pull_head(git: _Git, clone: Path, number: int, head: str) -> str:
    """Fetch ``refs/pull/N/head`` and return it, which must still be the dispatched ``head``."""
    ref = f"refs/pull/{number}/head"
    # https://docs.github.com/en/pull-requests/collaborating-with-pull-requests/reviewing-changes-in-pull-requests/checking-out-pull-requests-locally
    fetched = git.run(
        "fetch", "--quiet", "--no-tags", "origin", f"+{ref}:refs/cujo/pull/{number}", cwd=clone
    )
    if fetched.code != 0:
        raise PrepareError(
            f"Could not fetch {ref} from {git.shown}: {git.why(fetched)}. A private "
            "repository needs the job's token (action.yml passes github.token); a fork's "
            "head must be readable with it."
        )
    sha = _rev_parse(git, clone, f"refs/cujo/pull/{number}")
    if sha != head:
        raise PrepareError(
            f"The pull request's head moved: {ref} is now {sha or 'gone'}, but this run was "
            f"dispatched for {head} (a push or force push between dispatch and clone). "
            "Nothing was reviewed; the run for the new head reviews it."
        )
    return sha


def _ensure_commit(git: _Git, clone: Path, sha: str, ref: str) -> None:
    if _has_commit(git, clone, sha):
        return
    git.run("fetch", "--quiet", "--no-tags", "origin", sha, cwd=clone)
    if not _has_commit(git, clone, sha):
        raise PrepareError(
            f"{ref!r} resolves to {sha} in {git.shown}, but that commit could not be "
            "fetched from it; give a branch or tag that contains it."
        )


def _base_policy_text(git: _Git, clone: Path, base_sha: str) -> str | None:
    """Return base's .cujo.yml text (None when absent), read from git objects, never head."""
    out = git.check(
        "ls-tree", "-z", base_sha, "--", POLICY_FILE, cwd=clone, what="list the base commit"
    )
    if not out:
        return None
    meta, _, _ = out.decode("utf-8", "replace").partition("\t")
    mode, kind, blob = meta.split()
    if kind != "blob" or mode not in ("100644", "100755"):
        raise PolicyError(POLICY_FILE, None, "", "must be a regular file, not a link or folder")
    text = git.check("cat-file", "blob", blob, cwd=clone, what=f"read {POLICY_FILE} at base")
    return text.decode("utf-8", "replace")


def _base_workflows(git: _Git, clone: Path, base_sha: str) -> dict[str, str]:
    """Return base's CI workflows (path → text, capped), read from git objects like the policy."""
    out = git.run("ls-tree", "-z", base_sha, "--", f"{WORKFLOWS}/", cwd=clone).out
    found: dict[str, str] = {}
    for entry in out.split(b"\0"):
        meta, _, path = entry.partition(b"\t")
        parts = meta.split()
        name = path.decode("utf-8", "replace")
        if len(parts) != 3 or parts[1] != b"blob" or not name.endswith((".yml", ".yaml")):
            continue
        if len(found) >= MAX_WORKFLOWS:
            break
        blob = git.run("cat-file", "blob", parts[2].decode(), cwd=clone)
        if blob.code == 0:
            found[name] = blob.out[:READ_CAP].decode("utf-8", "replace")
    return found


def _tracked_files(git: _Git, clone: Path, head_sha: str) -> list[str]:
    """Return head's regular files; links and submodules are never read as build files."""
    out = git.check(
        "ls-tree", "-r", "-z", "--full-tree", head_sha, cwd=clone, what="list the head commit"
    )
    paths = []
    for entry in out.split(b"\0"):
        meta, _, path = entry.partition(b"\t")
        if meta.split(b" ", 1)[0] in (b"100644", b"100755"):
            paths.append(path.decode("utf-8", "replace"))
    return paths


class _Checkout(Mapping[str, str]):
    """Head's tracked files as path → text, each read from the checkout on first use."""

    def __init__(self, root: Path, paths: Iterable[str]) -> None:
        self._root, self._paths, self._texts = root, set(paths), dict[str, str]()

    def __getitem__(self, path: str) -> str:
        if path not in self._paths:
            raise KeyError(path)
        if path not in self._texts:
            self._texts[path] = self._read(path)
        return self._texts[path]

    def __contains__(self, path: object) -> bool:
        # Mapping's default would read the file just to answer whether it exists.
        return path in self._paths

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._paths))

    def __len__(self) -> int:
        return len(self._paths)

    def _read(self, path: str) -> str:
        try:
            fd = open_no_follow(self._root / path, "read")
        except OSError:
            return ""
        with os.fdopen(fd, "rb") as handle:
            return handle.read(READ_CAP).decode("utf-8", "replace")


def _changed_files(git: _Git, clone: Path, base_sha: str, head_sha: str) -> list[str]:
    """Return the files changed from the merge base of base and head to head (``base...head``)."""
    merge_base = git.run("merge-base", base_sha, head_sha, cwd=clone)
    # Unrelated histories have no merge base; compare with base itself, listing more, not less.
    start = merge_base.out.decode().strip() if merge_base.code == 0 else base_sha
    out = git.check(
        "diff",
        "--name-only",
        "-z",
        "--no-renames",
        "--no-ext-diff",
        start,
        head_sha,
        "--",
        cwd=clone,
        what="list the changed files",
    )
    return [p.decode("utf-8", "replace") for p in out.split(b"\0") if p]


def _max_items(field: str) -> int:
    """Return the schema's cap on the length of a Plan list field."""
    for meta in Plan.model_fields[field].metadata:
        if isinstance(meta, annotated_types.MaxLen):
            return meta.max_length
    raise AssertionError(f"Plan.{field} has no max_length")


# --------------------------------------------------------------------------- prepare


def prepare(
    repo: str,
    base: str,
    head: str,
    run_id: str,
    workdir: Path,
    *,
    git_timeout: float = 120,
    which: Which = shutil.which,
    pull_request: int | None = None,
    token: str | None = None,
) -> Plan:
    """Check out head and base under ``workdir``, settle the commands and write plan.json.

    With ``pull_request``, head is fetched as ``refs/pull/N/head`` and must still be the
    commit ``head`` names. ``token`` (a clone URL over https only) is sent to that host
    as GitHub's Actions checkout sends it, in the environment of root's git commands
    alone: never in a URL, a file, the clone's config or the plan.
    """
    workdir = Path(workdir).resolve()
    head_dir, base_dir = workdir / "head", workdir / "base"
    for path in (head_dir, base_dir):
        if path.exists():
            raise PrepareError(f"{path} already exists; give prepare an empty work directory.")
    for ref in (base, head):
        _check_ref(ref)
    workdir.mkdir(parents=True, exist_ok=True)
    env = _git_env(workdir)
    clone = ["clone", "--no-checkout", "--quiet", "--no-recurse-submodules", "--"]

    if pull_request is not None and (not _is_sha(head) or pull_request < 1):
        raise PrepareError(
            f"a pull request's head is checked against the exact commit: give head as a "
            f"40-hex SHA and a pull request number above 0 (got {head!r}, {pull_request!r})."
        )
    if _REMOTE.match(repo):
        if token is not None:
            env.update(_auth_env(repo, token))
        git = _Git(env, git_timeout, shown=_redact(repo), raw=repo)
        git.check(*clone, repo, str(head_dir), cwd=workdir, what=f"clone {git.shown}")
        base_sha = _resolve_remote(git, head_dir, base)
        if pull_request is not None:
            head_sha = _fetch_pull_head(git, head_dir, pull_request, head)
        else:
            head_sha = _resolve_remote(git, head_dir, head)
    elif token is not None or pull_request is not None:
        raise PrepareError(
            f"{repo} is a local path: a token and a pull request number go with a clone URL."
        )
    else:
        source = Path(repo).expanduser().resolve()
        git = _Git(env, git_timeout, shown=str(source), raw=str(source))
        if not source.is_dir():
            raise PrepareError(f"{repo} is not a git repository (no such directory).")
        ceiling = {"GIT_CEILING_DIRECTORIES": str(source.parent)}
        if git.run("rev-parse", "--git-dir", cwd=source, env=ceiling).code != 0:
            raise PrepareError(f"{repo} is not a git repository.")
        base_sha = _resolve_local(git, source, base)
        head_sha = _resolve_local(git, source, head)
        git.check(*clone, str(source), str(head_dir), cwd=workdir, what=f"clone {git.shown}")
        _ensure_commit(git, head_dir, base_sha, base)
        _ensure_commit(git, head_dir, head_sha, head)

    # PolicyError propagates: the caller makes the run `error` with file, line and key.
    policy = load_policy(_base_policy_text(git, head_dir, base_sha), POLICY_FILE)
    git.check(
        "checkout", "--quiet", "--detach", head_sha, cwd=head_dir, what=f"check out {head_sha}"
    )
    git.check(
        "worktree",
        "add",
        "--quiet",
        "--detach",
        str(base_dir),
        base_sha,
        cwd=head_dir,
        what=f"add a worktree at {base_sha}",
    )
    ci = _base_workflows(git, head_dir, base_sha)
    settled = settle(
        _Checkout(head_dir, _tracked_files(git, head_dir, head_sha)), policy, which=which, ci=ci
    )
    changed = _changed_files(git, head_dir, base_sha, head_sha)
    # The base as it builds and tests itself, under the same policy and CI, from its own
    # build files: run beside the head, so what the base already does is told apart.
    at_base = settle(
        _Checkout(base_dir, _tracked_files(git, head_dir, base_sha)), policy, which=which, ci=ci
    )

    plan = Plan(
        run_id=run_id,
        repo=clip(git.shown, MAX_TEXT),
        base_sha=base_sha,
        head_sha=head_sha,
        policy_from=base_sha,
        policy=policy,
        ecosystem=settled.ecosystem,
        build_files=[clip(f, MAX_SHORT) for f in settled.build_files[: _max_items("build_files")]],
        install=clip(settled.install, MAX_TEXT),
        test=clip(settled.test, MAX_TEXT),
        smoke=clip(settled.smoke, MAX_TEXT),
        unproven_reason=settled.unproven_reason,
        notes=list(settled.notes),
        test_sources=list(settled.test_sources[: _max_items("test_sources")]),
        base_ecosystem=at_base.ecosystem,
        base_install=clip(at_base.install, MAX_TEXT),
        base_test=clip(at_base.test, MAX_TEXT),
        changed_files=[clip(p, MAX_TEXT) for p in changed[: _max_items("changed_files")]],
        head_dir=str(head_dir),
        base_dir=str(base_dir),
    )
    (workdir / "plan.json").write_text(plan.model_dump_json(by_alias=True, indent=2) + "\n")
    return plan
