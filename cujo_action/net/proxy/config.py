"""Describe one logging proxy: what it listens on, forwards, looks for, writes and answers."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cujo_action.net.helperconfig import DecoySpec, checked_labels
from cujo_action.net.lookalike.github_facts import GitHubFacts
from cujo_action.schema import REGISTRY_HOSTS

SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")
# The run's CA, minted by the proxy process in its confdir (proxy.disguise.write_run_ca)
# under the names mitmproxy loads an existing CA by: its key and certificate, and its
# certificate alone. The names stay in the harness's confdir; the sandbox sees only the
# system bundle with the CA appended.
CA_KEY_NAME = "mitmproxy-ca.pem"
CA_CERT_NAME = "mitmproxy-ca-cert.pem"


class ProxyConfig(BaseModel):
    """What one proxy process listens on, forwards, looks for and writes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    listen_host: str = "127.0.0.1"
    labels: list[str] = Field(min_length=1)
    # Fixed ports by label; a label missing here gets a free port picked at start.
    ports: dict[str, int] = Field(default_factory=dict)
    confdir: Path
    allow_hosts: list[str] = Field(default_factory=lambda: list(REGISTRY_HOSTS))
    # Hosts only read through the proxy (GET and HEAD); any other method is answered here.
    registry_hosts: list[str] = Field(default_factory=lambda: list(REGISTRY_HOSTS))
    upstream_ca: Path = SYSTEM_CA
    decoys: list[DecoySpec] = Field(default_factory=list)
    log_path: Path
    ready_path: Path
    # Also listen transparently, one port per label (fixed here, or picked at start).
    transparent: bool = False
    transparent_ports: dict[str, int] = Field(default_factory=dict)
    # Without root (net/ns/rootless.py) the transparent listeners are regular ones that only
    # the harness's relay reaches, each connection opened by a CONNECT to its original
    # destination: treated as a transparent connection to that address.
    relayed: bool = False
    # Where the logging resolver writes which name it gave each address out for: a
    # transparent connection to such an address is logged under that name.
    names_path: Path | None = None
    # The decoy job as GitHub would know it, for the answers api.github.com gives.
    github: GitHubFacts = Field(default_factory=GitHubFacts)

    @field_validator("labels")
    @classmethod
    def _labels_are_check_phase(cls, labels: list[str]) -> list[str]:
        return checked_labels(labels)

    @field_validator("ports", "transparent_ports")
    @classmethod
    def _ports_in_range(cls, ports: dict[str, int]) -> dict[str, int]:
        for label, port in ports.items():
            if not 0 < port < 65536:
                raise ValueError(f"port {port} for {label} is not in 1..65535")
        return ports
