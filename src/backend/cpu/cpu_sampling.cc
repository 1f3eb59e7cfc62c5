// CpuBackend::sample: the reference per-row code (ref_sampling.cc), one row per unit of
// work. Sampling is a sort-free path on the GPU only; on the CPU the sort costs about as
// much as the lm_head row it follows, and sharing the scalar code keeps cpu == ref exact.
#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_sampling.h"

namespace quiver {

void CpuBackend::sample(const SampleOutputs& out, Tensor logits, const SampleInputs& in) {
  sampling::check_sample_args(out, logits, in);
  run_units(logits.dim(0), [&](int64_t r) { sampling::sample_rows_host(out, logits, in, r, r + 1); });
}

}  // namespace quiver
