// `tessera experiment serve`: a small web page of the store's experiments, their trials and
// curves (cpp-httplib from Debian).
#pragma once
#include <string>

namespace tessera::cli {

const char* experiment_page();  // the page's HTML (experiment_page.cpp)

// Serves the page, /api/experiments, /api/experiments/ID (experiment_detail) and
// /static/chart.min.js on host:port until SIGINT/SIGTERM.
int serve_experiments(const std::string& store_dir, const std::string& host, int port);

}  // namespace tessera::cli
