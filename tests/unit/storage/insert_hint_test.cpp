// The insert hint's key shapes and the range-delete begin keys that keep
// range tombstones out of its domain (storage/rocksdb/insert_hint.hpp).

#include "storage/rocksdb/insert_hint.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "storage/schema.hpp"

namespace onceq::storage {
namespace {

// begin - 1 as a big-endian number of the same size; begin is not zero.
std::string predecessor(std::string k) {
  std::size_t i = k.size();
  while (k[i - 1] == '\0') k[--i] = '\xff';
  k[i - 1] = static_cast<char>(static_cast<unsigned char>(k[i - 1]) - 1);
  return k;
}

TEST(insert_hint, the_shapes_are_the_schemas_keys) {
  const auto m = insert_hint_of(column::messages);
  EXPECT_EQ(keys::message(7, 3, 99).size(), m.key_size);
  EXPECT_EQ(keys::message(7, 3, 99).substr(0, m.prefix_size),
            keys::message(7, 3, 1).substr(0, m.prefix_size));
  EXPECT_NE(keys::message(7, 3, 99).substr(0, m.prefix_size),
            keys::message(7, 4, 99).substr(0, m.prefix_size));
  const auto d = insert_hint_of(column::deliveries);
  EXPECT_EQ(keys::delivery(7, 2, 3, 99).size(), d.key_size);
  EXPECT_EQ(keys::delivery(7, 2, 3, 99).substr(0, d.prefix_size),
            keys::delivery(7, 2, 3, 1).substr(0, d.prefix_size));
  EXPECT_NE(keys::delivery(7, 2, 3, 99).substr(0, d.prefix_size),
            keys::delivery(7, 1, 3, 99).substr(0, d.prefix_size));
  for (column c : {column::meta, column::keys, column::dedup}) {
    EXPECT_EQ(insert_hint_of(c).key_size, 0u);
    EXPECT_EQ(insert_hint_extractor(c), nullptr);
  }
}

TEST(insert_hint, only_keys_of_the_exact_size_are_in_the_domain) {
  const auto x = insert_hint_extractor(column::messages);
  ASSERT_NE(x, nullptr);
  const std::string k = keys::message(1, 2, 3);
  EXPECT_TRUE(x->InDomain(k));
  EXPECT_EQ(x->Transform(k).ToString(), k.substr(0, 8));
  EXPECT_FALSE(x->InDomain(k.substr(0, 15)));
  EXPECT_FALSE(x->InDomain(k + '\0'));
  EXPECT_FALSE(x->InDomain(keys::topic_begin(1)));
}

TEST(insert_hint, a_range_begin_leaves_the_domain_and_bounds_the_same_keys) {
  std::mt19937_64 rng(42);
  for (column c : {column::messages, column::deliveries}) {
    const std::size_t n = insert_hint_of(c).key_size;
    std::vector<std::string> begins = {std::string(n, '\x01'), std::string(n, '\xff'),
                                       std::string(n - 1, '\x05') + '\0',
                                       std::string(1, '\x02') + std::string(n - 1, '\0')};
    for (int i = 0; i < 1000; ++i) {
      std::string k(n, '\0');
      for (auto& ch : k) ch = static_cast<char>(rng() % 4 == 0 ? 0 : rng());  // zeros borrow
      if (k != std::string(n, '\0')) begins.push_back(k);
    }
    for (const auto& b : begins) {
      const std::string r = range_begin_outside_hint(c, b);
      EXPECT_NE(r.size(), n);
      EXPECT_LT(r, b);               // b itself is in [r, end)
      EXPECT_LT(predecessor(b), r);  // the key of size n just below is not
      // Nor the lease run keyed just below b (a delivery key and 0x01).
      EXPECT_LT(predecessor(b) + '\x01', r);
    }
    // All zeros: nothing of size n is smaller; the shorter key bounds them all.
    const std::string zero(n, '\0');
    const std::string r = range_begin_outside_hint(c, zero);
    EXPECT_EQ(r, std::string(n - 1, '\0'));
    EXPECT_LT(r, zero);
  }
  // Other sizes and families are left alone.
  EXPECT_EQ(range_begin_outside_hint(column::messages, "abc"), "abc");
  EXPECT_EQ(range_begin_outside_hint(column::meta, std::string(16, 'x')), std::string(16, 'x'));
}

}  // namespace
}  // namespace onceq::storage
