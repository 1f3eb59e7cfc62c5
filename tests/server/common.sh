# Shared by the server test scripts (sourced): a scratch folder and the servers started,
# both removed on exit, and the ok/FAIL reporting that sets FAILED.
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT

FAILED=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; FAILED=1; }
