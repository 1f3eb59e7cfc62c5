// Paged attention kernel for one work item (see AttentionWork), written once over a Simd
// vocabulary (simd_*.h). Included only by the cpu_kernels_*.cc files.
//
// Online softmax (flash-attention style) over chunks of kW KV positions: each chunk's
// K and V rows are gathered through the block table and converted to f32 once, then
// used by every query row and every head of the GQA group. Scores for the chunk come
// out of one transpose-add tree (Simd::reduce_lanes) as one vector, so the max, exp
// and sum are vector ops. Scores stay f32 and are max-subtracted before exp.
#pragma once

#include <cstdint>

#include "backend/cpu/matmul_kernels.h"

namespace quiver::cpu {
namespace {

template <class S, int E>
void attention_kernel(const AttentionWork& w) {
  using V = typename S::V;
  using W = WElem<E>;
  constexpr int C = S::kW;  // KV positions per chunk
  const int hd = w.head_dim;
  const int nv = (hd + C - 1) / C;
  const int hdp = nv * C;  // padded row length of the f32 buffers (zero tail)
  const int tail = hd - (nv - 1) * C;
  const int nq = w.num_rows * w.group;

  alignas(64) float kbuf[C * kAttnMaxHeadDim];
  alignas(64) float vbuf[C * kAttnMaxHeadDim];
  alignas(64) float qbuf[kAttnMaxQueryFloats];  // scaled queries [nq][hdp]
  alignas(64) float obuf[kAttnMaxQueryFloats];  // unnormalised outputs [nq][hdp]
  float m_local[kAttnMaxQueryFloats / 16], l_local[kAttnMaxQueryFloats / 16];
  float* m = w.m ? w.m : m_local;
  float* l = w.m ? w.l : l_local;

  const V scale = S::set1(w.scale);
  for (int qi = 0; qi < nq; ++qi) {
    const float* qp = w.q + (qi / w.group) * w.q_row_stride + (qi % w.group) * hd;
    for (int v = 0; v < nv; ++v) {
      V x = v + 1 < nv ? S::load(qp + v * C) : S::load_n(qp + v * C, tail);
      S::store(qbuf + qi * hdp + v * C, S::mul(x, scale));
      S::store(obuf + qi * hdp + v * C, S::zero());
    }
    m[qi] = -__builtin_inff();
    l[qi] = 0.f;
  }

  const int64_t last_pos = w.first_pos + w.num_rows - 1;
  const int64_t kv_end = min64(w.kv_end, last_pos + 1);
  alignas(64) float p[C];
  for (int64_t c0 = w.kv_begin; c0 < kv_end; c0 += C) {
    const int cn = static_cast<int>(min64(C, kv_end - c0));
    for (int j = 0; j < cn; ++j) {
      const int64_t pos = c0 + j;
      const int64_t slot = static_cast<int64_t>(w.block_table[pos / w.block_size]) * w.block_size + pos % w.block_size;
      const int64_t base = slot * w.kv_token_stride + w.kv_head_offset;
      const W* kp = static_cast<const W*>(w.k_cache) + base;
      const W* vp = static_cast<const W*>(w.v_cache) + base;
      for (int v = 0; v + 1 < nv; ++v) {
        S::store(kbuf + j * hdp + v * C, S::template load_w<E>(kp + v * C));
        S::store(vbuf + j * hdp + v * C, S::template load_w<E>(vp + v * C));
      }
      const int v = nv - 1;
      S::store(kbuf + j * hdp + v * C, S::template load_w_n<E>(kp + v * C, tail));
      S::store(vbuf + j * hdp + v * C, S::template load_w_n<E>(vp + v * C, tail));
    }

    for (int r = 0; r < w.num_rows; ++r) {
      const int64_t limit = w.first_pos + r;  // last position this row may see
      if (limit < c0) continue;
      const int valid = static_cast<int>(min64(cn, limit - c0 + 1));
      for (int g = 0; g < w.group; ++g) {
        const int qi = r * w.group + g;
        const float* qv = qbuf + qi * hdp;
        V parts[C];
        for (int j = 0; j < C; ++j) {
          V acc = S::zero();
          if (j < valid) {
            for (int v = 0; v < nv; ++v) acc = S::fma(S::load(qv + v * C), S::load(kbuf + j * hdp + v * C), acc);
          }
          parts[j] = acc;
        }
        const V s = S::first_n(S::reduce_lanes(parts), valid, -__builtin_inff());
        const float m_old = m[qi];
        const float cmax = S::reduce_max(s);
        const float m_new = cmax > m_old ? cmax : m_old;
        const V pv = S::first_n(S::exp(S::sub(s, S::set1(m_new))), valid, 0.f);
        // exp(-inf) comes out as 0 from the clamped exp; l and o are 0 then anyway.
        const float corr = m_old == -__builtin_inff() ? 0.f : S::reduce_max(S::exp(S::set1(m_old - m_new)));
        l[qi] = l[qi] * corr + S::reduce_add(pv);
        m[qi] = m_new;
        S::store(p, pv);
        float* ov = obuf + qi * hdp;
        const V cv = S::set1(corr);
        for (int v = 0; v < nv; ++v) {
          V o = S::mul(S::load(ov + v * C), cv);
          for (int j = 0; j < valid; ++j) o = S::fma(S::set1(p[j]), S::load(vbuf + j * hdp + v * C), o);
          S::store(ov + v * C, o);
        }
      }
    }
  }

  for (int qi = 0; qi < nq; ++qi) {
    float* op = w.out + (qi / w.group) * w.out_row_stride + (qi % w.group) * hd;
    const V inv = S::set1(w.m ? 1.0f : (l[qi] > 0.f ? 1.0f / l[qi] : 0.f));
    for (int v = 0; v < nv; ++v) {
      V o = S::mul(S::load(obuf + qi * hdp + v * C), inv);
      if (v + 1 < nv) S::store(op + v * C, o);
      else S::store_n(op + v * C, o, tail);
    }
  }
}

}  // namespace
}  // namespace quiver::cpu
