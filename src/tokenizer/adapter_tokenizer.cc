// Picking and loading an adapter folder's tokenizer (see adapter_tokenizer.h). The added
// tokens of a folder without tokenizer.json get the flags transformers gives them when it
// loads such a folder: tokenizer_config.json's added_tokens_decoder entries as written, else
// added_tokens.json's names as AddedToken(lstrip=False, rstrip=False, normalized=not special,
// special) — special only when a special-token field names them — and any token a
// special-token field names is made special, as PreTrainedTokenizerFast's constructor does.
#include "tokenizer/adapter_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "io/path_allowlist.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/json_path.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/utf8.h"

namespace quiver {

using nlohmann::json;
namespace fs = std::filesystem;
namespace jp = json_path;

namespace {

// Every file read below; each must resolve inside the allow-list.
constexpr const char* kReadFiles[] = {"tokenizer.json",          "tokenizer_config.json", "added_tokens.json",
                                      "special_tokens_map.json", "chat_template.jinja",   "chat_template.json"};
// Files whose presence means Hugging Face builds a tokenizer from the folder.
constexpr const char* kHfFiles[] = {"tokenizer_config.json", "added_tokens.json", "special_tokens_map.json",
                                    "tokenizer.model"};
// transformers' special-token attributes (SPECIAL_TOKENS_ATTRIBUTES, one string each).
constexpr const char* kSpecialKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token"};

Status check_files_allowed(const fs::path& dir, const std::vector<std::string>& allowlist) {
  if (allowlist.empty()) return Status::ok();
  for (const char* name : kReadFiles) {
    std::error_code ec;
    const fs::path real = fs::canonical(dir / name, ec);
    if (!ec) QV_RETURN_IF_ERROR(check_allowed(real.string(), allowlist, name));
  }
  return Status::ok();
}

// An object file, or an empty object when the folder does not have it.
Result<json> read_object_if_present(const fs::path& path) {
  if (!fs::exists(path)) return json::object();
  QV_ASSIGN_OR_RETURN(json j, read_json_file(path));
  if (!j.is_object()) return Status::error(path.string() + ": expected a JSON object");
  return j;
}

// The strings the special-token fields of `config` name.
Status collect_specials(const json& config, const std::string& file, std::set<std::string>* out) {
  for (const char* key : kSpecialKeys) {
    auto s = special_token_string(config, key);
    if (!s) return s.status().with_context(file);
    if (!s->empty()) out->insert(s.value());
  }
  auto extra = config.find("additional_special_tokens");
  if (extra == config.end() || extra->is_null()) return Status::ok();
  if (!extra->is_array()) return Status::error(file + ": additional_special_tokens: expected a list");
  for (size_t i = 0; i < extra->size(); ++i) {
    const json& e = (*extra)[i];
    if (e.is_string()) {
      out->insert(e.get<std::string>());
    } else {
      auto content = jp::require_string(e, "content", jp::index("additional_special_tokens", i));
      if (!content) return content.status().with_context(file);
      out->insert(content.value());
    }
  }
  return Status::ok();
}

Result<int32_t> token_id(const std::string& text, const std::string& path) {
  const bool digits = !text.empty() && text.size() <= 9 && std::all_of(text.begin(), text.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
  const int64_t id = digits ? std::stoll(text) : -1;
  if (id < 0 || id > jp::kMaxTokenId)
    return jp::error(path, "'" + text + "' is not a token id in [0, " + std::to_string(jp::kMaxTokenId) + "]");
  return static_cast<int32_t>(id);
}

// tokenizer_config.json's {"32000": {"content": "[user]", "special": false, ...}, ...}.
Result<std::vector<AddedToken>> tokens_from_decoder(const json& decoder) {
  if (!decoder.is_object()) return jp::error("added_tokens_decoder", "expected an object");
  std::vector<AddedToken> out;
  for (auto it = decoder.begin(); it != decoder.end(); ++it) {
    const std::string path = jp::child("added_tokens_decoder", it.key());
    QV_ASSIGN_OR_RETURN(int32_t id, token_id(it.key(), path));
    if (!it.value().is_object()) return jp::error(path, "expected an object");
    json entry = it.value();
    entry["id"] = id;
    QV_ASSIGN_OR_RETURN(AddedToken token, parse_added_token(entry, path));
    out.push_back(std::move(token));
  }
  return out;
}

// added_tokens.json's {"[user]": 32000, ...}.
Result<std::vector<AddedToken>> tokens_from_names(const json& names, const std::set<std::string>& specials) {
  std::vector<AddedToken> out;
  for (auto it = names.begin(); it != names.end(); ++it) {
    if (it.key().empty() || !utf8::is_valid(it.key()))
      return Status::error("a token name is empty or not valid UTF-8");
    if (!it.value().is_number_integer())
      return Status::error("token '" + it.key() + "': expected an integer id, got " + it.value().dump());
    QV_ASSIGN_OR_RETURN(int32_t id, token_id(it.value().dump(), "token '" + it.key() + "'"));
    AddedToken token;
    token.id = id;
    token.content = it.key();
    token.special = specials.count(token.content) > 0;
    token.normalized = !token.special;
    out.push_back(std::move(token));
  }
  return out;
}

TokenizerConfig overlay(TokenizerConfig base, const TokenizerConfig& own) {
  if (!own.bos_token.empty()) base.bos_token = own.bos_token;
  if (!own.eos_token.empty()) base.eos_token = own.eos_token;
  if (own.add_bos_token) base.add_bos_token = own.add_bos_token;
  if (own.add_eos_token) base.add_eos_token = own.add_eos_token;
  if (own.chat_template) base.chat_template = own.chat_template;
  return base;
}

// Case 2: the base tokenizer plus the folder's added tokens. `file` gets the name of the file
// the added tokens came from, for later messages.
Result<std::shared_ptr<const Tokenizer>> extend_base(const fs::path& dir, const HfTokenizer& base, std::string* file) {
  QV_ASSIGN_OR_RETURN(json config, read_object_if_present(dir / "tokenizer_config.json"));
  QV_ASSIGN_OR_RETURN(json special_map, read_object_if_present(dir / "special_tokens_map.json"));
  std::set<std::string> specials;
  QV_RETURN_IF_ERROR(collect_specials(config, "tokenizer_config.json", &specials));
  QV_RETURN_IF_ERROR(collect_specials(special_map, "special_tokens_map.json", &specials));

  std::vector<AddedToken> listed;
  if (auto d = config.find("added_tokens_decoder"); d != config.end() && !d->is_null()) {
    *file = "tokenizer_config.json";
    auto parsed = tokens_from_decoder(*d);
    if (!parsed) return parsed.status().with_context(*file);
    listed = std::move(parsed).value();
    for (AddedToken& t : listed) t.special = t.special || specials.count(t.content) > 0;
  } else if (fs::exists(dir / "added_tokens.json")) {
    *file = "added_tokens.json";
    QV_ASSIGN_OR_RETURN(json names, read_object_if_present(dir / *file));
    auto parsed = tokens_from_names(names, specials);
    if (!parsed) return parsed.status().with_context(*file);
    listed = std::move(parsed).value();
  }

  // Ids inside the base tokenizer name its own tokens (save_pretrained lists <s> and the like
  // too): they must be those tokens, and keep the base's flags. The others are new, and must
  // have the ids HF's add_tokens gives them: the next ones after the base's, in id order.
  std::sort(listed.begin(), listed.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  const int64_t base_size = base.vocab_size();
  std::vector<AddedToken> fresh;
  for (AddedToken& t : listed) {
    const std::string id = std::to_string(t.id);
    if (t.id < base_size) {
      std::optional<std::string> own = base.id_to_token(t.id);
      if (own != t.content)
        return Status::error(*file + ": token '" + t.content + "' has id " + id + ", which is " +
                             (own ? "'" + *own + "'" : "unused") + " in the base model's tokenizer");
      continue;
    }
    const int64_t want = base_size + static_cast<int64_t>(fresh.size());
    if (t.id != want)
      return Status::error(*file + ": token '" + t.content + "' has id " + id + " but the next id after the base " +
                           "model's tokenizer (" + std::to_string(base_size) + " ids) is " + std::to_string(want) +
                           " (added tokens must continue it without gaps)");
    fresh.push_back(std::move(t));
  }
  QV_ASSIGN_OR_RETURN(TokenizerConfig own_config, read_tokenizer_config(dir));
  auto extended = base.with_added_tokens(std::move(fresh), overlay(base.config(), own_config));
  if (!extended) return extended.status().with_context(file->empty() ? "tokenizer_config.json" : *file);
  return std::shared_ptr<const Tokenizer>(std::move(extended).value());
}

// The checks every adapter tokenizer passes, whatever built it.
Status check_ids(const Tokenizer& tok, const AdapterTokenizerSource& s, const std::string& file) {
  if (tok.vocab_size() > s.vocab_size)
    return Status::error(file + ": the tokenizer has ids up to " + std::to_string(tok.vocab_size() - 1) +
                         " but the adapter's vocabulary ends at id " + std::to_string(s.vocab_size - 1) + " (" +
                         std::to_string(s.base_vocab_size) + " of the base model, " +
                         std::to_string(s.vocab_size - s.base_vocab_size) +
                         " added): it would produce ids the model has no embedding for");
  for (size_t i = 0; i < s.new_token_names.size(); ++i) {
    const std::string& name = s.new_token_names[i];
    const int64_t id = s.base_vocab_size + static_cast<int64_t>(i);
    std::optional<int32_t> got = tok.token_to_id(name);
    if (got != id)
      return Status::error(file + ": added_tokens.json gives '" + name + "' id " + std::to_string(id) +
                           " but the tokenizer " + (got ? "gives it id " + std::to_string(*got) : "does not have it"));
  }
  return Status::ok();
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> load_adapter_tokenizer(const AdapterTokenizerSource& s) {
  const fs::path dir(s.dir);
  QV_RETURN_IF_ERROR(check_files_allowed(dir, s.allowlist));
  std::shared_ptr<const Tokenizer> tokenizer;
  std::string file = "tokenizer.json";
  if (fs::exists(dir / "tokenizer.json")) {
    QV_ASSIGN_OR_RETURN(tokenizer, Tokenizer::load(s.dir));
  } else if (std::any_of(std::begin(kHfFiles), std::end(kHfFiles), [&](const char* f) { return fs::exists(dir / f); })) {
    // Nothing to add the tokens to: the adapter's requests send token ids, as the base's do.
    if (!s.base) return s.base;
    const auto* base = dynamic_cast<const HfTokenizer*>(s.base.get());
    if (base == nullptr) return Status::error("the base model's tokenizer cannot take the adapter's added tokens");
    file.clear();
    QV_ASSIGN_OR_RETURN(tokenizer, extend_base(dir, *base, &file));
    if (file.empty()) file = "tokenizer_config.json";
  } else {
    return s.base;
  }
  QV_RETURN_IF_ERROR(check_ids(*tokenizer, s, file));
  return tokenizer;
}

}  // namespace quiver
