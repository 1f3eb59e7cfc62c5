// Paged attention kernel for one work item (see AttentionWork), written once over a Simd
// vocabulary (simd_*.h). Included only by the cpu_kernels_*.cc files.
//
// Online softmax (flash-attention style) over blocks of up to 4 x kW KV positions: each
// block's K and V rows are gathered through the block table and converted to f32 once,
// then used by every query row and every head of the GQA group. Scores of kW positions
// come out of one transpose-add tree (Simd::reduce_lanes) as one vector, so max, exp and
// sum are vector ops; the running max/sum/output rescale happens once per block. Scores
// stay f32 and are max-subtracted before exp.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend/cpu/matmul_kernels.h"
#include "core/dtype.h"

namespace quiver::cpu {
namespace {

constexpr int kAttnKvBufFloats = 16 * kAttnMaxHeadDim;  // per K / V block buffer

// o[0..NV) += sum_j p[j] * vbuf[j] over n positions, with o held in registers.
template <class S, int NV>
inline void attn_accumulate(float* o, const float* vbuf, int hdp, const float* p, int n, float corr) {
  using V = typename S::V;
  V acc[NV];
  const V cv = S::set1(corr);
#pragma GCC unroll 8
  for (int u = 0; u < NV; ++u) acc[u] = S::mul(S::load(o + u * S::kW), cv);
  for (int j = 0; j < n; ++j) {
    const V pj = S::set1(p[j]);
    const float* vr = vbuf + j * hdp;
#pragma GCC unroll 8
    for (int u = 0; u < NV; ++u) acc[u] = S::fma(pj, S::load(vr + u * S::kW), acc[u]);
  }
#pragma GCC unroll 8
  for (int u = 0; u < NV; ++u) S::store(o + u * S::kW, acc[u]);
}

template <class S>
inline void attn_accumulate_any(float* o, const float* vbuf, int hdp, int nv, const float* p, int n, float corr) {
  constexpr int L = S::kW;
  int v = 0;
  for (; v + 8 <= nv; v += 8) attn_accumulate<S, 8>(o + v * L, vbuf + v * L, hdp, p, n, corr);
  switch (nv - v) {
    case 1: attn_accumulate<S, 1>(o + v * L, vbuf + v * L, hdp, p, n, corr); break;
    case 2: attn_accumulate<S, 2>(o + v * L, vbuf + v * L, hdp, p, n, corr); break;
    case 3: attn_accumulate<S, 3>(o + v * L, vbuf + v * L, hdp, p, n, corr); break;
    case 4: attn_accumulate<S, 4>(o + v * L, vbuf + v * L, hdp, p, n, corr); break;
    case 5: attn_accumulate<S, 5>(o + v * L, vbuf + v * L, hdp, p, n, corr); break;
    case 6: attn_accumulate<S, 6>(o + v * L, vbuf + v * L, hdp, p, n, corr); break;
    case 7: attn_accumulate<S, 7>(o + v * L, vbuf + v * L, hdp, p, n, corr); break;
    default: break;
  }
}

// Scores of kW consecutive positions (rows of kb) against one query: lane j = q . k_j.
template <class S>
inline typename S::V attn_scores(const float* q, const float* kb, int hdp, int nv) {
  using V = typename S::V;
  constexpr int C = S::kW;
  V parts[C];
#pragma GCC unroll 16
  for (int j = 0; j < C; ++j) parts[j] = S::zero();
  for (int v = 0; v < nv; ++v) {
    const V qv = S::load(q + v * C);
#pragma GCC unroll 16
    for (int j = 0; j < C; ++j) parts[j] = S::fma(qv, S::load(kb + j * hdp + v * C), parts[j]);
  }
  return S::reduce_lanes(parts);
}

template <class S, int E>
void attention_kernel(const AttentionWork& w) {
  using V = typename S::V;
  using W = std::conditional_t<E == kElemF8, uint8_t, WElem<E>>;
  constexpr int C = S::kW;       // positions per score vector
  constexpr int kMaxChunks = 4;  // score vectors per block
  const int hd = w.head_dim;
  const int nv = (hd + C - 1) / C;
  const int hdp = nv * C;  // padded row length of the f32 buffers (zero tail)
  const int tail = hd - (nv - 1) * C;
  const int nq = w.num_rows * w.group;
  // Positions per block: up to kMaxChunks * C, fewer for wide heads (buffers ~ L1 size).
  int chunks = (4096 / hdp) / C;
  chunks = chunks < 1 ? 1 : (chunks > kMaxChunks ? kMaxChunks : chunks);
  const int block = chunks * C;

  alignas(64) float kbuf[kAttnKvBufFloats];
  alignas(64) float vbuf[kAttnKvBufFloats];
  alignas(64) float qbuf[kAttnMaxQueryFloats];  // scaled queries [nq][hdp]
  alignas(64) float obuf[kAttnMaxQueryFloats];  // unnormalised outputs [nq][hdp]
  alignas(64) float p[kMaxChunks * C];
  float m_local[kAttnMaxQueryFloats / 16], l_local[kAttnMaxQueryFloats / 16];
  float* m = w.m ? w.m : m_local;
  float* l = w.m ? w.l : l_local;
  const float neg_inf = -__builtin_inff();
  // fp8 rows are widened through a table of the 256 codes (no e4m3 vector conversion on
  // these instruction sets).
  float f8[E == kElemF8 ? 256 : 1];
  if constexpr (E == kElemF8)
    for (int c = 0; c < 256; ++c) f8[c] = e4m3_to_f32(static_cast<uint8_t>(c));

  const V scale = S::set1(w.scale);
  for (int qi = 0; qi < nq; ++qi) {
    const float* qp = w.q + (qi / w.group) * w.q_row_stride + (qi % w.group) * hd;
    for (int v = 0; v < nv; ++v) {
      V x = v + 1 < nv ? S::load(qp + v * C) : S::load_n(qp + v * C, tail);
      S::store(qbuf + qi * hdp + v * C, S::mul(x, scale));
      S::store(obuf + qi * hdp + v * C, S::zero());
    }
    m[qi] = neg_inf;
    l[qi] = 0.f;
  }

  const int64_t last_pos = w.first_pos + w.num_rows - 1;
  const int64_t kv_end = min64(w.kv_end, last_pos + 1);
  for (int64_t b0 = w.kv_begin; b0 < kv_end; b0 += block) {
    const int bn = static_cast<int>(min64(block, kv_end - b0));
    for (int j = 0; j < bn; ++j) {
      const int64_t pos = b0 + j;
      const int64_t slot = static_cast<int64_t>(w.block_table[pos / w.block_size]) * w.block_size + pos % w.block_size;
      const int64_t base = slot * w.kv_token_stride + w.kv_head_offset;
      const W* kp = static_cast<const W*>(w.k_cache) + base;
      const W* vp = static_cast<const W*>(w.v_cache) + base;
      if constexpr (E == kElemF8) {
        for (int e = 0; e < hdp; ++e) {
          kbuf[j * hdp + e] = e < hd ? f8[kp[e]] : 0.f;
          vbuf[j * hdp + e] = e < hd ? f8[vp[e]] : 0.f;
        }
        continue;
      }
      for (int v = 0; v + 1 < nv; ++v) {
        S::store(kbuf + j * hdp + v * C, S::template load_w<E>(kp + v * C));
        S::store(vbuf + j * hdp + v * C, S::template load_w<E>(vp + v * C));
      }
      const int v = nv - 1;
      S::store(kbuf + j * hdp + v * C, S::template load_w_n<E>(kp + v * C, tail));
      S::store(vbuf + j * hdp + v * C, S::template load_w_n<E>(vp + v * C, tail));
    }
    // Rows past the end of a partial chunk feed masked lanes only; keep them finite.
    for (int j = bn; j < (bn + C - 1) / C * C; ++j)
      for (int v = 0; v < nv; ++v) S::store(kbuf + j * hdp + v * C, S::zero());

    for (int r = 0; r < w.num_rows; ++r) {
      const int64_t limit = w.first_pos + r;  // last position this row may see
      if (limit < b0) continue;
      const int valid = static_cast<int>(min64(bn, limit - b0 + 1));
      const int nchunks = (valid + C - 1) / C;
      auto lanes = [&](int c) { return valid - c * C < C ? valid - c * C : C; };  // valid lanes of chunk c
      for (int g = 0; g < w.group; ++g) {
        const int qi = r * w.group + g;
        const float* qv = qbuf + qi * hdp;
        V s[kMaxChunks];
        V smax = S::set1(neg_inf);
        for (int c = 0; c < nchunks; ++c) {
          s[c] = S::first_n(attn_scores<S>(qv, kbuf + c * C * hdp, hdp, nv), lanes(c), neg_inf);
          smax = S::max(smax, s[c]);
        }
        const float m_old = m[qi];
        const float bmax = S::reduce_max(smax);
        const float m_new = bmax > m_old ? bmax : m_old;
        const V mv = S::set1(m_new);
        V psum = S::zero();
        for (int c = 0; c < nchunks; ++c) {
          const V pc = S::first_n(S::exp(S::sub(s[c], mv)), lanes(c), 0.f);
          psum = S::add(psum, pc);
          S::store(p + c * C, pc);
        }
        // m_old = -inf only before the first block, when l and o are still 0.
        const float corr = m_old == neg_inf ? 0.f : S::reduce_max(S::exp(S::set1(m_old - m_new)));
        l[qi] = l[qi] * corr + S::reduce_add(psum);
        m[qi] = m_new;
        attn_accumulate_any<S>(obuf + qi * hdp, vbuf, hdp, nv, p, valid, corr);
      }
    }
  }

  for (int qi = 0; qi < nq; ++qi) {
    float* op = w.out + (qi / w.group) * w.out_row_stride + (qi % w.group) * hd;
    const V inv = S::set1(w.v_scale * (w.m ? 1.0f : (l[qi] > 0.f ? 1.0f / l[qi] : 0.f)));
    for (int v = 0; v < nv; ++v) {
      V o = S::mul(S::load(obuf + qi * hdp + v * C), inv);
      if (v + 1 < nv) S::store(op + v * C, o);
      else S::store_n(op + v * C, o, tail);
    }
  }
}

}  // namespace
}  // namespace quiver::cpu
