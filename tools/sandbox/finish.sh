#!/usr/bin/env bash
# Follow the sandbox to its end, hand the bundle to the runner's user, and say how the
# run ended: upload-artifact then uploads $RUNNER_TEMP/cujo-reports.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
out="$RUNNER_TEMP/cujo-reports"
bash "$here/follow.sh" end || true
sudo chown -R "$(id -u):$(id -g)" "$out" || true
# A bundle is written even when the run fails (failure.json says why); no manifest at
# all means the sandbox never got that far.
if [ ! -f "$out/manifest.json" ]; then
  echo "::error::the sandbox wrote no bundle"
  exit 1
fi
if [ -f "$out/failure.json" ]; then
  python - "$out/failure.json" <<'PY'
import json, sys
failure = json.load(open(sys.argv[1]))
message = f"{failure['stage']}: {failure['reason']}"
# Escaped as workflow commands are: a reason may quote git, and so a ref name.
print("::warning::" + message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))
PY
fi
echo "Cujo reports are in the artifact cujo-reports." >> "$GITHUB_STEP_SUMMARY"
