#include "storage/rocksdb/insert_hint.hpp"

namespace onceq::storage {

namespace {

class exact_size_prefix final : public rocksdb::SliceTransform {
 public:
  explicit exact_size_prefix(insert_hint_shape shape) : shape_(shape) {}
  const char* Name() const override { return "onceq.exact_size_prefix"; }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    return {key.data(), shape_.prefix_size};
  }
  bool InDomain(const rocksdb::Slice& key) const override { return key.size() == shape_.key_size; }

 private:
  const insert_hint_shape shape_;
};

}  // namespace

insert_hint_shape insert_hint_of(column c) noexcept {
  switch (c) {
    case column::messages:
      return {16, 8};  // topic(4) partition(4) | offset(8)
    case column::deliveries:
      return {20, 12};  // topic(4) group(4) partition(4) | offset(8)
    default:
      return {};
  }
}

std::shared_ptr<const rocksdb::SliceTransform> insert_hint_extractor(column c) {
  const insert_hint_shape shape = insert_hint_of(c);
  if (shape.key_size == 0) return nullptr;
  return std::make_shared<exact_size_prefix>(shape);
}

std::string range_begin_outside_hint(column c, std::string begin) {
  const insert_hint_shape shape = insert_hint_of(c);
  if (shape.key_size == 0 || begin.size() != shape.key_size) return begin;
  // begin - 1, big-endian: trailing zero bytes borrow.
  std::size_t i = begin.size();
  while (i > 0 && begin[i - 1] == '\0') --i;
  if (i == 0) {
    begin.pop_back();  // all zeros: no key of this size is smaller
    return begin;
  }
  begin[i - 1] = static_cast<char>(static_cast<unsigned char>(begin[i - 1]) - 1);
  for (std::size_t j = i; j < begin.size(); ++j) begin[j] = '\xff';
  // 0xff, not 0: a lease run's key (keys::lease_run) is a delivery key and
  // 0x01, and the run of begin - 1 must stay outside [result, end).
  begin.push_back('\xff');
  return begin;
}

}  // namespace onceq::storage
