"""tool-config-runs: a package manager's config naming a program runs it at the next use."""

from __future__ import annotations

from cujo_action.schema import TOOL_CONFIG_WRITE

WRITES = {
    # npm and pnpm run every script through this shell, and start every node with these.
    "~/.npmrc": ("fund=false\n", "fund=false\nscript-shell=/home/runner/.cache/x.sh\n"),
    "~/work/app/app/.npmrc": (None, "node-options=--require /home/runner/.x.js\n"),
    # yarn 1 and yarn 2+ run the yarn their rc names, and load its plugins.
    "~/.yarnrc": (None, 'yarn-path "/home/runner/.x.js"\n'),
    "~/.yarnrc.yml": ("enableTelemetry: false\n", "enableTelemetry: false\nyarnPath: .x.cjs\n"),
    "~/work/app/app/.yarnrc.yml": (
        "plugins:\n  - path: .yarn/plugins/ok.cjs\n",
        "plugins:\n  - path: .yarn/plugins/ok.cjs\n  - path: /tmp/x.cjs\n",
    ),
    # bun preloads these modules into every `bun test`.
    "~/work/app/app/bunfig.toml": (None, '[test]\npreload = ["./x.ts"]\n'),
}
HARMLESS = {
    "~/.npmrc": ("fund=false\n", "fund=false\naudit=false\n"),
    "~/.yarnrc.yml": ("enableTelemetry: false\n", "enableTelemetry: true\n"),
    "~/work/app/app/bunfig.toml": (None, "[install]\nexact = true\n"),
    # A program already named before the commands ran is not theirs.
    "~/work/app/app/.npmrc": ("script-shell=/bin/bash\n", "script-shell=/bin/bash\nfund=false\n"),
}


def test_fires_on_each_write_the_harness_reports_and_names_the_path(persistence_rule):
    findings = persistence_rule.fires("tool-config-runs", TOOL_CONFIG_WRITE, WRITES)
    titles = " ".join(f.title for f in findings)
    for key in ("script-shell", "node-options", "yarn-path", "yarnpath", "plugins", "preload"):
        assert key in titles, titles


def test_near_misses_are_not_reported(persistence_rule):
    persistence_rule.misses("tool-config-runs", HARMLESS)


def test_a_config_that_also_redirects_the_index_is_two_findings(make, run_rule):
    both = {"~/.npmrc": (None, "registry=https://npm.evil.test/\nscript-shell=/tmp/x\n")}
    seen = make.persisted("install", both)
    assert sorted(o.kind for o in seen) == ["package_index_write", TOOL_CONFIG_WRITE]
    report = [make.report("install", observations=seen)]
    assert len(run_rule("tool-config-runs", report)) == 1
    assert len(run_rule("package-index-redirect", report)) == 1
