/* The recursive methods on the GPU, each as an x pass then a y pass over lines (pass_io):
 *  - yvv: seed 002's kernel, one thread per line, causal then anti-causal with Triggs-Sdika;
 *  - yvv2way: seed 000's Algorithm 1, three threads per line;
 *  - deriche: one thread per line, causal plus anti-causal;
 *  - yvv_blocked: block-parallel with exact carries (cpu_yvv_blocked_line, after Nehab et al.
 *    2011): one thread per block of B samples for the zero-state carries, one thread per line to
 *    fix them, one thread per block again for the output, so the whole GPU works whatever the
 *    image's shape.
 * Each runs in R = float or double; the line functions of cpu/gauss.c are their statements. */
#include "gpu_int.cuh"

#define LINES_PER_BLOCK 128

template <class R> struct yvv_k { /* Young-van Vliet coefficients in R */
  R b, a1, a2, a3, m[3][3];
  __device__ explicit yvv_k(const rec_params &p)
      : b((R)p.b), a1((R)p.a[0]), a2((R)p.a[1]), a3((R)p.a[2]) {
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 3; j++) m[i][j] = (R)p.m[i][j];
  }
  /* b x + a1 s1 + a2 s2 + a3 s3, lane by lane */
  __device__ __forceinline__ v4<R> step(const v4<R> &x, const v4<R> &s1, const v4<R> &s2,
                                        const v4<R> &s3) const {
    v4<R> r;
#pragma unroll
    for (int c = 0; c < 4; c++) r.l[c] = b * x.l[c] + a1 * s1.l[c] + a2 * s2.l[c] + a3 * s3.l[c];
    return r;
  }
  /* Triggs-Sdika: v[n-1], v[n], v[n+1] from u[n-1], u[n-2], u[n-3] and the edge x[n-1]. */
  __device__ __forceinline__ void boundary(const v4<R> &u1, const v4<R> &u2, const v4<R> &u3,
                                           const v4<R> &edge, v4<R> v[3]) const {
#pragma unroll
    for (int c = 0; c < 4; c++) {
      R d0 = u1.l[c] - edge.l[c], d1 = u2.l[c] - edge.l[c], d2 = u3.l[c] - edge.l[c];
#pragma unroll
      for (int i = 0; i < 3; i++)
        v[i].l[c] = b * (m[i][0] * d0 + m[i][1] * d1 + m[i][2] * d2) + edge.l[c];
    }
  }
};

template <class R> __device__ __forceinline__ v4<R> from_tmp(const float4 *t, size_t i) {
  float4 f = t[i];
  v4<R> v = {{(R)f.x, (R)f.y, (R)f.z, (R)f.w}};
  return v;
}

template <class R> __device__ __forceinline__ void to_tmp(float4 *t, size_t i, const v4<R> &v) {
  t[i] = make_float4((float)v.l[0], (float)v.l[1], (float)v.l[2], (float)v.l[3]);
}

/* seed 002: one thread per line. The causal outputs wait in tmp for the anti-causal pass. */
template <class R> __global__ void yvv_lines(pass_io io, rec_params p, float4 *tmp) {
  int line = blockIdx.x * blockDim.x + threadIdx.x;
  if (line >= io.lines) return;
  yvv_k<R> k(p);
  v4<R> x0 = pass_load<R>(io, line, 0), u1 = x0, u2 = x0, u3 = x0;
  for (int i = 0; i < io.n; i++) {
    v4<R> u = k.step(pass_load<R>(io, line, i), u1, u2, u3);
    to_tmp(tmp, scratch_index(io, line, i), u);
    u3 = u2, u2 = u1, u1 = u;
  }
  v4<R> v[3];
  k.boundary(u1, u2, u3, pass_load<R>(io, line, io.n - 1), v);
  pass_store<R>(io, line, io.n - 1, v[0]);
  v4<R> v1 = v[0], v2 = v[1], v3 = v[2];
  for (int i = io.n - 2; i >= 0; i--) {
    v4<R> t = k.step(from_tmp<R>(tmp, scratch_index(io, line, i)), v1, v2, v3);
    pass_store<R>(io, line, i, t);
    v3 = v2, v2 = v1, v1 = t;
  }
}

/* Deriche: one thread per line; the causal part waits in tmp, the anti-causal part is added. */
template <class R> __global__ void deriche_lines(pass_io io, rec_params p, float4 *tmp) {
  int line = blockIdx.x * blockDim.x + threadIdx.x;
  if (line >= io.lines) return;
  R a1 = (R)p.d_a[1], a2 = (R)p.d_a[2], a3 = (R)p.d_a[3], a4 = (R)p.d_a[4];
  v4<R> x1 = pass_load<R>(io, line, 0), x2 = x1, x3 = x1, x4, y1, y2, y3, y4;
  for (int c = 0; c < 4; c++) y1.l[c] = x1.l[c] * (R)p.d_gc;
  y2 = y3 = y4 = y1;
  for (int i = 0; i < io.n; i++) {
    v4<R> x = pass_load<R>(io, line, i), y;
    for (int c = 0; c < 4; c++)
      y.l[c] = (R)p.d_bc[0] * x.l[c] + (R)p.d_bc[1] * x1.l[c] + (R)p.d_bc[2] * x2.l[c] +
               (R)p.d_bc[3] * x3.l[c] - (a1 * y1.l[c] + a2 * y2.l[c] + a3 * y3.l[c] + a4 * y4.l[c]);
    to_tmp(tmp, scratch_index(io, line, i), y);
    x3 = x2, x2 = x1, x1 = x;
    y4 = y3, y3 = y2, y2 = y1, y1 = y;
  }
  x1 = x2 = x3 = x4 = pass_load<R>(io, line, io.n - 1);
  for (int c = 0; c < 4; c++) y1.l[c] = x1.l[c] * (R)p.d_ga;
  y2 = y3 = y4 = y1;
  for (int i = io.n - 1; i >= 0; i--) {
    v4<R> y, out = from_tmp<R>(tmp, scratch_index(io, line, i));
    for (int c = 0; c < 4; c++)
      y.l[c] = (R)p.d_ba[1] * x1.l[c] + (R)p.d_ba[2] * x2.l[c] + (R)p.d_ba[3] * x3.l[c] +
               (R)p.d_ba[4] * x4.l[c] - (a1 * y1.l[c] + a2 * y2.l[c] + a3 * y3.l[c] + a4 * y4.l[c]);
    x4 = x3, x3 = x2, x2 = x1, x1 = pass_load<R>(io, line, i);
    y4 = y3, y3 = y2, y2 = y1, y1 = y;
    for (int c = 0; c < 4; c++) out.l[c] += y.l[c];
    pass_store<R>(io, line, i, out);
  }
}

/* seed 000, Algorithm 1: three threads per line (threadIdx.y): 0 the left block, 1 the centre
 * pixel by FIR, 2 the right block. The first pass's values wait in tmp. */
template <class R> __global__ void yvv2way_lines(pass_io io, rec_params p, float4 *tmp) {
  __shared__ v4<R> s_pc[32];
  int line = blockIdx.x * 32 + threadIdx.x, role = threadIdx.y, h = io.n / 2;
  yvv_k<R> k(p);
  if (role == 1 && line < io.lines) {
    v4<R> pc = v4_zero<R>();
    for (int j = -p.radius; j <= p.radius; j++) {
      int a = j < 0 ? -j : j;
      R w = (R)(p.radius < 64 ? p.w[a] : p.d_w[a]);
      v4_fma(pc, w, pass_load<R>(io, line, clampi(h + j, 0, io.n - 1)));
    }
    s_pc[threadIdx.x] = pc;
  } else if (role == 0 && line < io.lines) {
    v4<R> u1 = pass_load<R>(io, line, 0), u2 = u1, u3 = u1;
    for (int i = 0; i < h; i++) {
      v4<R> u = k.step(pass_load<R>(io, line, i), u1, u2, u3);
      to_tmp(tmp, scratch_index(io, line, i), u);
      u3 = u2, u2 = u1, u1 = u;
    }
  } else if (line < io.lines) {
    v4<R> u1 = pass_load<R>(io, line, io.n - 1), u2 = u1, u3 = u1;
    for (int i = io.n - 1; i > h; i--) {
      v4<R> u = k.step(pass_load<R>(io, line, i), u1, u2, u3);
      to_tmp(tmp, scratch_index(io, line, i), u);
      u3 = u2, u2 = u1, u1 = u;
    }
  }
  __syncthreads();
  if (line >= io.lines) return;
  v4<R> pc = s_pc[threadIdx.x], v1 = pc, v2 = pc, v3 = pc;
  if (role == 0) {
    for (int i = h - 1; i >= 0; i--) {
      v4<R> v = k.step(from_tmp<R>(tmp, scratch_index(io, line, i)), v1, v2, v3);
      pass_store<R>(io, line, i, v);
      v3 = v2, v2 = v1, v1 = v;
    }
  } else if (role == 2) {
    for (int i = h + 1; i < io.n; i++) {
      v4<R> v = k.step(from_tmp<R>(tmp, scratch_index(io, line, i)), v1, v2, v3);
      pass_store<R>(io, line, i, v);
      v3 = v2, v2 = v1, v1 = v;
    }
  } else {
    pass_store<R>(io, line, h, pc);
  }
}

/* ---- yvv_blocked ---- */

/* Carries: six planes of v4<R>, each nb x lines (block-major, so that threads of neighbouring
 * lines touch neighbouring addresses): S0..S2 the causal state before each block (first its
 * zero-state last outputs), E0..E2 the anti-causal state after it (first its zero-state first
 * outputs). */
template <class R> struct carries {
  v4<R> *p;
  int lines, nb;
  __device__ __forceinline__ v4<R> &s(int i, int blk, int line) const {
    return p[((size_t)i * nb + blk) * lines + line];
  }
  __device__ __forceinline__ v4<R> &e(int i, int blk, int line) const {
    return p[((size_t)(3 + i) * nb + blk) * lines + line];
  }
};

/* Zero-state carries of every block but the last, as dot products with the block's input. */
template <class R, int B> __global__ void blocked_carries(pass_io io, rec_params p, carries<R> cr) {
  int line = blockIdx.x * blockDim.x + threadIdx.x, blk = blockIdx.y;
  if (line >= io.lines || blk >= cr.nb - 1) return;
  v4<R> P[3], E[3];
  for (int i = 0; i < 3; i++) P[i] = E[i] = v4_zero<R>();
#pragma unroll 4
  for (int j = 0; j < B; j++) {
    v4<R> x = pass_load<R>(io, line, blk * B + j);
#pragma unroll
    for (int i = 0; i < 3; i++) {
      v4_fma(P[i], (R)p.mp[i][j], x);
      v4_fma(E[i], (R)p.me[i][j], x);
    }
  }
  for (int i = 0; i < 3; i++) cr.s(i, blk, line) = P[i], cr.e(i, blk, line) = E[i];
}

template <class R>
__device__ __forceinline__ void mat3(const double m[3][3], const v4<R> x[3], v4<R> y[3]) {
#pragma unroll
  for (int i = 0; i < 3; i++)
#pragma unroll
    for (int j = 0; j < 3; j++) v4_fma(y[i], (R)m[i][j], x[j]);
}

/* One thread per line and channel (four neighbouring lanes share a line): fix the causal states
 * left to right, filter the last block in full (with Triggs-Sdika), then fix the anti-causal
 * states right to left. The carries of a block do not depend on the previous block's fix, so the
 * loads run ahead of the serial chain of 3x3 products. */
template <class R, int B> __global__ void blocked_fix(pass_io io, rec_params p, carries<R> cr) {
  int t = blockIdx.x * blockDim.x + threadIdx.x, line = t >> 2, c = t & 3;
  bool live = line < io.lines;
  if (!live) line = io.lines - 1; /* keep the whole warp for the shuffles below */
  yvv_k<R> k(p);
  R s0, s1, s2, x0 = pass_load<R>(io, line, 0).l[c];
  s0 = s1 = s2 = x0;
#pragma unroll 4
  for (int blk = 0; blk < cr.nb - 1; blk++) {
    R n0 = cr.s(0, blk, line).l[c], n1 = cr.s(1, blk, line).l[c], n2 = cr.s(2, blk, line).l[c];
    if (live)
      cr.s(0, blk, line).l[c] = s0, cr.s(1, blk, line).l[c] = s1, cr.s(2, blk, line).l[c] = s2;
    R q[3] = {s0, s1, s2};
    n0 += (R)p.bt[0][0] * q[0] + (R)p.bt[0][1] * q[1] + (R)p.bt[0][2] * q[2];
    n1 += (R)p.bt[1][0] * q[0] + (R)p.bt[1][1] * q[1] + (R)p.bt[1][2] * q[2];
    n2 += (R)p.bt[2][0] * q[0] + (R)p.bt[2][1] * q[1] + (R)p.bt[2][2] * q[2];
    s0 = n0, s1 = n1, s2 = n2;
  }
  int l0 = (cr.nb - 1) * B, len = io.n - l0;
  R u[B + 3]; /* u[0..2]: the state before the block, oldest first */
  u[0] = s2, u[1] = s1, u[2] = s0;
  for (int i = 0; i < len; i++)
    u[3 + i] =
        k.b * pass_load<R>(io, line, l0 + i).l[c] + k.a1 * u[2 + i] + k.a2 * u[1 + i] + k.a3 * u[i];
  R d0 = u[2 + len], d1 = u[1 + len], d2 = u[len], edge = pass_load<R>(io, line, io.n - 1).l[c];
  d0 -= edge, d1 -= edge, d2 -= edge;
  R v[B + 2]; /* v[len-1..len+1]: the Triggs-Sdika values */
  for (int i = 0; i < 3; i++)
    v[len - 1 + i] = k.b * (k.m[i][0] * d0 + k.m[i][1] * d1 + k.m[i][2] * d2) + edge;
  for (int i = len - 2; i >= 0; i--)
    v[i] = k.b * u[3 + i] + k.a1 * v[i + 1] + k.a2 * v[i + 2] + k.a3 * v[i + 3];
  for (int i = 0; i < len; i++) { /* lane c holds channel c: gather the pixel in lane 0 */
    v4<R> px;
    int base = threadIdx.x & ~3;
    for (int j = 0; j < 4; j++) px.l[j] = __shfl_sync(0xffffffff, v[i], base + j);
    if (live && c == 0) pass_store<R>(io, line, l0 + i, px);
  }
  R e0 = v[0], e1 = v[1], e2 = v[2]; /* block nb-1's first outputs: the state after nb-2 */
#pragma unroll 4
  for (int blk = cr.nb - 2; blk >= 0; blk--) {
    R c0 = cr.e(0, blk, line).l[c], c1 = cr.e(1, blk, line).l[c], c2 = cr.e(2, blk, line).l[c];
    R q[3] = {cr.s(0, blk, line).l[c], cr.s(1, blk, line).l[c], cr.s(2, blk, line).l[c]};
    R n[3] = {e0, e1, e2};
    if (live)
      cr.e(0, blk, line).l[c] = e0, cr.e(1, blk, line).l[c] = e1, cr.e(2, blk, line).l[c] = e2;
    c0 += (R)p.bc[0][0] * q[0] + (R)p.bc[0][1] * q[1] + (R)p.bc[0][2] * q[2];
    c1 += (R)p.bc[1][0] * q[0] + (R)p.bc[1][1] * q[1] + (R)p.bc[1][2] * q[2];
    c2 += (R)p.bc[2][0] * q[0] + (R)p.bc[2][1] * q[1] + (R)p.bc[2][2] * q[2];
    c0 += (R)p.bta[0][0] * n[0] + (R)p.bta[0][1] * n[1] + (R)p.bta[0][2] * n[2];
    c1 += (R)p.bta[1][0] * n[0] + (R)p.bta[1][1] * n[1] + (R)p.bta[1][2] * n[2];
    c2 += (R)p.bta[2][0] * n[0] + (R)p.bta[2][1] * n[1] + (R)p.bta[2][2] * n[2];
    e0 = c0, e1 = c1, e2 = c2;
  }
}

/* Every block but the last again, from its true states: causal, then anti-causal. */
template <class R, int B> __global__ void blocked_apply(pass_io io, rec_params p, carries<R> cr) {
  int line = blockIdx.x * blockDim.x + threadIdx.x, blk = blockIdx.y;
  if (line >= io.lines || blk >= cr.nb - 1) return;
  yvv_k<R> k(p);
  v4<R> u[B], s1 = cr.s(0, blk, line), s2 = cr.s(1, blk, line), s3 = cr.s(2, blk, line);
#pragma unroll
  for (int j = 0; j < B; j++) {
    u[j] = k.step(pass_load<R>(io, line, blk * B + j), s1, s2, s3);
    s3 = s2, s2 = s1, s1 = u[j];
  }
  v4<R> e1 = cr.e(0, blk, line), e2 = cr.e(1, blk, line), e3 = cr.e(2, blk, line);
#pragma unroll
  for (int j = B - 1; j >= 0; j--) {
    v4<R> v = k.step(u[j], e1, e2, e3);
    pass_store<R>(io, line, blk * B + j, v);
    e3 = e2, e2 = e1, e1 = v;
  }
}

size_t blocked_carry_bytes(int w, int h, int use_double) {
  int b = use_double ? BLOCKED_B_DOUBLE : BLOCKED_B_FLOAT;
  size_t x = (size_t)div_up(w, b) * h, y = (size_t)div_up(h, b) * w;
  return 6 * (x > y ? x : y) * 4 * (use_double ? sizeof(double) : sizeof(float));
}

template <class R, int B>
static void blocked_pass(const pass_io &io, const rec_params &p, void *d_carry, cudaStream_t s) {
  carries<R> cr = {(v4<R> *)d_carry, io.lines, (int)div_up(io.n, B)};
  dim3 grid(div_up(io.lines, LINES_PER_BLOCK), cr.nb > 1 ? cr.nb - 1 : 1);
  if (cr.nb > 1) blocked_carries<R, B><<<grid, LINES_PER_BLOCK, 0, s>>>(io, p, cr);
  blocked_fix<R, B><<<div_up(4 * io.lines, 64), 64, 0, s>>>(io, p, cr); /* 4 lanes a line */
  if (cr.nb > 1) blocked_apply<R, B><<<grid, LINES_PER_BLOCK, 0, s>>>(io, p, cr);
}

template <class R>
static void one_pass(enum rec_kind kind, const pass_io &io, const rec_params &p, float4 *tmp,
                     void *d_carry, cudaStream_t s) {
  unsigned grid = div_up(io.lines, LINES_PER_BLOCK);
  switch (kind) {
  case REC_YVV:
    yvv_lines<R><<<grid, LINES_PER_BLOCK, 0, s>>>(io, p, tmp);
    break;
  case REC_DERICHE:
    deriche_lines<R><<<grid, LINES_PER_BLOCK, 0, s>>>(io, p, tmp);
    break;
  case REC_YVV2WAY:
    yvv2way_lines<R><<<div_up(io.lines, 32), dim3(32, 3), 0, s>>>(io, p, tmp);
    break;
  case REC_YVV_BLOCKED:
    if (sizeof(R) == sizeof(double))
      blocked_pass<R, BLOCKED_B_DOUBLE>(io, p, d_carry, s);
    else
      blocked_pass<R, BLOCKED_B_FLOAT>(io, p, d_carry, s);
    break;
  }
}

cudaError_t launch_recursive(enum rec_kind kind, const rec_params &p, int use_double, packed in,
                             packed out, mid m, float4 *d_tmp, void *d_carry, cudaStream_t s) {
  pass_io x = {in, m, 0, in.w, in.h}, y = {out, m, 1, in.h, in.w};
  if (use_double) {
    one_pass<double>(kind, x, p, d_tmp, d_carry, s);
    one_pass<double>(kind, y, p, d_tmp, d_carry, s);
  } else {
    one_pass<float>(kind, x, p, d_tmp, d_carry, s);
    one_pass<float>(kind, y, p, d_tmp, d_carry, s);
  }
  return cudaGetLastError();
}
