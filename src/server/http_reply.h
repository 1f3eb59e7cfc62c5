// Small helpers for writing JSON and error replies with cpp-httplib.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/openai_protocol.h"
#include "server/openai_response.h"

namespace quiver {

inline void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(safe_dump(body), "application/json");
}

inline void send_error(httplib::Response& res, const ApiError& error) { send_json(res, error.status, api_error_json(error)); }

}  // namespace quiver
