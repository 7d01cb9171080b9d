// `tessera experiment serve`: a small web page of the store's experiments, their trials and
// curves (cpp-httplib from Debian).
#pragma once
#include <string>

namespace tessera::experiment {

// The page's HTML, and its style and script (served apart: no inline code), in
// experiment_page.cpp.
const char* experiment_page();
const char* experiment_page_css();
const char* experiment_page_js();

// Serves the page, /api/experiments, /api/experiments/ID (experiment_detail) and the page's
// static files on host:port until SIGINT/SIGTERM (read-only, no authentication: see the
// security model in experiment_serve.cpp).
int serve_experiments(const std::string& store_dir, const std::string& host, int port);

}  // namespace tessera::experiment
