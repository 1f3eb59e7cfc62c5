// Steps an engine until nothing is left; the finished outputs by request id.
#pragma once

#include <map>
#include <string>

#include "engine/llm_engine.h"

namespace quiver::testing {

inline std::map<std::string, RequestOutput> run_all(LLMEngine& e) {
  std::map<std::string, RequestOutput> done;
  while (e.has_unfinished_requests())
    for (auto& o : e.step())
      if (o.finished) done[o.request_id] = o;
  return done;
}

}  // namespace quiver::testing
