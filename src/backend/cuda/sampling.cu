// CUDA Backend::sample: one block per logits row, no sort. The rules are those of
// backend/sampling_math.h (shared with the scalar reference, ref_sampling.cc); the
// thresholds of top-k, top-p and the top-K logprobs come from block_select.cuh.
//
// Passes over a row (each a read of vocab floats, mostly from L2 right after lm_head):
//   1 max + lowest-index argmax           (always; that of the allowed tokens too under a
//                                          structured-output mask, which steps 4-5 obey)
//   2 log-sum-exp, top-p mass total        (always; the mass only when needed)
//   3 top-K logprobs: select + collect     (K > 0: 4 passes, + a tie scan when ties straddle)
//   4 top-k select, top-p select          (3 passes each, + a tie scan when ties straddle)
//   5 Gumbel race over the kept set, rank  (sampled rows)
// Nothing allocates, synchronises or reads back: the grid is `rows` blocks, so the op is
// captured into the decode graphs like any other.
#include <cmath>

#include "backend/cuda/block_select.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"
#include "backend/ref/ref_sampling.h"

namespace quiver {
namespace {

namespace sel = cuda::select;
using sel::kThreads;

struct SampleArgs {
  const float* logits;  // [rows, vocab]
  int vocab;
  const float* temperature;
  const int32_t* top_k;
  const float* top_p;
  const float* min_p;
  const uint32_t* seed;  // [rows, 2]: low, high words
  const int32_t* counter;
  const int32_t* row_logprobs;  // [rows] or null
  const int32_t* mask_row;      // [rows] or null
  const uint32_t* masks;        // [table rows, words]
  int mask_words;
  int num_logprobs;
  int32_t* token;
  float* logprob;
  int32_t* rank;
  int32_t* top_ids;  // [rows, num_logprobs]
  float* top_logprobs;
};

// The prefix of the order kept by a weighted boundary: keys above it, and the first
// `cut` indices among the keys equal to it.
struct Prefix {
  uint32_t key = 0;
  int cut = 0;  // 0 with key 0: everything; index bound of the tied elements otherwise
  __device__ bool keeps(int i, uint32_t k) const { return k > key || (k == key && i < cut); }
};

// Turns a boundary into a prefix: of the elements at the boundary key (all of weight q),
// the first ceil((target - above) / q) in index order are in.
template <class Tied>
__device__ Prefix to_prefix(sel::Shared& sh, int n, const sel::Boundary& b, unsigned long long target,
                            unsigned long long q, Tied tied) {
  Prefix p;
  p.key = b.key;
  p.cut = n;
  if (q == 0) return p;  // cannot happen at a boundary (its weight reaches the target)
  const unsigned long long need = (target - b.above + q - 1) / q, count = b.at_key / q;
  if (need < count) p.cut = sel::find_nth(sh, n, need, tied) + 1;
  return p;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleArgs a) {
  __shared__ sel::Shared sh;
  __shared__ int top_slot;
  __shared__ unsigned long long top_packed[sampling::kMaxLogprobs];
  const int row = blockIdx.x, n = a.vocab;
  const float* x = a.logits + static_cast<int64_t>(row) * n;
  // A structured-output mask restricts the choice (steps 4-5 and the greedy token), not
  // the logprobs.
  const int mask = a.mask_row != nullptr ? a.mask_row[row] : -1;
  const uint32_t* allow = mask >= 0 ? a.masks + static_cast<int64_t>(mask) * a.mask_words : nullptr;
  auto ok = [allow](int i) { return allow == nullptr || sampling::mask_allows(allow, i); };

  // 1. argmax (the softmax shift), and the greedy token: the argmax of the allowed tokens.
  unsigned long long best = 0, best_ok = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const unsigned long long p = sel::pack_first(sampling::order_key(x[i]), i);
    best = sel::MaxOp{}(best, p);
    if (allow != nullptr && ok(i)) best_ok = sel::MaxOp{}(best_ok, p);
  }
  const int argmax = sel::unpack_index(sel::block_reduce(best, sh.red_u64, sel::MaxOp{}));
  if (allow != nullptr) best_ok = sel::block_reduce(best_ok, sh.red_u64, sel::MaxOp{});
  // pack_first of a non-NaN logit is never 0, so 0 means no allowed token: unconstrained.
  const bool masked = allow != nullptr && best_ok != 0;
  const int first = masked ? sel::unpack_index(best_ok) : argmax;
  const float mx = x[argmax], cmx = x[first];
  auto allowed = [&](int i) { return !masked || ok(i); };

  // 2. log-sum-exp (expf per element, summed in double) and, for top-p without top-k, the
  //    total integer mass.
  const float temp = a.temperature[row];
  const bool sampled = temp != 0.0f;
  const bool use_k = sampled && sampling::top_k_active(a.top_k[row], n);
  const bool use_p = sampled && sampling::top_p_active(a.top_p[row]);
  const bool total_here = use_p && !use_k;
  double sum = 0;
  unsigned long long mass = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    sum += static_cast<double>(expf(x[i] - mx));
    if (total_here && allowed(i)) mass += sampling::mass_q(sampling::rel_prob(x[i], cmx, temp));
  }
  const double lse = static_cast<double>(mx) + log(sel::block_reduce(sum, sh.red_f64, sel::SumOp{}));
  if (total_here) mass = sel::block_reduce(mass, sh.red_u64, sel::SumOp{});

  // 3. top-K logprobs: the boundary of the first K, then the K themselves, sorted.
  const int k_out = a.num_logprobs;
  const int k_row = a.row_logprobs ? max(0, min(a.row_logprobs[row], k_out)) : k_out;
  for (int s = k_row + threadIdx.x; s < k_out; s += kThreads) {
    a.top_ids[row * k_out + s] = -1;
    a.top_logprobs[row * k_out + s] = -INFINITY;
  }
  if (k_row > 0) {
    const int k = min(k_row, n);
    auto count = [](int, uint32_t) { return 1ull; };
    const sel::Boundary b = sel::select_boundary(sh, x, n, static_cast<unsigned long long>(k), count);
    const Prefix top = to_prefix(sh, n, b, k, 1, [&](int i) { return sampling::order_key(x[i]) == b.key; });
    if (threadIdx.x == 0) top_slot = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = sampling::order_key(x[i]);
      if (top.keeps(i, key)) {
        const int s = atomicAdd(&top_slot, 1);
        if (s < k) top_packed[s] = sel::pack_first(key, i);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // At most 20: an insertion sort by (key descending, index ascending).
      for (int s = 1; s < k; ++s)
        for (int t = s; t > 0 && top_packed[t] > top_packed[t - 1]; --t) {
          const unsigned long long tmp = top_packed[t];
          top_packed[t] = top_packed[t - 1];
          top_packed[t - 1] = tmp;
        }
      for (int s = 0; s < k_row; ++s) {
        const int id = s < k ? sel::unpack_index(top_packed[s]) : -1;
        a.top_ids[row * k_out + s] = id;
        a.top_logprobs[row * k_out + s] = id >= 0 ? static_cast<float>(static_cast<double>(x[id]) - lse) : -INFINITY;
      }
    }
  }

  int token = first;
  if (sampled) {
    // 4. the kept prefix: top-k, then top-p over the top-k survivors' mass, then min-p.
    Prefix pk;  // key 0, cut 0 keeps every key > 0, i.e. every non-NaN logit
    if (use_k) {
      const unsigned long long k = static_cast<unsigned long long>(a.top_k[row]);
      const sel::Boundary b = sel::select_boundary(sh, x, n, k, [&](int i, uint32_t) { return allowed(i) ? 1ull : 0ull; });
      if (b.found)
        pk = to_prefix(sh, n, b, k, 1, [&](int i) { return sampling::order_key(x[i]) == b.key && allowed(i); });
    }
    auto mass_of = [&](int i, uint32_t key) {
      return pk.keeps(i, key) && allowed(i) ? sampling::mass_q(sampling::rel_prob(x[i], cmx, temp)) : 0ull;
    };
    Prefix pp;
    if (use_p) {
      if (use_k) {
        mass = 0;
        for (int i = threadIdx.x; i < n; i += kThreads) mass += mass_of(i, sampling::order_key(x[i]));
        mass = sel::block_reduce(mass, sh.red_u64, sel::SumOp{});
      }
      const unsigned long long target = sampling::top_p_target(a.top_p[row], mass);
      const sel::Boundary b = sel::select_boundary(sh, x, n, target, mass_of);
      if (b.found) {
        const unsigned long long q = sampling::mass_q(sampling::rel_prob(sel::key_to_float(b.key), cmx, temp));
        pp = to_prefix(sh, n, b, target, q, [&](int i) {
          const uint32_t key = sampling::order_key(x[i]);
          return key == b.key && pk.keeps(i, key) && allowed(i);
        });
      }
    }
    const float min_p = a.min_p[row];
    const bool use_min_p = sampling::min_p_active(min_p);
    const uint64_t seed = static_cast<uint64_t>(a.seed[2 * row]) | static_cast<uint64_t>(a.seed[2 * row + 1]) << 32;
    const uint32_t counter = static_cast<uint32_t>(a.counter[row]);

    // 5. Gumbel race: four neighbouring tokens per thread share one Philox call. Scores
    //    are >= 0, so their float bits order like the floats; 0 = nobody (keep `first`).
    unsigned long long win = 0;
    for (int g = threadIdx.x; 4 * g < n; g += kThreads) {
      bool any = false;
      float e[4];
      for (int j = 0; j < 4; ++j) {
        const int i = 4 * g + j;
        e[j] = -1.0f;
        if (i >= n) continue;
        const uint32_t key = sampling::order_key(x[i]);
        if (!pk.keeps(i, key) || !pp.keeps(i, key) || !allowed(i)) continue;
        const float p = sampling::rel_prob(x[i], cmx, temp);
        if (use_min_p && !(p >= min_p)) continue;
        e[j] = p;
        any = true;
      }
      if (!any) continue;
      const sampling::Philox4 bits = sampling::token_noise_bits(seed, counter, static_cast<uint32_t>(g));
      for (int j = 0; j < 4; ++j) {
        if (e[j] < 0.0f) continue;
        const float score = sampling::race_score(e[j], bits.v[j]);
        if (!(score >= 0.0f)) continue;
        win = sel::MaxOp{}(win, (static_cast<unsigned long long>(__float_as_uint(score)) << 32) |
                                    (0xffffffffu - static_cast<uint32_t>(4 * g + j)));
      }
    }
    win = sel::block_reduce(win, sh.red_u64, sel::MaxOp{});
    if (win != 0) token = sel::unpack_index(win);
  }

  // Rank: tokens before the chosen one in the order (the argmax has none).
  int before = 0;
  if (token != argmax) {
    const uint32_t tk = sampling::order_key(x[token]);
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = sampling::order_key(x[i]);
      before += (key > tk || (key == tk && i < token)) ? 1 : 0;
    }
    before = static_cast<int>(sel::block_reduce(static_cast<unsigned long long>(before), sh.red_u64, sel::SumOp{}));
  }
  if (threadIdx.x == 0) {
    a.token[row] = token;
    a.logprob[row] = static_cast<float>(static_cast<double>(x[token]) - lse);
    a.rank[row] = before + 1;
  }
}

}  // namespace

void CudaBackend::sample(const SampleOutputs& out, Tensor logits, const SampleInputs& in) {
  sampling::check_sample_args(out, logits, in);
  check(logits.device == Device::kCuda, "sample: logits must be on the GPU");
  const int64_t rows = logits.dim(0);
  if (rows == 0) return;
  SampleArgs a{
      .logits = logits.ptr<float>(),
      .vocab = static_cast<int>(logits.dim(1)),
      .temperature = in.temperature.ptr<float>(),
      .top_k = in.top_k.ptr<int32_t>(),
      .top_p = in.top_p.ptr<float>(),
      .min_p = in.min_p.ptr<float>(),
      .seed = reinterpret_cast<const uint32_t*>(in.seed.ptr<int32_t>()),
      .counter = in.counter.ptr<int32_t>(),
      .row_logprobs = in.row_logprobs.empty() ? nullptr : in.row_logprobs.ptr<int32_t>(),
      .mask_row = in.mask_row.empty() ? nullptr : in.mask_row.ptr<int32_t>(),
      .masks = in.mask_row.empty() ? nullptr : reinterpret_cast<const uint32_t*>(in.masks.ptr<int32_t>()),
      .mask_words = in.mask_row.empty() ? 0 : static_cast<int>(in.masks.dim(1)),
      .num_logprobs = in.num_logprobs,
      .token = out.token.ptr<int32_t>(),
      .logprob = out.logprob.ptr<float>(),
      .rank = out.rank.ptr<int32_t>(),
      .top_ids = in.num_logprobs > 0 ? out.top_ids.ptr<int32_t>() : nullptr,
      .top_logprobs = in.num_logprobs > 0 ? out.top_logprobs.ptr<float>() : nullptr,
  };
  sample_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream_>>>(a);
  cuda::launch_check();
}

}  // namespace quiver
