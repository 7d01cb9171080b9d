// Tessera's own sections of a training config: model, data, train.
#include "config_sections.h"

namespace tessera::io::config {

void parse_model(Section m, TrainConfig& c) {
  const std::string& source = m.source();
  auto& md = c.model;
  md.stated_keys = m.stated_keys();
  // Which types exist, and which keys each reads, is the model registry's
  // (models::check_model_config): io reads the section's values.
  m.get("type", md.type);
  TS_CHECK(!md.type.empty(), source, ": 'model.type' is empty");
  m.get("size", md.size);
  m.notes({{"type", "the registered model (`tessera models`)"},
           {"size", "a named size of the model (`tessera models`): it decides the shape keys"},
           {"n_layer", "transformer blocks"},
           {"n_head", "attention heads (divides n_embd)"},
           {"n_embd", "the hidden width"},
           {"block_size", "the longest sequence (positions) the model takes"},
           {"intermediate_size", "the MLP's inner width (0: 4 x n_embd)"},
           {"dropout", "the dropout probability everywhere dropout applies"},
           {"bias", "linear and norm layers have biases"},
           {"transformer_kernel",
            "the layers run as DeepSpeed's transformer kernel (QKV as one GEMM, the "
            "\"transformer_kernel\" section's options; docs/models.md)"},
           {"init_from",
            "a Hugging Face model directory: its weights, and its config.json for the keys left "
            "out"}});
  m.get_min<int64_t>("n_layer", md.n_layer, 1, ">= 1");
  m.get_min<int64_t>("n_head", md.n_head, 1, ">= 1");
  m.get_min<int64_t>("n_embd", md.n_embd, 1, ">= 1");
  m.get_min<int64_t>("block_size", md.block_size, 2, ">= 2");
  m.get_min<int64_t>("intermediate_size", md.intermediate_size, 0, ">= 0");
  m.get("dropout", md.dropout);
  m.expect("dropout", md.dropout >= 0 && md.dropout < 1, md.dropout, "in [0, 1)");
  m.get("bias", md.bias);
  m.get("transformer_kernel", md.transformer_kernel);
  m.get("init_from", md.init_from);
  if (!md.init_from.empty()) adopt_init_from_model(m, c);
  if (!md.size.empty())
    for (const char* k : {"n_layer", "n_head", "n_embd", "intermediate_size"})
      if (m.has(k))
        m.warnings().push_back(source + ": 'model." + k +
                               "' has no effect with 'model.size' (ignored): the named size \"" +
                               md.size + "\" decides it");
  TS_CHECK(md.n_embd % md.n_head == 0, source, ": 'model.n_embd' (", md.n_embd,
           ") must be divisible by 'model.n_head' (", md.n_head, ")");
  m.warn_unknown();
}

void parse_data(Section d, TrainConfig& c) {
  const std::string& source = d.source();
  auto& dt = c.data;
  dt.stated_keys = d.stated_keys();
  d.get("path", dt.path);
  d.get("tokenizer", dt.tokenizer);
  d.expect("tokenizer",
           dt.tokenizer == "char" || dt.tokenizer == "gpt2" || dt.tokenizer == "wordpiece",
           dt.tokenizer, "\"char\", \"gpt2\" or \"wordpiece\"");
  d.get("vocab", dt.vocab);
  d.get("merges", dt.merges);
  d.get("tokenizer_file", dt.tokenizer_file);
  d.get("lower_case", dt.lower_case);
  d.get("val_fraction", dt.val_fraction);
  d.expect("val_fraction", dt.val_fraction > 0 && dt.val_fraction < 1, dt.val_fraction,
           "in (0, 1)");
  d.get("cache_dir", dt.cache_dir);
  d.notes({{"path", "the corpus: a text file or a directory of text files"},
           {"tokenizer", "characters, GPT-2's byte-level BPE or BERT's WordPiece"},
           {"vocab", "vocab.json (gpt2) or vocab.txt (wordpiece)"},
           {"merges", "merges.txt (gpt2)"},
           {"tokenizer_file", "a Hugging Face tokenizer.json instead of vocab and merges"},
           {"lower_case", "wordpiece: lower-case and strip accents (uncased BERT)"},
           {"val_fraction", "the corpus's tail held out for evaluation"},
           {"cache_dir", "where token files go (\"\": PATH.tessera/)"},
           {"mask_prob", "BERT's masked-LM share of tokens"},
           {"nsp", "BERT's next-sentence pairs"}});
  d.get("mask_prob", dt.mask_prob);
  d.expect("mask_prob", dt.mask_prob > 0 && dt.mask_prob < 1, dt.mask_prob, "in (0, 1)");
  d.get("nsp", dt.nsp);
  // (With model.init_from, the directory's files may complete it: train_config_init_from.cpp.)
  TS_CHECK(!c.model.init_from.empty() || dt.tokenizer != "gpt2" ||
               (!dt.vocab.empty() && !dt.merges.empty()) || !dt.tokenizer_file.empty(),
           source,
           ": 'data.tokenizer' \"gpt2\" needs 'data.vocab' (vocab.json) and 'data.merges' "
           "(merges.txt), or 'data.tokenizer_file' (a Hugging Face tokenizer.json)");
  if (d.has("lower_case") && dt.tokenizer != "wordpiece" && c.model.init_from.empty())
    d.warnings().push_back(source + ": 'data.lower_case' has no effect on the " + dt.tokenizer +
                           " tokenizer (ignored): it configures WordPiece");
  TS_CHECK(!c.model.init_from.empty() || dt.tokenizer != "wordpiece" || !dt.vocab.empty(), source,
           ": 'data.tokenizer' \"wordpiece\" needs 'data.vocab' (BERT's vocab.txt)");
  TS_CHECK(dt.tokenizer_file.empty() || (dt.vocab.empty() && dt.merges.empty()), source,
           ": 'data.tokenizer_file' and 'data.vocab'/'data.merges' both give the tokenizer: "
           "keep one");
  d.warn_unknown();
}

void parse_train(Section t, TrainConfig& c) {
  const std::string& source = t.source();
  auto& tr = c.train;
  t.notes({{"steps", "optimizer steps to train"},
           {"seed", "the seed of weights, dropout and data order"},
           {"eval_interval", "evaluate every this many steps"},
           {"eval_iters", "batches per evaluation"},
           {"sample_tokens", "tokens generated as a sample after training (0: none)"},
           {"checkpoint_dir", "where periodic checkpoints go (\"\": none)"},
           {"checkpoint_interval", "a checkpoint every this many steps"},
           {"keep_last", "checkpoints kept in checkpoint_dir"},
           {"device", "where to train"}});
  t.get_min<int64_t>("steps", tr.steps, 0, ">= 0");
  int64_t seed = static_cast<int64_t>(tr.seed);
  t.get_min<int64_t>("seed", seed, 0, ">= 0");
  tr.seed = static_cast<uint64_t>(seed);
  t.get_min<int64_t>("eval_interval", tr.eval_interval, 0, ">= 0 (0 = only at the end)");
  t.get_min<int64_t>("eval_iters", tr.eval_iters, 1, ">= 1");
  t.get_min<int64_t>("sample_tokens", tr.sample_tokens, 0, ">= 0");
  t.get("checkpoint_dir", tr.checkpoint_dir);
  t.get_min<int64_t>("checkpoint_interval", tr.checkpoint_interval, 0, ">= 0 (0 = off)");
  if (tr.checkpoint_interval > 0 && tr.checkpoint_dir.empty())
    t.warnings().push_back(source +
                           ": 'train.checkpoint_interval' is set but 'train.checkpoint_dir' is "
                           "not: no periodic checkpoints are written");
  t.get_min<int64_t>("keep_last", tr.keep_last, 0, ">= 0 (0 = keep every checkpoint)");
  t.get("device", tr.device);
  t.expect("device", tr.device == "cpu" || tr.device == "cuda" || tr.device.rfind("cuda:", 0) == 0,
           tr.device, "\"cpu\", \"cuda\" or \"cuda:N\"");
  t.warn_unknown();
}

}  // namespace tessera::io::config
