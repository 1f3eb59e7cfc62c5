// Post-processor parsing. A Sequence of processors is folded into one template: the only
// processors that change ids wrap the sequence in special tokens, and nesting composes.
#include "tokenizer/post_processor.h"

#include "tokenizer/json_path.h"

namespace quiver {

using nlohmann::json;
namespace jp = json_path;

namespace {

Result<std::vector<int32_t>> parse_special_ids(const json& special_tokens, const std::string& name,
                                               const std::string& path) {
  std::string entry_path = jp::child(jp::child(path, "special_tokens"), name);
  auto it = special_tokens.find(name);
  if (it == special_tokens.end()) return jp::error(entry_path, "not defined in special_tokens");
  auto ids = it->find("ids");
  if (ids == it->end() || !ids->is_array()) return jp::error(jp::child(entry_path, "ids"), "expected an array");
  std::vector<int32_t> out;
  for (const json& id : *ids) {
    if (!id.is_number_integer()) return jp::error(jp::child(entry_path, "ids"), "expected integers");
    out.push_back(id.get<int32_t>());
  }
  return out;
}

Result<std::vector<PostProcessor::Item>> parse_template(const json& j, const std::string& path) {
  std::string single_path = jp::child(path, "single");
  auto single = j.find("single");
  if (single == j.end() || !single->is_array()) return jp::error(single_path, "expected an array");
  json special_tokens = j.value("special_tokens", json::object());
  std::vector<PostProcessor::Item> items;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& item = (*single)[i];
    std::string item_path = jp::index(single_path, i);
    if (item.contains("Sequence")) {
      items.push_back({true, {}});
    } else if (item.contains("SpecialToken")) {
      QV_ASSIGN_OR_RETURN(std::string name, jp::require_string(item["SpecialToken"], "id", item_path + ".SpecialToken"));
      QV_ASSIGN_OR_RETURN(auto ids, parse_special_ids(special_tokens, name, path));
      items.push_back({false, std::move(ids)});
    } else {
      return jp::error(item_path, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  return items;
}

// Bert/Roberta: {"cls": ["[CLS]", 101], "sep": ["[SEP]", 102]} -> cls $A sep.
Result<std::vector<PostProcessor::Item>> parse_cls_sep(const json& j, const std::string& path) {
  std::vector<PostProcessor::Item> items;
  for (const char* key : {"cls", "sep"}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
      return jp::error(jp::child(path, key), "expected [token, id]");
    }
    if (std::string(key) == "sep") items.push_back({true, {}});
    items.push_back({false, {(*it)[1].get<int32_t>()}});
  }
  return items;
}

// Substitutes `inner` for the sequence item of `outer`.
std::vector<PostProcessor::Item> compose(const std::vector<PostProcessor::Item>& outer,
                                         const std::vector<PostProcessor::Item>& inner) {
  if (outer.empty()) return inner;
  if (inner.empty()) return outer;
  std::vector<PostProcessor::Item> out;
  for (const auto& item : outer) {
    if (item.is_sequence) {
      out.insert(out.end(), inner.begin(), inner.end());
    } else {
      out.push_back(item);
    }
  }
  return out;
}

Status parse_into(const json& j, const std::string& path, std::vector<PostProcessor::Item>& single,
                  bool& is_template) {
  QV_ASSIGN_OR_RETURN(std::string type, jp::type_of(j, path));
  if (type == "ByteLevel") return Status::ok();
  if (type == "TemplateProcessing") {
    QV_ASSIGN_OR_RETURN(auto items, parse_template(j, path));
    single = compose(items, single);
    is_template = true;
    return Status::ok();
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    QV_ASSIGN_OR_RETURN(auto items, parse_cls_sep(j, path));
    single = compose(items, single);
    return Status::ok();
  }
  if (type == "Sequence") {
    auto it = j.find("processors");
    std::string list_path = jp::child(path, "processors");
    if (it == j.end() || !it->is_array()) return jp::error(list_path, "expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      QV_RETURN_IF_ERROR(parse_into((*it)[i], jp::index(list_path, i), single, is_template));
    }
    return Status::ok();
  }
  return jp::error(jp::child(path, "type"), "unsupported post_processor type '" + type +
                   "' (supported: TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence)");
}

}  // namespace

Result<std::unique_ptr<PostProcessor>> PostProcessor::parse(const json& j, const std::string& path) {
  if (j.is_null()) return std::unique_ptr<PostProcessor>();
  auto p = std::make_unique<PostProcessor>();
  QV_RETURN_IF_ERROR(parse_into(j, path, p->single_, p->is_template_));
  return p;
}

std::unique_ptr<PostProcessor> PostProcessor::bos_eos(std::optional<int32_t> bos, std::optional<int32_t> eos) {
  auto p = std::make_unique<PostProcessor>();
  if (bos) p->single_.push_back({false, {*bos}});
  p->single_.push_back({true, {}});
  if (eos) p->single_.push_back({false, {*eos}});
  p->is_template_ = true;
  return p;
}

void PostProcessor::process(std::vector<int32_t>& ids, bool add_special_tokens) const {
  if (!add_special_tokens || single_.empty()) return;
  std::vector<int32_t> out;
  out.reserve(ids.size() + 4);
  for (const Item& item : single_) {
    if (item.is_sequence) {
      out.insert(out.end(), ids.begin(), ids.end());
    } else {
      out.insert(out.end(), item.ids.begin(), item.ids.end());
    }
  }
  ids = std::move(out);
}

}  // namespace quiver
