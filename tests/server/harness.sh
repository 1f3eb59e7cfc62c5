# Shared by the server's shell tests (sourced): a scratch folder and the servers started,
# both removed on exit; pass/fail reporting (FAILED); free loopback ports.
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

# A loopback port nothing listens on now (the kernel's pick for an ephemeral bind, then released).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
