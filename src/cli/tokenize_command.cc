// `quiver tokenize`: runs the model's tokenizer over a JSONL file (encode, decode or chat
// template; see tokenizer/tokenize_request.h). One output line per input line; a bad line
// gets {"error": {"message": ...}} and the others go on.
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "tokenizer/tokenize_request.h"

namespace quiver {

namespace {

struct TokenizeOptions {
  std::string model;
  std::string input;
  std::string output;
};

int run_tokenize(const TokenizeOptions& o) {
  auto tokenizer = Tokenizer::load(o.model);
  if (!tokenizer.is_ok()) {
    std::cerr << "quiver tokenize: " << tokenizer.message() << "\n";
    return 1;
  }
  std::ifstream in(o.input);
  if (!in) {
    std::cerr << "quiver tokenize: cannot read --input " << o.input << "\n";
    return 2;
  }
  std::ofstream out(o.output);
  if (!out) {
    std::cerr << "quiver tokenize: cannot write --output " << o.output << "\n";
    return 2;
  }
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::ordered_json request = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    Result<nlohmann::json> response =
        request.is_discarded() ? Result<nlohmann::json>(Status::error("not valid JSON"))
                               : run_tokenize_request(*tokenizer.value(), request);
    if (response.is_ok()) {
      out << response.value().dump() << "\n";
    } else {
      nlohmann::json error = {{"error", {{"message", "line " + std::to_string(line_no) + ": " + response.message()}}}};
      if (request.is_object() && request.contains("id")) error["id"] = request["id"];
      out << error.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
  }
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "encode, decode or apply the chat template over a JSONL file");
  cmd->add_option("--model", opts->model, "model folder with tokenizer.json [+ tokenizer_config.json]")->required();
  cmd->add_option("--input", opts->input, "requests, one JSON object per line")->required();
  cmd->add_option("--output", opts->output, "results, one JSON object per line")->required();
  cmd->callback([opts, exit_code] { *exit_code = run_tokenize(*opts); });
}

}  // namespace quiver
