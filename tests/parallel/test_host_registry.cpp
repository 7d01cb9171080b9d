// The host registry that lets runs started by hand share the cores: live registrations count,
// a file nobody holds (its process died) is removed by the next count, and a directory that
// others could tamper with is not used.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "tessera/parallel/host_registry.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

namespace fs = std::filesystem;
using tessera::parallel::HostRegistry;

namespace {

struct RegistryDir {
  fs::path path = fs::temp_directory_path() / ("tessera-registry-test-" + std::to_string(getpid()));
  RegistryDir() { fs::remove_all(path); }
  ~RegistryDir() { fs::remove_all(path); }
  size_t files() const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(path)) n += e.path().filename().string()[0] != '.';
    return n;
  }
};

}  // namespace

TEST_CASE("host registry: registrations count while they live and leave no file") {
  RegistryDir dir;
  {
    HostRegistry first(dir.path);
    REQUIRE(first.active());
    CHECK(first.live() == 1);
    CHECK((fs::status(dir.path).permissions() & fs::perms::all) ==
          fs::perms::owner_all);  // made 0700
    {
      HostRegistry second(dir.path);  // another open file: its lock counts apart
      CHECK(first.live() == 2);
      CHECK(second.live() == 2);
    }
    CHECK(first.live() == 1);
  }
  CHECK(dir.files() == 0);
}

TEST_CASE("host registry: a file nobody holds is a dead process's and is removed") {
  RegistryDir dir;
  HostRegistry self(dir.path);
  std::ofstream(dir.path / "process-1-1") << "";  // registered, then killed: no lock
  std::ofstream(dir.path / "unrelated") << "";    // not a registration: left alone
  CHECK(self.live() == 1);
  CHECK(!fs::exists(dir.path / "process-1-1"));
  CHECK(fs::exists(dir.path / "unrelated"));
}

TEST_CASE("host registry: a directory others may write, a link or a file is not used") {
  RegistryDir dir;
  fs::create_directory(dir.path);
  SUBCASE("writable by others") {
    chmod(dir.path.c_str(), 0777);
    HostRegistry r(dir.path);
    CHECK(!r.active());
    CHECK(r.live() == 1);
    CHECK(fs::is_empty(dir.path));
  }
  SUBCASE("a symbolic link to a private directory") {
    fs::create_directory(dir.path / "real", dir.path);
    chmod((dir.path / "real").c_str(), 0700);
    fs::create_directory_symlink(dir.path / "real", dir.path / "link");
    HostRegistry r(dir.path / "link");
    CHECK(!r.active());
    CHECK(fs::is_empty(dir.path / "real"));
  }
  SUBCASE("a file") {
    std::ofstream(dir.path / "file") << "";
    HostRegistry r(dir.path / "file");
    CHECK(!r.active());
  }
}

TEST_SUITE_END();
