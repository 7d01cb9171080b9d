// `tessera train CONFIG.json [--data PATH] [--steps N] [--save DIR] [--resume DIR] [--json]`
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/cuda.h"
#include "tessera/engine/engine.h"
#include "tessera/grad_mode.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/token_data.h"
#include "tessera/models/bert.h"
#include "tessera/models/generate.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"
#include "tessera/parallel/process_group.h"
#include "tools/cli.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const char* kHelp =
    R"(usage: tessera train CONFIG.json [--data PATH] [--steps N] [--device D] [--save DIR]
                     [--resume DIR] [--json]

Trains the GPT-2 or BERT reference model a DeepSpeed-style JSON config describes (see
configs/). The corpus (data.path, or --data: a text file or a directory of text files) is
tokenised once into a cache beside it. Prints a progress line (step, loss, learning rate,
tokens/s, ETA), the validation loss every train.eval_interval steps, and for GPT a text
sample at the end.

--steps N     train until global step N (a resumed run continues from its checkpoint's step)
--device D    cpu, cuda or cuda:N (overrides train.device; default cpu). On a GPU, bf16 or
              fp16 in the config trains in 16 bits with float32 master weights.
--save DIR    write a checkpoint (tag "step<N>") there at the end
--resume DIR  continue from the latest checkpoint in DIR (model, optimizer, schedule, loss
              scaler, RNG and data position: the numbers continue exactly)
--json        last line: {"step": S, "train_loss": L, "val_loss": V, "tokens_per_s": R,
              "rank": 0, "world_size": N, "memory": {"params": B, "grads": B, "optimizer": B}}
              (under mpirun every rank prints its own line)

On N processes: mpirun -np N tessera train CONFIG.json (CPU, MPI). The batch triple is
resolved for N ranks; zero_optimization.stage picks plain data parallelism (0) or ZeRO 1-3.
Only rank 0 prints progress, validation, checkpoints and the sample.
)";

std::string fmt_duration(double secs) {
  const int64_t s = static_cast<int64_t>(secs);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld", static_cast<long>(s / 60), static_cast<long>(s % 60));
  return buf;
}

// DeepSpeed's CSV monitor: one file per event, "<output_path>/<job_name>/<event>.csv".
class CsvMonitor {
 public:
  explicit CsvMonitor(const io::TrainConfig::CsvMonitor& c) : enabled_(c.enabled) {
    if (!enabled_) return;
    dir_ = fs::path(c.output_path) / c.job_name;
    fs::create_directories(dir_);
  }
  void write(const std::string& event, int64_t step, double value) {
    if (!enabled_) return;
    std::string name = event;
    for (char& ch : name)
      if (ch == '/') ch = '_';
    const fs::path p = dir_ / (name + ".csv");
    const bool fresh = !fs::exists(p);
    std::ofstream f(p, std::ios::app);
    f.precision(9);
    if (fresh) f << "step," << event << "\n";
    f << step << "," << value << "\n";
  }

 private:
  bool enabled_;
  fs::path dir_;
};

struct Trainer {
  io::TrainConfig cfg;
  io::TokenizedCorpus corpus;
  std::unique_ptr<models::PretrainedModel> model;
  std::unique_ptr<engine::Engine> eng;
  std::unique_ptr<io::GPTBatchSampler> gpt_sampler;
  std::unique_ptr<io::BertBatchSampler> bert_sampler;
  bool bert = false;
  Device device = Device::cpu();

  std::vector<int64_t> special_ids() const {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 5; ++i) ids.push_back(corpus.vocab_size - 5 + i);
    return ids;
  }

  void build_model() {
    manual_seed(cfg.train.seed);
    model = model_from_train_config(cfg, corpus.vocab_size);
    if (!cfg.model.init_from.empty()) {
      auto src = models::load_pretrained(cfg.model.init_from);
      model->load_state_dict(src->state_dict());
    }
    device = Device::parse(cfg.train.device);
    // "cuda" under a launcher: one GPU per rank on each machine, by local rank.
    if (cfg.train.device == "cuda" && parallel::launched_distributed())
      device = Device::cuda(parallel::local_device_index());
    if (device.is_cuda()) {
      TS_CHECK(device.index < cuda_device_count(), "train.device \"", cfg.train.device, "\": ",
               cuda_unavailable_reason().empty()
                   ? std::to_string(cuda_device_count()) + " CUDA devices visible"
                   : cuda_unavailable_reason());
      model->to(device);
    }
  }

  Tensor train_loss() {
    models::Batch b;
    if (bert) {
      const io::BertBatch bb = bert_sampler->next();
      b = {bb.input_ids, bb.targets, bb.attention_mask, bb.token_type_ids, bb.next_sentence_label};
    } else {
      gpt_sampler->next(b.input_ids, b.targets);
    }
    return eng->forward(b);
  }

  // Mean loss over eval_iters global batches of the validation split, each rank taking its
  // rows (the same batches, and the same number, at any rank count).
  double val_loss() {
    NoGradGuard no_grad;
    model->eval();
    const int64_t B = cfg.micro_batch_size, T = cfg.model.block_size;
    const int rank = eng->rank(), world = eng->world_size();
    double total = 0;
    // The same validation batches every time (a fixed seed), so values are comparable.
    if (bert) {
      io::BertBatchSampler s(*corpus.val, B, T, corpus.vocab_size, special_ids(),
                             cfg.data.mask_prob, cfg.data.nsp, 424242);
      s.shard(rank, world);
      for (int64_t i = 0; i < cfg.train.eval_iters; ++i) {
        const io::BertBatch bb = s.next();
        const models::Batch b{bb.input_ids, bb.targets, bb.attention_mask, bb.token_type_ids,
                              bb.next_sentence_label};
        total += eng->forward(b).item();
      }
    } else {
      io::GPTBatchSampler s(*corpus.val, B, T, 424242);
      s.shard(rank, world);
      for (int64_t i = 0; i < cfg.train.eval_iters; ++i) {
        models::Batch b;
        s.next(b.input_ids, b.targets);
        total += eng->forward(b).item();
      }
    }
    model->train();
    total /= static_cast<double>(cfg.train.eval_iters);
    return eng->group().all_reduce_scalar(total, parallel::ReduceOp::Avg);
  }

  nlohmann::json client_state() const {
    const GeneratorState s = bert ? bert_sampler->state() : gpt_sampler->state();
    return {{"sampler", {{"seed", s.seed}, {"offset", s.offset}}},
            {"vocab_size", corpus.vocab_size}};
  }

  // The tokenizer, saved with every checkpoint so `tessera export` can write it for HF.
  std::map<std::string, std::string> tokenizer_files() const {
    nlohmann::json meta{{"kind", corpus.tokenizer_kind}, {"specials", corpus.specials}};
    std::map<std::string, std::string> files;
    if (corpus.tokenizer_kind == "gpt2") {
      files["tokenizer/vocab.json"] = io::read_text_file(cfg.data.vocab);
      files["tokenizer/merges.txt"] = io::read_text_file(cfg.data.merges);
    } else {
      meta["chars"] = corpus.chars;
    }
    files["tokenizer/tessera_tokenizer.json"] = meta.dump(1) + "\n";
    return files;
  }

  void save(const std::string& dir) {
    const std::string tag = "step" + std::to_string(eng->global_steps());
    eng->save_checkpoint(dir, tag, client_state(), /*save_latest=*/true, tokenizer_files());
    if (eng->rank() != 0) return;
    std::cerr << "checkpoint: " << (fs::path(dir) / tag).string() << "\n";
    if (cfg.train.keep_last > 0) remove_old_checkpoints(dir, tag);
  }

  // train.keep_last: the newest step<N> checkpoints stay, never the one just written.
  void remove_old_checkpoints(const std::string& dir, const std::string& newest) const {
    std::vector<std::pair<int64_t, fs::path>> steps;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (!e.is_directory() || name.rfind("step", 0) != 0 || name == newest) continue;
      const std::string digits = name.substr(4);
      if (digits.empty() || digits.size() > 15 ||
          digits.find_first_not_of("0123456789") != std::string::npos)
        continue;
      steps.emplace_back(std::stoll(digits), e.path());
    }
    std::sort(steps.rbegin(), steps.rend());
    for (size_t i = static_cast<size_t>(cfg.train.keep_last) - 1; i < steps.size(); ++i) {
      std::error_code ec;
      fs::remove_all(steps[i].second, ec);
      if (ec)
        std::cerr << "warning: keep_last: cannot remove '" << steps[i].second.string()
                  << "': " << ec.message() << "\n";
    }
  }
};

}  // namespace

int train_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help"}, {"data", "steps", "save", "resume", "device"});
  if (a.has("help")) {
    std::cout << kHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "train: expected one CONFIG.json (see --help)");
  auto world = parallel::world();
  const bool lead = world->rank() == 0;  // prints and writes files for the job
  Trainer t;
  t.cfg = io::TrainConfig::from_file(a.positional()[0], world->size());
  if (lead)
    for (const auto& w : t.cfg.warnings) std::cerr << "warning: " << w << "\n";
  if (a.has("data")) t.cfg.data.path = a.get("data", "");
  if (a.has("device")) t.cfg.train.device = a.get("device", "cpu");
  if (a.has("steps")) t.cfg.train.steps = a.get_int("steps", t.cfg.train.steps);
  TS_CHECK(t.cfg.train.steps >= 0, "--steps must be >= 0");
  const bool json = a.has("json");
  t.bert = t.cfg.model.type == "bert";
  // Every place the run will write is checked now, not after the training it would lose.
  if (a.has("save")) io::check_writable_directory(a.get("save", ""), "--save");
  if (!t.cfg.train.checkpoint_dir.empty() && t.cfg.train.checkpoint_interval > 0)
    io::check_writable_directory(t.cfg.train.checkpoint_dir, "train.checkpoint_dir");
  if (t.cfg.csv_monitor.enabled && lead)
    io::check_writable_directory(t.cfg.csv_monitor.output_path, "csv_monitor.output_path");
  // The config's timeout covers the wait for rank 0's tokenising too.
  world->set_timeout(t.cfg.distributed.timeout());
  // Rank 0 tokenises (or finds the cache); the others then read its files.
  if (lead) t.corpus = io::prepare_corpus(t.cfg.data, t.bert, true);
  world->barrier();
  if (!lead) t.corpus = io::prepare_corpus(t.cfg.data, t.bert, false);
  t.build_model();
  t.eng = engine::initialize(*t.model, t.cfg, world);
  const int64_t B = t.cfg.micro_batch_size, T = t.cfg.model.block_size;
  if (t.bert) {
    t.bert_sampler = std::make_unique<io::BertBatchSampler>(
        *t.corpus.train, B, T, t.corpus.vocab_size, t.special_ids(), t.cfg.data.mask_prob,
        t.cfg.data.nsp, t.cfg.train.seed + 1);
    t.bert_sampler->shard(world->rank(), world->size());
  } else {
    t.gpt_sampler =
        std::make_unique<io::GPTBatchSampler>(*t.corpus.train, B, T, t.cfg.train.seed + 1);
    t.gpt_sampler->shard(world->rank(), world->size());
  }
  if (a.has("resume")) {
    const nlohmann::json cs = t.eng->load_checkpoint(a.get("resume", "")).client_state;
    const io::JsonFields client(cs, "train --resume: the checkpoint's client_state");
    const int64_t vocab = client.integer("vocab_size");
    TS_CHECK(vocab == t.corpus.vocab_size, "train --resume: the checkpoint's vocabulary (", vocab,
             ") differs from this corpus's (", t.corpus.vocab_size, ")");
    const io::JsonFields sampler = client.object("sampler");
    const GeneratorState s{sampler.unsigned_integer("seed"), sampler.unsigned_integer("offset")};
    if (t.bert)
      t.bert_sampler->set_state(s);
    else
      t.gpt_sampler->set_state(s);
    if (lead) std::cerr << "resumed at step " << t.eng->global_steps() << "\n";
  }
  if (lead)
    std::cerr << t.model->type_name() << ": " << t.model->num_parameters() << " parameters, vocab "
              << t.corpus.vocab_size << ", block " << T << ", batch " << t.cfg.train_batch_size
              << " (" << B << " x " << t.cfg.gradient_accumulation_steps << " accumulation), "
              << t.eng->optimizer().name() << ", " << t.cfg.train.steps << " steps"
              << (world->size() > 1 ? ", " + std::to_string(world->size()) + " ranks" : "")
              << (t.eng->zero_stage() > 0 ? ", ZeRO stage " + std::to_string(t.eng->zero_stage())
                                          : "")
              << "\n";

  io::TrainConfig::CsvMonitor csv_cfg = t.cfg.csv_monitor;
  csv_cfg.enabled &= lead;
  CsvMonitor csv(csv_cfg);
  const bool tty = lead && ::isatty(STDERR_FILENO);
  const int64_t tokens_per_step = t.cfg.train_batch_size * T;
  const int64_t start_step = t.eng->global_steps();
  double last_loss = NAN, val = NAN;
  const auto t0 = Clock::now();
  // wall_clock_breakdown: milliseconds in forward, backward and step since the last print.
  double t_fwd = 0, t_bwd = 0, t_step = 0;
  auto since = [](Clock::time_point a) {
    return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
  };
  while (t.eng->global_steps() < t.cfg.train.steps) {
    double loss_sum = 0;
    engine::StepStats st;
    for (int64_t m = 0; m < t.cfg.gradient_accumulation_steps; ++m) {
      auto c0 = Clock::now();
      const Tensor loss = t.train_loss();
      const double lv = loss.item();
      t_fwd += since(c0);
      TS_CHECK(std::isfinite(lv) || t.cfg.fp16.enabled, "train: the loss is ", lv, " at step ",
               t.eng->global_steps(), "; lower the learning rate or check the data");
      loss_sum += lv;
      c0 = Clock::now();
      t.eng->backward(loss);
      t_bwd += since(c0);
      // After every micro-batch (DeepSpeed's contract); it updates at the window's last.
      const auto c1 = Clock::now();
      st = t.eng->step();
      t_step += since(c1);
    }
    last_loss = loss_sum / static_cast<double>(t.cfg.gradient_accumulation_steps);
    last_loss = world->all_reduce_scalar(last_loss, parallel::ReduceOp::Avg);  // mean over ranks
    const int64_t step = t.eng->global_steps();
    csv.write("Train/Samples/train_loss", step, last_loss);
    csv.write("Train/Samples/lr", step, st.lr);
    if (t.cfg.fp16.enabled) csv.write("Train/Samples/loss_scale", step, st.loss_scale);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double rate =
        static_cast<double>((step - start_step) * tokens_per_step) / std::max(secs, 1e-9);
    const double eta = static_cast<double>(t.cfg.train.steps - step) * secs /
                       static_cast<double>(step - start_step);
    if (lead && (tty || step % t.cfg.steps_per_print == 0 || step == t.cfg.train.steps)) {
      char line[200];
      std::snprintf(line, sizeof line, "step %ld/%ld | loss %.4f | lr %.3e | %.0f tok/s | ETA %s%s",
                    static_cast<long>(step), static_cast<long>(t.cfg.train.steps), last_loss, st.lr,
                    rate, fmt_duration(eta).c_str(),
                    st.overflow ? " | overflow: step skipped" : "");
      std::cerr << (tty ? "\r" : "") << line << (tty ? "\033[K" : "\n") << std::flush;
    }
    if (lead && t.cfg.wall_clock_breakdown && step % t.cfg.steps_per_print == 0) {
      const double n = static_cast<double>(t.cfg.steps_per_print);
      char line[160];
      std::snprintf(line, sizeof line,
                    "time (ms/step) | forward: %.2f | backward: %.2f | step: %.2f", t_fwd / n,
                    t_bwd / n, t_step / n);
      std::cerr << (tty ? "\n" : "") << line << "\n";
      t_fwd = t_bwd = t_step = 0;
    }
    const bool eval_now = t.cfg.train.eval_interval > 0 && step % t.cfg.train.eval_interval == 0;
    if (eval_now && step < t.cfg.train.steps) {
      val = t.val_loss();
      csv.write("Eval/val_loss", step, val);
      if (lead) std::cerr << (tty ? "\n" : "") << "step " << step << ": val loss " << val << "\n";
    }
    if (t.cfg.train.checkpoint_interval > 0 && step % t.cfg.train.checkpoint_interval == 0 &&
        !t.cfg.train.checkpoint_dir.empty()) {
      if (tty) std::cerr << "\n";
      t.save(t.cfg.train.checkpoint_dir);
    }
  }
  if (tty) std::cerr << "\n";
  // Communication of the training steps alone (validation and sampling come after).
  const auto train_comms = world->logger().totals();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const int64_t trained = t.eng->global_steps() - start_step;
  const double rate = trained > 0 ? static_cast<double>(trained * tokens_per_step) / secs : 0.0;
  val = t.val_loss();
  csv.write("Eval/val_loss", t.eng->global_steps(), val);
  if (lead)
    std::cerr << "step " << t.eng->global_steps() << ": val loss " << val << " (" << trained
              << " steps in " << fmt_duration(secs) << ", " << static_cast<int64_t>(rate)
              << " tokens/s)\n";
  // (The interval may have just written this very checkpoint there.)
  const bool saved_now = t.cfg.train.checkpoint_interval > 0 &&
                         t.eng->global_steps() % t.cfg.train.checkpoint_interval == 0 &&
                         fs::path(t.cfg.train.checkpoint_dir) == fs::path(a.get("save", ""));
  if (a.has("save") && !saved_now) t.save(a.get("save", ""));
  if (t.cfg.comms_logger.enabled && lead)
    std::cerr << world->logger().summary(world->rank(), world->size());
  // ZeRO-3 gathers parameters collectively, so every rank runs the sampler then.
  const bool sample_here = lead || t.eng->zero_stage() == 3;
  if (!t.bert && t.cfg.train.sample_tokens > 0 && !json && sample_here) {
    auto& gpt = dynamic_cast<models::GPT2LMHeadModel&>(*t.model);
    models::GenerateOptions o;
    o.max_new_tokens = std::min<int64_t>(t.cfg.train.sample_tokens, T - 1);
    o.temperature = 0.8;
    o.top_k = 40;
    o.seed = t.cfg.train.seed;
    std::vector<int64_t> prompt = t.corpus.tokenizer->encode("\n");
    if (prompt.empty()) prompt = {0};
    std::string text;
    // Slide a window so samples can be longer than the context.
    std::vector<int64_t> ctx = prompt;
    int64_t left = t.cfg.train.sample_tokens;
    while (left > 0) {
      o.max_new_tokens = std::min<int64_t>(left, T - static_cast<int64_t>(ctx.size()));
      const auto ids = models::generate(gpt, ctx, o);
      text += t.corpus.tokenizer->decode(ids);
      left -= static_cast<int64_t>(ids.size());
      ctx.insert(ctx.end(), ids.begin(), ids.end());
      if (static_cast<int64_t>(ctx.size()) > T / 2) ctx.erase(ctx.begin(), ctx.end() - T / 2);
      ++o.seed;
      if (ids.empty()) break;
    }
    if (lead) std::cout << "---- sample ----\n" << text << "\n----------------\n";
  }
  if (json) {
    char loss_text[64];
    std::snprintf(loss_text, sizeof loss_text, "%.9g", last_loss);
    const parallel::MemoryStats mem = t.eng->memory();
    std::ostringstream line;
    line << "{\"step\": " << t.eng->global_steps()
         << ", \"train_loss\": " << (std::isfinite(last_loss) ? loss_text : "null")
         << ", \"val_loss\": " << nlohmann::json(val).dump()
         << ", \"tokens_per_s\": " << nlohmann::json(rate).dump() << ", \"rank\": " << world->rank()
         << ", \"world_size\": " << world->size() << ", \"zero_stage\": " << t.eng->zero_stage()
         << ", \"memory\": "
         << nlohmann::json{{"params", mem.params},
                           {"grads", mem.grads},
                           {"optimizer", mem.optimizer},
                           {"buffers", mem.buffers}}
                .dump();
    if (t.cfg.comms_logger.enabled) {
      nlohmann::json comms = nlohmann::json::object();
      for (const auto& [op, st] : train_comms)
        comms[op] = {{"calls", st.calls},
                     {"message_bytes", st.message_bytes},
                     {"bus_bytes", st.bus_bytes},
                     {"seconds", st.seconds}};
      line << ", \"comms\": " << comms.dump();
    }
    line << "}\n";
    std::cout << line.str() << std::flush;
  }
  return 0;
}

}  // namespace tessera::cli
