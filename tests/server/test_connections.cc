// The connection front without the engine: request-head framing, HttpListener over
// loopback with a stand-in request processor, and the server's option bounds.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "server/http_listener.h"
#include "server/request_head.h"
#include "server/server_options.h"

namespace quiver {
namespace {

using namespace std::chrono_literals;

TEST(RequestHead, WaitsForTheBlankLine) {
  EXPECT_FALSE(scan_request_head("POST / HTTP/1.1\r\nHost: x\r\n"));
  EXPECT_FALSE(scan_request_head("POST / HTTP/1.1\r\nHost: x\r\n\r"));
  auto h = scan_request_head("GET / HTTP/1.1\r\nHost: x\r\n\r\nrest");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->head_bytes, 27u);
  EXPECT_FALSE(h->content_length);
  EXPECT_EQ(bytes_to_gather(*h, 100), 27u);
}

TEST(RequestHead, LengthsAndExpectations) {
  auto h = scan_request_head("POST / HTTP/1.1\r\ncontent-LENGTH:  12 \r\n\r\n");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->content_length, 12u);
  EXPECT_EQ(bytes_to_gather(*h, 100), h->head_bytes + 12);
  EXPECT_EQ(bytes_to_gather(*h, 11), h->head_bytes);  // over the body limit: httplib answers 413 on the head

  h = scan_request_head("POST / HTTP/1.1\r\nContent-Length: 12\r\nExpect: 100-continue\r\n\r\n");
  ASSERT_TRUE(h);
  EXPECT_TRUE(h->expect_continue);
  EXPECT_EQ(bytes_to_gather(*h, 100), h->head_bytes);  // the body waits for our 100

  h = scan_request_head("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
  ASSERT_TRUE(h);
  EXPECT_TRUE(h->chunked);
  EXPECT_EQ(bytes_to_gather(*h, 100), h->head_bytes);

  for (const char* bad : {"Content-Length: -1", "Content-Length: 1e3", "Content-Length: 99999999999999999999",
                          "Content-Length: 3\r\nContent-Length: 4"}) {
    h = scan_request_head(std::string("POST / HTTP/1.1\r\n") + bad + "\r\n\r\n");
    ASSERT_TRUE(h) << bad;
    EXPECT_FALSE(h->content_length) << bad;
  }
}

TEST(ServerOptionsBounds, NameTheFlag) {
  ServerOptions o;
  EXPECT_TRUE(validate(o).is_ok());
  o.http_threads = 100000;
  EXPECT_NE(validate(o).message().find("--http-threads"), std::string::npos);
  o = ServerOptions{};
  o.http_max_connections = 0;
  EXPECT_NE(validate(o).message().find("--http-max-connections"), std::string::npos);
  o = ServerOptions{};
  o.http_header_timeout_s = 0;
  EXPECT_NE(validate(o).message().find("--http-header-timeout"), std::string::npos);
  o = ServerOptions{};
  o.port = 70000;
  EXPECT_NE(validate(o).message().find("--port"), std::string::npos);
}

// A listener whose "request processing" answers each head with how many bytes of it it
// read, through the same httplib::Stream calls httplib makes.
class Listener : public ::testing::Test {
 protected:
  void start(ListenerOptions o) {
    listener_ = std::make_unique<HttpListener>(o, [](httplib::Stream& s, bool close, bool& closed) {
      std::string head;
      char c;
      while (head.find("\r\n\r\n") == std::string::npos) {
        if (s.read(&c, 1) != 1) return false;
        head += c;
      }
      closed = head.find("Connection: close") != std::string::npos;
      const std::string body = std::to_string(head.size());
      const std::string r = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      return s.write(r.data(), r.size()) == static_cast<ssize_t>(r.size());
    });
    auto port = listener_->bind("127.0.0.1", 0);
    ASSERT_TRUE(port.is_ok()) << port.message();
    port_ = port.value();
    thread_ = std::thread([this] { listener_->run(); });
  }
  void TearDown() override {
    if (listener_) listener_->stop();
    if (thread_.joinable()) thread_.join();
  }
  int connect_client() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  }
  static std::string read_to_end(int fd) {
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
    return out;
  }
  static void send_all(int fd, const std::string& s) { ASSERT_EQ(::send(fd, s.data(), s.size(), 0), (ssize_t)s.size()); }

  std::unique_ptr<HttpListener> listener_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(Listener, StopBeforeRunReturnsAtOnce) {
  HttpListener l(ListenerOptions{}, [](httplib::Stream&, bool, bool&) { return false; });
  ASSERT_TRUE(l.bind("127.0.0.1", 0).is_ok());
  l.stop();
  const auto t = std::chrono::steady_clock::now();
  l.run();
  EXPECT_LT(std::chrono::steady_clock::now() - t, 1s);
}

TEST_F(Listener, PipelinedRequestsAndHalfClose) {
  ListenerOptions o;
  o.workers = 2;
  start(o);
  const int fd = connect_client();
  const std::string a = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string b = "GET /bb HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  send_all(fd, a + b);
  ::shutdown(fd, SHUT_WR);  // both were sent before the end of stream: both are answered
  const std::string got = read_to_end(fd);
  ::close(fd);
  EXPECT_EQ(got, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n" + std::to_string(a.size()) +
                     "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n" + std::to_string(b.size()));
}

TEST_F(Listener, SlowHeadGets408WhileOthersAreServed) {
  ListenerOptions o;
  o.workers = 1;
  o.header_timeout = 600ms;
  start(o);
  const int slow = connect_client();
  send_all(slow, "GET / HTTP/1.1\r\n");
  // The one worker is not held by the slow head.
  const int fast = connect_client();
  send_all(fast, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(read_to_end(fast).substr(0, 15), "HTTP/1.1 200 OK");
  ::close(fast);
  const auto t = std::chrono::steady_clock::now();
  EXPECT_EQ(read_to_end(slow).substr(0, 12), "HTTP/1.1 408");
  EXPECT_LT(std::chrono::steady_clock::now() - t, 2s);
  ::close(slow);
}

// A request refused on its head (the stand-in answers without reading the body) while the
// client is still sending a body of 4 MiB: the client must be able to finish sending and
// then read the answer. A socket closed with unread bytes sends a reset instead, and the
// client's next write fails (curl then reports no answer at all).
TEST_F(Listener, ClientStillSendingItsBodyReadsTheEarlyAnswer) {
  ListenerOptions o;
  o.workers = 1;
  o.max_body_bytes = 1024;  // the body is not gathered: the head is answered at once
  start(o);
  const int fd = connect_client();
  constexpr size_t kBody = size_t{4} << 20, kPiece = size_t{64} << 10;
  send_all(fd, "POST / HTTP/1.1\r\nContent-Length: " + std::to_string(kBody) + "\r\n\r\n");
  const std::string piece(kPiece, ' ');
  size_t sent = 0;
  int error = 0;
  for (; sent < kBody; sent += kPiece) {
    if (::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(piece.size())) {
      error = errno;
      break;
    }
    std::this_thread::sleep_for(1ms);  // the answer and the server's close come meanwhile
  }
  EXPECT_EQ(sent, kBody) << "send failed: " << std::strerror(error);
  const std::string got = read_to_end(fd);
  ::close(fd);
  EXPECT_EQ(got.substr(0, 15), "HTTP/1.1 200 OK");
}

TEST_F(Listener, FullListenerClosesTheLongestWaiting) {
  ListenerOptions o;
  o.workers = 1;
  o.max_connections = 3;
  start(o);
  int idle[3];
  for (int& fd : idle) {
    fd = connect_client();
    std::this_thread::sleep_for(20ms);
  }
  const int fd = connect_client();
  send_all(fd, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(read_to_end(fd).substr(0, 15), "HTTP/1.1 200 OK");
  ::close(fd);
  EXPECT_EQ(read_to_end(idle[0]), "");  // closed to make room
  char c;
  EXPECT_EQ(::recv(idle[1], &c, 1, MSG_DONTWAIT), -1);  // still open, nothing sent
  for (int i : idle) ::close(i);
}

}  // namespace
}  // namespace quiver
