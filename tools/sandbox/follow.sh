#!/usr/bin/env bash
# Print the sandbox's output from where the last step stopped until STAGE is over
# (prepare, arm, install, detonation, base, privileged, tests, probes, smoke, workflows,
# bundle, or end).
set -euo pipefail
stage="${1:?usage: follow.sh STAGE}"
sudo "$RUNNER_TEMP/cujo-harness/bin/python" -I -m cujo_action follow \
  --state "$RUNNER_TEMP/cujo-state" --until "$stage"
