// The web view's server. Its security model: read-only, no authentication, loopback by default.
// So it answers only requests addressed to the name it is bound to (DNS rebinding), never
// shares its port (no SO_REUSEPORT: a second server on a held port is refused), bounds its
// workers and how long an idle or slow connection may hold one, and sends a strict
// Content-Security-Policy; errors carry no paths or exception text.
#include "tessera/experiment/experiment_serve.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "tessera/engine/stop_signals.h"
#include "tessera/error.h"
#include "tessera/experiment/experiment_view.h"

namespace tessera::experiment {

namespace {

// Debian's libjs-chart.js, served as the page's plotting library (no CDN).
constexpr const char* kChartJs = "/usr/share/javascript/chart.js/chart.min.js";
// Workers: more than a browser's connections; an idle connection holds one at most
// kKeepAliveSeconds, a slow request kReadSeconds.
constexpr size_t kWorkers = 64;
constexpr time_t kKeepAliveSeconds = 2, kReadSeconds = 5;
constexpr const char* kPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in, "experiment serve: ", path,
           " is missing: install Debian's libjs-chart.js (scripts/setup.sh does)");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}
bool is_any(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host.empty();
}

// The Host headers a request to this server may carry (empty: any, when bound to every address).
std::set<std::string> allowed_hosts(const std::string& host, int port) {
  std::set<std::string> names;
  if (is_any(host)) return names;
  names.insert(host.find(':') != std::string::npos ? "[" + host + "]" : host);
  if (is_loopback(host)) names.insert({"localhost", "127.0.0.1", "[::1]"});
  std::set<std::string> out;
  for (const std::string& n : names) {
    out.insert(lower(n) + ":" + std::to_string(port));
    if (port == 80) out.insert(lower(n));
  }
  return out;
}

void json_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(nlohmann::json{{"error", message}}.dump(), "application/json");
}

// Answers with what `body` returns. The store's own errors go to the server's log, not to the
// client (they hold paths and internals); the client gets what it can act on.
void json_answer(httplib::Response& res, const std::function<nlohmann::json()>& body) {
  try {
    // (A name that is not UTF-8, from an older store, shows as U+FFFD, not as an error.)
    res.set_content(body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                    "application/json");
  } catch (const std::exception& e) {
    std::cerr << "experiment serve: " << e.what() << "\n";
    json_error(res, 500, "the experiment store could not be read (the server's log says why)");
  }
}

bool has_experiment(const ExperimentStore& store, int64_t id) {
  for (const auto& e : store.experiment_rows())
    if (e.id == id) return true;
  return false;
}

void add_routes(httplib::Server& server, const std::string& db, const std::string& chart_js) {
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(experiment_page(), "text/html; charset=utf-8");
  });
  server.Get("/static/chart.min.js", [&chart_js](const httplib::Request&, httplib::Response& res) {
    res.set_content(chart_js, "application/javascript");
  });
  server.Get("/static/experiment.js", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(experiment_page_js(), "application/javascript");
  });
  server.Get("/static/experiment.css", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(experiment_page_css(), "text/css");
  });
  // A connection to the store per request: the server answers from several threads.
  server.Get("/api/experiments", [db](const httplib::Request&, httplib::Response& res) {
    json_answer(res, [&] { return experiments_summary(ExperimentStore(db)); });
  });
  server.Get(
      R"(/api/experiments/(\d{1,18}))", [db](const httplib::Request& req, httplib::Response& res) {
        const int64_t id = std::stoll(req.matches[1]);
        try {
          if (!has_experiment(ExperimentStore(db), id))
            return json_error(res, 404, "no experiment " + std::to_string(id) + " in this store");
        } catch (const std::exception& e) {
          std::cerr << "experiment serve: " << e.what() << "\n";
          return json_error(res, 500, "the experiment store could not be read");
        }
        json_answer(res, [&] { return experiment_detail(ExperimentStore(db), id); });
      });
}

// Every request: addressed to this server's name, at most one byte range; every answer: the
// page's policy and no sniffing, framing or caching.
void add_guards(httplib::Server& server, std::set<std::string> hosts) {
  server.set_pre_routing_handler(
      [hosts = std::move(hosts)](const httplib::Request& req, httplib::Response& res) {
        if (!hosts.empty() && !hosts.count(lower(req.get_header_value("Host")))) {
          json_error(res, 421, "this server answers requests for " + *hosts.begin() + " only");
          return httplib::Server::HandlerResponse::Handled;
        }
        // Overlapping or many ranges would multiply the answer; one range is served.
        if (req.get_header_value("Range").find(',') != std::string::npos) {
          json_error(res, 416, "one byte range per request");
          return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  server.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy", kPolicy);
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("X-Frame-Options", "DENY");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("Cache-Control", "no-store");
  });
}

}  // namespace

int serve_experiments(const std::string& store_dir, const std::string& host, int port) {
  const std::string chart_js = read_file(kChartJs);
  const std::string db = store_dir + "/experiments.db";
  httplib::Server server;
  add_routes(server, db, chart_js);
  add_guards(server, allowed_hosts(host, port));
  server.new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
  server.set_keep_alive_timeout(kKeepAliveSeconds);
  server.set_keep_alive_max_count(100);
  server.set_read_timeout(kReadSeconds, 0);
  server.set_write_timeout(kReadSeconds, 0);
  server.set_payload_max_length(64 * 1024);  // (GET only: no request needs a body)
  // SO_REUSEADDR (a restart may take its port back from TIME_WAIT) but never SO_REUSEPORT:
  // with it, a second server bound to the same port and the kernel shared the requests.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  engine::StopSignals signals(true);
  TS_CHECK(server.bind_to_port(host.c_str(), port), "experiment serve: cannot listen on ", host,
           ":", port, " (another server holds that port, or the address is not this machine's)");
  if (!is_loopback(host))
    std::cerr << "warning: experiment serve: listening on "
              << (is_any(host) ? "every address" : host)
              << ": other machines can reach it, and the page has no authentication (anyone who "
                 "reaches the port reads every experiment's names, hyperparameters and metrics)"
              << (is_any(host) ? "; requests are not checked for their Host" : "")
              << ". For a remote browser, keep the default 127.0.0.1 and use an SSH tunnel\n";
  std::thread listener([&server] { server.listen_after_bind(); });
  std::cerr << "serving the experiments of " << store_dir << " on http://"
            << (host.find(':') != std::string::npos ? "[" + host + "]" : host) << ":" << port
            << "/ (read-only; Ctrl-C stops)" << std::endl;
  while (engine::stop_signal_received() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server.stop();
  listener.join();
  return 0;
}

}  // namespace tessera::experiment
