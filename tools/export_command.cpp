// `tessera export CKPT_DIR OUT_DIR [--tag TAG]`: a checkpoint as a Hugging Face model directory.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/tokenizer.h"
#include "tessera/models/pretrained.h"
#include "tessera/ops.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;

const char* kExportHelp = R"(usage: tessera export CKPT_DIR OUT_DIR [--tag TAG] [--json]

Writes a complete Hugging Face model directory from a training checkpoint of the built-in
GPT-2 or BERT, saved at any ZeRO stage and any number of ranks:
  config.json          the architecture, as transformers reads it
  model.safetensors    float32 weights under HF's names and layouts ({"format": "pt"})
  vocab.json, merges.txt   GPT-2's byte-level BPE (data.tokenizer "gpt2"), or the
                       tokenizer.json training read (data.tokenizer_file)
  tokenizer.json, tokenizer_config.json, tessera_chars.json
                       the character vocabulary (data.tokenizer "char"), which
                       AutoTokenizer.from_pretrained(OUT_DIR) loads; BERT also gets a
                       vocab.txt in id order (whitespace characters as [unused<id>])
  vocab.txt, tokenizer_config.json   BERT's WordPiece (data.tokenizer "wordpiece")
GPT2LMHeadModel.from_pretrained(OUT_DIR) / BertForPreTraining.from_pretrained(OUT_DIR) load
it, and so do `tessera eval` and `tessera generate` (text prompts for both tokenizers).
CKPT_DIR is the directory given to --save or checkpoint_dir (TAG: the one `latest` names) or
a tag directory itself.
)";

// The tokenizer files of the checkpoint (saved by `tessera train` under tokenizer/), in HF's
// names; returns the files written.
std::vector<std::string> export_tokenizer(const fs::path& tag_dir, const fs::path& out,
                                          const std::string& model_type) {
  const fs::path tok = tag_dir / "tokenizer";
  const fs::path meta_path = tok / "tessera_tokenizer.json";
  if (!fs::exists(meta_path)) {
    std::cerr << "export: warning: '" << tag_dir.string()
              << "' stores no tokenizer (saved by an older version or from C++): exported "
                 "without tokenizer files\n";
    return {};
  }
  const nlohmann::json meta_json = io::JsonFields::parse_file(meta_path.string());
  const io::JsonFields meta(meta_json, io::quoted(meta_path.string()));
  const std::string kind = meta.string("kind");
  std::vector<std::string> written;
  if (kind == "gpt2") {
    // The files training read: vocab.json + merges.txt, or a tokenizer.json.
    const bool json_file = fs::exists(tok / "tokenizer.json");
    for (const char* f : json_file ? std::vector<const char*>{"tokenizer.json"}
                                   : std::vector<const char*>{"vocab.json", "merges.txt"}) {
      TS_CHECK(fs::exists(tok / f), "export: '", (tok / f).string(), "' is missing");
      fs::copy_file(tok / f, out / f, fs::copy_options::overwrite_existing);
      written.push_back(f);
    }
    return written;
  }
  if (kind == "wordpiece") {  // BERT's vocab.txt, cased or not as training read it
    TS_CHECK(fs::exists(tok / "vocab.txt"), "export: '", (tok / "vocab.txt").string(),
             "' is missing");
    fs::copy_file(tok / "vocab.txt", out / "vocab.txt", fs::copy_options::overwrite_existing);
    const bool lower = meta.boolean("lower_case");
    io::write_file_atomically((out / "tokenizer_config.json").string(), [&](std::ostream& os) {
      os << nlohmann::json{{"tokenizer_class", "BertTokenizer"},
                           {"do_lower_case", lower},
                           {"strip_accents",
                            lower ? nlohmann::json(nullptr) : nlohmann::json(false)},
                           {"clean_up_tokenization_spaces", false}}
                .dump(1)
         << "\n";
    });
    return {"vocab.txt", "tokenizer_config.json"};
  }
  TS_CHECK(kind == "char", meta.where(), ": 'kind' is \"", kind,
           "\", expected char, gpt2 or wordpiece");
  nlohmann::json chars = meta_json;
  chars.erase("kind");
  io::write_file_atomically((out / "tessera_chars.json").string(),
                            [&](std::ostream& os) { os << chars.dump(1) << "\n"; });
  written.push_back("tessera_chars.json");
  // The same vocabulary for AutoTokenizer.from_pretrained (a fast tokenizer of its own class,
  // so BERT's directory is not read as WordPiece).
  std::vector<std::string> char_list, specials;
  for (const auto& c : meta.array("chars")) char_list.push_back(c.get<std::string>());
  for (const auto& c : meta.array("specials")) specials.push_back(c.get<std::string>());
  io::write_file_atomically((out / "tokenizer.json").string(), [&](std::ostream& os) {
    os << io::char_tokenizer_json(char_list, specials);
  });
  nlohmann::json tok_config{{"tokenizer_class", "PreTrainedTokenizerFast"},
                            {"clean_up_tokenization_spaces", false}};
  if (specials.size() == 5)  // BERT's, in the order train appends them
    for (size_t i = 0;
         const char* k : {"pad_token", "unk_token", "cls_token", "sep_token", "mask_token"})
      tok_config[k] = specials[i++];
  io::write_file_atomically((out / "tokenizer_config.json").string(),
                            [&](std::ostream& os) { os << tok_config.dump(1) << "\n"; });
  written.push_back("tokenizer.json");
  written.push_back("tokenizer_config.json");
  if (model_type == "bert") {
    // One token per line, ids in order; whitespace and control characters cannot be lines.
    io::write_file_atomically((out / "vocab.txt").string(), [&](std::ostream& os) {
      int64_t id = 0;
      for (const char* key : {"chars", "specials"})
        for (const auto& c : meta.array(key)) {
          const std::string s = c.get<std::string>();
          const bool printable = !s.empty() && static_cast<unsigned char>(s[0]) > ' ';
          os << (printable ? s : "[unused" + std::to_string(id) + "]") << "\n";
          ++id;
        }
    });
    written.push_back("vocab.txt");
  }
  return written;
}

}  // namespace

int export_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help"}, {"tag"});
  if (a.has("help")) {
    std::cout << kExportHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 2, "export: expected CKPT_DIR and OUT_DIR (see --help)");
  const fs::path tag_dir = checkpoint_tag_dir(a.positional()[0], a.get("tag", ""), "export");
  const fs::path out = a.positional()[1];
  TS_CHECK(!fs::exists(out / "engine.json"), "export: '", out.string(),
           "' is a checkpoint; give an output directory of its own");
  auto model = checkpoint_model(tag_dir);
  TS_CHECK(model, "export: '", tag_dir.string(),
           "' has no model config: only the built-in GPT-2 and BERT export to Hugging Face's "
           "layout (zero-to-fp32 gives any model's weights)");
  const std::map<std::string, Tensor> weights = checkpoint_weights(tag_dir, "export");
  for (auto& [name, t] : model->named_parameters())
    TS_CHECK(weights.count(name), "export: '", tag_dir.string(), "' has no weights for '", name,
             "'");
  // HF's class may expect more than the checkpoint holds (GPT-2 always has biases).
  if (auto hf_form = model->hf_export_model()) model = std::move(hf_form);
  model->load_state_dict(weights, /*strict=*/false);  // no buffers in ZeRO checkpoints
  io::check_writable_directory(out.string(), "export: OUT_DIR");
  models::save_pretrained(*model, out.string());
  std::vector<std::string> files{"config.json", "model.safetensors"};
  for (const std::string& f : export_tokenizer(tag_dir, out, model->model_type()))
    files.push_back(f);
  std::cerr << "exported " << tag_dir.string() << " (" << model->type_name() << ", "
            << model->num_parameters() << " parameters) to " << out.string() << ":";
  for (const std::string& f : files) std::cerr << " " << f;
  std::cerr << "\n";
  if (a.has("json"))
    std::cout << nlohmann::json{{"output", out.string()},
                                {"model_type", model->model_type()},
                                {"parameters", model->num_parameters()},
                                {"files", files}}
                     .dump()
              << "\n";
  return 0;
}

}  // namespace tessera::cli
