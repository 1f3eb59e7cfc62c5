// Socket lookup by endpoints (getsockname/getpeername over open descriptors), a
// non-blocking peek for end-of-stream and the probe that tells a half-close from a close.
// Linux only, like the rest of the server.
#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace quiver {

namespace {

// "ip", port of a socket address (IPv4 or IPv6), as httplib formats them.
bool endpoint(const sockaddr_storage& ss, std::string* ip, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) return false;
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) return false;
    *port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  *ip = buf;
  return true;
}

bool matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port) {
  std::string ip;
  int port = 0;
  if (!peer_endpoint(fd, &ip, &port) || port != remote_port || ip != remote_addr) return false;
  if (!local_endpoint(fd, &ip, &port)) return false;
  return port == local_port && (local_addr.empty() || ip == local_addr);
}

}  // namespace

bool local_endpoint(int fd, std::string* ip, int* port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  return getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && endpoint(ss, ip, port);
}

bool peer_endpoint(int fd, std::string* ip, int* port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  return getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && endpoint(ss, ip, port);
}

int find_connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                           int remote_port) {
  if (remote_port <= 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == dirfd(dir)) continue;
    if (matches(fd, local_addr, local_port, remote_addr, remote_port)) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

PeerState peer_state(int fd) {
  if (fd < 0) return PeerState::kOpen;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return PeerState::kOpen;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return PeerState::kGone;
  if (p.revents & (POLLIN | POLLRDHUP)) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return PeerState::kSendingEnded;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return PeerState::kGone;
  }
  return PeerState::kOpen;
}

bool send_interim_continue(int fd) {
  static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
  const ssize_t n = send(fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  return n == static_cast<ssize_t>(sizeof kContinue - 1);
}

}  // namespace quiver
