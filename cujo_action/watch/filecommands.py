"""Judge what a step leaves in its file commands for the runner to act on after it.

A step is handed five files (GitHub's "Workflow commands for GitHub Actions", environment
files); after the step the runner reads each, as the runner's user, following links
(actions/runner ``src/Runner.Worker/FileCommandManager.cs``):

=======================  ==================================================================
``GITHUB_STEP_SUMMARY``  Markdown shown on the run's page, public like the log
``GITHUB_OUTPUT``        values later steps, jobs and workflows read (``steps.<id>.outputs``)
``GITHUB_STATE``         values the action's post step gets (``STATE_<name>``)
``GITHUB_ENV``           variables set for every later step of the job
``GITHUB_PATH``          folders put first on every later step's ``PATH``
=======================  ==================================================================

After each pull-request command the harness reads them (``filecommand_scan.py``) and
searches each for the decoys as output is searched (``output.py``): a decoy written there
is ``decoy_in_output``, naming the file. What ``GITHUB_ENV`` and ``GITHUB_PATH`` now set
for later steps is judged here (``workflow_command_write``): every folder put on the
``PATH`` is a program search path, and a variable counts unless its name is in
``DATA_ONLY``. An allow-list, not a deny-list: a name nobody listed (``GIT_EXTERNAL_DIFF``,
``XDG_CONFIG_HOME``, ``GCONV_PATH``, ``RUSTC_WRAPPER``) counts. Pure: text in, details out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

# The file commands whose content changes what later steps run.
JUDGED: Final = ("GITHUB_ENV", "GITHUB_PATH")
# Names a step may hand to later steps as data: no program, loader, shell, interpreter or
# package manager reads them to choose what runs, where a program, library, plugin or
# configuration is found, or where it connects. Matched exactly (case matters, as it does
# to the programs). A project whose tests set another name gets a finding to dismiss;
# the other way round, a variable that runs something would pass unseen.
DATA_ONLY: Final = frozenset(
    {
        # What was built, from what, and when.
        "VERSION", "TAG", "SHA", "SHORT_SHA", "COMMIT", "COMMIT_SHA", "REF", "BRANCH",
        "RELEASE", "RELEASE_TAG", "RELEASE_VERSION", "RELEASE_NAME", "PACKAGE_NAME",
        "PACKAGE_VERSION", "PKG_VERSION", "APP_VERSION", "IMAGE_TAG", "IMAGE_NAME",
        "ARTIFACT_NAME", "CACHE_KEY", "PR_NUMBER", "BUILD_NUMBER", "BUILD_ID", "BUILD_DATE",
        "DATE", "TIMESTAMP", "SOURCE_DATE_EPOCH", "SETUPTOOLS_SCM_PRETEND_VERSION",
        # Results passed on (coverage's data file holds data, read as data).
        "RESULT", "STATUS", "COVERAGE", "COVERAGE_FILE",
        # How output looks: switches and numbers, never a name of something to load.
        "CI", "FORCE_COLOR", "NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "PY_COLORS",
        "COLUMNS", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED",
        "PYTHONFAULTHANDLER", "PYTHONUTF8",
    }
)  # fmt: skip
_LINE_BREAKS = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class EnvFile:
    """A ``GITHUB_ENV`` file (or ``GITHUB_OUTPUT``, ``GITHUB_STATE``) as the runner reads it.

    ``entries`` in the order set; ``error`` says why the runner would stop reading where
    it did (it fails the step there, having set what came before), "" when it read all.
    """

    entries: tuple[tuple[str, str], ...]
    error: str = ""


def parse_env(text: str) -> EnvFile:
    """Read ``NAME=value`` lines and ``NAME<<DELIMITER`` blocks as the runner does.

    As on Linux runners: lines end at ``\\n`` only; an empty line is skipped; a line whose
    first ``=`` comes before any ``<<`` is ``NAME=value`` (the value may hold ``<<``), one
    whose ``<<`` comes first opens a value that runs to the line equal to the delimiter.
    """
    entries: list[tuple[str, str]] = []
    # .NET's File.ReadAllText drops a byte-order mark (the runner's own tests write one).
    lines = text.removeprefix("\ufeff").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the text ended with a line break: no line after it
    n = 0
    while n < len(lines):
        line = lines[n]
        n += 1
        if not line:
            continue
        equals, heredoc = line.find("="), line.find("<<")
        if equals >= 0 and (heredoc < 0 or equals < heredoc):
            name, _, value = line.partition("=")
            if not name:
                return EnvFile(tuple(entries), f"a line without a name: {line[:80]!r}")
            entries.append((name, value))
        elif heredoc >= 0:
            name, _, delimiter = line.partition("<<")
            if not name or not delimiter:
                return EnvFile(tuple(entries), f"a name or delimiter missing: {line[:80]!r}")
            try:
                end = lines.index(delimiter, n)
            except ValueError:
                return EnvFile(tuple(entries), f"{name}'s delimiter never closes its value")
            entries.append((name, "\n".join(lines[n:end])))
            n = end + 1
        else:
            return EnvFile(tuple(entries), f"neither NAME=value nor NAME<<EOF: {line[:80]!r}")
    return EnvFile(tuple(entries))


def env_writes(before: str, after: str) -> list[str]:
    """Return what ``GITHUB_ENV`` newly sets for later steps that is not data, one each."""
    old = set(parse_env(before).entries)
    names = {name for name, value in parse_env(after).entries if (name, value) not in old}
    return [
        f"$GITHUB_ENV sets {name[:100]} for later steps (not a data-only name)"
        for name in sorted(names - DATA_ONLY)
    ]


def path_writes(before: str, after: str) -> list[str]:
    """Return each folder ``GITHUB_PATH`` newly puts first on later steps' ``PATH``.

    As the runner reads it (.NET's ``File.ReadAllLines``, a byte-order mark dropped): lines
    end at ``\\r\\n``, ``\\r`` or ``\\n``; only an empty line is skipped (spaces make a
    folder's name).
    """
    old = set(_LINE_BREAKS.split(before.removeprefix("\ufeff")))
    lines = _LINE_BREAKS.split(after.removeprefix("\ufeff"))
    added = dict.fromkeys(line for line in lines if line and line not in old)
    return [f"$GITHUB_PATH puts {folder[:200]} first on later steps' PATH" for folder in added]


def judge(var: str, before: str, after: str) -> list[str]:
    """Return what a file command now makes later steps run differently (empty: nothing)."""
    if var == "GITHUB_ENV":
        return env_writes(before, after)
    if var == "GITHUB_PATH":
        return path_writes(before, after)
    return []


def not_regular(var: str, what: str) -> str:
    """Return why a file command that is no longer a file of its own counts."""
    return (
        f"${var} is {what}, not the file the runner made: the runner reads whatever it "
        "leads to, following links"
    )
