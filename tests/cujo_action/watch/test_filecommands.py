"""The step's file commands: read as the runner reads them, judged by an allow-list, and
read by root without following anything the pull request's code could have planted."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from cujo_action.find.decoys import make_decoys
from cujo_action.find.matcher import DecoyMatcher
from cujo_action.sandbox.boundary import read_file_below
from cujo_action.schema import DECOY_IN_OUTPUT, WORKFLOW_COMMAND_WRITE
from cujo_action.watch import filecommand_scan
from cujo_action.watch.filecommand_scan import FileCommandScan
from cujo_action.watch.filecommands import DATA_ONLY, env_writes, judge, parse_env, path_writes

DECOYS = make_decoys()
MATCHER = DecoyMatcher(DECOYS)
TOKEN = next(d for d in DECOYS if d.name == "GITHUB_TOKEN").value
FOLDER = "work/_temp/_runner_file_commands"
FILES = {
    "GITHUB_ENV": f"{FOLDER}/set_env_1",
    "GITHUB_PATH": f"{FOLDER}/add_path_1",
    "GITHUB_OUTPUT": f"{FOLDER}/set_output_1",
    "GITHUB_STATE": f"{FOLDER}/save_state_1",
    "GITHUB_STEP_SUMMARY": f"{FOLDER}/step_summary_1",
}


def twice(text: str) -> str:
    return base64.b64encode(base64.b64encode(text.encode())).decode()


# --------------------------------------------------------------------------- the format

# The runner's own cases (actions/runner src/Test/L0/Worker/SetEnvFileCommandL0.cs), each
# written there with a byte-order mark and lines joined by "\n" on Linux: what it sets.
RUNNER_CASES = [
    (["", "MY_ENV=my value", "", "MY_ENV_2=my second value", ""],
     [("MY_ENV", "my value"), ("MY_ENV_2", "my second value")]),
    (["MY_ENV="], [("MY_ENV", "")]),
    (["MY_ENV==abc", "MY_ENV_2=def=ghi", "MY_ENV_3=jkl="],
     [("MY_ENV", "=abc"), ("MY_ENV_2", "def=ghi"), ("MY_ENV_3", "jkl=")]),
    (["MY_ENV<<EOF", "line one", "line two", "line three", "EOF"],
     [("MY_ENV", "line one\nline two\nline three")]),
    (["MY_ENV<<EOF", "EOF"], [("MY_ENV", "")]),
    (["MY_ENV<<=EOF", "hello", "one", "=EOF", "MY_ENV_2<<<EOF", "hello", "two", "<EOF",
      "MY_ENV_3<<EOF", "hello", "", "three", "", "EOF", "MY_ENV_4<<EOF", "hello=four", "EOF",
      "MY_ENV_5<<EOF", " EOF", "EOF"],
     [("MY_ENV", "hello\none"), ("MY_ENV_2", "hello\ntwo"), ("MY_ENV_3", "hello\n\nthree\n"),
      ("MY_ENV_4", "hello=four"), ("MY_ENV_5", " EOF")]),
]  # fmt: skip


@pytest.mark.parametrize(("lines", "entries"), RUNNER_CASES)
def test_the_env_file_is_read_as_the_runners_own_tests_expect(
    lines: list[str], entries: list[tuple[str, str]]
) -> None:
    parsed = parse_env("\ufeff" + "\n".join(lines))
    assert parsed.error == ""
    assert list(parsed.entries) == entries


def test_the_runner_stops_at_a_line_it_cannot_read_having_set_what_came_before() -> None:
    parsed = parse_env("A=1\nnot a command\nGIT_PAGER=/x\n")
    assert parsed.entries == (("A", "1"),)
    assert "not a command" in parsed.error
    unclosed = parse_env("A=1\nBODY<<EOF\nGIT_PAGER=/x\n")
    assert unclosed.entries == (("A", "1"),)
    assert "never closes" in unclosed.error
    # "=" before "<<": a plain value that holds "<<"; "<<" first: a delimiter holding "=".
    assert parse_env("A=x<<y\n").entries == (("A", "x<<y"),)
    assert parse_env("A<<E=F\nv\nE=F\n").entries == (("A", "v"),)


# --------------------------------------------------------------------------- the allow-list


@pytest.mark.parametrize(
    "name",
    ["GIT_EXTERNAL_DIFF", "XDG_CONFIG_HOME", "GIT_PAGER", "GCONV_PATH", "RUSTC_WRAPPER",
     "LD_PRELOAD", "NODE_OPTIONS", "PYTHONPATH", "PYENV_VERSION", "PYTHONWARNINGS",
     "PYTEST_ADDOPTS", "version", "Version", "MY_PROJECT_MODE"],
)  # fmt: skip
def test_any_name_not_on_the_allow_list_counts(name: str) -> None:
    assert env_writes("", f"VERSION=1\n{name}=/tmp/x\n") == [
        f"$GITHUB_ENV sets {name} for later steps (not a data-only name)"
    ]


def test_data_only_names_and_values_already_there_do_not_count() -> None:
    text = "\n".join(f"{name}=1" for name in sorted(DATA_ONLY)) + "\n"
    assert env_writes("", text) == []
    assert env_writes("GIT_PAGER=cat\n", "GIT_PAGER=cat\nVERSION=2\n") == []
    # The same name with another value is a new setting.
    assert env_writes("GIT_PAGER=cat\n", "GIT_PAGER=cat\nGIT_PAGER=/tmp/p\n") == [
        "$GITHUB_ENV sets GIT_PAGER for later steps (not a data-only name)"
    ]
    # A line of a multi-line value is a value, never a name.
    assert env_writes("", "RELEASE_NAME<<EOF\nLD_PRELOAD=/x.so\nEOF\n") == []


def test_every_folder_added_to_the_path_counts_once() -> None:
    added = path_writes("/usr/local/x\n", "/usr/local/x\n/tmp/a\r\n\n /tmp/b\r/tmp/a\n")
    assert added == [
        "$GITHUB_PATH puts /tmp/a first on later steps' PATH",
        "$GITHUB_PATH puts  /tmp/b first on later steps' PATH",
    ]
    assert judge("GITHUB_OUTPUT", "", "GIT_PAGER=/x\n") == []  # outputs set no variable


# --------------------------------------------------------------------------- the scan


def staged(tmp_path: Path) -> Path:
    """Return a HOME holding the five empty files, as arm leaves them."""
    home = tmp_path / "home"
    (home / FOLDER).mkdir(parents=True)
    for rel in FILES.values():
        (home / rel).write_text("")
    return home


def test_decoys_in_any_file_command_and_risky_settings_are_found_once(tmp_path: Path) -> None:
    home = staged(tmp_path)
    scan = FileCommandScan(home, FILES, MATCHER)
    blob = twice(json.dumps({"GITHUB_TOKEN": TOKEN}))
    (home / FILES["GITHUB_STEP_SUMMARY"]).write_text(f"## Results\n\n| a | b |\n{blob}\n")
    (home / FILES["GITHUB_OUTPUT"]).write_text(f"result=ok\ndata={blob}\n")
    (home / FILES["GITHUB_ENV"]).write_text("VERSION=1\nGIT_EXTERNAL_DIFF=/tmp/x\n")
    (home / FILES["GITHUB_PATH"]).write_text("/home/runner/.implant/bin\n")

    look = scan.look("`pytest`")

    assert look.cuts == []
    assert [(w.kind, w.detail, w.path) for w in look.written] == [
        (WORKFLOW_COMMAND_WRITE,
         "$GITHUB_ENV sets GIT_EXTERNAL_DIFF for later steps (not a data-only name), after "
         "`pytest`", None),
        (WORKFLOW_COMMAND_WRITE,
         "$GITHUB_PATH puts /home/runner/.implant/bin first on later steps' PATH, after "
         "`pytest`", None),
        (DECOY_IN_OUTPUT, "GITHUB_TOKEN (base64+base64) in $GITHUB_OUTPUT after `pytest`",
         "$GITHUB_OUTPUT"),
        (DECOY_IN_OUTPUT, "GITHUB_TOKEN (base64+base64) in $GITHUB_STEP_SUMMARY after `pytest`",
         "$GITHUB_STEP_SUMMARY"),
    ]  # fmt: skip
    # Each is said once: a later command that leaves it there, or adds to it, adds nothing.
    with (home / FILES["GITHUB_OUTPUT"]).open("a") as out:
        out.write("more=1\n")
    assert scan.look("`pytest -k x`").written == []


def test_benign_writes_are_not_reported(tmp_path: Path) -> None:
    home = staged(tmp_path)
    scan = FileCommandScan(home, FILES, MATCHER)
    (home / FILES["GITHUB_OUTPUT"]).write_text("result=ok\ncoverage=97\n")
    (home / FILES["GITHUB_STEP_SUMMARY"]).write_text(
        "### Tests\n\n| suite | passed |\n|---|---|\n| unit | 12 |\n"
        + base64.b64encode(os.urandom(3000)).decode()
        + "\n"
    )
    (home / FILES["GITHUB_ENV"]).write_text("VERSION=0.1\n")
    assert scan.look("`pytest`") == filecommand_scan.Look()


# --------------------------------------------------------------------------- attacks on root


def test_a_file_command_swapped_for_a_link_to_a_root_only_file_is_named_never_read(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "root-only"
    secret.write_text(f"GIT_PAGER=/x\n{TOKEN}\n")
    secret.chmod(0o600)
    home = staged(tmp_path)
    scan = FileCommandScan(home, FILES, MATCHER)
    summary = home / FILES["GITHUB_STEP_SUMMARY"]
    summary.unlink()
    summary.symlink_to(secret)

    read = read_file_below(home, FILES["GITHUB_STEP_SUMMARY"], 1024)
    assert read is not None
    assert (read.not_regular, read.data, read.size) == ("a symbolic link", b"", 0)

    (written,) = scan.look("`pytest`").written

    # Named as what it is; nothing of the file it points to was read (no decoy found).
    assert written.kind == WORKFLOW_COMMAND_WRITE
    assert written.detail.startswith("$GITHUB_STEP_SUMMARY is a symbolic link, not the file")
    assert scan.look("`pytest -x`").written == []  # said once


def test_an_oversized_file_is_read_to_the_cap_and_the_rest_is_a_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = staged(tmp_path)
    monkeypatch.setattr(filecommand_scan, "FILE_COMMAND_READ", 4096)
    scan = FileCommandScan(home, FILES, MATCHER)
    summary = home / FILES["GITHUB_STEP_SUMMARY"]
    with summary.open("w") as out:
        out.write(f"{twice(TOKEN)}\n")
        out.truncate(1 << 34)  # 16 GiB, sparse: only the head is ever read

    look = scan.look("`pytest`")

    (cut,) = look.cuts
    assert cut.limit == "file-command-read"
    assert (cut.kept, cut.dropped) == (4096, (1 << 34) - 4096)
    assert cut.detail.startswith(f"$GITHUB_STEP_SUMMARY held {1 << 34} bytes after `pytest`")
    # What was read was still searched: the decoy at its head is found.
    assert [w.kind for w in look.written] == [DECOY_IN_OUTPUT]


def test_what_is_carried_to_a_workflow_jobs_later_steps_is_never_read_through_a_link(
    tmp_path: Path,
) -> None:
    # The workflow runner carries GITHUB_ENV on to later steps from what the scan read:
    # a file swapped for a link to a root-only file carries nothing of it.
    secret = tmp_path / "root-only"
    secret.write_text("LD_PRELOAD=/root/x.so\n")
    secret.chmod(0o600)
    home = staged(tmp_path)
    scan = FileCommandScan(home, FILES, MATCHER)
    env = home / FILES["GITHUB_ENV"]
    env.write_text("URL=https://drop.test\n")
    scan.look("`step 1`")
    assert scan.current["GITHUB_ENV"] == "URL=https://drop.test\n"
    env.unlink()
    env.symlink_to(secret)
    scan.look("`step 2`")
    assert "GITHUB_ENV" not in scan.current
    env.unlink()
    scan.look("`step 3`")
    assert "GITHUB_ENV" not in scan.current
