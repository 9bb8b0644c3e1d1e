"""package-index-redirect: a config naming another index feeds every later install from it."""

from __future__ import annotations

from cujo_action.schema import PACKAGE_INDEX_WRITE

WRITES = {
    "~/.npmrc": (
        "@myorg:registry=https://npm.pkg.github.com/\n",
        "@myorg:registry=https://npm.pkg.github.com/\nregistry=https://npm.evil.test/\n",
    ),
    "~/.config/pip/pip.conf": (
        None,
        "[global]\nextra-index-url =\n    https://pypi.org/simple\n    https://pypi.evil.test/simple\n",
    ),
    "~/work/venv/pip.conf": (
        None,
        "[global]\nindex-url = https://mirror.evil.test/simple\n",
    ),
    "~/.config/uv/uv.toml": (None, '[[index]]\nurl = "https://uv.evil.test/simple"\n'),
}
HARMLESS = {
    "~/.npmrc": (
        "@myorg:registry=https://npm.pkg.github.com/\n",
        "@myorg:registry=https://npm.pkg.github.com/\nfund=false\n",
    ),
    "~/.config/pip/pip.conf": (None, "[global]\nindex-url = https://pypi.org/simple\n"),
}


def test_fires_on_each_write_the_harness_reports_and_names_the_path(persistence_rule):
    findings = persistence_rule.fires("package-index-redirect", PACKAGE_INDEX_WRITE, WRITES)
    assert len(findings) == len(WRITES)


def test_near_misses_are_not_reported(persistence_rule):
    persistence_rule.misses("package-index-redirect", HARMLESS)
