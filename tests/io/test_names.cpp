// Names and identities: the closest known key for a misspelt one, SHA-256 against FIPS 180-2's
// examples, UUIDs, names made safe as one path component, and UTF-8 validation.
#include <doctest/doctest.h>

#include <set>

#include "tessera/io/closest_name.h"
#include "tessera/io/identity.h"
#include "tessera/io/utf8_validation.h"

using namespace tessera;

TEST_CASE("closest_name: the known key a typo meant, and none for a word that is no typo") {
  const std::vector<std::string> top = {
      "optimizer", "scheduler", "train_batch_size", "fp16", "zero_optimization", "data",
      "model",     "train"};
  CHECK(io::closest_name("optimiser", top) == "optimizer");
  CHECK(io::closest_name("Optimizer", top) == "optimizer");  // case only
  CHECK(io::closest_name("shceduler", top) == "scheduler");  // two letters swapped
  CHECK(io::closest_name("train_batch_szie", top) == "train_batch_size");
  CHECK(io::closest_name("dta", top) == "data");
  CHECK_FALSE(io::closest_name("tokenizer", top));  // far from all of them
  CHECK_FALSE(io::closest_name("xy", {"lr"}));      // two edits on two letters is no typo
  CHECK(io::did_you_mean("lrr", {"lr", "betas"}) == " (did you mean 'lr'?)");
  CHECK(io::did_you_mean("momentum", {"lr", "betas"}).empty());
}

TEST_CASE("sha256_hex: FIPS 180-2's test vectors") {
  CHECK(io::sha256_hex("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(io::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(io::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("new_uuid: version 4, variant 1, never the same twice") {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string u = io::new_uuid();
    REQUIRE(u.size() == 36);
    CHECK(u[8] == '-');
    CHECK(u[14] == '4');
    CHECK(std::string("89ab").find(u[19]) != std::string::npos);
    seen.insert(u);
  }
  CHECK(seen.size() == 100);
}

TEST_CASE("path_component: any name is one safe file name") {
  CHECK(io::path_component("gpt2-asha_v1.2", "x") == "gpt2-asha_v1.2");
  CHECK(io::path_component("../x", "x") == "%2E.%2Fx");
  CHECK(io::path_component("/etc/passwd", "x") == "%2Fetc%2Fpasswd");
  CHECK(io::path_component("..", "x") == "%2E.");
  CHECK(io::path_component(".", "x") == "%2E");
  CHECK(io::path_component("", "experiment") == "experiment");
  CHECK(io::path_component("a b\xc3\xa9", "x") == "a%20b%C3%A9");
  const std::string long_name(1000, '/');
  const std::string c = io::path_component(long_name, "x");
  CHECK(c.size() <= 200);
  CHECK(c.find('/') == std::string::npos);
  CHECK(c != io::path_component(std::string(999, '/'), "x"));  // still told apart
}

TEST_CASE("first_invalid_utf8: the offset of the first bad sequence") {
  CHECK_FALSE(io::first_invalid_utf8("plain ascii, caf\xc3\xa9, \xe6\x97\xa5\xe6\x9c\xac"));
  CHECK(io::first_invalid_utf8("caf\xe9") == 3u);       // Latin-1
  CHECK(io::first_invalid_utf8("ab\xc3") == 2u);        // cut short
  CHECK(io::first_invalid_utf8("\xed\xa0\x80") == 0u);  // a surrogate
  CHECK(io::first_invalid_utf8("ok\xc0\xaf") == 2u);    // overlong '/'
}
