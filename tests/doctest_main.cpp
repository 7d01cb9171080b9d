// doctest's main, plus honest skips: the reasons test cases were skipped are printed, and an
// executable whose selected test cases were all skipped exits 77, which meson reports as SKIP.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>

#include "skip.h"

namespace {

doctest::TestRunStats last_run;

// Keeps the run's totals (a listener sees them after every test case has run).
struct RunTotals : doctest::IReporter {
  explicit RunTotals(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override { last_run = s; }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("run-totals", 1, RunTotals);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit()) return result;
  const unsigned skipped = last_run.numTestCases - last_run.numTestCasesPassingFilters;
  if (skipped > 0)
    for (const std::string& why : tessera::test::skip_reasons())
      std::cout << "[tessera] skipped test cases: " << why << "\n";
  if (result == 0 && last_run.numTestCasesPassingFilters == 0 && skipped > 0) return 77;
  return result;
}
