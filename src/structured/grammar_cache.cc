#include "structured/grammar_cache.h"

#include "structured/json_schema_regex.h"
#include "structured/regex_parser.h"

namespace quiver::structured {

Result<std::string> spec_to_regex(const StructuredOutputSpec& spec) {
  using Kind = StructuredOutputSpec::Kind;
  switch (spec.kind) {
    case Kind::kRegex:
      return spec.regex;
    case Kind::kChoice: {
      if (spec.choice.empty()) return Status::error("choice: must list at least one string");
      std::string r;
      for (size_t i = 0; i < spec.choice.size(); ++i) {
        if (i > 0) r += "|";  // by position: an empty first choice still takes its place
        r += regex_escape(spec.choice[i]);
      }
      return r;
    }
    case Kind::kJsonObject:
      return any_json_object_regex();
    case Kind::kJson: {
      auto schema = nlohmann::ordered_json::parse(spec.json_schema, nullptr, false);
      if (schema.is_discarded()) return Status::error("json: the schema is not valid JSON");
      return json_schema_to_regex(schema);
    }
    case Kind::kNone:
      break;
  }
  return Status::error("no structured output constraint given");
}

Result<Dfa> compile_spec(const StructuredOutputSpec& spec) {
  auto regex = spec_to_regex(spec);
  if (!regex.is_ok()) return regex.status();
  auto tree = parse_regex(regex.value());
  if (!tree.is_ok()) return tree.status();
  return Dfa::compile(*tree.value(), kMaxDfaStates);
}

Result<std::shared_ptr<Grammar>> GrammarCache::get(const StructuredOutputSpec& spec) {
  const std::string key = spec.cache_key();
  if (std::shared_ptr<Grammar>* hit = entries_.find(key)) return *hit;
  std::shared_ptr<const Dfa> dfa = spec.compiled;
  if (!dfa) {
    auto compiled = compile_spec(spec);
    if (!compiled.is_ok()) return compiled.status();
    dfa = std::make_shared<const Dfa>(std::move(compiled).value());
  }
  auto g = std::make_shared<Grammar>(std::move(dfa), vocab_);
  entries_.insert(key, g);
  return g;
}

}  // namespace quiver::structured
