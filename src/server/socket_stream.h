// httplib::Stream over one client connection, for httplib's request processing
// (Server::process_request) run by the connection front's workers. Unlike httplib's own
// stream it
// - starts from the bytes the front already read (the head, often the body) and keeps
//   what follows the request, so a pipelined next request is not lost;
// - bounds the whole body read by a deadline, not only each read, so a client sending a
//   byte every few seconds cannot hold a worker;
// - stays writable while the client has only ended its sending side (a half-closed
//   client gets its answer); a reset or error ends writing.
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>

namespace quiver {

struct StreamTimeouts {
  std::chrono::milliseconds read{5000};   // longest wait for the next bytes
  std::chrono::milliseconds write{10000}; // longest wait for room to write
};

class SocketStream final : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;
  SocketStream(int fd, std::string buffered, StreamTimeouts timeouts, Clock::time_point read_deadline);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  // Not the descriptor: httplib uses it only for a select() guard (descriptors past
  // FD_SETSIZE get a 500) that does not apply to these poll()-based reads and writes.
  socket_t socket() const override { return INVALID_SOCKET; }

  size_t bytes_read() const { return consumed_; }
  // Bytes received but not read: the start of the next request.
  std::string take_unread() { return buffered_.substr(offset_); }

 private:
  // Waits until the socket has `events` or the wait (and the read deadline, for reads)
  // runs out; false on timeout, error or hang-up.
  bool wait(short events, std::chrono::milliseconds limit, bool reading) const;

  int fd_;
  std::string buffered_;
  size_t offset_ = 0;
  size_t consumed_ = 0;
  StreamTimeouts timeouts_;
  Clock::time_point read_deadline_;
};

}  // namespace quiver
