// libFuzzer target for structured outputs: what a request's regex, JSON schema or choice
// list compiles through (grammar_cache.cc's compile_spec: spec_to_regex, regex_parser,
// json_schema_regex, dfa). Not part of the CMake build: tools/fuzz.sh structured compiles
// it with clang's -fsanitize=fuzzer,address,undefined together with those files.
// The first byte picks the spec's kind (regex, JSON schema, choice list split at '\n',
// or a literal to escape); the rest is its text. Besides not crashing or hanging, the
// checks: a compiled automaton accepts every choice of a choice list, and regex_escape(t)
// compiles to an automaton that accepts t and nothing one byte longer or shorter.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "structured/dfa.h"
#include "structured/grammar_cache.h"
#include "structured/regex_parser.h"
#include "tokenizer/utf8.h"

namespace {

using quiver::StructuredOutputSpec;
namespace st = quiver::structured;

// The automaton of a spec, as the engine compiles it, or nothing where the spec is refused
// (with a message).
bool compile(const StructuredOutputSpec& spec, st::Dfa* out) {
  auto dfa = st::compile_spec(spec);
  if (!dfa.is_ok()) {
    if (dfa.status().message().empty()) __builtin_trap();
    return false;
  }
  *out = std::move(dfa).value();
  if (out->num_states() < 1 || out->num_states() > st::kMaxDfaStates) __builtin_trap();
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  StructuredOutputSpec spec;
  st::Dfa dfa;
  switch (data[0] % 4) {
    case 0:
      spec.kind = StructuredOutputSpec::Kind::kRegex;
      spec.regex = text;
      compile(spec, &dfa);
      break;
    case 1:
      spec.kind = StructuredOutputSpec::Kind::kJson;
      spec.json_schema = text;
      compile(spec, &dfa);
      break;
    case 2: {
      spec.kind = StructuredOutputSpec::Kind::kChoice;
      size_t at = 0;
      while (at <= text.size()) {
        const size_t nl = text.find('\n', at);
        spec.choice.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
        if (nl == std::string::npos) break;
        at = nl + 1;
      }
      if (compile(spec, &dfa))
        for (const std::string& c : spec.choice)
          if (quiver::utf8::is_valid(c) && !dfa.matches(c)) __builtin_trap();
      break;
    }
    default: {
      if (!quiver::utf8::is_valid(text)) break;
      spec.kind = StructuredOutputSpec::Kind::kRegex;
      spec.regex = st::regex_escape(text);
      if (!compile(spec, &dfa)) break;  // a long literal may pass the state bound
      if (!dfa.matches(text) || dfa.matches(text + "a")) __builtin_trap();
      if (!text.empty() && dfa.matches(text.substr(0, text.size() - 1))) __builtin_trap();
      break;
    }
  }
  return 0;
}
