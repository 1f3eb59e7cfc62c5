#include "io/json_fields.h"

namespace quiver {

std::optional<FieldProblem> check_fields(const nlohmann::json& obj, std::span<const FieldRule> rules,
                                         const std::string& api) {
  for (const auto& [key, value] : obj.items()) {
    const FieldRule* rule = nullptr;
    for (const FieldRule& r : rules)
      if (key == r.name) rule = &r;
    if (rule == nullptr)
      return FieldProblem{key, true, "unknown field '" + key + "': not a parameter of " + api};
    if (rule->use == FieldUse::kAccepted || value.is_null()) continue;
    if (rule->no_op_value != nullptr && value == nlohmann::json::parse(rule->no_op_value)) continue;
    std::string message = "'" + key + "' is not supported by quiver's " + api;
    if (rule->no_op_value != nullptr) message += std::string(" (leave it unset or ") + rule->no_op_value + ")";
    return FieldProblem{key, false, std::move(message)};
  }
  return std::nullopt;
}

}  // namespace quiver
