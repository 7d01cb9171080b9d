#include "experiment_serve.h"

#include <httplib.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "experiment_view.h"
#include "tessera/engine/stop_signals.h"
#include "tessera/error.h"

namespace tessera::cli {

namespace {

// Debian's libjs-chart.js, served as the page's plotting library (no CDN).
constexpr const char* kChartJs = "/usr/share/javascript/chart.js/chart.min.js";

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in, "experiment serve: ", path,
           " is missing: install Debian's libjs-chart.js (scripts/setup.sh does)");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Answers with what `body` returns, or a JSON error naming what went wrong.
void json_answer(httplib::Response& res, const std::function<nlohmann::json()>& body) {
  try {
    res.set_content(body().dump(), "application/json");
  } catch (const std::exception& e) {
    res.status = 404;
    res.set_content(nlohmann::json{{"error", e.what()}}.dump(), "application/json");
  }
}

}  // namespace

int serve_experiments(const std::string& store_dir, const std::string& host, int port) {
  const std::string chart_js = read_file(kChartJs);
  const std::string db = store_dir + "/experiments.db";
  httplib::Server server;
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(experiment_page(), "text/html; charset=utf-8");
  });
  server.Get("/static/chart.min.js", [&chart_js](const httplib::Request&, httplib::Response& res) {
    res.set_content(chart_js, "application/javascript");
  });
  // A connection per request: the server answers from several threads.
  server.Get("/api/experiments", [&db](const httplib::Request&, httplib::Response& res) {
    json_answer(res, [&] { return experiments_summary(experiment::ExperimentStore(db)); });
  });
  server.Get(
      R"(/api/experiments/(\d+))", [&db](const httplib::Request& req, httplib::Response& res) {
        json_answer(res, [&] {
          return experiment_detail(experiment::ExperimentStore(db), std::stoll(req.matches[1]));
        });
      });
  engine::StopSignals signals(true);
  TS_CHECK(server.bind_to_port(host.c_str(), port), "experiment serve: cannot listen on ", host,
           ":", port, " (in use?)");
  std::thread listener([&server] { server.listen_after_bind(); });
  std::cerr << "serving the experiments of " << store_dir << " on http://" << host << ":" << port
            << "/ (Ctrl-C stops)" << std::endl;
  while (engine::stop_signal_received() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server.stop();
  listener.join();
  return 0;
}

}  // namespace tessera::cli
