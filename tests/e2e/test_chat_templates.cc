// link: qv_tokenizer
// Real Hugging Face chat templates (tests/fixtures/chat_templates/*.jinja) rendered by
// ChatTemplate must match, byte for byte, the renders transformers produced for the
// same conversations (tests/fixtures/chat_expected/<name>.jsonl, written by
// tools/make_chat_fixtures.py). A render that failed in transformers must fail here,
// and a raise_exception message must be the same text.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const fs::path kFixtures = fs::path(QUIVER_SOURCE_DIR) / "tests" / "fixtures";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<ojson> read_jsonl(const fs::path& p) {
  std::vector<ojson> rows;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(ojson::parse(line));
  return rows;
}

class ChatTemplates : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplates, MatchTransformers) {
  const std::string name = GetParam();
  const fs::path expected_path = kFixtures / "chat_expected" / (name + ".jsonl");
  if (!fs::exists(expected_path))
    GTEST_SKIP() << expected_path << " is missing: run `python3 tools/make_chat_fixtures.py` where transformers is installed";

  auto tmpl = ChatTemplate::parse(read_file(kFixtures / "chat_templates" / (name + ".jinja")));
  ASSERT_TRUE(tmpl.is_ok()) << name << ": " << tmpl.message();

  std::map<std::string, ojson> conversations;
  for (ojson& c : read_jsonl(kFixtures / "chat_conversations.jsonl")) conversations[c["id"].get<std::string>()] = c;
  ojson special = ojson::parse(read_file(kFixtures / "chat_templates" / "special_tokens.json"));
  ojson tokens = special.contains(name) ? special[name] : ojson::object();

  int checked = 0;
  for (const ojson& row : read_jsonl(expected_path)) {
    if (row.contains("meta")) continue;
    const std::string id = row["id"].get<std::string>();
    ASSERT_TRUE(conversations.count(id)) << "unknown conversation " << id;
    const ojson& conv = conversations[id];
    ojson variables = tokens;
    if (conv.contains("variables"))
      for (auto it = conv["variables"].begin(); it != conv["variables"].end(); ++it) variables[it.key()] = it.value();
    if (conv.contains("tools")) variables["tools"] = conv["tools"];
    const bool agp = row["add_generation_prompt"].get<bool>();

    auto out = tmpl->render_ordered(conv["messages"], agp, variables);
    const std::string where = name + "/" + id + (agp ? " (add_generation_prompt)" : "");
    if (row.contains("error")) {
      EXPECT_FALSE(out.is_ok()) << where << ": transformers failed with '" << row["error"].get<std::string>()
                                << "' but quiver rendered:\n" << *out;
      if (!out.is_ok() && row["error_kind"] == "raise_exception") {
        EXPECT_EQ(out.message(), row["error"].get<std::string>()) << where;
      }
    } else {
      ASSERT_TRUE(out.is_ok()) << where << ": " << out.message();
      EXPECT_EQ(*out, row["output"].get<std::string>()) << where;
    }
    ++checked;
  }
  EXPECT_GT(checked, 0) << name;
}

INSTANTIATE_TEST_SUITE_P(Real, ChatTemplates,
                         ::testing::Values("llama2", "llama3", "llama3_1", "mistral_v1", "mistral_v3", "qwen2",
                                           "qwen2_5", "qwen3", "zephyr"));

// Every template in the fixture folder is covered by the list above.
TEST(ChatTemplateFixtures, AllTemplatesListed) {
  const std::set<std::string> listed = {"llama2", "llama3", "llama3_1", "mistral_v1", "mistral_v3",
                                        "qwen2",  "qwen2_5", "qwen3",   "zephyr"};
  for (const auto& entry : fs::directory_iterator(kFixtures / "chat_templates")) {
    if (entry.path().extension() != ".jinja") continue;
    EXPECT_TRUE(listed.count(entry.path().stem().string())) << entry.path() << " has no test";
  }
}

}  // namespace
}  // namespace quiver
