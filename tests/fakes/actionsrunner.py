"""Run a workflow job's and a composite action's steps as a GitHub-hosted runner would.

Not an Actions emulator: it runs exactly what Cujo's own workflow files use, and fails
loudly on anything else (an ``if:``, an expression it does not know, an unpinned
``uses:``), so a workflow that grows beyond it cannot pass untested.

* ``run:`` steps run as the runner runs ``shell: bash`` —
  ``bash --noprofile --norc -eo pipefail FILE`` — with the runner's environment
  (``CI``, ``GITHUB_*``, ``RUNNER_*``, ``ACTIONS_RUNTIME_TOKEN``), the step's ``env:``
  with its ``${{ }}`` expressions evaluated, and, in a composite action,
  ``GITHUB_ACTION_PATH``. A ``${{`` inside a script is refused (template injection).
  https://docs.github.com/en/actions/reference/workflows-and-actions/workflow-syntax#jobsjob_idstepsshell
* ``uses:`` steps run stand-ins: ``actions/checkout`` clones a local bare repository,
  ``actions/setup-python`` puts a Python on PATH, ``actions/upload-artifact`` records
  the folder it would upload, and ``./DIR`` runs that composite action.
* Machine commands the steps call are stand-ins on PATH that record their calls:
  ``sudo`` (resetting the environment and PATH to ``secure_path`` as Ubuntu's sudo does),
  ``apt-get``, ``sysctl``, and a Python whose venvs carry a recording ``pip`` that never
  downloads: it installs the checked-out ``cujo_action`` and points at this test
  environment's packages for the locked dependencies (their hashes are checked here, and
  the lock itself by tests/repo/test_harness_lock.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SECURE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/snap/bin"
PINNED = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(?:/[^@]+)?@[0-9a-f]{40}$")
EXPRESSION = re.compile(r"\$\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")

SUDO = '''#!{python}
"""sudo as Ubuntu's: env_reset with secure_path, then the command (already root here)."""
import json, os, sys
args = sys.argv[1:]
keep = []
while args and args[0].startswith("-"):
    opt = args.pop(0)
    if opt.startswith("--preserve-env="):
        keep += opt.split("=", 1)[1].split(",")
    elif opt == "--":
        break
    else:
        sys.exit(f"sudo stand-in: option {{opt}} is not modelled")
env = {{k: os.environ[k] for k in keep if k in os.environ}}
env.update(
    PATH={secure_path!r}, HOME="/root", USER="root", LOGNAME="root", SHELL="/bin/bash",
    SUDO_USER="runner", SUDO_UID="1001", SUDO_GID="1001", SUDO_COMMAND=" ".join(args),
)
# The runner trusts github.com through the system's CA store; the loopback git host's
# certificate stands in for it here.
for name in ("GIT_SSL_CAINFO", "TERM"):
    if name in os.environ:
        env[name] = os.environ[name]
with open({log!r}, "a") as fh:
    fh.write(json.dumps({{"tool": "sudo", "argv": args, "env": sorted(env)}}) + "\\n")
os.environ.clear()
os.environ.update(env)
os.execvp(args[0], args)
'''

RECORDER = """#!{python}
import json, sys
with open({log!r}, "a") as fh:
    fh.write(json.dumps({{"tool": {tool!r}, "argv": sys.argv[1:]}}) + "\\n")
"""

PYTHON = '''#!{python}
"""setup-python's python: venvs get the recording pip; everything else is real Python."""
import os, pathlib, subprocess, sys
args = sys.argv[1:]
if args[:2] == ["-m", "venv"]:
    target = pathlib.Path(args[-1])
    subprocess.run([{python!r}, "-m", "venv", "--without-pip", str(target)], check=True)
    site = subprocess.run(
        [str(target / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    (pathlib.Path(site) / "pip").mkdir()
    (pathlib.Path(site) / "pip" / "__init__.py").write_text("")
    (pathlib.Path(site) / "pip" / "__main__.py").write_text({pip!r})
    sys.exit(0)
os.execv({python!r}, [{python!r}, *args])
'''

PIP = '''"""pip in a runner venv: record the call, check hashes, install without downloading."""
import json, pathlib, shutil, sys
args = sys.argv[1:]
with open({log!r}, "a") as fh:
    fh.write(json.dumps({{"tool": "pip", "argv": args}}) + "\\n")
if args[:1] != ["install"]:
    sys.exit("pip stand-in: only install is modelled")
site = pathlib.Path(__file__).resolve().parent.parent
locks = [args[i + 1] for i, a in enumerate(args) if a == "-r"]
for lock in locks:
    blocks = [b for b in pathlib.Path(lock).read_text().split("\\n") if b and b[0].isalnum()]
    text = pathlib.Path(lock).read_text()
    if "--require-hashes" in args and text.count("--hash=sha256:") < len(blocks):
        sys.exit(f"pip stand-in: {{lock}} has a requirement without a hash")
if locks:
    # What the locks would install: this test environment's packages.
    (site / "cujo-test-deps.pth").write_text({deps!r} + "\\n")
local = [a for a in args[1:] if not a.startswith("-") and a not in locks]
for folder in local:
    if "--no-index" not in args:
        sys.exit("pip stand-in: a local install must not reach the index")
    for package in ("cujo_action", "app_relay"):
        shutil.copytree(
            pathlib.Path(folder) / package, site / package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
'''


@dataclass
class StepResult:
    """One step that ran."""

    name: str
    code: int
    stdout: str = ""
    stderr: str = ""


@dataclass
class Upload:
    """What actions/upload-artifact was handed."""

    name: str
    path: Path
    options: dict[str, Any]
    files: dict[str, bytes]


@dataclass
class JobResult:
    """The steps that ran (up to the first failure) and the artifacts uploaded."""

    steps: list[StepResult] = field(default_factory=list)
    uploads: list[Upload] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """Return whether a step failed."""
        return any(s.code != 0 for s in self.steps)

    @property
    def log(self) -> str:
        """Return everything the steps printed, as the job's log holds it."""
        return "\n".join(s.stdout + s.stderr for s in self.steps)


def calls(log: Path, tool: str) -> list[dict[str, Any]]:
    """Return the recorded calls of one stand-in tool."""
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [line for line in lines if line["tool"] == tool]


class Runner:
    """A hosted runner for one job: its folders, environment and stand-in tools."""

    def __init__(
        self,
        root: Path,
        *,
        server_url: str,
        repository: str,
        token: str,
        git_root: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root
        self.git_root = git_root  # OWNER/NAME bare repositories actions/checkout clones
        self.token = token
        self.temp = root / "runner-temp"
        self.workspace = root / "work" / repository.split("/")[1]
        self.home = root / "home"
        self.log = root / "calls.jsonl"
        shims, setup_python = root / "shims", root / "setup-python"
        for folder in (self.temp, self.workspace, self.home, shims, setup_python):
            folder.mkdir(parents=True, exist_ok=True)
        python = sys._base_executable  # type: ignore[attr-defined]
        pip = PIP.format(log=str(self.log), deps=sysconfig.get_paths()["purelib"])
        # sudo's secure_path finds the stand-ins first: the machine's own apt-get and
        # sysctl are never run by a test.
        secure = f"{shims}:{SECURE_PATH}"
        self._script(
            shims / "sudo", SUDO.format(python=python, secure_path=secure, log=str(self.log))
        )
        for tool in ("apt-get", "sysctl"):
            self._script(shims / tool, RECORDER.format(python=python, log=str(self.log), tool=tool))
        self._script(setup_python / "python", PYTHON.format(python=python, pip=pip))
        self.runtime_token = "rt-" + os.urandom(12).hex()
        files = {
            name: self.temp / f"_{name.lower()}"
            for name in ("GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH")
        }
        event = root / "event.json"
        event.write_text("{}")
        self.env = {
            "PATH": f"{shims}:{setup_python}:{SECURE_PATH}",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_SERVER_URL": server_url,
            "GITHUB_API_URL": f"{server_url}/api/v3",
            "GITHUB_REPOSITORY": repository,
            "GITHUB_REPOSITORY_OWNER": repository.split("/", maxsplit=1)[0],
            "GITHUB_WORKSPACE": str(self.workspace),
            "GITHUB_EVENT_NAME": "workflow_dispatch",
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_REF": "refs/heads/main",
            "GITHUB_RUN_ID": "4242",
            "GITHUB_JOB": "sandbox",
            "RUNNER_TEMP": str(self.temp),
            "RUNNER_OS": "Linux",
            "RUNNER_ARCH": "X64",
            # Every JavaScript action's runtime token (ACTIONS.md): it must reach no report.
            "ACTIONS_RUNTIME_TOKEN": self.runtime_token,
            **{name: str(path) for name, path in files.items()},
            **(env or {}),
        }

    @staticmethod
    def _script(path: Path, text: str) -> None:
        path.write_text(text)
        path.chmod(0o755)

    # ------------------------------------------------------------------ expressions

    def evaluate(self, value: Any, contexts: Mapping[str, Mapping[str, str]]) -> str:
        """Evaluate the ``${{ context.name }}`` expressions in ``value``."""

        def one(match: re.Match[str]) -> str:
            context, _, name = match[1].partition(".")
            if context not in contexts or name not in contexts[context]:
                raise KeyError(f"the stand-in runner does not know ${{{{ {match[1]} }}}}")
            return contexts[context][name]

        text = str(value).lower() if isinstance(value, bool) else str(value)
        return EXPRESSION.sub(one, text)

    # ------------------------------------------------------------------ workflows

    def run_job(
        self, workflow: Path, job: str, inputs: Mapping[str, str], job_context: Mapping[str, str]
    ) -> JobResult:
        """Run one job of a reusable workflow with ``inputs``; return what happened."""
        spec = yaml.safe_load(workflow.read_text())
        steps = spec["jobs"][job]["steps"]
        contexts = {
            "inputs": dict(inputs),
            "job": dict(job_context),
            "github": {"token": self.token, "workspace": str(self.workspace)},
            "runner": {"temp": str(self.temp)},
        }
        result = JobResult()
        self._steps(steps, contexts, result, action_path=None, composite=False)
        return result

    def run_action(self, action: Path, with_: Mapping[str, str]) -> JobResult:
        """Run a composite action (a folder holding action.yml) with ``with_`` inputs."""
        result = JobResult()
        self._action(action, with_, result)
        return result

    def _action(self, folder: Path, with_: Mapping[str, str], result: JobResult) -> bool:
        spec = yaml.safe_load((folder / "action.yml").read_text())
        assert spec["runs"]["using"] == "composite"
        github = {"token": self.token, "action_path": str(folder), "workspace": str(self.workspace)}
        base = {"github": github, "runner": {"temp": str(self.temp)}}
        inputs: dict[str, str] = {}
        for name, meta in spec.get("inputs", {}).items():
            if name in with_:
                inputs[name] = with_[name]
            elif "default" in meta:
                inputs[name] = self.evaluate(meta["default"], base)
            elif meta.get("required"):
                raise AssertionError(f"input {name} is required and not given")
        unknown = set(with_) - set(inputs)
        assert not unknown, f"inputs the action does not declare: {unknown}"
        contexts = {**base, "inputs": inputs}
        return self._steps(
            spec["runs"]["steps"], contexts, result, action_path=folder, composite=True
        )

    def _steps(
        self,
        steps: list[dict[str, Any]],
        contexts: Mapping[str, Mapping[str, str]],
        result: JobResult,
        *,
        action_path: Path | None,
        composite: bool,
    ) -> bool:
        for step in steps:
            assert "if" not in step, "the stand-in runner does not model if:"
            if "run" in step:
                ok = self._run(step, contexts, result, action_path, composite)
            else:
                ok = self._uses(step, contexts, result)
            if not ok:
                return False
        return True

    def _run(
        self,
        step: dict[str, Any],
        contexts: Mapping[str, Mapping[str, str]],
        result: JobResult,
        action_path: Path | None,
        composite: bool,
    ) -> bool:
        script = step["run"]
        assert "${{" not in script, f"an expression is expanded into the script of {step}"
        shell = step.get("shell")
        assert shell == "bash" or (shell is None and not composite), f"shell {shell!r}"
        env = dict(self.env)
        if action_path is not None:
            env["GITHUB_ACTION_PATH"] = str(action_path)
        env.update({k: self.evaluate(v, contexts) for k, v in step.get("env", {}).items()})
        path = self.temp / f"step-{len(result.steps)}.sh"
        path.write_text(script)
        argv = ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(path)]
        if shell is None:  # the default shell on Linux runners
            argv = ["bash", "-e", str(path)]
        done = subprocess.run(
            argv,
            env=env,
            cwd=self.workspace,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            check=False,
            timeout=900,
        )
        name = step.get("name", script.splitlines()[0])
        result.steps.append(StepResult(name, done.returncode, done.stdout, done.stderr))
        return done.returncode == 0

    def _uses(
        self, step: dict[str, Any], contexts: Mapping[str, Mapping[str, str]], result: JobResult
    ) -> bool:
        uses: str = step["uses"]
        with_ = {k: self.evaluate(v, contexts) for k, v in step.get("with", {}).items()}
        result.uses.append(uses)
        if uses.startswith("./"):
            return self._action(self.workspace / uses[2:], with_, result)
        assert PINNED.match(uses), f"{uses} is not pinned to a commit SHA"
        action = uses.split("@", maxsplit=1)[0]
        if action == "actions/setup-python":
            assert "cache" not in with_, "setup-python must not cache in the sandbox job"
        elif action == "actions/checkout":
            assert with_.get("persist-credentials") == "false", "checkout persists the token"
            target = self.workspace / with_.get("path", ".")
            source = self.git_root / with_["repository"]
            for argv in (
                ["git", "clone", "--quiet", "--no-checkout", str(source), str(target)],
                ["git", "-C", str(target), "checkout", "--quiet", "--detach", with_["ref"]],
            ):
                done = subprocess.run(argv, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    result.steps.append(StepResult(uses, 1, "", done.stderr))
                    return False
        elif action == "actions/upload-artifact":
            folder = Path(with_["path"])
            files = {
                str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()
            }
            if not files and with_.get("if-no-files-found") == "error":
                result.steps.append(StepResult(uses, 1, "", f"No files were found in {folder}"))
                return False
            result.uploads.append(Upload(with_["name"], folder, with_, files))
        else:
            raise AssertionError(f"the stand-in runner has no stand-in for {action}")
        result.steps.append(StepResult(uses, 0))
        return True
