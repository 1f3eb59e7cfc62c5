#include "parallel/local_communicator.h"

#include <cstring>

namespace quiver {

std::vector<std::unique_ptr<Communicator>> LocalCommunicator::make_group(int world) {
  check(world >= 1, "LocalCommunicator: world below 1");
  auto shared = std::make_shared<Shared>(world);
  std::vector<std::unique_ptr<Communicator>> group;
  for (int r = 0; r < world; ++r) group.push_back(std::unique_ptr<Communicator>(new LocalCommunicator(r, shared)));
  return group;
}

void LocalCommunicator::all_reduce_sum(std::initializer_list<Tensor> tensors) {
  Shared& s = *shared_;
  auto& mine = s.slots[static_cast<size_t>(rank_)];
  mine.assign(tensors.begin(), tensors.end());
  for (const Tensor& t : mine) check(t.dtype == DType::kF32 && t.device == Device::kCpu, "all_reduce_sum: f32 host tensors");
  s.sync.arrive_and_wait();  // every rank's tensors published
  // Every rank sums all ranks' values in rank order into its own scratch, so all ranks get
  // the same bits; nobody writes a tensor until everybody has read them all.
  size_t total = 0;
  for (const Tensor& t : mine) total += static_cast<size_t>(t.numel());
  sum_.assign(total, 0.f);
  size_t at = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    const size_t n = static_cast<size_t>(mine[i].numel());
    for (const auto& rank : s.slots) {
      check(rank.size() == mine.size() && rank[i].numel() == mine[i].numel(),
            "all_reduce_sum: the ranks' tensors differ in count or size");
      const float* src = rank[i].ptr<float>();
      for (size_t j = 0; j < n; ++j) sum_[at + j] += src[j];
    }
    at += n;
  }
  s.sync.arrive_and_wait();  // every rank has read every tensor
  at = 0;
  for (const Tensor& t : mine) {
    std::memcpy(t.data, sum_.data() + at, t.bytes());
    at += static_cast<size_t>(t.numel());
  }
}

void LocalCommunicator::all_gather(Tensor out, Tensor in) {
  Shared& s = *shared_;
  check(out.numel() == in.numel() * world() && out.dtype == in.dtype, "all_gather: out must be [world, in]");
  auto& mine = s.slots[static_cast<size_t>(rank_)];
  mine.assign({in});
  s.sync.arrive_and_wait();
  for (int r = 0; r < world(); ++r) {
    const Tensor& src = s.slots[static_cast<size_t>(r)][0];
    check(src.bytes() == in.bytes(), "all_gather: the ranks' inputs differ in size");
    std::memcpy(static_cast<char*>(out.data) + static_cast<size_t>(r) * in.bytes(), src.data, in.bytes());
  }
  s.sync.arrive_and_wait();  // nobody reuses `in` before all have copied it
}

}  // namespace quiver
