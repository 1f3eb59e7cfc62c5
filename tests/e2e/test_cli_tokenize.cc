// `quiver tokenize` end to end: runs the binary on a JSONL file with good and bad lines and
// checks one output line per request, errors on their own lines, and a clear message for
// a model folder without tokenizer files.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<json> read_lines(const fs::path& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

TEST(CliTokenize, RequestsAndPerLineErrors) {
  fs::path dir = fs::temp_directory_path() / ("quiver_cli_tokenize_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in.jsonl") << R"({"text": "Hello world", "add_special_tokens": true})" << "\n"
                                   << R"({"ids": [1, 22557, 1526], "skip_special_tokens": true})" << "\n"
                                   << "not json\n"
                                   << R"({"ids": [99999999]})" << "\n"
                                   << R"({"text": "Hello world", "add_special_tokens": false})" << "\n";
  std::string model = std::string(QUIVER_SOURCE_DIR) + "/tests/fixtures/tokenizers/mistral";
  std::string cmd = std::string(QUIVER_BINARY) + " tokenize --model " + model + " --input " +
                    (dir / "in.jsonl").string() + " --output " + (dir / "out.jsonl").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<json> out = read_lines(dir / "out.jsonl");
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0]["ids"], json({1, 22557, 1526}));
  EXPECT_EQ(out[1]["text"], "Hello world");
  EXPECT_TRUE(out[2].contains("error"));
  EXPECT_TRUE(out[3]["error"]["message"].get<std::string>().find("vocabulary") != std::string::npos);
  EXPECT_EQ(out[4]["ids"], json({22557, 1526}));

  std::string missing = std::string(QUIVER_BINARY) + " tokenize --model " + dir.string() + " --input " +
                        (dir / "in.jsonl").string() + " --output " + (dir / "out2.jsonl").string() + " 2> " +
                        (dir / "err.txt").string();
  EXPECT_NE(std::system(missing.c_str()), 0);
  std::ifstream err(dir / "err.txt");
  std::string message((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_NE(message.find("tokenizer.json: not found"), std::string::npos) << message;
  fs::remove_all(dir);
}

}  // namespace
