// Which keys a JSON request object may carry. A request API that ignores keys it does not
// know turns a typo ("max_token") or a feature it lacks into a silently different answer;
// these rules make both an error that names the key.
#pragma once

#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace quiver {

enum class FieldUse {
  kAccepted,     // read by the parser (or handed on as is to the part that implements it)
  kUnsupported,  // a real parameter of the API that quiver does not implement
};

struct FieldRule {
  const char* name;
  FieldUse use = FieldUse::kAccepted;
  // kUnsupported only: JSON text of the one value that is still accepted, the API's default
  // that asks for nothing (e.g. "false" for use_beam_search); null = none is.
  const char* no_op_value = nullptr;
};

struct FieldProblem {
  std::string field;
  bool unknown = false;  // false: known but unsupported
  std::string message;
};

// The first key of `obj` (an object) that `rules` do not accept; `api` names the API in
// messages ("/v1/completions"). JSON null counts as absent and is always accepted.
std::optional<FieldProblem> check_fields(const nlohmann::json& obj, std::span<const FieldRule> rules,
                                         const std::string& api);

}  // namespace quiver
