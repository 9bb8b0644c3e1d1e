#!/usr/bin/env bash
# Check the run's inputs, then start the sandbox in the background as root: its output
# (progress and the tamper record) goes to $RUNNER_TEMP/cujo-state/log, which follow.sh
# prints step by step. Inputs come as INPUT_RUN_ID, INPUT_BASE_SHA, INPUT_HEAD_SHA,
# INPUT_PULL_REQUEST and INPUT_TOKEN, never expanded into a script, and a refused value
# is not echoed (it could hold a workflow command).
set -euo pipefail
harness="$RUNNER_TEMP/cujo-harness/bin/python"
# The SHAs, the pull request and the run id against cujo_action.schema's patterns, the
# ones every reader uses: exit 2 with an ::error:: on the first refused. Each value is
# given as --flag=VALUE, so none can be read as an option.
"$harness" -I -m cujo_action check-id --sha="$INPUT_BASE_SHA" --sha="$INPUT_HEAD_SHA" \
  --pull-request="$INPUT_PULL_REQUEST" --run-id="$INPUT_RUN_ID"
[ -n "$INPUT_TOKEN" ] || { echo "::error::no token for the clone (the token input is empty)"; exit 2; }
# Root is what network namespaces need; pull-request commands still run as unprivileged
# users with no capabilities, in a scrubbed environment. sudo resets the environment and
# PATH (secure_path), so PATH is passed on with env. The token goes on standard input: in
# no argument, no environment and no file. --detach returns once the run has started.
printf '%s' "$INPUT_TOKEN" | sudo env PATH="$PATH" \
  "$harness" -I -m cujo_action run \
  --repo "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY" --pull-request "$INPUT_PULL_REQUEST" \
  --token-stdin --base "$INPUT_BASE_SHA" --head "$INPUT_HEAD_SHA" \
  --run-id "$INPUT_RUN_ID" --out "$RUNNER_TEMP/cujo-reports" \
  --detach "$RUNNER_TEMP/cujo-state"
