#!/usr/bin/env bash
# Check the run's inputs, then start the sandbox in the background as root: its output
# (progress and the tamper record) goes to $RUNNER_TEMP/cujo-state/log, which follow.sh
# prints step by step. Inputs come as INPUT_RUN_ID, INPUT_BASE_SHA, INPUT_HEAD_SHA,
# INPUT_PULL_REQUEST and INPUT_TOKEN, never expanded into a script, and a refused value
# is not echoed (it could hold a workflow command).
set -euo pipefail
for sha in "$INPUT_BASE_SHA" "$INPUT_HEAD_SHA"; do
  [[ "$sha" =~ ^[0-9a-f]{40}$ ]] || { echo "::error::base-sha and head-sha must be 40-hex commit SHAs"; exit 2; }
done
[[ "$INPUT_PULL_REQUEST" =~ ^[1-9][0-9]{0,9}$ ]] || { echo "::error::pull-request must be a pull request number"; exit 2; }
[[ "$INPUT_RUN_ID" =~ ^[A-Za-z0-9._-]{1,64}$ ]] || { echo "::error::run-id must be 1-64 of A-Z a-z 0-9 . _ -"; exit 2; }
[ -n "$INPUT_TOKEN" ] || { echo "::error::no token for the clone (the token input is empty)"; exit 2; }
# Root is what network namespaces need; pull-request commands still run as unprivileged
# users with no capabilities, in a scrubbed environment. sudo resets the environment and
# PATH (secure_path), so PATH is passed on with env. The token goes on standard input: in
# no argument, no environment and no file. --detach returns once the run has started.
printf '%s' "$INPUT_TOKEN" | sudo env PATH="$PATH" \
  "$RUNNER_TEMP/cujo-harness/bin/python" -I -m cujo_action run \
  --repo "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY" --pull-request "$INPUT_PULL_REQUEST" \
  --token-stdin --base "$INPUT_BASE_SHA" --head "$INPUT_HEAD_SHA" \
  --run-id "$INPUT_RUN_ID" --out "$RUNNER_TEMP/cujo-reports" \
  --detach "$RUNNER_TEMP/cujo-state"
