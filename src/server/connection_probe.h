// Noticing that an HTTP client went away while its request is still generating.
// cpp-httplib 0.11 does not hand handlers the connection's socket, and a write to a
// closed socket only fails after the peer's reset arrives, so a non-streaming request
// (which writes nothing until it is done) would run to the end for nobody. We find the
// connection's socket by its address pair and peek at it.
#pragma once

#include <string>

namespace quiver {

// The descriptor of this process's TCP socket with exactly these endpoints, or -1.
int find_connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                           int remote_port);

// The socket's local and peer addresses, formatted as httplib formats them; false (and
// nothing set) when the socket has none.
bool local_endpoint(int fd, std::string* ip, int* port);
bool peer_endpoint(int fd, std::string* ip, int* port);

// What a peek at a client's socket shows. Never blocks, never consumes data: a pipelined
// next request stays in the socket for the server to read.
enum class PeerState {
  kOpen,
  // End of stream without a reset: the client shut its sending side and still waits for
  // the answer (a half-close), or it closed the socket and the reset that says so comes
  // only in answer to something sent.
  kSendingEnded,
  kGone,  // reset, error or both directions shut
};
PeerState peer_state(int fd);

// Whether a waiting request's client is still there. On the first end of stream the
// watch sends a probe the client ignores (a closed socket answers it with a reset, which a
// later check sees); a half-closed client keeps its request.
class ClientWatch {
 public:
  ClientWatch() = default;
  explicit ClientWatch(int fd) : fd_(fd) {}  // -1: unknown socket, never gone
  int fd() const { return fd_; }
  // `probe` writes something the client ignores; it returns false if it could not.
  template <typename Probe>
  bool gone(Probe&& probe) {
    switch (peer_state(fd_)) {
      case PeerState::kOpen: return false;
      case PeerState::kGone: return true;
      case PeerState::kSendingEnded:
        if (probed_) return false;
        probed_ = true;
        return !probe();
    }
    return false;
  }

 private:
  int fd_ = -1;
  bool probed_ = false;
};

// Writes an interim "100 Continue" response straight to the socket: the probe for a
// request whose answer has not started (HTTP/1.1 clients skip 1xx responses they did not
// ask for, RFC 9110 section 15.2). False if the socket refused it.
bool send_interim_continue(int fd);

}  // namespace quiver
