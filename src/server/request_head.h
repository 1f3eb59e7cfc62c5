// What the connection front reads from a request's head before a worker takes the
// connection: where the head ends and how much body follows it. Only framing; httplib
// parses the request itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace quiver {

struct RequestHead {
  size_t head_bytes = 0;                   // through the blank line
  std::optional<uint64_t> content_length;  // a valid Content-Length, when given once
  bool expect_continue = false;            // "Expect: 100-continue": the body waits for our 100
  bool chunked = false;                    // Transfer-Encoding names chunked
};

// The head at the start of `buf`, or nothing while its blank line ("\r\n\r\n") has not
// arrived. A malformed length is left out (httplib answers that request itself).
std::optional<RequestHead> scan_request_head(std::string_view buf);

// Bytes the front gathers before handing the connection on: the head, and the body too
// when its length is known, within `max_body` and not waiting for a 100 Continue. A body
// of unknown length (chunked) is read by the worker, under its deadline.
size_t bytes_to_gather(const RequestHead& head, size_t max_body);

}  // namespace quiver
