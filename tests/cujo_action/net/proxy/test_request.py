"""A transparent request is named by its SNI, else its Host; a fronted one is flagged."""

from __future__ import annotations

from cujo_action.net.proxy.request import host_header_name, transparent_name


def test_transparent_name_prefers_sni_and_flags_fronting() -> None:
    assert host_header_name("example.test:8080") == "example.test"
    assert host_header_name("[::1]:443") == "::1"
    assert host_header_name("example.test") == "example.test"
    assert transparent_name("a.test", "a.test:443", "10.0.0.1") == ("a.test", False)
    assert transparent_name(None, "b.test", "10.0.0.1") == ("b.test", False)
    assert transparent_name(None, None, "10.0.0.1") == ("10.0.0.1", False)
    # SNI names a registry, Host another host: never forwarded.
    assert transparent_name("pypi.org", "evil.test", "10.0.0.1") == ("pypi.org", True)
    assert transparent_name("PyPI.org", "pypi.org.", "10.0.0.1") == ("PyPI.org", False)
