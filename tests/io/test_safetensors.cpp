// Safetensors: round trips, every dtype, and corrupt, truncated or lying files rejected.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/io/safetensors.h"
#include "tessera/ops.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {
std::string tmp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("tessera-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

// A file made by hand: header JSON text followed by `data`.
std::string write_raw(const std::string& name, const std::string& header, const std::string& data,
                      int64_t claimed_len = -1) {
  const std::string p = tmp_path(name);
  std::ofstream f(p, std::ios::binary);
  const uint64_t len = claimed_len >= 0 ? static_cast<uint64_t>(claimed_len) : header.size();
  f.write(reinterpret_cast<const char*>(&len), 8);
  f << header << data;
  return p;
}
}  // namespace

TEST_CASE("round trip of every dtype, with metadata") {
  std::map<std::string, Tensor> in;
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32,
                  DType::Int64, DType::Bool})
    in[dtype_name(d)] = (randn({3, 5}) * 4.0).to(d);
  in["scalar"] = full({}, 7.0);
  in["empty"] = zeros({0, 4});
  const std::string p = tmp_path("all.safetensors");
  io::save_safetensors(p, in, {{"format", "pt"}});
  const io::SafetensorsFile f(p);
  CHECK(f.metadata().at("format") == "pt");
  for (auto& [n, t] : in) {
    const Tensor back = f.get(n);
    CHECK(back.dtype() == t.dtype());
    CHECK(back.shape() == t.shape());
    CHECK(back.to_vector() == t.to_vector());
  }
  CHECK(f.entry("bfloat16").file_dtype == "BF16");
}

TEST_CASE("narrow integer and float8 file dtypes load widened") {
  const std::string data =
      std::string("\x01\xff", 2) + std::string("\x38\xc0", 2);  // U8 [1,255]; E4M3 [1.0,-2.0]
  const std::string p = write_raw("narrow.safetensors",
                                  R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                  R"("b":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[2,4]}})",
                                  data);
  const io::SafetensorsFile f(p);
  CHECK(f.get("a").to_vector() == std::vector<double>{1, 255});
  CHECK(f.get("b").to_vector() == std::vector<double>{1.0, -2.0});
}

TEST_CASE("corrupt, truncated and lying files are rejected naming file and tensor") {
  const std::string ok_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  SUBCASE("too small") {
    const std::string p = tmp_path("tiny.safetensors");
    std::ofstream(p) << "abc";
    CHECK_THROWS_WITH_AS(io::SafetensorsFile{p}, doctest::Contains("too small"), Error);
  }
  SUBCASE("header length beyond the file") {
    const std::string p = write_raw("hlen.safetensors", ok_header, data, 1 << 20);
    CHECK_THROWS_WITH_AS(io::SafetensorsFile{p}, doctest::Contains("header length 1048576"), Error);
  }
  SUBCASE("invalid JSON") {
    const std::string p = write_raw("json.safetensors", R"({"w": {"dtype": )", data);
    CHECK_THROWS_WITH_AS(io::SafetensorsFile{p}, doctest::Contains("invalid JSON header"), Error);
  }
  SUBCASE("truncated data") {
    const std::string p = write_raw("trunc.safetensors", ok_header, data.substr(0, 5));
    CHECK_THROWS_WITH_AS(io::SafetensorsFile{p}, doctest::Contains("tensor 'w'"), Error);
  }
  SUBCASE("size disagrees with shape") {
    const std::string p = write_raw(
        "lie.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data);
    CHECK_THROWS_WITH_AS(io::SafetensorsFile{p}, doctest::Contains("needs 12 bytes"), Error);
  }
  SUBCASE("overlapping tensors") {
    const std::string p = write_raw("overlap.safetensors",
                                    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                    data);
    CHECK_THROWS_WITH_AS(io::SafetensorsFile{p}, doctest::Contains("inside the previous tensor"),
                         Error);
  }
  SUBCASE("unknown dtype") {
    const std::string p = write_raw(
        "dtype.safetensors", R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,8]}})", data);
    CHECK_THROWS_WITH_AS(io::SafetensorsFile{p}, doctest::Contains("unknown dtype 'F128'"), Error);
  }
  SUBCASE("negative size") {
    const std::string p = write_raw(
        "neg.safetensors", R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data);
    CHECK_THROWS_WITH_AS(io::SafetensorsFile{p}, doctest::Contains("negative"), Error);
  }
  SUBCASE("trailing bytes") {
    const std::string p = write_raw("tail.safetensors", ok_header, data + "xx");
    CHECK_THROWS_WITH_AS(io::SafetensorsFile{p}, doctest::Contains("after the last tensor"), Error);
  }
  SUBCASE("missing file") {
    CHECK_THROWS_WITH_AS(io::SafetensorsFile{tmp_path("absent.safetensors")},
                         doctest::Contains("cannot open"), Error);
  }
}

TEST_CASE("a failed write leaves the previous file intact") {
  const std::string p = tmp_path("atomic.safetensors");
  io::save_safetensors(p, {{"a", ones({2})}});
  CHECK_THROWS(
      io::write_file_atomically(p, [](std::ostream&) { throw Error("killed mid-write"); }));
  CHECK(io::load_safetensors(p).at("a").to_vector() == std::vector<double>{1, 1});
}
