// Every file of a fuzz target's corpus (tests/fuzz/corpus/<target>/: seeds,
// and the inputs of crashes found and fixed, named crash-*) through that
// target's checks. A regression crashes or traps the test binary; the last
// "replay:" line of the output names the input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" int request_fuzz_one_input(const std::uint8_t* data, std::size_t size);
extern "C" int codec_fuzz_one_input(const std::uint8_t* data, std::size_t size);
extern "C" int schema_fuzz_one_input(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;
using entry_point = int (*)(const std::uint8_t*, std::size_t);

// Replays the corpus of target; answers how many inputs ran.
std::size_t replay(const std::string& target, entry_point one_input) {
  const fs::path dir = fs::path(ONCEQ_FUZZ_CORPUS_DIR) / target;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != "README") files.push_back(e.path());
  }
  std::size_t ran = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s\n", f.c_str());
    EXPECT_EQ(one_input(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), 0) << f;
    ++ran;
  }
  return ran;
}

TEST(FuzzReplay, RequestCorpus) {
  EXPECT_GE(replay("request_fuzz", request_fuzz_one_input), 20u);
}

TEST(FuzzReplay, CodecCorpus) {
  EXPECT_GE(replay("codec_fuzz", codec_fuzz_one_input), 20u);
}

TEST(FuzzReplay, SchemaCorpus) {
  EXPECT_GE(replay("schema_fuzz", schema_fuzz_one_input), 20u);
}

}  // namespace
