// Helpers for tokenizer tests: tiny hand-built tokenizer.json documents, and locating the
// real tokenizers (committed under tests/fixtures/tokenizers, fetched ones under
// tests/tokenizer_data/npm by tools/fetch_tokenizers.sh).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_tokenizer.h"

namespace quiver::testing {

using nlohmann::json;

// SentencePiece-style toy: <unk>=0 <s>=1 </s>=2, <0x00>..<0xFF> = 3..258, then `pieces`
// from 259 on; Prepend/Replace normalizers, byte fallback, LLaMA's decoder and BOS template.
inline json sentencepiece_json(const std::vector<std::string>& pieces, const json& merges) {
  json vocab = json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = 259 + static_cast<int>(i);
  auto special = [](int id, const char* content) {
    return json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  return json{
      {"version", "1.0"},
      {"added_tokens", {special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")}},
      {"normalizer", {{"type", "Sequence"},
                      {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", {{"type", "TemplateProcessing"},
                          {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "Sequence"},
                   {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                 {{"type", "ByteFallback"}},
                                 {{"type", "Fuse"}},
                                 {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true},
                 {"vocab", vocab}, {"merges", merges}}}};
}

// Byte-level toy: the 256 byte stand-ins are ids 0..255 (in byte order), `pieces` follow.
inline json byte_level_json(const std::vector<std::string>& pieces, const json& merges) {
  json vocab = json::object();
  // GPT-2's byte -> code point table, rebuilt here independently of the library.
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab[s] = b;
  }
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = 256 + static_cast<int>(i);
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  return json{{"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", byte_level},
              {"post_processor", byte_level},
              {"decoder", byte_level},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

inline std::unique_ptr<HfTokenizer> make_tokenizer(const json& j, const TokenizerConfig& config = {}) {
  auto t = HfTokenizer::create(j, config);
  if (!t) throw std::runtime_error(t.message());
  return std::move(t.value());
}

// A fresh empty folder under the system temp dir.
inline std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("quiver_tok_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The folder of a real tokenizer, or "" when it is neither committed nor fetched.
inline std::string real_tokenizer_dir(const std::string& name) {
  for (const char* base : {"/tests/fixtures/tokenizers/", "/tests/tokenizer_data/npm/"}) {
    std::string dir = std::string(QUIVER_SOURCE_DIR) + base + name;
    if (std::filesystem::exists(dir + "/tokenizer.json")) return dir;
  }
  return "";
}

inline const std::vector<std::string>& real_tokenizer_names() {
  static const std::vector<std::string> names = {"gpt2", "mistral", "llama2", "llama2-metaspace", "llama3", "qwen3"};
  return names;
}

inline std::vector<std::string> corpus_texts() {
  std::ifstream in(std::string(QUIVER_SOURCE_DIR) + "/tests/fixtures/tokenizer_corpus.jsonl");
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) texts.push_back(json::parse(line).at("text").get<std::string>());
  }
  return texts;
}

}  // namespace quiver::testing
