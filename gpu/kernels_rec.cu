/* The recursive methods on the GPU, each as an x pass then a y pass over lines (pass_io):
 *  - yvv: Vidal-Migallon et al.'s Young-van Vliet kernel, one thread per line, causal then
 *    anti-causal with Triggs-Sdika;
 *  - yvv2way: Lee, Ko and Choe's two-way partition (their Algorithm 1), three threads per line;
 *  - deriche: four threads per line (one per channel), causal plus anti-causal, as two
 *    second-order sections;
 *  - yvv_blocked: block-parallel with exact carries (after Nehab et al. 2011), below.
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

/* Vidal-Migallon et al.'s kernel: one thread per line. The causal outputs wait in tmp for the
 * anti-causal pass. */
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

/* One section of Deriche's filter (cpu_deriche_sec) in R: the step from (y, d) and the
 * numerator's part n, which becomes the new (y, d); returns y. */
template <class R> struct der_sec {
  R b0, b1, c1, c2, k1, k2, gc, ga;
  __device__ explicit der_sec(const cpu_deriche_sec &s)
      : b0((R)s.b0), b1((R)s.b1), c1((R)s.c1), c2((R)s.c2), k1((R)s.k1), k2((R)s.k2), gc((R)s.gc),
        ga((R)s.ga) {}
  __device__ __forceinline__ R step(R n, R &y, R &d) const {
    d = k2 * d + (k1 * y + n);
    return y += d;
  }
};

/* Lane c of v without indexing (which would put v in local memory). */
template <class R> __device__ __forceinline__ R lane(const v4<R> &v, int c) {
  return c == 0 ? v.l[0] : c == 1 ? v.l[1] : c == 2 ? v.l[2] : v.l[3];
}

/* Deriche: four threads per line, one per lane (channel), each with the two sections side by
 * side (cpu_deriche_sections_line); the causal part waits in tmp, the anti-causal part is added.
 * Lane 0 of the four gathers the pixel and stores it. */
template <class R> __global__ void deriche_lines(pass_io io, rec_params p, float4 *tmp) {
  int t = blockIdx.x * blockDim.x + threadIdx.x, c = t % 4, line = t / 4;
  bool live = line < io.lines;
  line = live ? line : io.lines - 1; /* the four threads shuffle together to the end */
  der_sec<R> s0(p.d_sec[0]), s1(p.d_sec[1]);
  float *tf = (float *)tmp;
  R x1 = lane(pass_load<R>(io, line, 0), c), y0 = s0.gc * x1, y1 = s1.gc * x1, d0 = 0, d1 = 0;
  for (int i = 0; i < io.n; i++) {
    R x = lane(pass_load<R>(io, line, i), c);
    R out = s0.step(s0.b0 * x + s0.b1 * x1, y0, d0) + s1.step(s1.b0 * x + s1.b1 * x1, y1, d1);
    if (live) tf[scratch_index(io, line, i) * 4 + c] = (float)out;
    x1 = x;
  }
  R xa = lane(pass_load<R>(io, line, io.n - 1), c), xb = xa; /* x[i+1], x[i+2] */
  y0 = s0.ga * xa, y1 = s1.ga * xa, d0 = d1 = 0;
  for (int i = io.n - 1; i >= 0; i--) {
    R out = live ? (R)tf[scratch_index(io, line, i) * 4 + c] : (R)0;
    out += s0.step(s0.c1 * xa + s0.c2 * xb, y0, d0);
    out += s1.step(s1.c1 * xa + s1.c2 * xb, y1, d1);
    xb = xa, xa = lane(pass_load<R>(io, line, i), c);
    v4<R> px;
#pragma unroll
    for (int k = 0; k < 4; k++) px.l[k] = __shfl_sync(0xffffffffu, out, k, 4);
    if (live && c == 0) pass_store<R>(io, line, i, px);
  }
}

/* Lee, Ko and Choe's two-way partition, their Algorithm 1: three threads per line (threadIdx.y):
 * 0 the left block, 1 the centre pixel by FIR, 2 the right block. The first pass's values wait in
 * tmp. */
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

/* ---- yvv_blocked ----
 * Block-parallel with exact carries (cpu_yvv_blocked_line, after Nehab et al. 2011). Tiles of 32
 * lines x B samples pass through shared memory (coalesced along image rows in both passes); one
 * thread per line and channel computes a block's zero-state carries, one thread per line and
 * channel fixes them along the line, and one thread per line and channel filters each block again
 * from its true states, in place in the tile. The whole GPU works whatever the image's shape. The
 * filter runs as a cascade of a first-order and a second-order section, which stays within a
 * level in single precision at every sigma. */

/* The cascade yvv_blocked filters with (cpu_yvv_blocked): w = p w + q x, u = g w + c1 u1 + c2 u2,
 * whose two sections of unit gain keep single precision accurate at every sigma. The kernels
 * carry W = w / q instead of w, which saves a multiplication a step: W = p W + x,
 * u = (g q) W + c1 u1 + c2 u2. */
template <class R> struct casc_k {
  R p, q, iq, gq, c1, c2;
  __device__ explicit casc_k(const rec_params &r)
      : p((R)r.casc[0]), q((R)r.casc[1]), iq((R)(1 / r.casc[1])), gq((R)(r.casc[2] * r.casc[1])),
        c1((R)r.casc[3]), c2((R)r.casc[4]) {}
  /* x from the state (W, u1, u2), which becomes (W, u, u1); returns u */
  __device__ __forceinline__ R step(R x, R &w, R &u1, R &u2) const {
    w = p * w + x;
    R u = c1 * u1 + (gq * w + c2 * u2); /* u1 last: short chain */
    u2 = u1, u1 = u;
    return u;
  }
};

/* Carries, R per line and lane (channel), in six planes of nb x 4 x lines values (so that the
 * threads of neighbouring lines touch neighbouring addresses): S0..S2 the causal state (w, u1,
 * u2) before each block (first its zero-state last outputs), E0..E2 the anti-causal state after
 * it (first its zero-state first outputs). Slot nb-1 holds the last block's states, set by the
 * fix. */
template <class R> struct carries {
  R *p;
  int lines, nb;
  __device__ __forceinline__ R &s(int i, int blk, int c, int line) const {
    return p[(((size_t)i * nb + blk) * 4 + c) * lines + line];
  }
  __device__ __forceinline__ R &e(int i, int blk, int c, int line) const {
    return s(3 + i, blk, c, line);
  }
};

/* A tile of TILE_LINES lines x B samples of a pass (V: 0 the x pass, 1 the y pass) in shared
 * memory, one plane per lane: sample j of line l, lane c at c PS + l LS + j. A line's samples
 * are contiguous, so the filters move VW of them (16 bytes) at a time, and LS = B + VW makes a
 * line's stride an odd number of 16-byte words: the 8 threads of a quarter warp, on 8 lines, hit
 * 8 different bank groups. Each thread loads and stores PER vectors (VW samples of one line),
 * neighbouring threads on neighbouring image addresses: neighbouring vectors of a row in the x
 * pass, neighbouring lines (columns) in the y pass. FULL: the tile lies inside the image. */
#define TILE_LINES   32
#define TILE_THREADS (4 * TILE_LINES)

template <class R> struct alignas(16) vec { R v[16 / sizeof(R)]; };

template <class R, int B, int V> struct tile {
  static const int VW = 16 / sizeof(R), NV = B / VW, LS = B + VW, PS = TILE_LINES * LS,
                   PER = TILE_LINES * NV / TILE_THREADS;
  R *s;
  __device__ __forceinline__ R &at(int c, int l, int j) const {
    return s[c * PS + l * LS + j];
  }
  __device__ __forceinline__ vec<R> &v(int c, int l, int g) const {
    return *(vec<R> *)&s[c * PS + l * LS + g * VW];
  }
  /* The line l and vector g of the thread's a-th vector. */
  __device__ __forceinline__ static void which(int a, int &l, int &g) {
    int k = threadIdx.x + a * TILE_THREADS;
    l = V ? k % TILE_LINES : k / NV, g = V ? k / TILE_LINES : k % NV;
  }
  __device__ __forceinline__ void put(int l, int g, const v4<R> (&px)[VW]) const {
#pragma unroll
    for (int c = 0; c < 4; c++) {
      vec<R> x;
#pragma unroll
      for (int e = 0; e < VW; e++) x.v[e] = px[e].l[c];
      v(c, l, g) = x;
    }
  }
  /* Lines l0.. of the pass's source, samples i0 .. i0+len-1, into the tile. 8-bit RGBA (x pass)
   * and the half intermediate (y pass) are loaded raw, every load of the thread issued before
   * the first one is waited for. */
  template <bool FULL>
  __device__ __forceinline__ void load(const pass_io &io, int l0, int i0, int len) const {
    if (V ? io.m.half : io.img.c == 4 && io.img.depth == 8) {
      uint2 raw[PER][VW];
#pragma unroll
      for (int a = 0; a < PER; a++) {
        int l, g;
        which(a, l, g);
        size_t o =
            V ? (size_t)(i0 + g * VW) * io.m.w + l0 + l : (size_t)(l0 + l) * io.img.w + i0 + g * VW;
#pragma unroll
        for (int e = 0; e < VW; e++) {
          raw[a][e] = make_uint2(0, 0);
          if (FULL || (l0 + l < io.lines && g * VW + e < len)) {
            if (V)
              raw[a][e] = ((const uint2 *)io.m.p)[o + (size_t)e * io.m.w];
            else
              raw[a][e].x = ((const unsigned *)io.img.p)[o + e];
          }
        }
      }
#pragma unroll
      for (int a = 0; a < PER; a++) {
        int l, g;
        which(a, l, g);
        v4<R> px[VW];
#pragma unroll
        for (int e = 0; e < VW; e++)
          px[e] = V ? v4_of_half4<R>(raw[a][e]) : px_of_rgba8<R>(*(uchar4 *)&raw[a][e].x);
        put(l, g, px);
      }
      return;
    }
#pragma unroll
    for (int a = 0; a < PER; a++) {
      int l, g;
      which(a, l, g);
      v4<R> px[VW];
#pragma unroll
      for (int e = 0; e < VW; e++) {
        int j = g * VW + e;
        px[e] = v4_zero<R>();
        if (FULL || (l0 + l < io.lines && j < len))
          px[e] = V ? load_mid<R>(io.m, l0 + l, i0 + j) : load_px<R>(io.img, i0 + j, l0 + l);
      }
      put(l, g, px);
    }
  }
  /* The tile into the pass's destination. */
  template <bool FULL>
  __device__ __forceinline__ void store(const pass_io &io, int l0, int i0, int len) const {
#pragma unroll
    for (int a = 0; a < PER; a++) {
      int l, g;
      which(a, l, g);
      if (!FULL && l0 + l >= io.lines) continue;
      vec<R> x[4];
#pragma unroll
      for (int c = 0; c < 4; c++) x[c] = v(c, l, g);
#pragma unroll
      for (int e = 0; e < VW; e++) {
        int j = g * VW + e;
        if (!FULL && j >= len) break;
        v4<R> px = {{x[0].v[e], x[1].v[e], x[2].v[e], x[3].v[e]}};
        if (V)
          store_px<R>(io.img, l0 + l, i0 + j, px);
        else
          store_mid<R>(io.m, i0 + j, l0 + l, px);
      }
    }
  }
};

/* Weight j of zero-state carry i (me: the anti-causal one, else mp), kept in the pass's
 * precision. */
template <class R>
__device__ __forceinline__ R carry_w(const rec_params &p, bool me, int i, int j) {
  if constexpr (sizeof(R) == sizeof(double))
    return me ? p.me.d[i][j] : p.mp.d[i][j];
  else
    return me ? p.me.f[i][j] : p.mp.f[i][j];
}

/* The tile (first line, block along the lines) of a launch over ng line groups x nbk blocks, in
 * the order that keeps neighbouring thread blocks on neighbouring addresses: along the rows. */
template <int V> __device__ __forceinline__ void blocked_at(int ng, int nbk, int *l0, int *blk) {
  int a = V ? ng : nbk, i = (int)(blockIdx.x % a), o = (int)(blockIdx.x / a);
  *l0 = (V ? i : o) * TILE_LINES, *blk = V ? o : i;
}

/* Zero-state carries of every block but the last, as dot products with the block's input. */
template <class R, int B, int V>
__global__ void __launch_bounds__(TILE_THREADS, 6)
    blocked_carries(pass_io io, rec_params p, carries<R> cr, int ng) {
  typedef tile<R, B, V> T;
  __shared__ vec<R> sm[4 * T::PS / T::VW];
  int l0, blk, l = threadIdx.x % TILE_LINES, c = threadIdx.x / TILE_LINES;
  blocked_at<V>(ng, cr.nb - 1, &l0, &blk);
  T t = {(R *)sm};
  if (l0 + TILE_LINES <= io.lines)
    t.template load<true>(io, l0, blk * B, B);
  else
    t.template load<false>(io, l0, blk * B, B);
  __syncthreads();
  if (l0 + l >= io.lines || c >= io.img.c) return;
  R P[3] = {0, 0, 0}, E[3] = {0, 0, 0};
#pragma unroll
  for (int g = 0; g < T::NV; g++) {
    vec<R> x = t.v(c, l, g);
#pragma unroll
    for (int e = 0; e < T::VW; e++)
#pragma unroll
      for (int i = 0; i < 3; i++) {
        P[i] += carry_w<R>(p, false, i, g * T::VW + e) * x.v[e];
        E[i] += carry_w<R>(p, true, i, g * T::VW + e) * x.v[e];
      }
  }
  for (int i = 0; i < 3; i++) cr.s(i, blk, c, l0 + l) = P[i], cr.e(i, blk, c, l0 + l) = E[i];
}

#define FIX_AHEAD 16 /* blocks whose carries are loaded before the serial chain uses them */

/* One thread per line and lane: fix the causal states left to right, filter the last block (with
 * Triggs-Sdika) for the anti-causal state before it, then fix the anti-causal states right to
 * left. The carries of FIX_AHEAD blocks are loaded at once, ahead of the chain of 3x3 products. */
template <class R, int B> __global__ void blocked_fix(pass_io io, rec_params p, carries<R> cr) {
  int line = blockIdx.x * blockDim.x + threadIdx.x, c = blockIdx.y, nb = cr.nb;
  if (line >= io.lines) return;
  casc_k<R> k(p);
  R s[3], bt[3][3], bc[3][3], ts[3][3];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      bt[i][j] = (R)p.bt[i][j], bc[i][j] = (R)p.bc[i][j], ts[i][j] = (R)p.bts[i][j];
  s[0] = s[1] = s[2] = pass_load<R>(io, line, 0).l[c];
  for (int b0 = 0; b0 < nb - 1; b0 += FIX_AHEAD) {
    R n[FIX_AHEAD][3];
#pragma unroll
    for (int a = 0; a < FIX_AHEAD; a++)
      for (int i = 0; i < 3; i++) n[a][i] = b0 + a < nb - 1 ? cr.s(i, b0 + a, c, line) : (R)0;
#pragma unroll
    for (int a = 0; a < FIX_AHEAD; a++) {
      if (b0 + a >= nb - 1) break;
      for (int i = 0; i < 3; i++) cr.s(i, b0 + a, c, line) = s[i];
      R q[3] = {s[0], s[1], s[2]};
      for (int i = 0; i < 3; i++)
        s[i] = n[a][i] + bt[i][0] * q[0] + bt[i][1] * q[1] + bt[i][2] * q[2];
    }
  }
  int l0 = (nb - 1) * B, len = io.n - l0;
  for (int i = 0; i < 3; i++) cr.s(i, nb - 1, c, line) = s[i];
  R u[B], e[3], edge = pass_load<R>(io, line, io.n - 1).l[c];
  s[0] *= k.iq;
  for (int i = 0; i < len; i++)
    u[i] = k.step(pass_load<R>(io, line, l0 + i).l[c], s[0], s[1], s[2]);
  s[0] *= k.q;
  for (int i = 0; i < 3; i++) s[i] -= edge;
  for (int i = 0; i < 3; i++) {
    e[i] = ts[i][0] * s[0] + ts[i][1] * s[1] + ts[i][2] * s[2] + edge;
    cr.e(i, nb - 1, c, line) = e[i];
  }
  e[0] *= k.iq;
  for (int i = len - 1; i >= 0; i--) k.step(u[i], e[0], e[1], e[2]);
  e[0] *= k.q;
  for (int b0 = nb - 2; b0 >= 0; b0 -= FIX_AHEAD) {
    R n[FIX_AHEAD][3], q[FIX_AHEAD][3];
#pragma unroll
    for (int a = 0; a < FIX_AHEAD; a++)
      for (int i = 0; i < 3; i++) {
        n[a][i] = b0 - a >= 0 ? cr.e(i, b0 - a, c, line) : (R)0;
        q[a][i] = b0 - a >= 0 ? cr.s(i, b0 - a, c, line) : (R)0;
      }
#pragma unroll
    for (int a = 0; a < FIX_AHEAD; a++) {
      if (b0 - a < 0) break;
      for (int i = 0; i < 3; i++) cr.e(i, b0 - a, c, line) = e[i];
      R r[3] = {e[0], e[1], e[2]};
      for (int i = 0; i < 3; i++)
        e[i] = n[a][i] + bc[i][0] * q[a][0] + bc[i][1] * q[a][1] + bc[i][2] * q[a][2] +
               bt[i][0] * r[0] + bt[i][1] * r[1] + bt[i][2] * r[2];
    }
  }
}

/* Block blk of line l, lane c, in the tile (len samples) from its true states s (causal, before
 * it) and e (anti-causal, after it): causal, then anti-causal, in place (the causal outputs wait
 * in the tile). A whole block moves VW samples at a time. */
template <class R, int B, int V>
__device__ __forceinline__ void blocked_filter(const tile<R, B, V> &t, const casc_k<R> &k, int l,
                                               int c, int len, R s[3], R e[3]) {
  typedef tile<R, B, V> T;
  s[0] *= k.iq, e[0] *= k.iq;
  if (len == B) {
#pragma unroll
    for (int g = 0; g < T::NV; g++) {
      vec<R> x = t.v(c, l, g);
#pragma unroll
      for (int i = 0; i < T::VW; i++) x.v[i] = k.step(x.v[i], s[0], s[1], s[2]);
      t.v(c, l, g) = x;
    }
#pragma unroll
    for (int g = T::NV - 1; g >= 0; g--) {
      vec<R> x = t.v(c, l, g);
#pragma unroll
      for (int i = T::VW - 1; i >= 0; i--) x.v[i] = k.step(x.v[i], e[0], e[1], e[2]);
      t.v(c, l, g) = x;
    }
    return;
  }
  for (int j = 0; j < len; j++) t.at(c, l, j) = k.step(t.at(c, l, j), s[0], s[1], s[2]);
  for (int j = len - 1; j >= 0; j--) t.at(c, l, j) = k.step(t.at(c, l, j), e[0], e[1], e[2]);
}

/* Every block from its true states. */
template <class R, int B, int V>
__global__ void __launch_bounds__(TILE_THREADS, 6)
    blocked_apply(pass_io io, rec_params p, carries<R> cr, int ng) {
  typedef tile<R, B, V> T;
  __shared__ vec<R> sm[4 * T::PS / T::VW];
  int l0, blk, l = threadIdx.x % TILE_LINES, c = threadIdx.x / TILE_LINES;
  blocked_at<V>(ng, cr.nb, &l0, &blk);
  int len = blk == cr.nb - 1 ? io.n - blk * B : B;
  bool full = l0 + TILE_LINES <= io.lines && len == B;
  int live = l0 + l < io.lines && c < io.img.c, line = live ? l0 + l : 0;
  R s[3], e[3];
  for (int i = 0; i < 3; i++) s[i] = cr.s(i, blk, c, line), e[i] = cr.e(i, blk, c, line);
  T t = {(R *)sm};
  if (full)
    t.template load<true>(io, l0, blk * B, len);
  else
    t.template load<false>(io, l0, blk * B, len);
  __syncthreads();
  if (live) blocked_filter<R, B, V>(t, casc_k<R>(p), l, c, len, s, e);
  __syncthreads();
  if (full)
    t.template store<true>(io, l0, blk * B, len);
  else
    t.template store<false>(io, l0, blk * B, len);
}

size_t blocked_carry_bytes(int w, int h, int use_double) {
  int b = use_double ? BLOCKED_B_DOUBLE : BLOCKED_B_FLOAT;
  size_t x = (size_t)div_up(w, b) * h, y = (size_t)div_up(h, b) * w;
  return 6 * (x > y ? x : y) * 4 * (use_double ? sizeof(double) : sizeof(float));
}

template <class R, int B, int V>
static void blocked_pass(const pass_io &io, const rec_params &p, void *d_carry, cudaStream_t s) {
  carries<R> cr = {(R *)d_carry, io.lines, (int)div_up(io.n, B)};
  int ng = (int)div_up(io.lines, TILE_LINES);
  if (cr.nb > 1)
    blocked_carries<R, B, V><<<(unsigned)ng *(cr.nb - 1), TILE_THREADS, 0, s>>>(io, p, cr, ng);
  blocked_fix<R, B><<<dim3(div_up(io.lines, 128), io.img.c), 128, 0, s>>>(io, p, cr);
  blocked_apply<R, B, V><<<(unsigned)ng * cr.nb, TILE_THREADS, 0, s>>>(io, p, cr, ng);
}

template <class R, int B>
static void blocked_pass(const pass_io &io, const rec_params &p, void *d_carry, cudaStream_t s) {
  if (io.vertical)
    blocked_pass<R, B, 1>(io, p, d_carry, s);
  else
    blocked_pass<R, B, 0>(io, p, d_carry, s);
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
    deriche_lines<R><<<div_up(4 * io.lines, LINES_PER_BLOCK), LINES_PER_BLOCK, 0, s>>>(io, p, tmp);
    break;
  case REC_YVV2WAY:
    yvv2way_lines<R><<<div_up(io.lines, 32), dim3(32, 3), 0, s>>>(io, p, tmp);
    break;
  case REC_YVV_BLOCKED:
    blocked_pass<R, sizeof(R) == sizeof(double) ? BLOCKED_B_DOUBLE : BLOCKED_B_FLOAT>(io, p,
                                                                                      d_carry, s);
    break;
  }
}

cudaError_t launch_recursive(enum rec_kind kind, const rec_params &px, const rec_params &py,
                             int use_double, packed in, packed out, mid m, float4 *d_tmp,
                             void *d_carry, cudaStream_t s) {
  pass_io x = {in, m, 0, in.w, in.h}, y = {out, m, 1, in.h, in.w};
  if (use_double) {
    one_pass<double>(kind, x, px, d_tmp, d_carry, s);
    one_pass<double>(kind, y, py, d_tmp, d_carry, s);
  } else {
    one_pass<float>(kind, x, px, d_tmp, d_carry, s);
    one_pass<float>(kind, y, py, d_tmp, d_carry, s);
  }
  return cudaGetLastError();
}
