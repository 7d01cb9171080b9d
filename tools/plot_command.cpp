// `tessera plot RUN_DIR [--out curves.png] [--size WxH]`: a run's curves as a PNG, drawn by
// gnuplot (Debian's gnuplot-nox), from the csv_monitor files or TensorBoard event files in
// RUN_DIR (the monitor's <output_path>/<job_name>).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "cli.h"
#include "tessera/io/event_file_reader.h"
#include "tessera/io/files.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;

const char* kPlotHelp = R"(usage: tessera plot RUN_DIR [--out curves.png] [--size 1200x800]

Draws a training run's curves to a PNG: the losses (train and evaluation) and the learning
rate against the samples trained. RUN_DIR is a monitor directory (csv_monitor's or
tensorboard's <output_path>/<job_name>): its *.csv files, else its events.out.tfevents.* files.
Needs gnuplot (scripts/setup.sh installs gnuplot-nox). --out defaults to RUN_DIR/curves.png.
)";

// Series named as the monitors name them ("Train/Samples/train_loss").
io::ScalarSeries read_csv_dir(const fs::path& dir) {
  io::ScalarSeries out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".csv") continue;
    std::ifstream f(e.path());
    std::string line;
    std::getline(f, line);
    TS_CHECK(line.rfind("step,", 0) == 0, "plot: '", e.path().string(),
             "' is not a csv_monitor file (its header is not step,<name>)");
    std::string name = e.path().stem().string();  // Train_Samples_train_loss
    for (const char* prefix : {"Train_Samples_", "Eval_"})
      if (name.rfind(prefix, 0) == 0)
        name = std::string(prefix[0] == 'T' ? "Train/Samples/" : "Eval/") +
               name.substr(std::strlen(prefix));
    for (int64_t row = 2; std::getline(f, line); ++row) {
      const size_t comma = line.find(',');
      try {
        out[name].emplace_back(std::stoll(line.substr(0, comma)),
                               std::stod(line.substr(comma + 1)));
      } catch (const std::exception&) {
        fail("plot: '", e.path().string(), "' line ", row, " is not step,value: '", line, "'");
      }
    }
  }
  return out;
}

// A directory written by several runs (a rerun appends to the csv files, and adds an event
// file): where a series' step goes back, a new run begins, drawn as its own curve ("name
// (run 2)") instead of one zig-zag line.
io::ScalarSeries split_reruns(const io::ScalarSeries& series) {
  io::ScalarSeries out;
  for (const auto& [name, points] : series) {
    int run = 1;
    for (size_t i = 0; i < points.size(); ++i) {
      if (i > 0 && points[i].first <= points[i - 1].first) ++run;
      out[run == 1 ? name : name + " (run " + std::to_string(run) + ")"].push_back(points[i]);
    }
  }
  return out;
}

// A gnuplot string literal: single quotes, a quote inside doubled (gnuplot's rule).
std::string gnuplot_quoted(const std::string& text) {
  TS_CHECK(text.find('\n') == std::string::npos && text.find('\r') == std::string::npos,
           "plot: a path or name with a line break cannot be given to gnuplot: ", io::quoted(text));
  std::string out = "'";
  for (char ch : text) out += ch == '\'' ? std::string("''") : std::string(1, ch);
  return out + "'";
}

io::ScalarSeries read_run(const fs::path& dir) {
  TS_CHECK(fs::is_directory(dir), "plot: '", dir.string(), "' is not a directory");
  io::ScalarSeries series = read_csv_dir(dir);
  if (!series.empty()) return split_reruns(series);
  std::vector<fs::path> files;  // by name: events.out.tfevents.<time>... in the runs' order
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files)
    for (auto& [tag, points] : io::read_event_scalars(file.string()))
      series[tag].insert(series[tag].end(), points.begin(), points.end());
  TS_CHECK(!series.empty(), "plot: '", dir.string(),
           "' holds no monitor files (*.csv from csv_monitor, events.out.tfevents.* from "
           "tensorboard)");
  return split_reruns(series);
}

// The gnuplot script: losses on top, the lr below; one data file per series in `work`.
std::string gnuplot_script(const io::ScalarSeries& series, const fs::path& work,
                           const std::string& png, int width, int height) {
  std::ostringstream loss, lr;
  int index = 0;
  for (const auto& [name, points] : series) {
    const fs::path data = work / ("series" + std::to_string(index++) + ".dat");
    std::ofstream f(data);
    f.precision(9);
    for (const auto& [step, value] : points) f << step << " " << value << "\n";
    const bool is_lr = name.size() >= 3 && name.substr(name.size() - 3) == "/lr";
    const bool is_loss =
        name.find("loss") != std::string::npos && name.find("scale") == std::string::npos;
    if (!is_lr && !is_loss) continue;
    std::ostringstream& out = is_lr ? lr : loss;
    out << (out.tellp() > 0 ? ", " : "plot ") << gnuplot_quoted(data.string())
        << " using 1:2 with lines linewidth 2 title " << gnuplot_quoted(name);
  }
  TS_CHECK(loss.tellp() > 0 || lr.tellp() > 0, "plot: no loss or lr series among ", series.size(),
           " series");
  std::ostringstream s;
  s << "set terminal pngcairo noenhanced size " << width << "," << height << " font 'sans,10'\n"
    << "set output " << gnuplot_quoted(png) << "\n"
    << "set multiplot layout 2,1\nset grid\nset xlabel 'samples'\nset key outside right\n"
    << "set ylabel 'loss'\n"
    << (loss.tellp() > 0 ? loss.str() : "plot 0 notitle") << "\n"
    << "set ylabel 'lr'\nset format y '%.1e'\n"
    << (lr.tellp() > 0 ? lr.str() : "plot 0 notitle") << "\n"
    << "unset multiplot\n";
  return s.str();
}

}  // namespace

int plot_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"help"}, {"out", "size"});
  if (a.has("help")) {
    std::cout << kPlotHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "plot: expected one RUN_DIR (see --help)");
  const fs::path dir = a.positional()[0];
  const Shape size = parse_shape(a.get("size", "1200x800"));
  TS_CHECK(
      size.size() == 2 && size[0] >= 100 && size[1] >= 100 && size[0] <= 10000 && size[1] <= 10000,
      "plot: --size must be WIDTHxHEIGHT, each 100-10000");
  const std::string out = a.get("out", (dir / "curves.png").string());
  const io::ScalarSeries series = read_run(dir);
  const fs::path work = fs::temp_directory_path() / ("tessera-plot-" + std::to_string(::getpid()));
  fs::create_directories(work);
  // gnuplot writes beside the target, renamed into place: no half-written PNG is left.
  const std::string partial = out + ".partial";
  const std::string script =
      gnuplot_script(series, work, partial, static_cast<int>(size[0]), static_cast<int>(size[1]));
  std::ofstream((work / "plot.gp").string()) << script;
  const std::string command =
      "gnuplot '" + (work / "plot.gp").string() + "' 2>'" + (work / "gnuplot.err").string() + "'";
  const int status = std::system(command.c_str());
  const std::string err =
      fs::exists(work / "gnuplot.err") ? io::read_text_file((work / "gnuplot.err").string()) : "";
  fs::remove_all(work);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fs::remove(partial);
    TS_CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 127),
             "plot: gnuplot is not installed (sudo apt-get install gnuplot-nox; scripts/setup.sh "
             "installs it)");
    fail("plot: gnuplot failed: ", err);
  }
  fs::rename(partial, out);
  std::cerr << "plot: " << series.size() << " series from '" << dir.string() << "' -> " << out
            << "\n";
  return 0;
}

}  // namespace tessera::cli
