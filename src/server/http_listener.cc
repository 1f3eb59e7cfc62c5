#include "server/http_listener.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>


namespace quiver {

namespace {

// Open files beyond the connections: the model's, logs, the engine's own.
constexpr int kOtherFiles = 128;
// When accept() runs out of descriptors, it is retried after this long rather than at once.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

// A whole answer written without a worker (the socket is new or idle, so this fits its
// send buffer); best effort, the connection closes after it.
void send_final_answer(int fd, const char* status) {
  const std::string r = std::string("HTTP/1.1 ") + status + "\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
  (void)::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Bytes a lingering connection may send between two polls before the loop moves on to
// the others (it is polled again; its time limit bounds the total).
constexpr size_t kDrainPerPoll = size_t{1} << 20;

// The 408 a connection gets when it is dropped in the middle of a head (none when idle).
const char* timeout_answer(const std::string& buf) { return buf.empty() ? nullptr : "408 Request Timeout"; }

int poll_timeout_ms(std::chrono::steady_clock::time_point now, std::chrono::steady_clock::time_point next) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
  return static_cast<int>(std::clamp<long long>(ms + 1, 0, 1000));
}

}  // namespace

HttpListener::HttpListener(ListenerOptions options, Process process)
    : options_(std::move(options)), process_(std::move(process)) {}

HttpListener::~HttpListener() {
  stop();
  for (std::thread& t : workers_)
    if (t.joinable()) t.join();
  for (Conn& c : waiting_) ::close(c.fd);
  for (Conn& c : ready_) ::close(c.fd);
  for (Conn& c : returned_) ::close(c.fd);
  for (const Lingering& l : lingering_) ::close(l.fd);
  for (int fd : to_linger_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Result<int> HttpListener::bind(const std::string& host, int port) {
  rlimit files{};
  const rlim_t needed = static_cast<rlim_t>(options_.max_connections) + kOtherFiles;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < needed) {
    files.rlim_cur = std::min(needed, files.rlim_max);
    setrlimit(RLIMIT_NOFILE, &files);
    getrlimit(RLIMIT_NOFILE, &files);
    if (files.rlim_cur < needed)
      return Status::error("--http-max-connections " + std::to_string(options_.max_connections) + " needs " +
                           std::to_string(needed) + " open files; this process may open " +
                           std::to_string(files.rlim_cur) + " (ulimit -n)");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int e = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); e != 0)
    return Status::error("cannot resolve " + host + ": " + gai_strerror(e));
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR lets a restart bind while old connections sit in TIME_WAIT; not
    // SO_REUSEPORT, with which a second server would bind the same port and take half
    // the connections.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) return Status::error("cannot bind " + host + ":" + service + ": " + why);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  const int bound = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Status::error(std::string("eventfd: ") + std::strerror(errno));
  return bound;
}

void HttpListener::wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void HttpListener::stop() {
  stopping_ = true;
  wake();
  ready_cv_.notify_all();
}

void HttpListener::close_conn(int fd, const char* answer) {
  if (answer != nullptr) send_final_answer(fd, answer);
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  --open_;
}

void HttpListener::linger(int fd) {
  ::shutdown(fd, SHUT_WR);
  lingering_.push_back({fd, Clock::now() + options_.linger});
}

void HttpListener::drain_lingering(const std::vector<pollfd>& fds, size_t first, size_t count) {
  const Clock::time_point now = Clock::now();
  char block[16384];
  size_t kept = 0;
  for (size_t i = 0; i < lingering_.size(); ++i) {
    Lingering& l = lingering_[i];
    bool done = l.until <= now;
    if (!done && i < count && fds[first + i].revents != 0) {
      // Until the client's end of stream (0), an error, or this poll's share.
      for (size_t got = 0; got < kDrainPerPoll;) {
        const ssize_t n = ::recv(l.fd, block, sizeof block, MSG_DONTWAIT);
        if (n > 0) {
          got += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        done = !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
        break;
      }
    }
    if (done) close_conn(l.fd);
    else lingering_[kept++] = l;
  }
  lingering_.resize(kept);
}

bool HttpListener::close_oldest_lingering() {
  if (lingering_.empty()) return false;
  auto oldest = std::min_element(lingering_.begin(), lingering_.end(),
                                 [](const Lingering& a, const Lingering& b) { return a.until < b.until; });
  close_conn(oldest->fd);
  *oldest = lingering_.back();
  lingering_.pop_back();
  return true;
}

void HttpListener::run() {
  if (listen_fd_ < 0 || stopping_) return;
  const int n = std::max(1, options_.workers);
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
  loop();
  ready_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  for (Conn& c : returned_) close_conn(c.fd);
  returned_.clear();
  for (int fd : to_linger_) close_conn(fd);  // handed over after the loop's last take
  to_linger_.clear();
}

void HttpListener::loop() {
  Clock::time_point accept_paused_until{};
  std::vector<pollfd> fds;
  while (!stopping_) {
    int dispatched = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Conn& c : returned_) {
        c.waiting_since = Clock::now();
        c.deadline = c.waiting_since + (c.buf.empty() ? options_.keep_alive : options_.header_timeout);
        // It may already hold its next (pipelined) request.
        if (dispatch_locked(c)) ++dispatched;
        else waiting_.push_back(std::move(c));
      }
      returned_.clear();
      for (int fd : to_linger_) linger(fd);
      to_linger_.clear();
    }
    for (int i = 0; i < dispatched; ++i) ready_cv_.notify_one();
    const Clock::time_point now = Clock::now();
    Clock::time_point next = now + std::chrono::seconds(1);
    for (size_t i = 0; i < waiting_.size();) {
      if (waiting_[i].deadline <= now) {
        // A head that started but did not finish in time is told so; an idle
        // keep-alive connection just closes.
        close_conn(waiting_[i].fd, timeout_answer(waiting_[i].buf));
        waiting_[i] = std::move(waiting_.back());
        waiting_.pop_back();
        continue;
      }
      next = std::min(next, waiting_[i].deadline);
      ++i;
    }
    for (const Lingering& l : lingering_) next = std::min(next, l.until);
    const bool accepting = now >= accept_paused_until;
    if (!accepting) next = std::min(next, accept_paused_until);
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    for (const Conn& c : waiting_) fds.push_back({c.fd, POLLIN, 0});
    const size_t polled_waiting = waiting_.size(), polled_lingering = lingering_.size();
    for (const Lingering& l : lingering_) fds.push_back({l.fd, POLLIN, 0});
    const int r = ::poll(fds.data(), fds.size(), poll_timeout_ms(now, next));
    if (r < 0 && errno != EINTR) break;
    // Before the waiting connections, which may add lingering ones (431) past those polled.
    drain_lingering(fds, 2 + polled_waiting, r > 0 ? polled_lingering : 0);
    if (r <= 0) continue;
    if (fds[0].revents) {
      uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof v);
    }
    // Connections first, so the ones accepted now are not looked at with stale entries.
    std::vector<Conn> kept;
    kept.reserve(waiting_.size());
    for (size_t i = 0; i < waiting_.size(); ++i) {
      if (fds[i + 2].revents == 0) {
        kept.push_back(std::move(waiting_[i]));
      } else if (read_some(waiting_[i])) {
        kept.push_back(std::move(waiting_[i]));
      }
    }
    waiting_ = std::move(kept);
    if (fds[1].revents && !accept_all()) accept_paused_until = Clock::now() + kAcceptPause;
  }
  for (Conn& c : waiting_) close_conn(c.fd);
  waiting_.clear();
  for (const Lingering& l : lingering_) close_conn(l.fd);
  lingering_.clear();
  ::close(listen_fd_);
  listen_fd_ = -1;
}

bool HttpListener::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;  // else out of descriptors or the like
    }
    if (open_.load() >= options_.max_connections && !close_oldest_lingering()) {
      // Full: a lingering connection made room if there was one; else the one that has
      // waited longest for its head does (a slow client loses its place, not a new one);
      // with none waiting, every connection is being answered and the new one is told to
      // come back.
      auto oldest = std::min_element(waiting_.begin(), waiting_.end(), [](const Conn& a, const Conn& b) {
        return a.waiting_since < b.waiting_since;
      });
      if (oldest == waiting_.end()) {
        send_final_answer(fd, "503 Service Unavailable");
        ::close(fd);
        continue;
      }
      close_conn(oldest->fd, timeout_answer(oldest->buf));
      *oldest = std::move(waiting_.back());
      waiting_.pop_back();
    }
    ++open_;
    int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    Conn c;
    c.fd = fd;
    c.waiting_since = Clock::now();
    c.deadline = c.waiting_since + options_.header_timeout;
    waiting_.push_back(std::move(c));
  }
}

bool HttpListener::read_some(Conn& c) {
  char block[16384];
  for (;;) {
    const ssize_t n = ::recv(c.fd, block, sizeof block, MSG_DONTWAIT);
    if (n > 0) {
      // The first bytes after an idle wait start the head's own deadline.
      if (c.buf.empty()) c.deadline = Clock::now() + options_.header_timeout;
      c.buf.append(block, static_cast<size_t>(n));
      if (c.buf.size() > options_.max_head_bytes + options_.max_body_bytes) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // End of stream: a half-closed client may have sent its whole request before it.
    if (n == 0 && dispatch(c)) return false;
    close_conn(c.fd);
    return false;
  }
  if (head_arrived(c) ? c.head->head_bytes > options_.max_head_bytes : c.buf.size() > options_.max_head_bytes) {
    send_final_answer(c.fd, "431 Request Header Fields Too Large");
    linger(c.fd);  // the client may still be sending the head
    return false;
  }
  return !dispatch(c);
}

bool HttpListener::head_arrived(Conn& c) {
  if (c.head) return true;
  // Only the bytes not searched before (and the 3 before them): a head sent a byte at a
  // time must not cost a search of everything so far per byte.
  const size_t from = c.searched > 3 ? c.searched - 3 : 0;
  c.searched = c.buf.size();
  if (c.buf.find("\r\n\r\n", from) == std::string::npos) return false;
  c.head = scan_request_head(c.buf);
  // The body the head announces has its own, longer deadline.
  c.deadline = Clock::now() + options_.body_timeout;
  return true;
}

bool HttpListener::dispatch(Conn& c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dispatch_locked(c)) return false;
  ready_cv_.notify_one();
  return true;
}

bool HttpListener::dispatch_locked(Conn& c) {
  if (!head_arrived(c) || c.buf.size() < bytes_to_gather(*c.head, options_.max_body_bytes)) return false;
  ready_.push_back(std::move(c));
  return true;
}

void HttpListener::work() {
  for (;;) {
    Conn c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_cv_.wait(lock, [this] { return !ready_.empty() || stopping_; });
      if (ready_.empty()) return;
      c = std::move(ready_.front());
      ready_.pop_front();
    }
    const RequestHead head = *c.head;
    // A chunked body's end is only found by reading it, and a handler may answer without
    // reading it (401, 413): such a connection is not reused.
    const bool last = stopping_ || head.chunked || ++c.served >= options_.max_requests_per_connection;
    const size_t whole = head.content_length ? head.head_bytes + *head.content_length : head.head_bytes;
    SocketStream stream(c.fd, std::move(c.buf), options_.stream, Clock::now() + options_.body_timeout);
    bool closed = false;
    const bool ok = process_(stream, last, closed);
    // A body the handler did not read (an early error answer) would be taken for the
    // next request: close instead, by the loop's drain, since the client may still be
    // sending it (a chunked body's end is not known either way).
    const bool unread = stream.bytes_read() < whole || head.chunked;
    if (!ok || closed || last || stopping_ || unread) {
      if (stopping_ || !unread) {
        close_conn(c.fd);
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        to_linger_.push_back(c.fd);
      }
      wake();
      continue;
    }
    c.buf = stream.take_unread();
    c.head.reset();
    c.searched = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      returned_.push_back(std::move(c));
    }
    wake();
  }
}

}  // namespace quiver
