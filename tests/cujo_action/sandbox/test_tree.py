"""The sandbox's tree: covered folders name nothing of Cujo; the image's folders are there."""

from __future__ import annotations

from cujo_action.sandbox.tree import SYSTEMD, covered, image_args, neutral_cover

COVER = ["/dev/shm", "/home", "/run", "/tmp"]


def test_a_hidden_folder_named_after_cujo_is_covered_from_above() -> None:
    assert neutral_cover("/work/main/cujo_action") == "/work/main"
    assert neutral_cover("/data/Cujo-Harness/venv") == "/data"
    assert neutral_cover("/work/main/.venv") == "/work/main/.venv"  # names nothing
    # Never a system folder whole: what the sandbox runs needs it (the name then shows).
    assert neutral_cover("/usr/lib/python3/dist-packages/cujo_action") == (
        "/usr/lib/python3/dist-packages/cujo_action"
    )
    assert neutral_cover("/opt/cujo/venv") == "/opt/cujo/venv"
    assert neutral_cover("/cujo") == "/cujo"


def test_covered_folders_are_sorted_and_none_lies_under_another() -> None:
    assert covered(["/tmp/x", "/run", "/tmp", "/work/main", "/work/main/.venv", "/runner"]) == [
        "/run",
        "/runner",
        "/tmp",
        "/work/main",
    ]


def test_image_folders_under_covered_ones_are_made_and_the_host_is_never_bound_for_systemd() -> (
    None
):
    args, sources = image_args(COVER, has=lambda p: False, real_folder=lambda p: "/run", empty_fd=7)
    assert sources == []
    assert args[:2] == ["--dir", "/home/linuxbrew/.linuxbrew/bin"]
    for folder in SYSTEMD:
        assert ["--dir", folder] == args[args.index(folder) - 1 : args.index(folder) + 1]
    assert args[-5:] == ["--perms", "0660", "--file", "7", "/run/docker.sock"]
    # Where the host has them: linuxbrew bound read-only from it; systemd and docker never.
    args, sources = image_args(COVER, has=lambda p: True, real_folder=lambda p: "/run", empty_fd=7)
    assert sources == ["/home/linuxbrew"]
    assert args[:3] == ["--ro-bind", "/home/linuxbrew", "/home/linuxbrew"]
    assert args.count("--ro-bind") == 1
    assert "--bind" not in args


def test_nothing_is_made_where_the_root_shows_the_host_or_where_no_file_can_be() -> None:
    # Not under a covered folder: the read-only root shows the host's, or nothing.
    args, _ = image_args(["/tmp"], has=lambda p: False, real_folder=lambda p: p, empty_fd=7)
    assert args == []
    # /var/run a folder of its own (not a link to /run): it is the host's, read-only.
    args, _ = image_args(COVER, has=lambda p: False, real_folder=lambda p: p, empty_fd=7)
    assert "/var/run/docker.sock" not in args
    assert "--file" not in args
    args, _ = image_args(COVER, has=lambda p: False, real_folder=lambda p: "/run", empty_fd=-1)
    assert "--file" not in args
