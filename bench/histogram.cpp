#include "bench/histogram.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace onceq::bench {
namespace {

constexpr std::size_t k_sub = 128;  // sub-buckets per power of two
constexpr std::size_t k_sub_bits = 7;
constexpr std::size_t k_linear = 2 * k_sub;  // values below this are exact
constexpr std::size_t k_buckets = k_linear + (64 - k_sub_bits - 1) * k_sub;

}  // namespace

histogram::histogram() : counts_(k_buckets, 0) {}

std::size_t histogram::index_of(std::uint64_t v) {
  if (v < k_linear) return static_cast<std::size_t>(v);
  const auto msb = static_cast<std::size_t>(63 - std::countl_zero(v));
  const std::size_t shift = msb - k_sub_bits;
  return k_linear + (shift - 1) * k_sub + static_cast<std::size_t>((v >> shift) - k_sub);
}

std::uint64_t histogram::upper_of(std::size_t idx) {
  if (idx < k_linear) return idx;
  const std::size_t j = idx - k_linear;
  const std::size_t shift = j / k_sub + 1;
  const std::uint64_t sub = j % k_sub + k_sub;
  return ((sub + 1) << shift) - 1;
}

void histogram::record(std::uint64_t ns) {
  ++counts_[index_of(ns)];
  ++count_;
  max_ = std::max(max_, ns);
}

void histogram::merge(const histogram& other) {
  for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  max_ = std::max(max_, other.max_);
}

std::uint64_t histogram::quantile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  auto target = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count_)));
  target = std::max<std::uint64_t>(target, 1);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= target) return std::min(upper_of(i), max_);
  }
  return max_;
}

}  // namespace onceq::bench
