"""Naming processes for evidence: the sandbox's only, as the kernel shows them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from sandboxes import sandboxes_for

from cujo_action.sandbox.jail import run_confined
from cujo_action.watch.procinfo import Proc, describe, sandbox_namespaces, socket_owner

ROOT = os.geteuid() == 0
PYTHON = "/usr/bin/python3"  # one the sandbox's uid may run


def test_the_harnesss_own_sockets_and_parents_are_never_named() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    try:
        address, port = client.getsockname()
        # Not a sandbox uid: the harness's (and anyone else's) processes are not looked at.
        assert socket_owner(address, port) is None
    finally:
        client.close()
        server.close()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = describe(child.pid)
        for _ in range(1000):  # until it has exec'd
            if found.cmdline:
                break
            found = describe(child.pid)
        assert found.exe is not None
        assert found.cmdline.endswith("time.sleep(30)")
        assert found.parents == ()  # its parent is this test: not the sandbox's
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(not ROOT, reason="needs root: a sandbox uid of its own")
def test_a_sandbox_process_holding_a_connection_is_named() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(20)
    port = server.getsockname()[1]
    found: list[Proc | None] = []
    read: list[dict[int, list[int]]] = []

    def accept() -> None:
        conn, peer = server.accept()
        found.append(socket_owner(*peer))  # while the client holds it
        # One reading of /proc serves every address tried; an empty one names nobody.
        among = sandbox_namespaces()
        read.append(among)
        found.append(socket_owner(*peer, among=among))
        found.append(socket_owner(*peer, among={}))
        conn.close()

    # The sandbox uid must pass through every parent of its home: pytest's are 0700.
    top = Path(tempfile.mkdtemp(prefix="cujo-procinfo-"))
    top.chmod(0o711)
    made = sandboxes_for(top)
    boxes = next(made)
    waiter = threading.Thread(target=accept)
    try:
        box = boxes.make(view=False)
        waiter.start()
        code = (
            f"import socket,time; s=socket.create_connection(('127.0.0.1',{port})); time.sleep(3)"
        )
        run_confined(
            f'{PYTHON} -c "{code}"; true',  # bash stays, the parent
            cwd=box.home, env={"PATH": "/usr/bin:/bin"}, timeout=30, confinement=box.confinement,
        )  # fmt: skip
        waiter.join()
    finally:
        server.close()
        next(made, None)
        shutil.rmtree(top, ignore_errors=True)
    proc, shared, unread = found
    assert proc is not None
    assert shared == proc
    assert unread is None
    (among,) = read
    (namespace,) = [pids for pids in among.values() if proc.pid in pids]
    assert namespace == sorted(namespace, reverse=True)  # newest first
    assert int(proc.parents[0].split(" ", 1)[0]) in namespace
    assert proc.cmdline.startswith(PYTHON), proc
    assert proc.parents[0].split(" ", 1)[1].endswith("bash"), proc


def test_what_started_a_process_is_read_from_its_command_line_and_settings(tmp_path: Path) -> None:
    cases = [
        ({"npm_lifecycle_event": "postinstall", "npm_package_name": "left-pad-ng"},
         ["sleep", "30"], "the npm postinstall script of left-pad-ng"),
        ({}, [sys.executable, "-c", "import time; time.sleep(30)  # setup.py"],
         f"the build of {tmp_path.name} (setup.py or its build backend)"),
        ({}, ["sh", "-c", "sleep 30", "-m", "pytest"], "the test suite (pytest)"),
        ({"PYTEST_CURRENT_TEST": "tests/test_x.py::test_y (call)"}, ["sleep", "30"],
         "the test tests/test_x.py::test_y"),
        ({}, ["sleep", "30"], ""),
    ]  # fmt: skip
    for env, argv, want in cases:
        child = subprocess.Popen(argv, env={"PATH": "/usr/bin:/bin", **env}, cwd=tmp_path)
        try:
            found = describe(child.pid)
            for _ in range(1000):  # until it has exec'd
                if found.cmdline.startswith(argv[0]):
                    break
                found = describe(child.pid)
            assert found.origin == want, (argv, env, found)
        finally:
            child.kill()
            child.wait()
