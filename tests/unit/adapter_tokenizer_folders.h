// Folders for the adapter-tokenizer tests, built in a scratch directory from committed
// fixtures: a base model (tests/fixtures/llama_vocab's files, linked, plus the 512-id
// tokenizers/llama512) and adapters over it in the layouts an adapter tokenizer comes in.
// llama_vocab's adapters add ids 512-515, named [user] [/user] [assistant] [/assistant].
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace quiver::tokenizer_folders {

namespace fs = std::filesystem;
using nlohmann::json;

inline const fs::path kRoot = QUIVER_SOURCE_DIR;
inline const fs::path kVocabModel = kRoot / "tests/fixtures/llama_vocab";
inline const fs::path kTokenizer512 = kRoot / "tests/fixtures/tokenizers/llama512";
inline const std::vector<std::string> kNewTokens = {"[user]", "[/user]", "[assistant]", "[/assistant]"};

// The adapters' own prompt format, written with their new tokens.
inline const std::string kAdapterTemplate =
    "{% for m in messages %}{% if m['role'] == 'user' %}[user] {{ m['content'] }} [/user]{% else %}"
    "[assistant] {{ m['content'] }} [/assistant]{% endif %}{% endfor %}"
    "{% if add_generation_prompt %} [assistant]{% endif %}";

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

inline json read_json(const fs::path& p) { return json::parse(read_text(p)); }

// Links the adapter files of `from` into `to` (made if missing): its config, weights and
// vocabulary rows, not its tokenizer files, which each test writes for itself.
inline void link_files(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) {
    const std::string name = e.path().filename().string();
    const bool adapter_file = name.starts_with("adapter_") || name == "new_embeddings.safetensors" ||
                              name == "added_tokens.json";
    if (e.is_regular_file() && adapter_file) fs::create_symlink(e.path(), to / name);
  }
}

// root/base: llama_vocab's model files and the llama512 tokenizer (with its [INST] template).
inline fs::path make_base(const fs::path& root) {
  const fs::path base = root / "base";
  fs::create_directories(base);
  for (const auto& e : fs::directory_iterator(kVocabModel)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json" || name == "generation_config.json" || name.find("safetensors") != std::string::npos)
      fs::create_symlink(e.path(), base / name);
  }
  fs::copy_file(kTokenizer512 / "tokenizer.json", base / "tokenizer.json");
  fs::copy_file(kTokenizer512 / "tokenizer_config.json", base / "tokenizer_config.json");
  return base;
}

// root/name holding the files of llama_vocab/adapters/<weights>, linked.
inline fs::path make_adapter(const fs::path& root, const std::string& name, const std::string& weights = "vocab_added") {
  const fs::path dir = root / name;
  link_files(kVocabModel / "adapters" / weights, dir);
  return dir;
}

// The added tokens as tokenizer.add_tokens([...]) makes them and save_pretrained writes them.
inline json new_token_entries(int first_id = 512) {
  json added = json::array();
  for (size_t i = 0; i < kNewTokens.size(); ++i)
    added.push_back({{"id", first_id + static_cast<int>(i)}, {"content", kNewTokens[i]}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", true}, {"special", false}});
  return added;
}

// Layout 1: DIR/tokenizer.json (llama512 with the new tokens added) and a tokenizer_config.json
// with the adapters' chat template. `tokenizer` replaces the tokenizer.json when given.
inline void add_tokenizer_json(const fs::path& dir, const json* tokenizer = nullptr) {
  json tok = read_json(kTokenizer512 / "tokenizer.json");
  for (const json& a : new_token_entries()) tok["added_tokens"].push_back(a);
  write_text(dir / "tokenizer.json", (tokenizer ? *tokenizer : tok).dump());
  json config = read_json(kTokenizer512 / "tokenizer_config.json");
  config["chat_template"] = kAdapterTemplate;
  write_text(dir / "tokenizer_config.json", config.dump(2));
}

// Layout 2 (vLLM's sql-lora adapter): no tokenizer.json; tokenizer_config.json (with the
// adapters' chat template, and added_tokens_decoder when `with_decoder`), special_tokens_map.json
// and a tokenizer.model, which quiver does not read. The folder's added_tokens.json names the ids.
inline void add_hf_files(const fs::path& dir, bool with_decoder) {
  json config = {{"add_bos_token", true},  {"add_eos_token", false},         {"bos_token", "<s>"},
                 {"eos_token", "</s>"},    {"unk_token", "<unk>"},           {"legacy", true},
                 {"pad_token", nullptr},   {"tokenizer_class", "LlamaTokenizer"}, {"chat_template", kAdapterTemplate}};
  if (with_decoder) {
    json decoder = json::object();
    const char* specials[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; ++i)
      decoder[std::to_string(i)] = {{"content", specials[i]}, {"lstrip", false}, {"normalized", false},
                                    {"rstrip", false},        {"single_word", false}, {"special", true}};
    for (const json& a : new_token_entries()) {
      json entry = a;
      entry.erase("id");
      decoder[std::to_string(a["id"].get<int>())] = entry;
    }
    config["added_tokens_decoder"] = decoder;
  }
  write_text(dir / "tokenizer_config.json", config.dump(2));
  write_text(dir / "special_tokens_map.json",
             json({{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}}).dump(2));
  write_text(dir / "tokenizer.model", "not a SentencePiece model: quiver never reads it");
}

}  // namespace quiver::tokenizer_folders
