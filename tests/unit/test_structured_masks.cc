// link: qv_structured
// Token masks for each kind of constraint (regex, choice, JSON schema, any JSON object),
// over a synthetic vocabulary (every byte plus multi-byte pieces) and the demo model's
// real one. At states reached by random generation, a token is allowed exactly when its
// bytes keep the automaton alive, checked against a plain walk (the mask's own code
// shares prefixes); EOS only where the automaton accepts. Property test: sampling at
// random under the mask until EOS gives text that Python-style full match, a choice, or
// JSON that parses and validates against the schema (an independent validator below).
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "structured/grammar_cache.h"
#include "tokenizer/tokenizer.h"

namespace quiver::structured {
namespace {

using Json = nlohmann::json;

std::shared_ptr<const TokenVocab> synthetic_vocab() {
  std::vector<std::string> bytes;
  bytes.push_back("");  // id 0: EOS
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  bytes.push_back(std::string(1, '\0'));
  for (const char* s : {"{\"", "\":", "\": ", "\",", ", \"", "true", "false", "null", "name", "\"name\"", "age",
                        "12", "345", "-1", ".5", "e+", "[]", "{}", "  ", "\n  ", "\"}", "\"]", "},", "abc", "ab",
                        "a", "red", "green", "gre", "een", "\\u00e9", "\\n", "é", "ü", "\xE2\x82", "\xAC", "tr", "ue"})
    bytes.push_back(s);
  return std::make_shared<TokenVocab>(TokenVocab::from_bytes(bytes, {0}));
}

// Fewest bytes from each state to acceptance (for steering random text to an end).
std::vector<int> distance_to_accept(const Dfa& d) {
  const int n = d.num_states();
  std::vector<int> dist(static_cast<size_t>(n), 1 << 30);
  bool changed = true;
  for (int s = 0; s < n; ++s)
    if (d.accepting(s)) dist[static_cast<size_t>(s)] = 0;
  while (changed) {
    changed = false;
    for (int s = 0; s < n; ++s)
      for (int b = 0; b < 256; ++b)
        if (int32_t t = d.step(s, static_cast<uint8_t>(b)); t != kDead && dist[static_cast<size_t>(t)] + 1 < dist[static_cast<size_t>(s)]) {
          dist[static_cast<size_t>(s)] = dist[static_cast<size_t>(t)] + 1;
          changed = true;
        }
  }
  return dist;
}

// Checks the state's mask against a plain walk of every token.
void check_mask(Grammar& g, int32_t state) {
  const TokenMask& m = g.mask(state);
  const TokenVocab& v = g.vocab();
  int64_t allowed = 0;
  for (int32_t id = 0; id < v.size(); ++id) {
    bool want;
    if (v.is_eos(id)) {
      want = g.dfa().accepting(state);
    } else {
      want = !v.bytes(id).empty() && g.dfa().walk(state, v.bytes(id)) != kDead;
    }
    ASSERT_EQ(m.allows(id), want) << "token " << id << " at state " << state;
    allowed += want;
  }
  EXPECT_EQ(m.num_allowed, allowed);
}

// Samples under the mask: random allowed tokens, EOS with some chance once allowed, and
// after `wander` tokens the allowed token that gets closest to acceptance. Returns the
// text; every visited state's mask is checked on the way.
std::string sample(Grammar& g, std::mt19937& rng, int wander) {
  const auto dist = distance_to_accept(g.dfa());
  std::string text;
  int32_t state = g.start();
  for (int step = 0; step < 2000; ++step) {
    check_mask(g, state);
    const TokenMask& m = g.mask(state);
    EXPECT_GT(m.num_allowed, 0) << "empty mask after '" << text << "'";
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < g.vocab().size(); ++id)
      if (m.allows(id)) ids.push_back(id);
    if (m.allows(0) && (m.eos_only || rng() % 4 == 0)) return text;
    int32_t pick = ids[rng() % ids.size()];
    if (step >= wander) {
      int best = 1 << 30;
      for (int32_t id : ids) {
        if (g.vocab().is_eos(id)) return text;
        const int d = dist[static_cast<size_t>(g.advance(state, id))];
        if (d < best || (d == best && rng() % 2)) best = d, pick = id;
      }
    }
    if (g.vocab().is_eos(pick)) continue;
    state = g.advance(state, pick);
    EXPECT_NE(state, kDead);
    text += g.vocab().bytes(pick);
  }
  ADD_FAILURE() << "no end after 2000 tokens: " << text;
  return text;
}

// A validator for the schema subset, written from the JSON Schema rules.
bool valid(const Json& v, const Json& s, const Json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    return valid(v, root["$defs"][r.substr(8)], root);
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
  if (s.contains("anyOf")) {
    bool any = false;
    for (const Json& sub : s["anyOf"]) any = any || valid(v, sub, root);
    if (!any) return false;
  }
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_array()) for (const Json& t : s["type"]) types.push_back(t);
    else types.push_back(s["type"]);
    bool ok = false;
    for (const std::string& t : types) {
      ok = ok || (t == "string" && v.is_string()) || (t == "integer" && v.is_number_integer()) ||
           (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
           (t == "array" && v.is_array()) || (t == "object" && v.is_object());
    }
    if (!ok) return false;
  }
  if (v.is_string()) {
    size_t cps = 0;
    for (unsigned char c : v.get<std::string>()) cps += (c & 0xC0) != 0x80;
    if (s.contains("minLength") && cps < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && cps > s["maxLength"].get<size_t>()) return false;
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items"))
      for (const Json& e : v)
        if (!valid(e, s["items"], root)) return false;
  }
  if (v.is_object() && s.contains("properties")) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!s["properties"].contains(it.key())) return false;  // closed objects only
      if (!valid(it.value(), s["properties"][it.key()], root)) return false;
    }
    if (s.contains("required"))
      for (const Json& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
  }
  return true;
}

std::shared_ptr<Grammar> grammar(GrammarCache& cache, const StructuredOutputSpec& spec) {
  auto g = cache.get(spec);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return g.value();
}

StructuredOutputSpec json_spec(const std::string& schema) {
  StructuredOutputSpec s;
  s.kind = StructuredOutputSpec::Kind::kJson;
  s.json_schema = schema;
  return s;
}

const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer"},
        "tags":{"type":"array","items":{"enum":["red","green",3]},"maxItems":3},"ok":{"type":"boolean"}},
        "required":["name","ok"],"additionalProperties":false})",
    R"({"type":"array","items":{"anyOf":[{"type":"number"},{"type":"null"},{"const":"x"}]},"minItems":1,"maxItems":4})",
    R"({"$defs":{"P":{"type":"object","properties":{"x":{"type":["integer","string"]}},"required":["x"]}},
        "type":"object","properties":{"a":{"$ref":"#/$defs/P"},"b":{"type":"string","minLength":2,"maxLength":3}}})",
    R"({"type":"object","properties":{"only":{"type":"boolean"}}})",
    R"({"type":"string","enum":["é","\"q\"","a\\b"]})",
};

TEST(StructuredMasks, JsonSchemaSamplesParseAndValidate) {
  GrammarCache cache(synthetic_vocab());
  std::mt19937 rng(11);
  for (const char* schema_text : kSchemas) {
    auto g = grammar(cache, json_spec(schema_text));
    const Json schema = Json::parse(schema_text);
    for (int i = 0; i < 30; ++i) {
      const std::string out = sample(*g, rng, 1 + static_cast<int>(rng() % 40));
      const Json v = Json::parse(out, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << schema_text << " gave unparseable " << out;
      ASSERT_TRUE(valid(v, schema, schema)) << schema_text << " gave invalid " << out;
    }
  }
}

TEST(StructuredMasks, PropertiesFollowTheSchemaOrder) {
  GrammarCache cache(synthetic_vocab());
  auto g = grammar(cache, json_spec(R"({"type":"object","properties":{"z":{"const":1},"a":{"const":2}},"required":["z","a"]})"));
  EXPECT_TRUE(g->dfa().matches(R"({"z":1,"a":2})"));
  EXPECT_TRUE(g->dfa().matches("{ \"z\" : 1 ,\n\"a\":2 }"));
  EXPECT_FALSE(g->dfa().matches(R"({"a":2,"z":1})"));
  EXPECT_FALSE(g->dfa().matches(R"({"z":1})"));
  EXPECT_FALSE(g->dfa().matches("{\"z\":1,      \"a\":2}"));  // whitespace is bounded
}

TEST(StructuredMasks, JsonObjectSamplesAreObjects) {
  GrammarCache cache(synthetic_vocab());
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonObject;
  auto g = grammar(cache, spec);
  std::mt19937 rng(5);
  for (int i = 0; i < 30; ++i) {
    const std::string out = sample(*g, rng, static_cast<int>(rng() % 30));
    const Json v = Json::parse(out, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << out;
    ASSERT_TRUE(v.is_object()) << out;
  }
  EXPECT_FALSE(g->dfa().matches("[1]"));
  EXPECT_TRUE(g->dfa().matches(R"({"a": [1, {"b": null}], "c": "\u00e9"})"));
}

TEST(StructuredMasks, RegexSamplesFullMatch) {
  GrammarCache cache(synthetic_vocab());
  std::mt19937 rng(3);
  for (const char* p : {"(ab|c)+d?", "[0-9]{2,4}-[a-z]+", "(true|false|nu(ll)?)x*", "\\w+@\\w+\\.(com|org)"}) {
    StructuredOutputSpec spec;
    spec.kind = StructuredOutputSpec::Kind::kRegex;
    spec.regex = p;
    auto g = grammar(cache, spec);
    const std::regex re(p);
    for (int i = 0; i < 40; ++i) {
      const std::string out = sample(*g, rng, static_cast<int>(rng() % 20));
      ASSERT_TRUE(std::regex_match(out, re)) << p << " gave " << out;
    }
  }
}

TEST(StructuredMasks, ChoiceSamplesAreChoices) {
  GrammarCache cache(synthetic_vocab());
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kChoice;
  spec.choice = {"red", "green", "gre", "a.b"};
  auto g = grammar(cache, spec);
  std::mt19937 rng(9);
  std::set<std::string> seen;
  for (int i = 0; i < 60; ++i) {
    const std::string out = sample(*g, rng, 100);
    ASSERT_TRUE(std::find(spec.choice.begin(), spec.choice.end(), out) != spec.choice.end()) << out;
    seen.insert(out);
  }
  EXPECT_EQ(seen.size(), spec.choice.size());
  // Forbidden: "ab" is no prefix of a choice, and EOS is refused until one is complete.
  const TokenMask& m = g->mask(g->start());
  EXPECT_FALSE(m.allows(0));
  EXPECT_FALSE(m.allows(static_cast<int32_t>('b')));
  EXPECT_TRUE(m.allows(static_cast<int32_t>('r')));
}

// An empty choice keeps its place wherever it stands in the list.
TEST(StructuredMasks, EmptyChoiceIsAChoiceInAnyPosition) {
  GrammarCache cache(synthetic_vocab());
  for (const std::vector<std::string>& choices :
       {std::vector<std::string>{"", "a"}, std::vector<std::string>{"a", ""}, std::vector<std::string>{""}}) {
    StructuredOutputSpec spec;
    spec.kind = StructuredOutputSpec::Kind::kChoice;
    spec.choice = choices;
    auto g = grammar(cache, spec);
    EXPECT_TRUE(g->dfa().matches("")) << choices.size() << " choices, first '" << choices[0] << "'";
    EXPECT_EQ(g->dfa().matches("a"), choices.size() == 2);
    EXPECT_TRUE(g->mask(g->start()).allows(0));  // EOS at once: the empty choice
  }
}

TEST(StructuredMasks, UnsupportedKeywordsAreNamed) {
  GrammarCache cache(synthetic_vocab());
  auto bad = [&](const std::string& schema) {
    auto g = cache.get(json_spec(schema));
    return g.is_ok() ? std::string("ok") : g.status().message();
  };
  EXPECT_NE(bad(R"({"type":"integer","minimum":3})").find("'minimum' is not supported"), std::string::npos);
  EXPECT_NE(bad(R"({"type":"object","properties":{"a":{"type":"string","pattern":"x"}}})").find("schema.properties.a"),
            std::string::npos);
  EXPECT_NE(bad(R"({"type":"object","properties":{"a":{}},"additionalProperties":true})").find("additionalProperties"),
            std::string::npos);
  EXPECT_NE(bad(R"({"type":"object","properties":{"a":{}},"required":["b"]})").find("required"), std::string::npos);
  EXPECT_NE(bad(R"({"$ref":"#/$defs/missing"})").find("missing"), std::string::npos);
  EXPECT_NE(bad("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(bad(R"({"type":"array","items":{"type":"string","maxLength":40},"maxItems":400})").find("too complex"),
            std::string::npos);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(StructuredMasks, CacheSharesGrammarsAndMasks) {
  GrammarCache cache(synthetic_vocab(), 2);
  auto a = grammar(cache, json_spec(kSchemas[0]));
  auto b = grammar(cache, json_spec(kSchemas[0]));
  EXPECT_EQ(a.get(), b.get());
  a->mask(a->start());
  EXPECT_EQ(b->num_cached_masks(), 1u);
  grammar(cache, json_spec(kSchemas[1]));
  grammar(cache, json_spec(kSchemas[2]));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(grammar(cache, json_spec(kSchemas[0])).get(), a.get());  // evicted, compiled anew
}

TEST(StructuredMasks, DemoTokenizerJsonSchema) {
  auto tok = Tokenizer::load(std::string(QUIVER_SOURCE_DIR) + "/models/demo/base");
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  auto vocab = std::make_shared<TokenVocab>(TokenVocab::from_tokenizer(*tok.value(), tok.value()->vocab_size(), {1}));
  // Byte-level pieces decode to their bytes: "Ġ" is a space.
  const auto space = tok.value()->token_to_id("\xC4\xA0");
  ASSERT_TRUE(space.has_value());
  EXPECT_EQ(vocab->bytes(*space), " ");
  EXPECT_TRUE(vocab->bytes(0).empty());  // <|bos|> is special
  GrammarCache cache(vocab);
  auto g = grammar(cache, json_spec(kSchemas[0]));
  const Json schema = Json::parse(kSchemas[0]);
  std::mt19937 rng(1);
  for (int i = 0; i < 10; ++i) {
    std::string text;
    int32_t state = g->start();
    const auto dist = distance_to_accept(g->dfa());
    for (int step = 0; step < 400; ++step) {
      check_mask(*g, state);
      const TokenMask& m = g->mask(state);
      if (m.allows(1) && (m.eos_only || step > 30)) break;
      std::vector<int32_t> ids;
      for (int32_t id = 0; id < vocab->size(); ++id)
        if (m.allows(id) && id != 1) ids.push_back(id);
      ASSERT_FALSE(ids.empty());
      int32_t pick = ids[rng() % ids.size()];
      if (step > 30)
        for (int32_t id : ids)
          if (dist[static_cast<size_t>(g->advance(state, id))] < dist[static_cast<size_t>(g->advance(state, pick))]) pick = id;
      state = g->advance(state, pick);
      text += vocab->bytes(pick);
    }
    const Json v = Json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << text;
    ASSERT_TRUE(valid(v, schema, schema)) << text;
  }
}

}  // namespace
}  // namespace quiver::structured
