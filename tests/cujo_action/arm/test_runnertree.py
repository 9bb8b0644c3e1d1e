"""The runner's process tree: what a step on a hosted runner sees above and beside it."""

from __future__ import annotations

import ast
import importlib.util
import marshal
import sys
from collections.abc import Iterator

import pytest

from cujo_action.arm.actionsjob import (
    RUNNER_BIN,
    RUNNER_ROOT,
    TEMP,
    WORKER_ARGS,
    worker_processes,
    worker_source,
)
from cujo_action.arm.host import worker_program
from cujo_action.arm.runnertree import NAME_MAX, Proc, count, literal, runner_tree
from cujo_action.sandbox.jail import Worker


def walk(proc: Proc, parents: tuple[Proc, ...] = ()) -> Iterator[tuple[Proc, tuple[Proc, ...]]]:
    yield proc, parents
    for child in proc.children:
        yield from walk(child, (*parents, proc))


def test_pid_1_is_systemd_and_the_worker_sits_below_the_listener_and_the_provisioner() -> None:
    tree = runner_tree(4, RUNNER_ROOT, RUNNER_BIN)
    assert (tree.name, tree.argv) == ("systemd", ("/sbin/init",))
    (worker, parents) = next((p, up) for p, up in walk(tree) if p.argv is None)
    assert [p for p, _ in walk(tree) if p.argv is None] == [worker]  # one worker only
    assert (worker.name, worker.children) == ("Runner.Worker", ())
    assert [(p.name, p.argv) for p in parents] == [
        ("systemd", ("/sbin/init",)),
        (
            "provisioner",
            (
                "/opt/runner/provisioner/provisioner",
                "--agentdirectory",
                "/home/runner/runners",
                "--settings",
                "/opt/runner/provisioner/.settings",
            ),
        ),
        ("Runner.Listener", (f"{RUNNER_BIN}/Runner.Listener", "run")),
    ]
    # The worker's line is started last, so the runner's processes have the highest pids.
    assert tree.children[-1].name == "provisioner"


def test_kernel_threads_come_first_under_kthreadd_once_per_cpu() -> None:
    two, four = (runner_tree(cpus, RUNNER_ROOT, RUNNER_BIN) for cpus in (2, 4))
    kthreadd = four.children[0]
    assert (kthreadd.name, kthreadd.argv) == ("kthreadd", ())
    assert all(t.argv == () and not t.children for t in kthreadd.children)
    names = [t.name for t in kthreadd.children]
    assert [n for n in names if n.startswith("ksoftirqd/")] == [f"ksoftirqd/{n}" for n in range(4)]
    assert "kworker/u8:0" in names
    assert len(names) == len(set(names))
    # Each CPU more is as many threads more; nothing else changes.
    per_cpu = (count(four) - count(two)) // 2
    assert per_cpu == sum(1 for n in names if n.endswith("/3") or n.startswith("kworker/3:"))
    assert [c.name for c in two.children[1:]] == [c.name for c in four.children[1:]]


def test_services_are_the_images_with_their_units_command_lines() -> None:
    tree = runner_tree(2, RUNNER_ROOT, RUNNER_BIN)
    services = {p.name: p for p in tree.children[1:-1]}
    assert services["systemd-journal"].argv == ("/usr/lib/systemd/systemd-journald",)
    assert services["dockerd"].argv is not None
    assert services["dockerd"].argv[0] == "/usr/bin/dockerd"
    waagent = services["python3"]
    assert waagent.argv == ("/usr/bin/python3", "-u", "/usr/sbin/waagent", "-daemon")
    assert [c.argv for c in waagent.children] == [
        ("python3", "-u", "/usr/sbin/waagent", "-run-exthandlers")
    ]
    # A process keeps NAME_MAX bytes of its name: a service's name is what the kernel
    # shows of its executable's (systemd-journald shows as systemd-journal).
    for proc, _ in walk(tree):
        if proc.argv and proc not in tree.children[-1:]:
            assert len(proc.name) <= NAME_MAX, proc.name


def test_the_count_is_every_process_and_the_literal_keeps_the_shape() -> None:
    tree = runner_tree(4, RUNNER_ROOT, RUNNER_BIN)
    assert count(tree) == sum(1 for _ in walk(tree))
    assert count(tree) >= 100  # the profile's `processes` with the step's own few
    shape = literal(tree)
    assert shape[:2] == ("systemd", ("/sbin/init",))
    assert ast.literal_eval(repr(shape)) == shape


def test_the_workers_program_holds_the_tree_and_the_scripts_folder() -> None:
    source = worker_source(cpus=4)
    assigned = {
        node.targets[0].id: node.value
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("TREE", "SCRIPTS")
    }
    tree = runner_tree(4, RUNNER_ROOT, RUNNER_BIN)
    # The last assignment wins: the appended values, not the file's placeholders.
    assert ast.literal_eval(assigned["TREE"]) == literal(tree)
    assert ast.literal_eval(assigned["SCRIPTS"]) == TEMP
    assert worker_processes(4) == count(tree)


def test_each_step_brings_its_jobs_message_in_hex() -> None:
    message = b'{"value":"x"}'
    worker = Worker("/usr/bin/python3", "/w", ("spawnclient", "107"), "/", (), b"", 1, message)
    step = worker.step("true", "/home/runner/work", {"CI": "true"}, 3)
    # No copy of the message in the step's text: it is in hex, decoded by the worker.
    assert b'"value"' not in step
    assert marshal.loads(step) == {
        "argv": ["/bin/bash", "-c", "true"], "cwd": "/home/runner/work", "env": {"CI": "true"},
        "status_fd": 3, "message": message.hex(),
    }  # fmt: skip


def test_the_program_is_compiled_once_by_the_interpreter_that_runs_it() -> None:
    source = worker_source(cpus=2)
    program = worker_program(sys.executable, source)
    # A .pyc's bytes, which Python runs whatever the file is called: this interpreter's
    # magic number, then the code as compile() makes it, ending by calling main.
    assert program[:4] == importlib.util.MAGIC_NUMBER
    code = marshal.loads(program[16:])
    assert code == compile(source, f"{RUNNER_BIN}/{WORKER_ARGS[0]}", "exec")
    assert ast.unparse(ast.parse(source).body[-1]) == "main()"
    # No program where the interpreter cannot compile it: no worker, rather than a
    # pid 1 that fails every command.
    assert worker_program("/nonexistent/python3", source) == b""
    assert worker_program(sys.executable, b"def (") == b""


def test_a_machine_with_many_cpus_costs_no_more_than_a_large_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 96)
    assert worker_processes() == count(runner_tree(16, RUNNER_ROOT, RUNNER_BIN))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert worker_processes() == count(runner_tree(2, RUNNER_ROOT, RUNNER_BIN))
