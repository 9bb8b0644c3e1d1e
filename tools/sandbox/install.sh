#!/usr/bin/env bash
# Install Cujo's harness on a GitHub-hosted runner: bubblewrap and nftables from apt, then
# the harness in a venv of its own under $RUNNER_TEMP, every download pinned by hash.
# Usage: install.sh CUJO_CHECKOUT (the folder holding Cujo's pyproject.toml).
set -euo pipefail
action="${1:?usage: install.sh CUJO_CHECKOUT}"
# Hosted images keep the package lists from build time: update before installing.
sudo apt-get update -qq
sudo apt-get install -y -qq nftables bubblewrap >/dev/null
# ubuntu-24.04 restricts unprivileged user namespaces through AppArmor; bubblewrap
# (run as the sandbox's unprivileged uid) needs them for this job. Without them the
# run says "isolation partial" and cannot be clean (docs/install.md).
sudo sysctl -q -w kernel.apparmor_restrict_unprivileged_userns=0 || true
# The harness in a venv of its own (non-editable): bubblewrap hides all of it from
# pull-request commands. The build backend first, then the locked dependencies built
# with it (one is an sdist), then Cujo from this checkout without the index.
harness="$RUNNER_TEMP/cujo-harness"
python -m venv "$harness"
pip=("$harness/bin/python" -m pip install --quiet --disable-pip-version-check --no-input)
"${pip[@]}" --require-hashes -r "$action/requirements/harness-build.txt"
"${pip[@]}" --require-hashes --no-build-isolation -r "$action/requirements/harness.txt"
"${pip[@]}" --no-deps --no-build-isolation --no-index "$action"
