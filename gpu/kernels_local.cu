/* Local statistics (Gouin et al.'s local-variance methods, Threewise among them), local contrast
 * and convolution on the GPU: the kernels behind gpu_variance, gpu_contrast and gpu_convolve, each
 * launched from a small host function. Every float32 kernel spells its arithmetic with __fadd_rn,
 * __fmul_rn and friends, in the order of its CPU twin (cpu/variance.c, cpu/var_merge.c,
 * cpu/convolve.c), so nvcc cannot fuse a multiply and an add the CPU keeps apart: the float
 * methods aim at the CPU's bits, not merely at its accuracy. */
#include "gpu_int.cuh"

/* ---- direct methods: naive, koenig, welford ----
 * One thread per pixel over every tap of the (2r+1)^2 window. */

#define DIRECT_BX 32
#define DIRECT_BY 8

/* Weight of tap k of one axis, as cpu/variance.c's float32 table holds it. */
__device__ __forceinline__ float axis_tap(int tri, int r, int k) {
  return tri ? (float)(r + 1 - (k < 0 ? -k : k)) : 1.0f;
}

__device__ __forceinline__ float tap_at(const packed &in, int x, int y) {
  return (float)raw_sample(in, (size_t)clampi(y, 0, in.h - 1) * in.w + clampi(x, 0, in.w - 1));
}

/* The usual formula: the weighted mean, then sum w (x - mean)^2 / W. */
__device__ void naive_px(const packed &in, int x, int y, int r, int tri, float total, float *m,
                         float *v) {
  float s = 0, q = 0;
  for (int dy = -r; dy <= r; dy++)
    for (int dx = -r; dx <= r; dx++) {
      float w = __fmul_rn(axis_tap(tri, r, dy), axis_tap(tri, r, dx));
      s = __fadd_rn(s, __fmul_rn(w, tap_at(in, x + dx, y + dy)));
    }
  *m = __fdiv_rn(s, total);
  for (int dy = -r; dy <= r; dy++)
    for (int dx = -r; dx <= r; dx++) {
      float w = __fmul_rn(axis_tap(tri, r, dy), axis_tap(tri, r, dx));
      float d = __fsub_rn(tap_at(in, x + dx, y + dy), *m);
      q = __fadd_rn(q, __fmul_rn(w, __fmul_rn(d, d)));
    }
  *v = __fdiv_rn(q, total);
}

/* Koenig: E[x^2] - E[x]^2 from two sums in one pass. */
__device__ void koenig_px(const packed &in, int x, int y, int r, int tri, float total, float *m,
                          float *v) {
  float s1 = 0, s2 = 0;
  for (int dy = -r; dy <= r; dy++)
    for (int dx = -r; dx <= r; dx++) {
      float w = __fmul_rn(axis_tap(tri, r, dy), axis_tap(tri, r, dx)),
            t = tap_at(in, x + dx, y + dy);
      s1 = __fadd_rn(s1, __fmul_rn(w, t));
      s2 = __fadd_rn(s2, __fmul_rn(w, __fmul_rn(t, t)));
    }
  *m = __fdiv_rn(s1, total);
  *v = __fsub_rn(__fdiv_rn(s2, total), __fmul_rn(*m, *m));
}

/* Welford's weighted update: running weight, mean and M2. */
__device__ void welford_px(const packed &in, int x, int y, int r, int tri, float *m, float *v) {
  float sw = 0, mu = 0, m2 = 0;
  for (int dy = -r; dy <= r; dy++)
    for (int dx = -r; dx <= r; dx++) {
      float w = __fmul_rn(axis_tap(tri, r, dy), axis_tap(tri, r, dx));
      float d = __fsub_rn(tap_at(in, x + dx, y + dy), mu);
      sw = __fadd_rn(sw, w);
      float step = __fdiv_rn(__fmul_rn(d, w), sw);
      mu = __fadd_rn(mu, step);
      m2 = __fadd_rn(m2, __fmul_rn(__fmul_rn(__fsub_rn(sw, w), d), step));
    }
  *m = mu;
  *v = __fdiv_rn(m2, sw);
}

__global__ void var_direct(int method, packed in, int r, int tri, float total, float *var,
                           float *mean) {
  int x = blockIdx.x * DIRECT_BX + threadIdx.x, y = blockIdx.y * DIRECT_BY + threadIdx.y;
  if (x >= in.w || y >= in.h) return;
  float m, v;
  if (method == CPU_VAR_NAIVE)
    naive_px(in, x, y, r, tri, total, &m, &v);
  else if (method == CPU_VAR_KOENIG)
    koenig_px(in, x, y, r, tri, total, &m, &v);
  else
    welford_px(in, x, y, r, tri, &m, &v);
  size_t i = (size_t)y * in.w + x;
  var[i] = v;
  if (mean) mean[i] = m;
}

cudaError_t launch_var_direct(enum cpu_var_method m, packed in, int r, int tri, float *var,
                              float *mean, cudaStream_t s) {
  uint64_t a = tri ? (uint64_t)(r + 1) * (r + 1) : (uint64_t)(2 * r + 1);
  float total = (float)(a * a); /* W rounded to float32 once, as the CPU twin */
  dim3 block(DIRECT_BX, DIRECT_BY), grid(div_up(in.w, DIRECT_BX), div_up(in.h, DIRECT_BY));
  var_direct<<<grid, block, 0, s>>>((int)m, in, r, tri, total, var, mean);
  return cudaGetLastError();
}

/* ---- merge methods: pairwise, threewise ----
 * One kernel per merge step, along x over lines extended by r replicated samples at each end,
 * then along y over the x pass's results; a line entry holds (mean, M2) and, since every entry of
 * a step has the same weight, the weights are scalars the host computes in float32 exactly as the
 * CPU does. */

#define MERGE_T 256 /* threads of a merge block */

enum { SRC_LINE, SRC_IMAGE, SRC_ROWS };

struct msrc {      /* where a merge step reads its entries */
  int kind;        /* SRC_LINE: a line buffer of this pass; SRC_IMAGE: the image (x pass, weight
                      1, M2 0); SRC_ROWS: the x pass's results (y pass), clamped like the image */
  const float2 *p; /* the buffer (SRC_LINE, SRC_ROWS): (mean, M2) per entry */
};

struct mpass {  /* one pass: along x (rows) or along y (columns) */
  packed img;   /* the gray image */
  int vertical; /* 0: along x, 1: along y */
  int n;        /* samples along the axis */
  int len;      /* entries of an extended line: n + 2r */
  int lines;    /* lines across the axis */
  int r;
  int rows_len; /* SRC_ROWS: entries per row of the x pass's buffers */
};

struct mstep {  /* one merge step */
  msrc a, b, c; /* merged at entries e, e + ob, e + oc (c: threes only) */
  int ob, oc;
  int three;              /* 1: three sets a, b, c; 0: two sets a, b */
  int mid_double;         /* threewise triangle: b is the sparse vector's centre, M2 times 2 */
  float ow;               /* the merged weight */
  float f, awf;           /* two sets: f = bw / ow, awf = aw * f */
  float aw, cw;           /* three sets: the outer weights */
  float awbw, awcw, bwcw; /* three sets: products of weights */
  float2 *out;            /* the line buffer written, or NULL: the pass's final output */
  int count;              /* entries written */
  float *var, *mean;      /* the final output: var = M2 / ow and mean per pixel */
};

__device__ __forceinline__ float2 mfetch(const mpass &p, const msrc &s, int e, int line) {
  if (s.kind == SRC_LINE)
    return s.p[p.vertical ? (size_t)e * p.lines + line : (size_t)line * p.len + e];
  int pos = clampi(e - p.r, 0, p.n - 1); /* the replicated edge */
  if (s.kind == SRC_ROWS) return s.p[(size_t)pos * p.rows_len + line];
  size_t i = p.vertical ? (size_t)pos * p.img.w + line : (size_t)line * p.img.w + pos;
  return make_float2((float)raw_sample(p.img, i), 0.0f);
}

/* Chan et al.'s merge, as var_merge.c's merge2: mean = ma + d f, M2 = M2a + M2b + d^2 Wa f. */
__device__ __forceinline__ float2 merge2(const mstep &m, float2 a, float2 b) {
  float d = __fsub_rn(b.x, a.x);
  return make_float2(__fadd_rn(a.x, __fmul_rn(d, m.f)),
                     __fadd_rn(__fadd_rn(a.y, b.y), __fmul_rn(__fmul_rn(d, d), m.awf)));
}

/* Three sets around a centre b, as var_merge.c's merge3 (the Threewise paper's equation 18). */
__device__ __forceinline__ float2 merge3(const mstep &m, float2 a, float2 b, float2 c) {
  float da = __fsub_rn(a.x, b.x), dc = __fsub_rn(c.x, b.x), dac = __fsub_rn(a.x, c.x);
  float mean = __fadd_rn(b.x, __fdiv_rn(__fadd_rn(__fmul_rn(m.aw, da), __fmul_rn(m.cw, dc)), m.ow));
  float spread = __fadd_rn(
      __fadd_rn(__fmul_rn(m.awbw, __fmul_rn(da, da)), __fmul_rn(m.awcw, __fmul_rn(dac, dac))),
      __fmul_rn(m.bwcw, __fmul_rn(dc, dc)));
  return make_float2(mean, __fadd_rn(__fadd_rn(__fadd_rn(a.y, b.y), c.y), __fdiv_rn(spread, m.ow)));
}

/* One merge step over count entries of every line; threads run along the memory's fast axis
 * (entries for the x pass, lines for the y pass). */
__global__ void merge_step(mpass p, mstep m) {
  int fast = blockIdx.x * MERGE_T + threadIdx.x;
  int nslow = p.vertical ? m.count : p.lines;
  for (int slow = blockIdx.y; slow < nslow; slow += gridDim.y) {
    int e = p.vertical ? slow : fast, line = p.vertical ? fast : slow;
    if (e >= m.count || line >= p.lines || (!m.out && e >= p.n)) continue;
    float2 a = mfetch(p, m.a, e, line), b = mfetch(p, m.b, e + m.ob, line), o;
    if (m.three) {
      if (m.mid_double) b.y = __fmul_rn(b.y, 2.0f);
      o = merge3(m, a, b, mfetch(p, m.c, e + m.oc, line));
    } else {
      o = merge2(m, a, b);
    }
    if (m.out) {
      m.out[p.vertical ? (size_t)e * p.lines + line : (size_t)line * p.len + e] = o;
    } else { /* the final output: entry e is pixel e of the column */
      size_t i = (size_t)e * p.img.w + line;
      m.var[i] = __fdiv_rn(o.y, m.ow);
      if (m.mean) m.mean[i] = o.x;
    }
  }
}

/* The host side of a pass: its geometry, the line buffers, and how many steps remain, so that
 * the last one writes the final output. */
struct mrun {
  mpass p;
  float2 *buf[4];
  const float2 *keep; /* a buffer still needed by a later pass */
  int steps;          /* steps issued */
  int last;           /* index of the final step, or -1 when only counting */
  float *var, *mean;
  cudaStream_t s;
  cudaError_t err;
};

/* A buffer that neither step m, live nor R.keep reads: at most three are in use at once. */
static float2 *free_buf(const mrun &R, const mstep &m, const msrc &live) {
  for (int i = 0; i < 4; i++) {
    const float2 *b = R.buf[i];
    if (b != m.a.p && b != m.b.p && b != m.c.p && b != live.p && b != R.keep) return R.buf[i];
  }
  return NULL;
}

/* Issues step m (unless only counting) into a free buffer; returns the source it wrote. */
static msrc issue(mrun &R, mstep m, const msrc &live) {
  msrc out = {SRC_LINE, free_buf(R, m, live)};
  int fin = R.steps++ == R.last;
  if (R.last < 0 || R.err != cudaSuccess) return out;
  m.out = fin ? NULL : (float2 *)out.p;
  m.var = R.var, m.mean = R.mean;
  int fast = R.p.vertical ? R.p.lines : m.count, slow = R.p.vertical ? m.count : R.p.lines;
  dim3 grid(div_up(fast, MERGE_T), slow < 65535 ? slow : 65535);
  merge_step<<<grid, MERGE_T, 0, R.s>>>(R.p, m);
  R.err = cudaGetLastError();
  return out;
}

static mstep pair_step(msrc a, float aw, msrc b, int ob, float bw, int count) {
  mstep m = {};
  m.a = a, m.b = b, m.ob = ob, m.count = count;
  m.ow = aw + bw;
  m.f = bw / m.ow;
  m.awf = aw * m.f;
  return m;
}

/* A box of len entries of src (weight w each, n valid entries) by doubling, as var_merge.c's
 * box_merge: the boxes of len's binary digits merged left to right. Returns the box starting at
 * each entry; *out_w is its weight. */
static msrc box_merge(mrun &R, msrc p, float w, int n, int len, float *out_w) {
  msrc acc = {SRC_LINE, NULL};
  float accw = 0;
  int off = 0;
  for (int size = 1; size <= len; size *= 2) {
    if (len & size) {
      if (off) {
        mstep m = pair_step(acc, accw, p, off, w, n - off - size + 1);
        accw = m.ow;
        acc = issue(R, m, p);
      } else {
        acc = p, accw = w;
      }
      off += size;
    }
    if (2 * size <= len) {
      mstep m = pair_step(p, w, p, size, w, n - 2 * size + 1);
      w = m.ow;
      p = issue(R, m, acc);
    }
  }
  *out_w = accw;
  return acc;
}

/* Threewise along the pass: merges of the taps -d, 0, +d (left-aligned: e, e + d, e + 2d) for
 * d = 1, 2, .., (r + 1) / 2. The triangle's centre is the previous step's entry with weight 2;
 * the box's is the lone sample between two boxes of radius d - 1. */
static msrc threewise_pass(mrun &R, msrc src, float w0, int tri, float *out_w) {
  msrc cur = src;
  float w = w0;
  int m = R.p.len;
  for (int d = 1; d <= (R.p.r + 1) / 2; d *= 2) {
    mstep s = {};
    float bw = tri ? w * 2 : w0;
    s.three = 1, s.mid_double = tri;
    s.a = cur, s.c = cur, s.oc = 2 * d, s.count = m - 2 * d;
    s.b = tri ? cur : src, s.ob = tri ? d : 2 * d - 1;
    s.aw = w, s.cw = w, s.ow = w + bw + w;
    s.awbw = w * bw, s.awcw = w * w, s.bwcw = bw * w;
    w = s.ow;
    cur = issue(R, s, src);
    m -= 2 * d;
  }
  *out_w = w;
  return cur;
}

/* One pass of method m from src (weight w0): returns its result and weight. */
static msrc merge_pass(mrun &R, enum cpu_var_method m, int tri, msrc src, float w0, float *w) {
  if (m == CPU_VAR_THREEWISE) return threewise_pass(R, src, w0, tri, w);
  int r = R.p.r;
  if (!tri) return box_merge(R, src, w0, R.p.len, 2 * r + 1, w);
  float w1;
  msrc a = box_merge(R, src, w0, R.p.len, r + 1, &w1);
  R.keep = a.p; /* the first box is the second's source (the pass's source is done with) */
  return box_merge(R, a, w1, R.p.len - r, r + 1, w);
}

size_t var_merge_bytes(int w, int h, int r) {
  size_t x = (size_t)(w + 2 * r) * h, y = (size_t)w * (h + 2 * r);
  return (x > y ? x : y) * sizeof(float2);
}

/* Runs a pass twice: once counting its steps, once issuing them with the last one final. */
static msrc run_pass(mrun &R, enum cpu_var_method m, int tri, msrc src, float w0, float *w) {
  const float2 *keep = R.keep;
  R.steps = 0, R.last = -1;
  merge_pass(R, m, tri, src, w0, w);
  R.last = R.p.vertical ? R.steps - 1 : R.steps; /* the x pass has no final step */
  R.steps = 0, R.keep = keep;
  msrc out = merge_pass(R, m, tri, src, w0, w);
  R.keep = keep;
  return out;
}

cudaError_t launch_var_merge(enum cpu_var_method m, packed in, int r, int tri, void *const buf[4],
                             float *var, float *mean, cudaStream_t s) {
  mrun R = {};
  for (int i = 0; i < 4; i++) R.buf[i] = (float2 *)buf[i];
  R.var = var, R.mean = mean, R.s = s, R.err = cudaSuccess;
  R.p = {in, 0, in.w, in.w + 2 * r, in.h, r, 0};
  msrc img = {SRC_IMAGE, NULL};
  float wx, wy;
  msrc rows = run_pass(R, m, tri, img, 1.0f, &wx);
  R.p = {in, 1, in.h, in.h + 2 * r, in.w, r, in.w + 2 * r};
  rows.kind = SRC_ROWS;
  R.keep = rows.p;
  run_pass(R, m, tri, rows, wx, &wy);
  return R.err;
}

/* ---- exact: running integer sums ----
 * O(1) per pixel at any radius. An x pass stages a row segment in shared memory and each thread
 * walks EX_ROW_S outputs of it; a y pass gives each thread a segment of one column (a warp reads
 * 32 adjacent columns, so every load is coalesced). The triangle's weighted sum T moves by
 * T(p+1) = T(p) + R(p) - L(p), with R and L the box sums right and left of p; the box moves by its
 * two end samples. The numerator W S2 - S1^2 is formed in 64 bits, or in 128 where 64 can
 * overflow, rounded once to double and divided once. */

#define EX_ROW_T 64 /* threads of an x-pass block */
#define EX_ROW_S 31 /* outputs a thread walks (odd: its shared-memory reads hit distinct banks) */
#define EX_TILE  (EX_ROW_T * EX_ROW_S)
#define EX_COL_X 32 /* columns of a y-pass block */
#define EX_COL_Y 8  /* column segments of a y-pass block */

/* Walks the triangle's sums of two quantities (a sample and its square) over S outputs from a
 * centre: get(j, &v1, &v2) gives offset j, emit(k, t1, t2) takes output k. */
template <class A1, class A2, class G, class E>
__device__ __forceinline__ void walk_triangle(const G &get, const E &emit, int r, int S) {
  A1 t1 = 0, r1 = 0, l1 = 0, v1, u1, w1;
  A2 t2 = 0, r2 = 0, l2 = 0, v2, u2, w2;
  int n = r + 1;
  for (int j = -r; j <= r; j++) {
    get(j, v1, v2);
    A1 wt = (A1)(n - (j < 0 ? -j : j));
    t1 += wt * v1, t2 += (A2)wt * v2;
    if (j >= 1)
      r1 += v1, r2 += v2;
    else
      l1 += v1, l2 += v2;
  }
  get(n, v1, v2);
  r1 += v1, r2 += v2;
  for (int k = 0; k < S; k++) {
    emit(k, t1, t2);
    if (k + 1 == S) break;
    t1 = t1 + r1 - l1, t2 = t2 + r2 - l2; /* unsigned: exact modulo 2^bits, and never negative */
    get(k + 1, v1, v2);
    get(k + n + 1, u1, u2);
    get(k - r, w1, w2);
    r1 = r1 + u1 - v1, r2 = r2 + u2 - v2;
    l1 = l1 + v1 - w1, l2 = l2 + v2 - w2;
  }
}

/* The box: the sum moves by its two end samples. */
template <class A1, class A2, class G, class E>
__device__ __forceinline__ void walk_box(const G &get, const E &emit, int r, int S) {
  A1 t1 = 0, v1, u1;
  A2 t2 = 0, v2, u2;
  for (int j = -r; j <= r; j++) {
    get(j, v1, v2);
    t1 += v1, t2 += v2;
  }
  for (int k = 0; k < S; k++) {
    emit(k, t1, t2);
    if (k + 1 == S) break;
    get(k + r + 1, v1, v2);
    get(k - r, u1, u2);
    t1 = t1 + v1 - u1, t2 = t2 + v2 - u2;
  }
}

/* x pass: one block per row segment of EX_TILE outputs. The segment and its halo are staged in
 * shared memory, each thread walks EX_ROW_S outputs, and the sums go back out through shared
 * memory so that the global stores are coalesced. Q holds sums of squares (32 bits for 8-bit
 * samples, 64 for 16-bit). */
template <class Q> __global__ void exact_rows(packed in, int r, int tri, uint32_t *s1, Q *s2) {
  extern __shared__ uint64_t s_raw[];
  Q *s_o2 = (Q *)s_raw;                          /* EX_TILE sums of squares */
  uint32_t *s_o1 = (uint32_t *)(s_o2 + EX_TILE); /* EX_TILE sums */
  uint32_t *s_x = s_o1 + EX_TILE;                /* EX_TILE + 2r + 2 samples from x0 - r */
  int x0 = blockIdx.x * EX_TILE, t = threadIdx.x, span = EX_TILE + 2 * r + 2;
  int p0 = t * EX_ROW_S, S = min(EX_ROW_S, in.w - x0 - p0), n = min(EX_TILE, in.w - x0);
  for (int y = blockIdx.y; y < in.h; y += gridDim.y) {
    size_t row = (size_t)y * in.w;
    for (int i = t; i < span; i += EX_ROW_T)
      s_x[i] = raw_sample(in, row + clampi(x0 - r + i, 0, in.w - 1));
    __syncthreads();
    const uint32_t *c = s_x + p0 + r; /* the first output's centre */
    auto get = [&](int j, Q &a, Q &b) {
      uint32_t v = c[j];
      a = v, b = (Q)v * v;
    };
    auto emit = [&](int k, Q a, Q b) { s_o1[p0 + k] = (uint32_t)a, s_o2[p0 + k] = b; };
    if (S > 0 && tri) walk_triangle<Q, Q>(get, emit, r, S);
    if (S > 0 && !tri) walk_box<Q, Q>(get, emit, r, S);
    __syncthreads();
    for (int i = t; i < n; i += EX_ROW_T) s1[row + x0 + i] = s_o1[i], s2[row + x0 + i] = s_o2[i];
    __syncthreads();
  }
}

/* 128 bits to double, rounded to nearest-even once, as gcc's conversion: the top 64 bits with a
 * sticky bit for everything below them. */
__device__ __forceinline__ double u128_to_double(uint64_t hi, uint64_t lo) {
  if (hi == 0) return __ull2double_rn(lo);
  int sh = 64 - __clzll((long long)hi); /* 1..64 bits above the low word */
  uint64_t top = sh == 64 ? hi : (hi << (64 - sh)) | (lo >> sh);
  uint64_t rest = sh == 64 ? lo : lo << (64 - sh);
  return ldexp(__ull2double_rn(top | (rest != 0)), sh);
}

struct exact_out {
  uint64_t total; /* W */
  double w2;      /* W^2 as a double (rounded once, as the CPU twin) */
  int wide;       /* W S2 can pass 2^64: form the numerator in 128 bits */
  double *var, *mean;
};

/* var = (W S2 - S1^2) / W^2, mean = S1 / W: cpu/variance.c's exact_finish. */
__device__ __forceinline__ void exact_store(const exact_out &o, uint64_t s1, uint64_t s2,
                                            size_t i) {
  double num;
  if (o.wide) {
    uint64_t lo1 = o.total * s2, hi1 = __umul64hi(o.total, s2);
    uint64_t lo2 = s1 * s1, hi2 = __umul64hi(s1, s1);
    num = u128_to_double(hi1 - hi2 - (lo1 < lo2), lo1 - lo2);
  } else {
    num = __ull2double_rn(o.total * s2 - s1 * s1);
  }
  o.var[i] = __ddiv_rn(num, o.w2);
  if (o.mean) o.mean[i] = __ddiv_rn(__ull2double_rn(s1), (double)o.total);
}

/* y pass: a thread walks seg rows of one column of the x pass's sums (rows clamped at the
 * edges), then divides. */
template <class Q>
__global__ void exact_cols(const uint32_t *s1, const Q *s2, int w, int h, int r, int tri, int seg,
                           exact_out o) {
  int x = blockIdx.x * EX_COL_X + threadIdx.x, y0 = (blockIdx.y * EX_COL_Y + threadIdx.y) * seg;
  if (x >= w || y0 >= h) return;
  int S = min(seg, h - y0);
  auto get = [&](int j, uint64_t &a, uint64_t &b) {
    size_t i = (size_t)clampi(y0 + j, 0, h - 1) * w + x;
    a = __ldg(&s1[i]), b = __ldg(&s2[i]);
  };
  auto emit = [&](int k, uint64_t a, uint64_t b) {
    exact_store(o, a, b, (size_t)(y0 + k) * w + x);
  };
  if (tri)
    walk_triangle<uint64_t, uint64_t>(get, emit, r, S);
  else
    walk_box<uint64_t, uint64_t>(get, emit, r, S);
}

size_t var_exact_bytes(int w, int h, int depth, size_t *s2_bytes) {
  *s2_bytes = (size_t)w * h * (depth == 16 ? sizeof(uint64_t) : sizeof(uint32_t));
  return (size_t)w * h * sizeof(uint32_t);
}

/* Rows per y-pass thread: long enough that the warm-up (2r + 2 reads) is a fraction of the walk,
 * short enough that the image still gives some 100k threads. */
static int exact_segment(int w, int h, int r) {
  int seg = r > 63 ? 256 : r > 31 ? 128 : 64;
  while (seg > 16 && (size_t)w * div_up(h, seg) < (1u << 17)) seg /= 2;
  return seg;
}

template <class Q>
static cudaError_t exact_both(packed in, int r, int tri, void *d_s1, void *d_s2, exact_out o,
                              cudaStream_t s) {
  size_t smem = EX_TILE * (sizeof(Q) + sizeof(uint32_t)) + (EX_TILE + 2 * r + 2) * sizeof(uint32_t);
  smem_allow_max((const void *)exact_rows<Q>); /* smem grows with r */
  dim3 rg(div_up(in.w, EX_TILE), in.h < 65535 ? in.h : 65535);
  exact_rows<Q><<<rg, EX_ROW_T, smem, s>>>(in, r, tri, (uint32_t *)d_s1, (Q *)d_s2);
  int seg = exact_segment(in.w, in.h, r);
  dim3 cb(EX_COL_X, EX_COL_Y), cg(div_up(in.w, EX_COL_X), div_up(div_up(in.h, seg), EX_COL_Y));
  exact_cols<Q>
      <<<cg, cb, 0, s>>>((const uint32_t *)d_s1, (const Q *)d_s2, in.w, in.h, r, tri, seg, o);
  return cudaGetLastError();
}

cudaError_t launch_var_exact(packed in, int r, int tri, void *d_s1, void *d_s2, double *var,
                             double *mean, cudaStream_t s) {
  uint64_t a = tri ? (uint64_t)(r + 1) * (r + 1) : (uint64_t)(2 * r + 1);
  uint64_t max = in.depth == 16 ? 65535 : 255;
  exact_out o = {a * a, (double)(a * a * a * a), 0, var, mean};
  o.wide = o.total * max > 0xffffffffull; /* numerator <= (W max)^2 */
  if (in.depth == 16) return exact_both<uint64_t>(in, r, tri, d_s1, d_s2, o, s);
  return exact_both<uint32_t>(in, r, tri, d_s1, d_s2, o, s);
}

/* ---- contrast ----
 * Luma, then exact box statistics, then the Wallis formula in double. */

#define PX_T 256 /* threads of a per-pixel block */

/* cpu_luma: gray copied, colour by BT.601 weights in integers. */
__global__ void luma_kernel(packed in, packed gray) {
  size_t n = (size_t)in.w * in.h;
  for (size_t i = (size_t)blockIdx.x * PX_T + threadIdx.x; i < n; i += (size_t)gridDim.x * PX_T) {
    size_t p = i * in.c;
    unsigned y;
    if (in.c <= 2) {
      y = raw_sample(in, p);
    } else {
      uint64_t r = raw_sample(in, p), g = raw_sample(in, p + 1), b = raw_sample(in, p + 2);
      y = (unsigned)(in.depth == 16 ? (19595 * r + 38470 * g + 7471 * b + 32768) >> 16
                                    : (77 * r + 150 * g + 29 * b + 128) >> 8);
    }
    if (gray.depth == 16)
      ((uint16_t *)gray.p)[i] = (uint16_t)y;
    else
      ((uint8_t *)gray.p)[i] = (uint8_t)y;
  }
}

struct wallis {       /* cpu_contrast_image's constants, formed on the host as the CPU does */
  double am0;         /* a m0 */
  double one_minus_a; /* 1 - a */
  double b, s0, bs0;  /* b, s0, b s0 */
};

/* floor(v + 0.5) clamped to [0, max]; NaN gives 0 (cpu/convolve.c's round_clamp). */
__device__ __forceinline__ unsigned round_clamp(double v, unsigned max) {
  double f = floor(__dadd_rn(v, 0.5));
  return f >= max ? max : f > 0 ? (unsigned)f : 0;
}

__global__ void contrast_kernel(packed in, packed gray, const double *mean, const double *var,
                                wallis c, packed out) {
  size_t n = (size_t)in.w * in.h;
  unsigned max = in.depth == 16 ? 65535u : 255u;
  for (size_t i = (size_t)blockIdx.x * PX_T + threadIdx.x; i < n; i += (size_t)gridDim.x * PX_T) {
    double y = raw_sample(gray, i), m = mean[i], s = __dsqrt_rn(var[i]);
    double den = __dadd_rn(c.s0, __dmul_rn(c.b, s)), gain = den > 0 ? __ddiv_rn(c.bs0, den) : 0;
    double t = __dadd_rn(c.am0, __dmul_rn(c.one_minus_a, m));
    double shift = __dsub_rn(__dadd_rn(t, __dmul_rn(__dsub_rn(y, m), gain)), y);
    for (int ch = 0; ch < in.c; ch++) {
      size_t k = i * in.c + ch;
      unsigned x = raw_sample(in, k);
      int alpha = (in.c == 2 || in.c == 4) && ch == in.c - 1;
      unsigned q = alpha ? x : round_clamp(__dadd_rn((double)x, shift), max);
      if (out.depth == 16)
        ((uint16_t *)out.p)[k] = (uint16_t)q;
      else
        ((uint8_t *)out.p)[k] = (uint8_t)q;
    }
  }
}

static unsigned px_blocks(size_t n) {
  size_t b = (n + PX_T - 1) / PX_T;
  return b < 65535 * 32 ? (unsigned)(b ? b : 1) : 65535 * 32; /* the rest by striding */
}

cudaError_t launch_luma(packed in, packed gray, cudaStream_t s) {
  luma_kernel<<<px_blocks((size_t)in.w * in.h), PX_T, 0, s>>>(in, gray);
  return cudaGetLastError();
}

cudaError_t launch_contrast(packed in, packed gray, const double *mean, const double *var,
                            const struct cpu_contrast &c, packed out, cudaStream_t s) {
  double scale = in.depth == 16 ? 257 : 1, m0 = c.m0 * scale, s0 = c.s0 * scale;
  wallis w = {c.a * m0, 1 - c.a, c.b, s0, c.b * s0};
  contrast_kernel<<<px_blocks((size_t)in.w * in.h), PX_T, 0, s>>>(in, gray, mean, var, w, out);
  return cudaGetLastError();
}

/* ---- convolution ----
 * A shared-memory tile with a halo: a 16x16 tile plus halo of each colour channel in shared
 * memory; the weights travel as a __grid_constant__ parameter, read by all threads at once. */

#define CONV_B 16 /* outputs per tile side */

/* A CONV_B x CONV_B block: the tile and its halo of each colour channel go to shared memory
 * (one plane per channel, so that adjacent threads read adjacent words), then each thread sums
 * its window row by row, left to right, as cpu/convolve.c does. */
__global__ void convolve_tile(packed in, packed out, const __grid_constant__ cpu_conv c) {
  extern __shared__ float s_tile[];
  int R = c.size / 2, tw = CONV_B + 2 * R, plane = tw * tw;
  int alpha = in.c == 2 || in.c == 4, nc = in.c - alpha;
  int x0 = blockIdx.x * CONV_B, y0 = blockIdx.y * CONV_B, tid = threadIdx.y * CONV_B + threadIdx.x;
  for (int idx = tid; idx < plane; idx += CONV_B * CONV_B) {
    int xx = clampi(x0 - R + idx % tw, 0, in.w - 1), yy = clampi(y0 - R + idx / tw, 0, in.h - 1);
    size_t p = ((size_t)yy * in.w + xx) * in.c;
    for (int ch = 0; ch < nc; ch++) s_tile[ch * plane + idx] = (float)raw_sample(in, p + ch);
  }
  __syncthreads();
  int x = x0 + threadIdx.x, y = y0 + threadIdx.y;
  if (x >= in.w || y >= in.h) return;
  size_t p = ((size_t)y * in.w + x) * in.c;
  float max = in.depth == 16 ? 65535.0f : 255.0f;
  for (int ch = 0; ch < in.c; ch++) {
    unsigned q;
    if (ch < nc) {
      float acc = 0;
      const float *s = s_tile + ch * plane + threadIdx.y * tw + threadIdx.x;
      for (int ky = 0; ky < c.size; ky++)
        for (int kx = 0; kx < c.size; kx++)
          acc = __fadd_rn(acc, __fmul_rn(c.k[ky * c.size + kx], s[ky * tw + kx]));
      float f = floorf(__fadd_rn(__fadd_rn(acc, c.bias), 0.5f));
      q = f >= max ? (unsigned)max : f > 0 ? (unsigned)f : 0;
    } else {
      q = raw_sample(in, p + ch); /* alpha copied */
    }
    if (out.depth == 16)
      ((uint16_t *)out.p)[p + ch] = (uint16_t)q;
    else
      ((uint8_t *)out.p)[p + ch] = (uint8_t)q;
  }
}

cudaError_t launch_convolve(packed in, packed out, const struct cpu_conv &c, cudaStream_t s) {
  int tw = CONV_B + 2 * (c.size / 2), alpha = in.c == 2 || in.c == 4;
  size_t smem = (size_t)tw * tw * (in.c - alpha) * sizeof(float);
  smem_allow_max((const void *)convolve_tile); /* smem grows with the kernel and channels */
  dim3 block(CONV_B, CONV_B), grid(div_up(in.w, CONV_B), div_up(in.h, CONV_B));
  convolve_tile<<<grid, block, smem, s>>>(in, out, c);
  return cudaGetLastError();
}
