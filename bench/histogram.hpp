#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace onceq::bench {

// Log-linear histogram of nanosecond durations (128 sub-buckets per power of
// two, so a reported percentile is within 0.8% of the true value). Fixed
// memory (~60 KB) whatever the count. Not thread-safe: keep one per thread
// and merge() them at the end.
class histogram {
 public:
  histogram();

  void record(std::uint64_t ns);
  void merge(const histogram& other);

  std::uint64_t count() const { return count_; }
  std::uint64_t max() const { return max_; }

  // The value at quantile q (0..1): the upper bound of the bucket holding the
  // ceil(q * count)-th smallest sample, capped at max(). 0 when empty.
  std::uint64_t quantile(double q) const;

 private:
  static std::size_t index_of(std::uint64_t v);
  static std::uint64_t upper_of(std::size_t idx);

  std::vector<std::uint64_t> counts_;
  std::uint64_t count_ = 0;
  std::uint64_t max_ = 0;
};

}  // namespace onceq::bench
