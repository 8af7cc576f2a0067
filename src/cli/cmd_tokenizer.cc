// `flashgen tokenize` and `flashgen detokenize`: the model folder's tokenizer from the command
// line, with exactly the ids / text Hugging Face tokenizers would give.
//
//   flashgen tokenize --model DIR (--text T | --file F) [--add-special-tokens] [--json]
//       prints the ids space-separated and a newline (--json: one line {"ids": [...]}).
//       Special tokens (BOS...) are added only with --add-special-tokens, like
//       encode(text, add_special_tokens=False) by default.
//   flashgen detokenize --model DIR --ids "1,2,3" [--skip-special-tokens]
//       writes the decoded text to stdout byte for byte (no trailing newline, nothing else).
//
// Errors are thrown as std::runtime_error with one line; main prints it and exits non-zero.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/token_ids.h"
#include "tokenizer/tokenizer.h"

namespace fg::cli {
namespace {

struct TokenizeOptions {
  std::string model_dir;
  std::string text;
  std::string file;
  bool add_special_tokens = false;
  bool json = false;
};

struct DetokenizeOptions {
  std::string model_dir;
  std::string ids;
  bool skip_special_tokens = false;
};

std::unique_ptr<Tokenizer> load_or_throw(const std::string& model_dir) {
  auto r = Tokenizer::load(model_dir);
  if (!r.is_ok()) throw std::runtime_error(r.status().to_string());
  return std::move(r).value();
}

std::string read_file_or_throw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_stdout(const std::string& s) {
  if (!s.empty() && std::fwrite(s.data(), 1, s.size(), stdout) != s.size())
    throw std::runtime_error("cannot write to stdout");
  std::fflush(stdout);
}

void run_tokenize(const TokenizeOptions& o) {
  const std::string text = o.file.empty() ? o.text : read_file_or_throw(o.file);
  auto tok = load_or_throw(o.model_dir);
  const std::vector<int32_t> ids = tok->encode(text, o.add_special_tokens);
  std::string out = o.json ? "{\"ids\": [" : "";
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k) out += o.json ? ", " : " ";
    out += std::to_string(ids[k]);
  }
  out += o.json ? "]}\n" : "\n";
  write_stdout(out);
}

void run_detokenize(const DetokenizeOptions& o) {
  const std::vector<int32_t> ids = parse_token_ids(o.ids, "--ids");
  auto tok = load_or_throw(o.model_dir);
  for (int32_t id : ids)
    if (id >= tok->vocab_size())
      throw std::runtime_error("--ids: id " + std::to_string(id) + " is outside the vocabulary (size " +
                               std::to_string(tok->vocab_size()) + ")");
  write_stdout(tok->decode(ids, o.skip_special_tokens));
}

}  // namespace

void register_tokenizer_commands(CLI::App& app) {
  auto topts = std::make_shared<TokenizeOptions>();
  CLI::App* tok = app.add_subcommand("tokenize", "Print the token ids of a text (Hugging Face tokenizer.json)");
  tok->add_option("--model", topts->model_dir, "Model folder with tokenizer.json (or the file itself), or a .gguf file")
      ->required();
  CLI::Option* text = tok->add_option("--text", topts->text, "Text to encode");
  CLI::Option* file = tok->add_option("--file", topts->file, "File whose bytes are encoded");
  text->excludes(file);
  file->excludes(text);
  tok->add_flag("--add-special-tokens", topts->add_special_tokens, "Add BOS/EOS as the tokenizer's template says");
  tok->add_flag("--json", topts->json, "Print {\"ids\": [...]} instead of space-separated ids");
  tok->callback([topts, text, file] {
    if (text->count() == 0 && file->count() == 0) throw std::runtime_error("tokenize: give --text or --file");
    run_tokenize(*topts);
  });

  auto dopts = std::make_shared<DetokenizeOptions>();
  CLI::App* detok = app.add_subcommand("detokenize", "Print the text of token ids");
  detok
      ->add_option("--model", dopts->model_dir,
                   "Model folder with tokenizer.json (or the file itself), or a .gguf file")
      ->required();
  detok->add_option("--ids", dopts->ids, "Token ids, e.g. \"1,2,3\"")->required();
  detok->add_flag("--skip-special-tokens", dopts->skip_special_tokens, "Leave out special tokens");
  detok->callback([dopts] { run_detokenize(*dopts); });
}

}  // namespace fg::cli
