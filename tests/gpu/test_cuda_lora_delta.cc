// link: qv_backend
// The ops that take the LoRA expand a group's plan leaves to them (ExpandKernel::kNextOp:
// rope_kv_write, add_rms_norm, silu_mul) on CUDA, where the term is added inside the op's
// kernel, against the reference's (lora_expand on the inputs, then the plain op). Stacks f32 / f16 /
// bf16, ranks that do and do not take the vector loads, 1 / 3 / 13 tokens with slots -1
// and one past the stack, rows wider than one pass of the kernel's threads; the inputs
// must hold their terms afterwards too. Skips without a GPU.
#include <cstdio>
#include <string>
#include <vector>

#include "gpu/cuda_test_util.h"

namespace quiver::test {
namespace {

constexpr int64_t kSlots = 4;

class CudaLoraDelta : public CudaTest {
 protected:
  // Per-token slots -1 .. kSlots (kSlots: past the stack), token 0 on slot 1; the
  // reference's copy has -1 where the stack ends (it rejects such slots).
  void make_slots(int64_t n) {
    slots_.assign(static_cast<size_t>(n), 0);
    for (auto& s : slots_) s = static_cast<int32_t>(rng_() % (kSlots + 2)) - 1;
    slots_[0] = 1;
    ref_slots_ = slots_;
    for (auto& s : ref_slots_) s = s < kSlots ? s : -1;
    hslots_ = host_i32({n}, ref_slots_);
    gslots_ = upload(gpu_.get(), host_i32({n}, slots_));
  }

  // A group's LoRA for n tokens of rank R: t [3, n, R] random, no members yet.
  void begin(GroupLora* h, GroupLora* d, int64_t n, int64_t rank) {
    b_.clear();
    gb_.clear();
    t_ = random_tensor(rng_, DType::kF32, {kMaxGroup, n, rank}, 0.5f);
    gt_ = upload(gpu_.get(), t_);
    *h = GroupLora();
    *d = GroupLora();
    h->t = t_.view();
    d->t = gt_.t;
    h->meta.token_slot = hslots_.view();
    d->meta.token_slot = gslots_.t;
  }

  // Adds a member over y (host) / gy (device): a random B stack [kSlots, out, R], out = y's
  // row size.
  void add_member(GroupLora* h, GroupLora* d, HostTensor& y, const DeviceTensor& gy, int64_t rank, DType st) {
    const int64_t n = y.shape[0], out = y.view().numel() / n;
    b_.push_back(random_tensor(rng_, st, {kSlots, out, rank}, 0.5f));
    gb_.push_back(upload(gpu_.get(), b_.back()));
    const int i = h->count++;
    d->count++;
    h->y[i] = y.view().view({n, out});  // [n, out], as project() leaves it
    d->y[i] = gy.t.view({n, out});
    h->b_stack[i] = b_.back().view();
    d->b_stack[i] = gb_.back().t;
  }

  std::vector<int32_t> slots_, ref_slots_;
  HostTensor hslots_, t_;
  DeviceTensor gslots_, gt_;
  std::vector<HostTensor> b_;
  std::vector<DeviceTensor> gb_;
};

// The plan that leaves the expand to these ops (its other fields do not matter to them).
const GroupPlan kNextOp{MatmulKernel::kHost, ShrinkKernel::kTokenRows, ExpandKernel::kNextOp, DType::kF32};

const DType kStackTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// One snprintf: GCC 13 at -O3 reports a false overflow (-Wstringop-overflow, -Warray-bounds)
// in the inlined chain of std::string operator+ here.
std::string tag_of(const char* op, DType st, int64_t rank, int64_t n, int64_t width) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s stacks %s r=%lld n=%lld width=%lld", op, name_of(st), static_cast<long long>(rank),
                static_cast<long long>(n), static_cast<long long>(width));
  return buf;
}

TEST_F(CudaLoraDelta, RopeKvWrite) {
  const int64_t max_pos = 64, bs = 16, heads = 8, kv = 2;
  for (DType st : kStackTypes)
    for (int64_t rank : {1, 8, 16, 24})
      for (int64_t hd : {64, 128})
        for (int64_t n : {1, 3, 13}) {
          make_slots(n);
          std::vector<float> cs(static_cast<size_t>(max_pos * hd));
          for (auto& c : cs) c = static_cast<float>(rng_() % 2001) / 1000.f - 1.f;
          HostTensor table = host_f32({max_pos, hd}, cs);
          std::vector<int32_t> pos(static_cast<size_t>(n)), cache_slot(static_cast<size_t>(n));
          for (size_t i = 0; i < pos.size(); ++i) {
            pos[i] = static_cast<int32_t>(rng_() % max_pos);
            cache_slot[i] = i % 4 == 2 ? -1 : static_cast<int32_t>(i);  // some padding
          }
          const int64_t num_blocks = (n + bs - 1) / bs + 1;
          HostTensor hp = host_i32({n}, pos), hs = host_i32({n}, cache_slot);
          HostTensor q = random_tensor(rng_, DType::kF32, {n, heads, hd}), k = random_tensor(rng_, DType::kF32, {n, kv, hd});
          HostTensor v = random_tensor(rng_, DType::kF32, {n, kv, hd});
          HostTensor kc = random_tensor(rng_, DType::kBF16, {num_blocks, bs, kv, hd});
          HostTensor vc = random_tensor(rng_, DType::kBF16, {num_blocks, bs, kv, hd});
          Backend* gpu = gpu_.get();
          DeviceTensor gq = upload(gpu, q), gk = upload(gpu, k), gv = upload(gpu, v), gp = upload(gpu, hp);
          DeviceTensor gs = upload(gpu, hs), gkc = upload(gpu, kc), gvc = upload(gpu, vc), gtable = upload(gpu, table);
          GroupLora h, d;
          begin(&h, &d, n, rank);
          add_member(&h, &d, q, gq, rank, st);
          add_member(&h, &d, k, gk, rank, st);
          add_member(&h, &d, v, gv, rank, st);
          ref_.rope_kv_write(q.view(), k.view(), v.view(), hp.view(), table.view(), KvLayer{kc.view(), vc.view()}, hs.view(),
                             kNextOp, h);
          gpu->rope_kv_write(gq.t, gk.t, gv.t, gp.t, gtable.t, KvLayer{gkc.t, gvc.t}, gs.t, kNextOp, d);
          const std::string tag = tag_of("rope_kv_write", st, rank, n, hd);
          expect_close(tag + " q", download(gpu, gq.t), q.as_f32(), 1e-5);
          expect_close(tag + " k", download(gpu, gk.t), k.as_f32(), 1e-5);
          expect_close(tag + " v", download(gpu, gv.t), v.as_f32(), 1e-5);
          // A value one f32 ulp away from the reference's may round to the other bf16 neighbour.
          expect_close(tag + " k cache", download(gpu, gkc.t), kc.as_f32(), 1e-2);
          expect_close(tag + " v cache", download(gpu, gvc.t), vc.as_f32(), 1e-2);
        }
}

TEST_F(CudaLoraDelta, AddRmsNorm) {
  for (DType st : kStackTypes)
    for (int64_t rank : {1, 8, 16, 40})
      // Not a multiple of 4; rows split over clusters of 8 x 32 and 4 x 224 threads (sm_90), 8 x 128
      // there, one float4 a thread elsewhere; more than two float4s a thread. 1-2 rows of up to
      // 4,096 with ranks 8 and 16: B rows staged in shared memory (rank 40's do not fit).
      for (int64_t d : {130, 1024, 3584, 4096, 5000})
        for (int64_t n : {1, 2, 3, 13}) {
          make_slots(n);
          HostTensor x = random_tensor(rng_, DType::kF32, {n, d}, 2.f), w = random_tensor(rng_, DType::kBF16, {d});
          HostTensor res = random_tensor(rng_, DType::kF32, {n, d}, 2.f), out = random_tensor(rng_, DType::kF32, {n, d});
          Backend* gpu = gpu_.get();
          DeviceTensor gx = upload(gpu, x), gw = upload(gpu, w), gr = upload(gpu, res), go = upload(gpu, out);
          DeviceTensor g16 = upload(gpu, random_tensor(rng_, DType::kBF16, {n, d}));
          GroupLora h, dd;
          begin(&h, &dd, n, rank);
          add_member(&h, &dd, x, gx, rank, st);
          ref_.add_rms_norm(out.view(), Tensor(), res.view(), x.view(), w.view(), 1e-6f, kNextOp, h);
          gpu->add_rms_norm(go.t, g16.t, gr.t, gx.t, gw.t, 1e-6f, kNextOp, dd);
          const std::string tag = tag_of("add_rms_norm", st, rank, n, d);
          expect_close(tag + " out", download(gpu, go.t), out.as_f32(), 1e-5);
          expect_close(tag + " out16", download(gpu, g16.t), out.as_f32(), 1e-2);
          expect_close(tag + " residual", download(gpu, gr.t), res.as_f32(), 1e-5);
          expect_close(tag + " x", download(gpu, gx.t), x.as_f32(), 1e-5);
        }
}

TEST_F(CudaLoraDelta, SiluMul) {
  for (DType st : kStackTypes)
    for (int64_t rank : {1, 8, 16, 40})
      for (int64_t f : {97, 11008})
        for (int64_t n : {1, 3, 13}) {
          make_slots(n);
          HostTensor gate = random_tensor(rng_, DType::kF32, {n, f}, 4.f), up = random_tensor(rng_, DType::kF32, {n, f});
          Backend* gpu = gpu_.get();
          DeviceTensor gg = upload(gpu, gate), gu = upload(gpu, up);
          DeviceTensor g16 = upload(gpu, random_tensor(rng_, DType::kF16, {n, f}));
          GroupLora h, d;
          begin(&h, &d, n, rank);
          add_member(&h, &d, gate, gg, rank, st);
          add_member(&h, &d, up, gu, rank, st);
          // In place on gate, as the model calls it; the reference's up then holds its term.
          ref_.silu_mul(gate.view(), Tensor(), gate.view(), up.view(), kNextOp, h);
          gpu->silu_mul(gg.t, g16.t, gg.t, gu.t, kNextOp, d);
          const std::string tag = tag_of("silu_mul", st, rank, n, f);
          expect_close(tag + " out", download(gpu, gg.t), gate.as_f32(), 1e-5);
          expect_close(tag + " out16", download(gpu, g16.t), gate.as_f32(), 1e-3);
          expect_close(tag + " up", download(gpu, gu.t), up.as_f32(), 1e-5);
        }
}

}  // namespace
}  // namespace quiver::test
