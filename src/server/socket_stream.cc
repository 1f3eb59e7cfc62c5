#include "server/socket_stream.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "server/connection_probe.h"

namespace quiver {

SocketStream::SocketStream(int fd, std::string buffered, StreamTimeouts timeouts, Clock::time_point read_deadline)
    : fd_(fd), buffered_(std::move(buffered)), timeouts_(timeouts), read_deadline_(read_deadline) {}

bool SocketStream::wait(short events, std::chrono::milliseconds limit, bool reading) const {
  const Clock::time_point until = reading ? std::min(Clock::now() + limit, read_deadline_) : Clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() < 0) return false;
    pollfd p{fd_, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (p.revents & (POLLERR | POLLNVAL)) return false;
    // A reader sees end-of-stream as readable (read returns 0); a writer is done once both
    // directions are shut, which a reset also causes.
    if (!reading && (p.revents & POLLHUP)) return false;
    return (p.revents & (events | POLLHUP)) != 0;
  }
}

bool SocketStream::is_readable() const {
  return offset_ < buffered_.size() || wait(POLLIN, timeouts_.read, true);
}

bool SocketStream::is_writable() const { return wait(POLLOUT, timeouts_.write, false); }

ssize_t SocketStream::read(char* ptr, size_t size) {
  if (offset_ == buffered_.size()) {
    buffered_.clear();
    offset_ = 0;
    // Read ahead in blocks: httplib reads a head a byte at a time.
    char block[16384];
    for (;;) {
      if (!wait(POLLIN, timeouts_.read, true)) return -1;
      const ssize_t n = ::recv(fd_, block, sizeof block, MSG_DONTWAIT);
      if (n == 0) return 0;
      if (n > 0) {
        buffered_.assign(block, static_cast<size_t>(n));
        break;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    }
  }
  const size_t n = std::min(size, buffered_.size() - offset_);
  std::memcpy(ptr, buffered_.data() + offset_, n);
  offset_ += n;
  consumed_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t SocketStream::write(const char* ptr, size_t size) {
  for (;;) {
    if (!wait(POLLOUT, timeouts_.write, false)) return -1;
    const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
  }
}

void SocketStream::get_remote_ip_and_port(std::string& ip, int& port) const { peer_endpoint(fd_, &ip, &port); }

void SocketStream::get_local_ip_and_port(std::string& ip, int& port) const { local_endpoint(fd_, &ip, &port); }

}  // namespace quiver
