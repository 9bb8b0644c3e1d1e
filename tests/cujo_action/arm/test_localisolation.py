"""Which isolation a machine gives, reasoned over fake readings of /proc/sys and tools."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cujo_action.arm.localisolation import (
    ROOT_TOOLS,
    ROOTLESS_TOOLS,
    Readings,
    local_isolation,
)

# A laptop as Ubuntu 22.04 ships it: user namespaces on, no AppArmor switch, bwrap 0.8.
LAPTOP = Readings(
    root=False,
    unprivileged_userns_clone="1\n",
    max_user_namespaces="63229\n",
    apparmor_restrict=None,
    bwrap_version="0.8.0",
    tools=frozenset(ROOTLESS_TOOLS),
)


def test_an_ordinary_user_with_user_namespaces_and_bubblewrap_gets_full_isolation() -> None:
    found = local_isolation(LAPTOP)
    assert (found.isolation, found.how, found.why, found.fix) == ("full", "rootless", "", "")


def test_a_newer_bubblewrap_and_a_kernel_without_the_debian_switch_are_full() -> None:
    found = local_isolation(replace(LAPTOP, unprivileged_userns_clone=None, bwrap_version="0.11.0"))
    assert found.isolation == "full"


@pytest.mark.parametrize(
    ("change", "why", "fix"),
    [
        (
            {"unprivileged_userns_clone": "0\n"},
            "unprivileged user namespaces are off (kernel.unprivileged_userns_clone=0)",
            "sudo sysctl -w kernel.unprivileged_userns_clone=1",
        ),
        (
            {"max_user_namespaces": "0\n"},
            "user namespaces are off (user.max_user_namespaces=0)",
            "sudo sysctl -w user.max_user_namespaces=15000",
        ),
        (
            {"apparmor_restrict": "1\n"},
            "AppArmor restricts unprivileged user namespaces "
            "(kernel.apparmor_restrict_unprivileged_userns=1)",
            "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
        ),
        (
            {"bwrap_version": None},
            "`bwrap` is not installed (bubblewrap)",
            "sudo apt-get install bubblewrap",
        ),
        (
            {"bwrap_version": "0.6.1"},
            "bubblewrap 0.6.1 is older than 0.8 (no --disable-userns)",
            "sudo apt-get install --only-upgrade bubblewrap",
        ),
        (
            {"bwrap_version": ""},
            "bubblewrap ? is older than 0.8 (no --disable-userns)",
            "sudo apt-get install --only-upgrade bubblewrap",
        ),
        (
            {"tools": frozenset({"unshare", "nsenter", "ip"})},
            "`nft` is not installed (nftables)",
            "sudo apt-get install nftables",
        ),
    ],
)
def test_each_missing_piece_is_named_with_the_one_command_that_fixes_it(
    change: dict[str, object], why: str, fix: str
) -> None:
    found = local_isolation(replace(LAPTOP, **change))  # type: ignore[arg-type]
    assert (found.isolation, found.how, found.why, found.fix) == (
        "partial",
        "proxy variables only",
        why,
        fix,
    )


def test_the_kernel_switch_is_named_before_the_tools() -> None:
    # Installing bubblewrap would not help while the kernel says no: the first fix is its.
    found = local_isolation(
        replace(LAPTOP, apparmor_restrict="1", bwrap_version=None, tools=frozenset())
    )
    assert "apparmor" in found.fix


def test_root_needs_its_own_tools_and_not_user_namespaces() -> None:
    root = Readings(root=True, unprivileged_userns_clone="0", tools=frozenset(ROOT_TOOLS))
    assert (local_isolation(root).isolation, local_isolation(root).how) == ("full", "root")
    no_setpriv = replace(root, tools=frozenset({"ip", "nft"}))
    found = local_isolation(no_setpriv)
    assert (found.isolation, found.fix) == ("partial", "sudo apt-get install util-linux")


def test_asking_for_partial_wins_over_everything() -> None:
    found = local_isolation(replace(LAPTOP, asked_partial=True))
    assert found.isolation == "partial"
    assert found.why == "CUJO_ISOLATION=partial asked for proxy variables only"
