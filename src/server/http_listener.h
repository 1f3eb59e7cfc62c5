// The connection front of `quiver serve`: accepts connections and reads each request's
// head (and a body of known length) in one poll() loop, then hands the connection to a
// worker thread that runs httplib's request processing on it. A connection costs a
// thread only while its request is being answered: clients that send slowly (one header
// line every few seconds) or sit idle between requests wait in the loop, under deadlines,
// and cannot take the workers from everyone else.
//
// Limits: the head must be whole within `header_timeout` of its first byte, an idle
// keep-alive connection closes after `keep_alive`, and at most `max_connections` are open;
// past that the loop closes the connection that has waited longest for its head, or
// answers 503 when every connection is being served.
//
// A connection answered before its request's body arrived (413, 401, 431) is not closed at
// once: closing a socket with unread bytes sends a reset, and a client still sending the
// body (curl uploading a body over --max-body-bytes) then fails on its next write without
// reading the answer that is already in its buffer. Its write side is shut instead (the
// answer, then end of stream) and the loop reads and drops what still comes until the
// client closes or `linger` has passed.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "server/request_head.h"
#include "server/socket_stream.h"

namespace quiver {

struct ListenerOptions {
  int workers = 128;
  int max_connections = 1024;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds keep_alive{5000};    // vLLM's (uvicorn's) keep-alive timeout
  std::chrono::milliseconds body_timeout{60000}; // a whole body read by a worker
  StreamTimeouts stream;
  size_t max_head_bytes = 64u << 10;
  size_t max_body_bytes = 32u << 20;   // bodies up to this size are read by the loop
  int max_requests_per_connection = 1000;
  // How long an answered connection is drained before it is closed regardless: the client
  // has the answer once it reads, so it only needs time to stop sending.
  std::chrono::milliseconds linger{2000};
};

class HttpListener {
 public:
  // Answers one request from the stream; httplib's Server::process_request contract.
  using Process = std::function<bool(httplib::Stream&, bool close_connection, bool& connection_closed)>;

  HttpListener(ListenerOptions options, Process process);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Listens on host:port (0 = a free port); the port bound.
  Result<int> bind(const std::string& host, int port);
  // Serves until stop(); returns once the workers have finished. At once if stop() came first.
  void run();
  // Safe from any thread, before or during run().
  void stop();
  bool stopping() const { return stopping_.load(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Conn {
    int fd = -1;
    std::string buf;           // received, not yet handed to httplib
    Clock::time_point waiting_since;
    Clock::time_point deadline;
    int served = 0;            // requests answered on this connection
    std::optional<RequestHead> head;  // the current request's, once it has arrived
    size_t searched = 0;       // bytes of buf already searched for the head's end
  };

  void loop();
  // Accepts what is pending; false when accept() ran out of descriptors.
  bool accept_all();
  // Reads what `c` has; false when it is finished with (closed or handed on).
  bool read_some(Conn& c);
  // Whether `c` holds a whole head (searching only what arrived since the last call); sets
  // c.head and the body's deadline when it arrives.
  bool head_arrived(Conn& c);
  // True (and `c` moved to the workers' queue) when its request has arrived.
  bool dispatch(Conn& c);
  bool dispatch_locked(Conn& c);  // mu_ held; the caller wakes a worker
  void work();
  // Closes a counted connection, first sending `answer` (a status line) when given.
  void close_conn(int fd, const char* answer = nullptr);
  // The loop's: shuts fd's write side and drains it until the client closes (see above).
  void linger(int fd);
  // Reads and drops what the lingering connections sent (polled: revents from fds, one entry
  // each from `first`), closing those that ended or whose time is up.
  void drain_lingering(const std::vector<pollfd>& fds, size_t first, size_t count);
  // Closes the lingering connection closest to its end; false when there is none.
  bool close_oldest_lingering();
  void wake();

  ListenerOptions options_;
  Process process_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int> open_{0};  // every connection not yet closed, in the loop or a worker
  std::vector<Conn> waiting_;  // the loop's: reading heads, or idle between requests
  struct Lingering {
    int fd = -1;
    Clock::time_point until;
  };
  std::vector<Lingering> lingering_;  // the loop's: answered, drained until closed

  std::mutex mu_;
  std::condition_variable ready_cv_;
  std::deque<Conn> ready_;     // whole requests for the workers
  std::vector<Conn> returned_; // kept-alive connections back to the loop
  std::vector<int> to_linger_; // answered before their body arrived, for the loop to drain
  std::vector<std::thread> workers_;
};

}  // namespace quiver
