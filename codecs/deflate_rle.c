/* deflate_rle.c: a fast zlib stream of Huffman-coded literals and byte runs, for PNG's low levels.
 * fpng's idea: after a PNG row filter most bytes are small residuals, so a deflate stream that
 * only codes literals and runs of one repeated byte (matches at distance 1), with Huffman codes
 * made for each block, comes close to a real match finder's size at a fraction of its time, and
 * faster than zlib's own run-length strategy (Z_RLE). Whole buffers (codec_deflate_rle,
 * codec_deflate_rle_part) and blocks handed over one at a time (codec_rle_block) give the same
 * stream. It is plain RFC 1950/1951: any inflater reads it. */
#include <libdeflate.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "codecs_int.h"

#define STORED_MAX  65535u /* bytes in one stored block */
#define LITLEN_SYMS 286    /* literals, end of block (256), lengths (257..285) */
#define CL_SYMS     19     /* the code-length alphabet */
#define MIN_RUN     3
#define MAX_RUN     258

struct huff {
  uint8_t len[LITLEN_SYMS];   /* code lengths, 0 for unused symbols */
  uint16_t code[LITLEN_SYMS]; /* codes, bit-reversed for the LSB-first bit buffer */
};

struct bitw {
  uint8_t *p;   /* the next byte to write */
  uint64_t buf; /* bits not yet written, LSB first */
  unsigned cnt; /* how many */
};

struct lengths { /* for each run length 3..258: its symbol and extra bits */
  uint16_t sym[MAX_RUN + 1];
  uint8_t nextra[MAX_RUN + 1];
  uint8_t extra[MAX_RUN + 1];
};

static void store_le64(uint8_t *p, uint64_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  memcpy(p, &v, 8);
#else
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
#endif
}

/* Adds n bits (at most 32 with cnt below 8): stores 8 bytes at p and moves on by the whole bytes,
 * without a branch, so cnt stays below 8 between calls; the bound's slack allows the store. */
static inline void put_bits(struct bitw *w, uint64_t bits, unsigned n) {
  w->buf |= bits << w->cnt;
  w->cnt += n;
  store_le64(w->p, w->buf);
  w->p += w->cnt >> 3;
  w->buf >>= w->cnt & ~7u;
  w->cnt &= 7;
}

/* Pads to a byte boundary and writes every bit held. */
static void flush_bytes(struct bitw *w) {
  for (; w->cnt > 0; w->cnt = w->cnt > 8 ? w->cnt - 8 : 0) {
    *w->p++ = (uint8_t)w->buf;
    w->buf >>= 8;
  }
  w->buf = 0;
}

static void init_lengths(struct lengths *t) {
  static const uint16_t base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                    31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
  for (int s = 0; s < 29; s++) {
    int nextra = s < 8 || s == 28 ? 0 : (s - 4) / 4, top = s == 28 ? 259 : base[s] + (1 << nextra);
    for (int l = base[s]; l < top && l <= MAX_RUN; l++) {
      t->sym[l] = (uint16_t)(257 + s);
      t->nextra[l] = (uint8_t)nextra;
      t->extra[l] = (uint8_t)(l - base[s]);
    }
  }
}

static int by_weight(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Huffman code lengths for freq[0..n) by the two-queue method (leaves sorted by weight, internal
 * nodes made in order); returns the longest. Unused symbols get 0. */
static int huffman_lengths(const uint32_t *freq, int n, uint8_t *len) {
  uint64_t leaf[LITLEN_SYMS];
  uint64_t w[2 * LITLEN_SYMS];
  int parent[2 * LITLEN_SYMS], m = 0, maxlen = 0;
  for (int s = 0; s < n; s++) {
    len[s] = 0;
    if (freq[s]) leaf[m++] = (uint64_t)freq[s] << 9 | (uint64_t)s;
  }
  if (m == 0) return 0;
  qsort(leaf, (size_t)m, sizeof *leaf, by_weight);
  for (int i = 0; i < m; i++) w[i] = leaf[i] >> 9;
  int li = 0, ni = m;
  for (int next = m; next < 2 * m - 1; next++) {
    int pick[2];
    for (int k = 0; k < 2; k++) pick[k] = li < m && (ni >= next || w[li] <= w[ni]) ? li++ : ni++;
    parent[pick[0]] = parent[pick[1]] = next;
    w[next] = w[pick[0]] + w[pick[1]];
  }
  if (m == 1) len[leaf[0] & 511] = 1;
  int depth[2 * LITLEN_SYMS];
  depth[2 * m - 2] = 0;
  for (int k = 2 * m - 3; k >= 0; k--) depth[k] = depth[parent[k]] + 1;
  for (int i = 0; i < m && m > 1; i++) {
    len[leaf[i] & 511] = (uint8_t)depth[i];
    if (depth[i] > maxlen) maxlen = depth[i];
  }
  return m == 1 ? 1 : maxlen;
}

/* Code lengths of at most limit bits, and their canonical codes: counts are halved (kept above
 * zero) until the Huffman code fits, which costs a little size only on extreme histograms. A
 * lone symbol gets a partner, since inflaters refuse an incomplete code-length code. */
static void build_code(const uint32_t *freq, int n, int limit, struct huff *h) {
  uint32_t f[LITLEN_SYMS];
  memcpy(f, freq, (size_t)n * sizeof *f);
  while (huffman_lengths(f, n, h->len) > limit)
    for (int s = 0; s < n; s++) f[s] = f[s] ? (f[s] >> 1) | 1 : 0;
  int used = 0;
  for (int s = 0; s < n; s++) used += h->len[s] != 0;
  if (used == 1) h->len[h->len[0] ? 1 : 0] = 1;
  uint16_t count[16] = {0}, next[16];
  for (int s = 0; s < n; s++) count[h->len[s]]++;
  count[0] = 0;
  for (int b = 1, c = 0; b < 16; b++) next[b] = (uint16_t)(c = (c + count[b - 1]) << 1);
  for (int s = 0; s < n; s++) {
    unsigned l = h->len[s], c = l ? next[l]++ : 0, r = 0;
    for (unsigned b = 0; b < l; b++) r |= ((c >> b) & 1u) << (l - 1 - b);
    h->code[s] = (uint16_t)r;
  }
}

/* The end of the run that starts at i (in[i - 1..i + 2] one byte value): the first j past i + 2
 * where in[j] differs from in[j - 1], at most MAX_RUN bytes from i and not past e. */
static size_t run_end(const uint8_t *in, size_t i, size_t e) {
  size_t j = i + MIN_RUN, lim = e - i > MAX_RUN ? i + MAX_RUN : e;
#ifdef __SSE2__
  __m128i pat = _mm_set1_epi8((char)in[i]);
  for (; j + 16 <= lim; j += 16) {
    unsigned m = (unsigned)_mm_movemask_epi8(
        _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(in + j)), pat));
    if (m != 0xffffu) return j + (size_t)__builtin_ctz(~m);
  }
#endif
  while (j < lim && in[j] == in[i]) j++;
  return j;
}

#ifdef __SSE2__
/* Bit k set where in[p + k] == in[p + k - 1], for k in 0..63. */
static inline uint64_t same_as_last(const uint8_t *in, size_t p) {
  uint64_t m = 0;
  for (int q = 0; q < 4; q++) {
    __m128i a = _mm_loadu_si128((const __m128i *)(in + p + 16 * q - 1));
    __m128i b = _mm_loadu_si128((const __m128i *)(in + p + 16 * q));
    m |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(a, b)) << (16 * q);
  }
  return m;
}

/* Stores the n literals src[0..n) at sym, 16 at a time: reads src[0..n + 15], writes sym[0..n +
 * 15]. */
static inline void put_literals(uint16_t *sym, const uint8_t *src, size_t n) {
  for (size_t q = 0; q < n; q += 16) {
    __m128i b = _mm_loadu_si128((const __m128i *)(src + q));
    _mm_storeu_si128((__m128i *)(sym + q), _mm_unpacklo_epi8(b, _mm_setzero_si128()));
    _mm_storeu_si128((__m128i *)(sym + q + 8), _mm_unpackhi_epi8(b, _mm_setzero_si128()));
  }
}

/* Parses the window in[p..p + 64) from i (p <= i < p + 64; the window's bytes and the 16 after
 * it readable, and in[p - 1]) into sym[*k..]; returns where the parse goes on, p + 64 or past.
 * same: bit j where in[p + j] == in[p + j - 1]; start: bit j where a run starts at p + j. */
static size_t parse_window(const uint8_t *in, size_t p, size_t i, size_t e, uint64_t same,
                           uint64_t start, uint16_t *sym, size_t *k) {
  for (unsigned off = (unsigned)(i - p);;) {
    uint64_t from = start >> off << off;
    unsigned r = from ? (unsigned)__builtin_ctzll(from) : 64;
    put_literals(sym + *k, in + p + off, r - off);
    *k += r - off;
    if (r == 64) return p + 64;
    uint64_t ends = r + MIN_RUN < 64 ? ~same >> (r + MIN_RUN) << (r + MIN_RUN) : 0;
    size_t j = ends ? p + (size_t)__builtin_ctzll(ends) : run_end(in, p + r, e);
    sym[(*k)++] = (uint16_t)(256 + (j - p - r));
    if (j >= p + 64) return j;
    off = (unsigned)(j - p);
  }
}
#endif

/* Parses in[s..e) (in[s - 1] readable when s > 0) into symbols: literals (< 256), runs of one
 * byte value (a match at distance 1; 256 + the run's length) that start where the last byte and
 * the next three are equal and go on as long as they can, and the end of the block (256).
 * Returns how many; sym holds e - s + 16. With SSE2 the block goes in windows of 64 bytes: a
 * window's bit masks of where each byte equals the last and where a run can start depend only
 * on the bytes, so they are made ahead of the parse, which then finds each run's start and end
 * with a count of zeros instead of a chain of loads and compares; the bytes that the windows
 * leave at the block's end are parsed one by one. */
static size_t parse_block(const uint8_t *in, size_t s, size_t e, int first, uint16_t *sym) {
  size_t i = s, k = 0;
  if (first && e > s) sym[k++] = in[i++]; /* the stream's first byte: a literal */
#ifdef __SSE2__
  for (size_t p = i; p + 64 + 16 <= e; p += 64) {
    if (i >= p + 64) continue; /* a run covers the window */
    uint64_t same = same_as_last(in, p);
    uint64_t x = (uint64_t)(in[p + 64] == in[p + 63]) | (uint64_t)(in[p + 65] == in[p + 64]) << 1;
    uint64_t start = same & (same >> 1 | x << 63) & (same >> 2 | x << 62);
    i = parse_window(in, p, i, e, same, start, sym, &k);
  }
#endif
  while (i < e) {
    if (e - i < MIN_RUN || in[i - 1] != in[i] || in[i] != in[i + 1] || in[i] != in[i + 2]) {
      sym[k++] = in[i++];
      continue;
    }
    size_t j = run_end(in, i, e);
    sym[k++] = (uint16_t)(256 + (j - i));
    i = j;
  }
  sym[k++] = 256;
  return k;
}

#define SYMS (256 + MAX_RUN + 1) /* parse_block's symbols */

/* Counts sym[0..n) into freq (the literal/length alphabet's counts). The counts go to four tables
 * in turn, so that a symbol that recurs within a few (residuals are mostly a few small values)
 * does not wait on the store of its last increment. */
static void count_symbols(const uint16_t *sym, size_t n, const struct lengths *t, uint32_t *freq) {
  uint32_t c[4][SYMS];
  memset(c, 0, sizeof c);
  size_t k = 0;
  for (; k + 4 <= n; k += 4) {
    c[0][sym[k]]++;
    c[1][sym[k + 1]]++;
    c[2][sym[k + 2]]++;
    c[3][sym[k + 3]]++;
  }
  for (; k < n; k++) c[0][sym[k]]++;
  for (int v = 0; v <= 256; v++) freq[v] = c[0][v] + c[1][v] + c[2][v] + c[3][v];
  for (int l = MIN_RUN; l <= MAX_RUN; l++)
    freq[t->sym[l]] += c[0][256 + l] + c[1][256 + l] + c[2][256 + l] + c[3][256 + l];
}

/* The code-length sequence of lens[0..n) with repeats (16: the last length 3..6 times, 17: 3..10
 * zeros, 18: 11..138 zeros) as symbols op[] and their extra bits ex[]; returns how many. */
static int rle_lengths(const uint8_t *lens, int n, uint8_t *op, uint8_t *ex) {
  int k = 0;
  for (int i = 0; i < n;) {
    int v = lens[i], run = 1;
    while (i + run < n && lens[i + run] == v) run++;
    if (v == 0 && run >= 3) {
      int r = run > 138 ? 138 : run;
      op[k] = r >= 11 ? 18 : 17;
      ex[k++] = (uint8_t)(r >= 11 ? r - 11 : r - 3);
      i += r;
      continue;
    }
    op[k] = (uint8_t)v;
    ex[k++] = 0;
    int r = run - 1;
    for (; v != 0 && r >= 3; r -= r > 6 ? 6 : r) {
      op[k] = 16;
      ex[k++] = (uint8_t)((r > 6 ? 6 : r) - 3);
    }
    for (; r > 0 && v != 0; r--) op[k] = (uint8_t)v, ex[k++] = 0;
    i += v != 0 ? run : 1;
  }
  return k;
}

struct block { /* one dynamic block's codes and header */
  struct huff lit, dist, cl;
  int hlit, hdist, hclen, nops;
  uint8_t op[LITLEN_SYMS + 30], ex[LITLEN_SYMS + 30]; /* the code-length sequence */
};

/* The order the code-length code's lengths are sent in (RFC 1951, 3.2.7). */
static const uint8_t cl_order[CL_SYMS] = {16, 17, 18, 0, 8,  7, 9,  6, 10, 5,
                                          11, 4,  12, 3, 13, 2, 14, 1, 15};

/* Makes b's codes from the symbol counts; returns the block's size in bits. */
static uint64_t plan_block(const uint32_t *freq, struct block *b) {
  static const uint8_t cl_extra[CL_SYMS] = {[16] = 2, [17] = 3, [18] = 7};
  uint32_t dfreq[30] = {1}, clfreq[CL_SYMS] = {0};
  build_code(freq, LITLEN_SYMS, 15, &b->lit);
  build_code(dfreq, 30, 15, &b->dist); /* distance 1 only: code 0, one bit */
  for (b->hlit = LITLEN_SYMS; b->lit.len[b->hlit - 1] == 0;) b->hlit--;
  b->hdist = 1;
  uint8_t lens[LITLEN_SYMS + 30];
  memcpy(lens, b->lit.len, (size_t)b->hlit);
  memcpy(lens + b->hlit, b->dist.len, (size_t)b->hdist);
  b->nops = rle_lengths(lens, b->hlit + b->hdist, b->op, b->ex);
  for (int k = 0; k < b->nops; k++) clfreq[b->op[k]]++;
  build_code(clfreq, CL_SYMS, 7, &b->cl);
  for (b->hclen = CL_SYMS; b->hclen > 4 && b->cl.len[cl_order[b->hclen - 1]] == 0;) b->hclen--;
  uint64_t bits = 3 + 14 + 3 * (uint64_t)b->hclen;
  for (int k = 0; k < b->nops; k++) bits += b->cl.len[b->op[k]] + cl_extra[b->op[k]];
  for (int s = 0; s < LITLEN_SYMS; s++) {
    int nextra = s < 265 || s == 285 ? 0 : (s - 261) / 4;
    bits += (uint64_t)freq[s] * (b->lit.len[s] + (unsigned)nextra + (s > 256 ? 1u : 0u));
  }
  return bits;
}

static void write_header(struct bitw *w, const struct block *b, int final) {
  static const uint8_t cl_extra[CL_SYMS] = {[16] = 2, [17] = 3, [18] = 7};
  put_bits(w, (unsigned) final | 2u << 1, 3); /* BFINAL, BTYPE 2: dynamic Huffman codes */
  put_bits(
      w, (unsigned)(b->hlit - 257) | (unsigned)(b->hdist - 1) << 5 | (unsigned)(b->hclen - 4) << 10,
      14);
  for (int k = 0; k < b->hclen; k++) put_bits(w, b->cl.len[cl_order[k]], 3);
  for (int k = 0; k < b->nops; k++)
    put_bits(w, b->cl.code[b->op[k]] | (uint64_t)b->ex[k] << b->cl.len[b->op[k]],
             b->cl.len[b->op[k]] + cl_extra[b->op[k]]);
}

/* A block's codes by parse_block's symbol, ready to write. A run's are its length code, extra
 * bits and distance code (code 0, one bit): 21 bits at most. Bits and lengths sit in two tables,
 * so that a code costs two loads and no unpacking. */
struct emit {
  uint32_t bits[SYMS];
  uint8_t len[SYMS];
};

static void make_emit(const struct block *b, const struct lengths *t, struct emit *x) {
  const uint8_t *len = b->lit.len;
  const uint16_t *code = b->lit.code;
  for (int v = 0; v <= 256; v++) x->bits[v] = code[v], x->len[v] = len[v];
  for (int l = MIN_RUN; l <= MAX_RUN; l++) {
    unsigned s = t->sym[l];
    x->bits[256 + l] = code[s] | (uint32_t)t->extra[l] << len[s];
    x->len[256 + l] = (uint8_t)(len[s] + t->nextra[l] + 1u);
  }
}

/* The codes of sym[0] and sym[1] joined, LSB first; their length in *n. */
static inline uint64_t two_codes(const struct emit *x, const uint16_t *sym, unsigned *n) {
  unsigned a = sym[0], b = sym[1];
  *n = (unsigned)x->len[a] + x->len[b];
  return (uint64_t)x->bits[a] | (uint64_t)x->bits[b] << x->len[a];
}

/* Adds bits of n bits to the buffer held in buf and cnt (below 8), stores 8 bytes at o and moves
 * on by the whole bytes; n + 7 must be below 64. */
#define PUT_STORE(bits, n)                                                                         \
  do {                                                                                             \
    buf |= (bits) << cnt;                                                                          \
    cnt += (n);                                                                                    \
    store_le64(o, buf);                                                                            \
    o += cnt >> 3;                                                                                 \
    buf >>= cnt & ~7u;                                                                             \
    cnt &= 7;                                                                                      \
  } while (0)

/* Writes sym[0..n) with x's codes, four codes per store of the bit buffer when they come to 56
 * bits or less (one of 15 or more bits is rare) and two per store otherwise; the codes are joined
 * in pairs before they are added, which shortens the chain of shifts through the count. */
static void write_symbols(struct bitw *w, const struct emit *x, const uint16_t *sym, size_t n) {
  uint64_t buf = w->buf;
  unsigned cnt = w->cnt, n0, n1;
  uint8_t *o = w->p;
  size_t k = 0;
  for (; k + 4 <= n; k += 4) {
    uint64_t c0 = two_codes(x, sym + k, &n0), c1 = two_codes(x, sym + k + 2, &n1);
    if (n0 + n1 <= 56) {
      PUT_STORE(c0 | c1 << n0, n0 + n1);
    } else {
      PUT_STORE(c0, n0);
      PUT_STORE(c1, n1);
    }
  }
  for (; k < n; k++) PUT_STORE((uint64_t)x->bits[sym[k]], x->len[sym[k]]);
  w->buf = buf, w->cnt = cnt, w->p = o;
}

/* Writes in[0..n) as stored blocks; the last one final when final is set. */
static void write_stored(struct bitw *w, const uint8_t *in, size_t n, int final) {
  size_t off = 0;
  do {
    size_t m = n - off > STORED_MAX ? STORED_MAX : n - off;
    put_bits(w, (unsigned)(final && off + m == n), 3); /* BTYPE 0 */
    flush_bytes(w);
    uint8_t hdr[4] = {(uint8_t)m, (uint8_t)(m >> 8), (uint8_t)~m, (uint8_t)(~m >> 8)};
    memcpy(w->p, hdr, 4);
    memcpy(w->p + 4, in + off, m);
    w->p += 4 + m;
    off += m;
  } while (off < n);
}

static size_t stored_bytes(size_t n) {
  return n + 5 * (n / STORED_MAX + 1);
}

size_t codec_deflate_rle_bound(size_t n) { /* each block no larger than stored; 8 bytes' slack */
  return 2 + stored_bytes(n) + 5 * (n / CODEC_RLE_BLOCK + 1) + 4 + 8;
}

size_t codec_deflate_rle_part_bound(size_t n) { /* the blocks, a sync flush, 8 bytes' slack */
  return stored_bytes(n) + 5 * (n / CODEC_RLE_BLOCK + 1) + 5 + 8;
}

struct codec_rle {
  struct lengths t;                   /* run lengths' symbols and extra bits */
  struct block b;                     /* the block's codes and header */
  struct emit x;                      /* the block's codes by symbol */
  struct bitw w;                      /* the output */
  uint8_t *out;                       /* where it started */
  int started;                        /* a block was written */
  uint16_t sym[CODEC_RLE_BLOCK + 16]; /* the block's symbols (parse_block) */
};

struct codec_rle *codec_rle_new(uint8_t *out) {
  struct codec_rle *c = codec_malloc(sizeof *c);
  if (c == NULL) return NULL;
  init_lengths(&c->t);
  c->w = (struct bitw){.p = out};
  c->out = out;
  c->started = 0;
  return c;
}

/* Codes in[s..e), at most CODEC_RLE_BLOCK bytes, as one block, in three passes over data the
 * cache holds: a parse into 16-bit symbols (SSE2 bit masks of where bytes repeat, 64 bytes at a
 * time, so that finding a run is a count of zeros and a stretch without runs costs a few
 * instructions), a count of the symbols (four tables), and, after length-limited Huffman codes are
 * built from the counts, the writing (four codes per store of a 64-bit bit buffer); or it writes
 * the block stored when that is smaller, so the output never exceeds codec_deflate_rle_bound. */
static void code_block(struct codec_rle *c, const uint8_t *in, size_t s, size_t e, int last) {
  uint32_t freq[LITLEN_SYMS] = {0};
  size_t nsym = parse_block(in, s, e, !c->started, c->sym);
  count_symbols(c->sym, nsym, &c->t, freq);
  uint64_t bits = plan_block(freq, &c->b);
  if ((bits + 7) / 8 < stored_bytes(e - s)) {
    make_emit(&c->b, &c->t, &c->x);
    write_header(&c->w, &c->b, last);
    write_symbols(&c->w, &c->x, c->sym, nsym);
  } else {
    write_stored(&c->w, in + s, e - s, last);
  }
  c->started = 1;
}

void codec_rle_block(struct codec_rle *c, const uint8_t *in, size_t s, size_t e, int last) {
  do {
    size_t end = e - s > CODEC_RLE_BLOCK ? s + CODEC_RLE_BLOCK : e;
    code_block(c, in, s, end, last && end == e);
    s = end;
  } while (s < e);
}

size_t codec_rle_end(struct codec_rle *c, int sync) {
  if (sync) write_stored(&c->w, c->out, 0, 0); /* an empty stored block */
  flush_bytes(&c->w);
  size_t n = (size_t)(c->w.p - c->out);
  codec_free(c);
  return n;
}

size_t codec_deflate_rle_part(const uint8_t *in, size_t s, size_t e, int last, uint8_t *out) {
  struct codec_rle *c = codec_rle_new(out);
  if (c == NULL) return 0;
  c->started = s > 0; /* in[s - 1] is the stream's byte before */
  codec_rle_block(c, in, s, e, last);
  return codec_rle_end(c, !last);
}

size_t codec_deflate_rle(const uint8_t *in, size_t n, uint8_t *out) {
  out[0] = 0x78; /* deflate, 32 KiB window */
  out[1] = 0x01; /* fastest compression, no dictionary; 0x7801 is a multiple of 31 */
  size_t z = codec_deflate_rle_part(in, 0, n, 1, out + 2);
  if (z == 0) return 0;
  codec_put_be32(out + 2 + z, libdeflate_adler32(1, in, n));
  return 2 + z + 4;
}
