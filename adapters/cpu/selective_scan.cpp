// Mamba-1's selective scan for real A, B and C shared by all channels, forward and backward,
// one sequence at a time (built and loaded by selective_scan_compiled.py; plain C ABI, no torch
// headers, so that it compiles in about a second).
//
// D is innermost everywhere: every inner loop runs along a contiguous row of D and vectorizes.
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((flatten, target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

namespace {

// expf in a form the compiler vectorizes: Cephes' polynomial (relative error ~1e-7);
// 0 below expf's normal range, inf above it, as expf
inline float exp_(float x) {
  const float hi = 88.3762626647949f, lo = -87.3365478515625f;
  float xc = x > hi ? hi : (x < lo ? lo : x);
  float fx = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round(x / ln 2)
  float r = xc - fx * 0.693359375f + fx * 2.12194440e-4f;            // x - fx ln 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  int32_t bits = ((int32_t)fx + 127) << 23;  // 2^fx
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float y = x < lo ? 0.f : p * scale;
  return x > hi ? INFINITY : y;
}
inline double exp_(double x) { return std::exp(x); }

inline float silu_(float x) { return x / (1.f + exp_(-x)); }
inline double silu_(double x) { return x / (1. + std::exp(-x)); }

// one sequence: x_t = exp(delta_t A) x_{t-1} + delta_t u_t B_t,  y_t = sum_n x_t C_t,
// out_t = (y_t + Ds u_t) silu(z_t).  delta, u, z (L, D); AT (N, D); B, C (L, N); Ds (D).
// Keeps y + Ds u (the gate's input) in pre when z is given, and every state in states
// (L, N, D) when states is not null (training); x (N, D) ends as the last state.
template <typename T>
void forward(int64_t L, int64_t N, int64_t D, const T* delta, const T* u, const T* AT,
             const T* B, const T* C, const T* Ds, const T* z, T* out, T* pre, T* x,
             T* states) {
  std::memset(x, 0, sizeof(T) * N * D);
  for (int64_t t = 0; t < L; ++t) {
    const T *dl = delta + t * D, *ut = u + t * D;
    T* yt = out + t * D;
    std::memset(yt, 0, sizeof(T) * D);
    for (int64_t n = 0; n < N; ++n) {
      const T b = B[t * N + n], c = C[t * N + n];
      const T* a = AT + n * D;
      T* xn = x + n * D;
      T* kept = states ? states + (t * N + n) * D : xn;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) {
        T s = exp_(dl[d] * a[d]) * xn[d] + dl[d] * ut[d] * b;
        xn[d] = s;
        kept[d] = s;
        yt[d] += s * c;
      }
    }
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) {
      T y = Ds ? yt[d] + Ds[d] * ut[d] : yt[d];
      if (z) pre[t * D + d] = y;
      yt[d] = z ? y * silu_(z[t * D + d]) : y;
    }
  }
}

// The gradients of forward, given the states it kept: g = dlast; for t = L-1 .. 0, with
// gy_t = dout_t silu(z_t): g += C_t gy_t; dC_t = <x_t, gy_t>; dB_t = <g, delta_t u_t>;
// the (delta u) gradient sum_n g B_t; s = g exp(delta_t A) x_{t-1} (t > 0) feeds d(delta)_t
// and dAT; g *= exp(delta_t A).  row (2 D) is scratch; dAT and dDs are accumulated.
template <typename T>
void backward(int64_t L, int64_t N, int64_t D, const T* delta, const T* u, const T* AT,
              const T* B, const T* C, const T* Ds, const T* z, const T* pre,
              const T* states, const T* dout, T* g, T* row, T* ddelta, T* du, T* dz, T* dAT,
              T* dB, T* dC, T* dDs) {
  T *gy = row, *gdu = row + D;
  for (int64_t t = L - 1; t >= 0; --t) {
    const T *dl = delta + t * D, *ut = u + t * D;
    T* gdl = ddelta + t * D;
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) {
      T go = dout[t * D + d], gate = 1;
      if (z) {
        T zt = z[t * D + d], sg = 1 / (1 + exp_(-zt));
        gate = zt * sg;
        dz[t * D + d] = go * pre[t * D + d] * sg * (1 + zt * (1 - sg));
      }
      gy[d] = go * gate;
      if (Ds) dDs[d] += gy[d] * ut[d];
      gdl[d] = 0;
      gdu[d] = 0;
    }
    for (int64_t n = 0; n < N; ++n) {
      const T b = B[t * N + n], c = C[t * N + n];
      const T *a = AT + n * D, *xt = states + (t * N + n) * D;
      T *gn = g + n * D, *ga = dAT + n * D;
      T sum_c = 0, sum_b = 0;
      if (t > 0) {
        const T* xp = states + ((t - 1) * N + n) * D;
#pragma omp simd reduction(+ : sum_c, sum_b)
        for (int64_t d = 0; d < D; ++d) {
          T gg = gn[d] + gy[d] * c;
          sum_c += xt[d] * gy[d];
          sum_b += gg * dl[d] * ut[d];
          gdu[d] += gg * b;
          T e = exp_(dl[d] * a[d]);
          T s = gg * e * xp[d];
          gdl[d] += s * a[d];
          ga[d] += s * dl[d];
          gn[d] = gg * e;
        }
      } else {
#pragma omp simd reduction(+ : sum_c, sum_b)
        for (int64_t d = 0; d < D; ++d) {
          T gg = gn[d] + gy[d] * c;
          sum_c += xt[d] * gy[d];
          sum_b += gg * dl[d] * ut[d];
          gdu[d] += gg * b;
        }
      }
      dB[t * N + n] = sum_b;
      dC[t * N + n] = sum_c;
    }
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) {  // delta u = x's input: its gradient to delta and u
      gdl[d] += gdu[d] * ut[d];
      du[t * D + d] = gdu[d] * dl[d] + (Ds ? gy[d] * Ds[d] : 0);
    }
  }
}

// sequences [b0, b1) of a batch laid out (batch, L, ·); null for an absent Ds, z, pre, states
template <typename T>
void fwd_batch(int64_t b0, int64_t b1, int64_t L, int64_t N, int64_t D, const T* delta,
               const T* u, const T* AT, const T* B, const T* C, const T* Ds, const T* z,
               T* out, T* pre, T* last, T* states) {
  for (int64_t i = b0; i < b1; ++i) {
    const int64_t s = i * L * D, r = i * L * N;
    forward(L, N, D, delta + s, u + s, AT, B + r, C + r, Ds, z ? z + s : z, out + s,
            pre ? pre + s : pre, last + i * N * D, states ? states + s * N : states);
  }
}

template <typename T>
void bwd_batch(int64_t b0, int64_t b1, int64_t L, int64_t N, int64_t D, const T* delta,
               const T* u, const T* AT, const T* B, const T* C, const T* Ds, const T* z,
               const T* pre, const T* states, const T* dout, const T* dlast, T* g, T* row,
               T* ddelta, T* du, T* dz, T* dAT, T* dB, T* dC, T* dDs) {
  for (int64_t i = b0; i < b1; ++i) {
    const int64_t s = i * L * D, r = i * L * N;
    std::memcpy(g, dlast + i * N * D, sizeof(T) * N * D);
    backward(L, N, D, delta + s, u + s, AT, B + r, C + r, Ds, z ? z + s : z,
             pre ? pre + s : pre, states + s * N, dout + s, g, row, ddelta + s, du + s,
             dz ? dz + s : dz, dAT, dB + r, dC + r, dDs);
  }
}

}  // namespace

#define EXPORT(T, suffix)                                                                   \
  extern "C" CLONES void scan_fwd_##suffix(                                                 \
      int64_t b0, int64_t b1, int64_t L, int64_t N, int64_t D, const T* delta, const T* u,  \
      const T* AT, const T* B, const T* C, const T* Ds, const T* z, T* out, T* pre,         \
      T* last, T* states) {                                                                 \
    fwd_batch(b0, b1, L, N, D, delta, u, AT, B, C, Ds, z, out, pre, last, states);          \
  }                                                                                         \
  extern "C" CLONES void scan_bwd_##suffix(                                                 \
      int64_t b0, int64_t b1, int64_t L, int64_t N, int64_t D, const T* delta, const T* u,  \
      const T* AT, const T* B, const T* C, const T* Ds, const T* z, const T* pre,           \
      const T* states, const T* dout, const T* dlast, T* g, T* row, T* ddelta, T* du,       \
      T* dz, T* dAT, T* dB, T* dC, T* dDs) {                                                \
    bwd_batch(b0, b1, L, N, D, delta, u, AT, B, C, Ds, z, pre, states, dout, dlast, g, row, \
              ddelta, du, dz, dAT, dB, dC, dDs);                                            \
  }

EXPORT(float, f32)
EXPORT(double, f64)
