# Shared by the server's shell tests (sourced): pass/fail reporting and free loopback ports.
FAILED=0
pass() { echo "ok   - $*"; }
fail() { echo "FAIL - $*"; FAILED=1; }

# A loopback port nothing listens on now (the kernel's pick for an ephemeral bind, then released).
free_port() {
  node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}
