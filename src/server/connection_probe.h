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

// True when the peer has closed (or reset) the connection. Never blocks, never consumes
// data: a pipelined next request stays in the socket for the server to read.
bool peer_closed(int fd);

}  // namespace quiver
