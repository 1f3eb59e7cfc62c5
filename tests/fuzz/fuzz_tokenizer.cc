// libFuzzer target for the tokenizer files a model folder brings: tokenizer.json (the
// first input byte even) and a chat template's Jinja source (odd). Every input must end in
// a value or an error Status; a crash, a sanitizer report, an exception or a hang is a
// finding. A tokenizer that loads encodes and decodes a fixed text, all at once and one
// id at a time; a template that parses renders a fixed conversation.
// Built and run for a bounded time by tools/fuzz.sh tokenizer (CTest: fuzz_tokenizer).
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_scratch.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

const std::string& tokenizer_dir() {
  static const std::string dir = quiver::fuzz::process_dir("tokenizer").string();
  return dir;
}

void exercise(const quiver::Tokenizer& t) {
  auto ids = t.encode("Hello w\xc3\xb6rld <s> 123 \xe2\x96\x81x\n\t", true);
  if (!ids.is_ok()) return;
  (void)t.decode(ids.value(), true);
  (void)t.decode(ids.value(), false);
  quiver::IncrementalDetokenizer inc(&t, {}, false);
  for (int32_t id : ids.value())
    if (!inc.push(id).is_ok()) return;
  (void)inc.flush();
  std::vector<int32_t> first;
  for (int32_t id = 0; id < 64 && id < t.vocab_size(); ++id) first.push_back(id);
  (void)t.decode(first, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    std::ofstream(tokenizer_dir() + "/tokenizer.json", std::ios::binary | std::ios::trunc) << body;
    auto t = quiver::Tokenizer::load(tokenizer_dir());
    if (t.is_ok()) exercise(*t.value());
    return 0;
  }
  auto tmpl = quiver::ChatTemplate::parse(body);
  if (!tmpl.is_ok()) return 0;
  const nlohmann::json messages = nlohmann::json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi [x]"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again"}])");
  (void)tmpl.value().render(messages, true, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  return 0;
}
