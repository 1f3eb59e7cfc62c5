// StructuredOutputSpec: what a request asks its output to match, in vLLM's terms
// (structured_outputs / guided_* / response_format). It is plain data carried by
// SamplingParams; grammar_cache.h compiles it to an automaton.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace quiver {

namespace structured {
class Dfa;
}

struct StructuredOutputSpec {
  enum class Kind { kNone, kJson, kJsonObject, kRegex, kChoice };
  Kind kind = Kind::kNone;
  std::string json_schema;          // kJson: the schema's JSON text, keys in the request's order
  std::string regex;                // kRegex
  std::vector<std::string> choice;  // kChoice: the output is exactly one of these
  // The spec's automaton (compile_spec), where the caller compiled it already: the server
  // does on its HTTP threads (AutomatonCache), and the engine then uses it instead of
  // compiling on its own thread. Not part of the key: it is the same constraint.
  std::shared_ptr<const structured::Dfa> compiled;

  bool active() const { return kind != Kind::kNone; }
  // Identifies the compiled automaton (equal specs share one).
  std::string cache_key() const {
    std::string k = std::to_string(static_cast<int>(kind)) + ":";
    if (kind == Kind::kJson) k += json_schema;
    if (kind == Kind::kRegex) k += regex;
    for (const std::string& c : choice) k += std::to_string(c.size()) + ":" + c;
    return k;
  }
};

}  // namespace quiver
