// The whole batch-1 decode step as one persistent CUDA kernel (the `megakernel` variant).
//
// Why CUDA and not Triton: a decode step is a stream of 2.47 GB of weights (Llama-3.2-1B)
// through 132 SMs; at 4.2 TB/s each SM must keep ~32 GB/s in flight, i.e. tens of KB of
// loads outstanding. A Triton program stages its loads in registers, and one persistent
// kernel shares one register allocation across all its branches: the Triton version of
// this kernel streamed 16 GB/s per SM (docs/kernels-notes.md, "Megakernel"). Here the
// weights never touch registers on their way in: a producer warp copies them with Hopper's
// bulk-copy engine (cp.async.bulk, completing on an mbarrier) into a ring of shared-memory
// stages, NSTAGE x TILE_BYTES (192 KB by default), and the consumer warps read them from
// there.
//
// Schedule (static): one CTA per SM, CTA b of G. Every weight stage is a row-major matrix
// [N, K] cut into tiles of R consecutive rows (R * K * 2 bytes, at most TILE_BYTES: one
// contiguous bulk copy); CTA b takes tiles b, b + G, b + 2G, ... Inside a tile, each
// consumer warp owns one (row, part) of the R rows x P = CWARPS / R parts of a row: it
// keeps its part of the input vector in registers for the whole stage (the CTA stages the
// vector in shared memory once), reduces its dot product with a warp shuffle, and (P > 1)
// the row's parts are summed in a fixed order once per MAXPT tiles. No block barrier
// per tile: warps run independently, held together only by the ring (a slot is refilled
// once all warps released it). The stages of a step, in order, g = layer * 5 + s:
//   s = 0  QKV:       qkv = W_qkv RMSNorm(h), where h = h + y (the residual add of the
//                     previous down stage; layer 0: h = the embedding row)
//   s = 1  attention: (KV head, position split) tasks over the grid (no weights; the cached
//                     K/V rows come through the ring), RoPE of the group's q and of this step's
//                     k, softmax(q K^T) V in 16-position quarters over all its warps, partials
//                     merged by split 0's CTA (see attention), the K/V append
//   s = 2  O:         y = W_o attn
//   s = 3  gate/up:   act = silu(W_1 n) * (W_3 n), n = RMSNorm(h), where h = h + y
//                     (W_13 = [gate; up], 2I rows; a tile pairs gate rows with their up rows)
//   s = 4  down:      y = W_2 act
//   g = 5L head:      logits = W_head RMSNorm(h + y), argmax
// Weights do not depend on activations, so each CTA's producer knows its whole tile list
// in advance and streams it without pause, through stage and layer boundaries, limited
// only by the ring: while the consumers wait for a stage's inputs, the ring fills with the
// next stage's tiles (132 x 192 KB = 25 MB, ~6 us of DRAM time; the QKV-attention-O
// stretch of a layer waits longer than that, which is most of what separates the step
// from its DRAM time: docs/kernels-notes.md, "Where it stands").
//
// Synchronisation (FLAGS, the default: tags in the data at every boundary but gate/up ->
// down, see "Flags in the data" below; FLAGS=0, the counters everywhere, as follows): done
// counter g counts the CTAs that finished stage g; every CTA bumps
// every counter once (a CTA without work in a stage at once), so stage g is complete at G.
// A CTA with work in stage g first waits for counter g - 1 to reach G. Transitively that
// orders every write-after-read on the shared activation buffers too (e.g. the down stage
// rewrites y only after every gate/up tile is done, and the gate/up loaders were the last
// readers of the O stage's y). Release: the consumer threads' stores, a named barrier,
// then one thread's fence + atomic add; acquire: one thread's ld.acquire spin, a named
// barrier, then L2 loads (__ldcg: the SM's L1 is not coherent) of activations. All CTAs
// must be resident at once (one per SM, 216 KB of shared memory each: the host launches
// exactly one per SM and checks the occupancy), or a CTA could wait for one never started.
// The last CTA to finish the head reduces the argmax, zeroes the counters and
// advances the launch epoch for the next launch, so a step is one kernel node and nothing else.
//
// Rounding follows the fused Triton kernels (and the eager model): every matrix product
// is an fp32 sum of bf16 products rounded to bf16; RMSNorm rounds as `normed_values`;
// RoPE rounds each product as `rope_pair`; attention rounds scores and probabilities to
// bf16 as `decode_attention` and merges its splits with that kernel's combine, but its
// splits are 16 positions (fused's are 64), so probabilities round against another max.

#include <cuda_bf16.h>
#include <stdint.h>

#ifndef TILE_BYTES
#define TILE_BYTES 32768  // one bulk copy, one ring stage
#endif
#ifndef NSTAGE
#define NSTAGE 6  // ring depth
#endif
#ifndef IN_FLIGHT
#define IN_FLIGHT NSTAGE  // bulk copies a producer keeps outstanding at most (see the producer)
#endif
#ifndef CWARPS
#define CWARPS 8  // consumer warps; one more warp produces
#endif
#define NC (CWARPS * 32)
#define NTHREADS (NC + 32)
#define MAXK 8192  // widest input vector (hidden, q_heads * head_dim, intermediate)
#define XCH 8  // 16-byte chunks of its part of the input vector per lane (parts of <= 256 chunks)
#define TCH ((MAXK / 8 + NC - 1) / NC)  // 16-byte chunks of a stage's input vector per consumer thread
#define MAXD 128  // head_dim at most
#define BLOCK_S 64  // attention positions per chunk, one ring slot of K and V
#define GMAX 4  // query heads per KV head at most (plan() checks)
#define SMAX 13  // position splits of a KV head's chunks at most (attention tasks, see attn_task)
#define MB 6  // splits the merging CTA loads per batch (8: 168 registers and spills; 6: none)
#define QPC 4  // 16-position quarters of an attention chunk (each softmaxed on its own maximum)
#define HPW ((GMAX * QPC + CWARPS - 1) / CWARPS)  // attention items (query head, quarter) of a chunk per warp at most
#define NSLOT (GMAX * QPC > CWARPS ? GMAX * QPC : CWARPS)  // attention runs kept per CTA (items, or warps: see attention)
static_assert(NSLOT * MAXD * 4 <= MAXK * 2, "attention's accumulators fit in xs");
static_assert(NC % (HEAD_DIM / 2) == 0, "attention's RoPE threads x = tid + k NC share tid's cos / sin");
#define CSTRIDE 32  // done counters 128 bytes apart
#define NPTR 8  // columns of the pointer table
#define MAXPT 32  // tiles whose row parts are summed together (P > 1), see the tile loop
#ifndef TPI
#define TPI 1  // tiles a consumer warp takes per step of its loop (2: their loads and FMAs interleave)
#endif
static_assert(TPI == 1 || TPI == 2, "one or two tiles per step");
#ifndef FLAGS
#define FLAGS 0  // 1: every boundary but gate/up -> down synchronises on tags in its data, not on done counters
#endif
#ifndef HEAD_DIM
#define HEAD_DIM 64  // the model's head_dim (the host always passes it): one attention<D> in the code
#endif
static_assert(HEAD_DIM == 16 || HEAD_DIM == 32 || HEAD_DIM == 64 || HEAD_DIM == 128, "attention<D> is for these");
static_assert(MAXPT % TPI == 0, "a part batch holds whole steps");
// Per CTA and stage, with Params.trace: 0 start, 1 inputs ready, 2 end (%globaltimer ns),
// 3 SM id, 4 the previous stage seen complete (attention: q/k/v loaded and rotated), 5
// clock64 cycles thread 0 spent waiting for ring slots to land, 6 the stage's last store
// issued (before the release), 7 clock64 cycles from 1 to 6 (to convert 5 into ns).
#define TRACE_WORDS 8

typedef __nv_bfloat16 bf16;

// Columns of the per-layer pointer table; the last row holds the final norm and the head.
enum { ATTN_NORM, WQKV, K_CACHE, V_CACHE, WO, MLP_NORM, W13, W2 };
enum { FINAL_NORM, W_HEAD };

struct Params {  // mirrored by perfdoctor.engine.megakernel._Params (same order and types)
  const unsigned long long* table;  // [L + 1][NPTR] addresses
  const bf16* embed;
  const bf16* cos;  // [ctx, D / 2]
  const bf16* sin;
  const long long* token;  // [1]
  const long long* pos;    // [1]
  bf16* hbuf;    // [2][K] the residual stream, materialised by the norm stages (see stage_normed; FLAGS: words)
  bf16* y;       // [K] the O or down projection, added to the stream by the next norm stage (FLAGS: words)
  bf16* qkv;     // [(NQ + 2 NKV) D] before RoPE (FLAGS: 32-bit words, see tagged())
  bf16* attn;    // [NQ D] (FLAGS: 32-bit words)
  bf16* gu;      // [I] silu(gate) * up, down's input
  bf16* logits;  // [V]
  float* part_val;  // [G] per-CTA argmax partials
  int* part_idx;
  long long* next_token;  // [1]
  unsigned* counters;     // [(5 L + 1) * CSTRIDE], zero at launch (and after it)
  long long* trace;       // null, or [G][5 L + 1][TRACE_WORDS] (see TRACE_WORDS)
  unsigned* epoch;        // [1] launches so far, mod 65535 (the tags' step part)
  unsigned long long* apart;  // [NQ][SMAX][D + 1] attention partials lse, o as tagged words (see attention)
  int L, K, NQ, NKV, D, I, V;
  int rows[5];  // rows per tile (a divisor of CWARPS) of the QKV, O, gate/up, down and head matrices
  long long stride_head, stride_pos;  // of the K/V caches, in elements
  float eps, scale;
  int round_twice;
  int attn_split;  // cached chunks per attention split (target): S = min(smax, ceil(chunks / attn_split))
  int attn_split_after;  // S = 1 while a KV head has at most this many cached chunks (see attn_task)
};

// ---- small device helpers -----------------------------------------------------------

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// mbar_wait; with `timed` (trace, thread 0) its duration is added to *acc.
__device__ __forceinline__ void mbar_wait_timed(uint64_t* bar, unsigned parity, bool timed, long long* acc) {
  if (!timed) return mbar_wait(bar, parity);
  const long long t = clock64();
  mbar_wait(bar, parity);
  *acc += clock64() - t;
}

// Global -> shared bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned),
// completing as transaction bytes on `bar`. Weights are read once per step: evict first.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}

__device__ __forceinline__ void consumers_sync() {  // the NC consumer threads only
  asm volatile("bar.sync 1, %0;" ::"r"(NC) : "memory");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ long long now_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

__device__ __forceinline__ float bf(float x) { return __bfloat162float(__float2bfloat16(x)); }

__device__ __forceinline__ float lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

__device__ __forceinline__ unsigned pack(float a, float b) {  // two floats -> bf16x2 (a low)
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<unsigned*>(&v);
}

// Flags in the data (FLAGS): q/k/v, the attention output, the residual stream h (both
// halves of hbuf) and y (the O and down outputs) are stored as 32-bit words
// (tag << 16) | bf16 bits, each one store (single-copy atomic), and their readers spin on
// the words themselves until the tag is the one they wait for: no release fence after the
// stores, no counter round trip before the loads (a fenced release was 1.5-2.5 us and the
// poll ~1 us at every boundary, docs/kernels-notes.md). Only gate/up -> down keeps its
// counter: every down loader spinning on gate/up's I tagged products measured 90 us per
// step slower (v4.6), its 2 I outputs 13 us (v4.3). A buffer written once
// per layer (qkv, attn, each half of hbuf) carries tag(e, l) = 1 + (e L + l) % 65535 for
// launch e (mod 65535) and layer l; y, written twice per layer, 1 + (2 e L + 2 l + w) %
// 65535 (w: 0 O, 1 down). Either way a buffer's tag grows by one from each write to the
// next (the last one of a launch to the first of the next too), so a stale word never
// carries the tag a reader waits for, and 0 (the zeroed buffers) never does.
// Write-after-read: every reader of a buffer produces something that the buffer's next
// writer waits for, transitively, as with the counters. E.g. the next writer of qkv (the
// next layer's QKV) waits for down's y, which down writes after the gate/up counter, which
// every CTA reaches after its O stage, whose loader waited for every head's output, which
// each owner wrote after reading its q/k/v; the next writer of y (O) waits for every
// head's output, hence for every QKV tile, each computed after its CTA's loader read y.
__device__ __forceinline__ unsigned tag_of(const Params& p, unsigned epoch, int layer) {
  return 1u + (epoch * (unsigned)p.L + (unsigned)layer) % 65535u;
}

__device__ __forceinline__ unsigned y_tag(const Params& p, unsigned epoch, int layer, int w) {
  return 1u + (epoch * 2u * (unsigned)p.L + 2u * (unsigned)layer + (unsigned)w) % 65535u;
}

__device__ __forceinline__ unsigned tagged(unsigned tag, float y) {  // y already a bf16 value
  return tag << 16 | (__float_as_uint(y) >> 16);
}

__device__ __forceinline__ void st_volatile(unsigned* p, unsigned v) {
  asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned ld_volatile(const unsigned* p) {
  unsigned v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint4 ld_volatile4(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_volatile4(uint4* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

__device__ __forceinline__ bool tags_are(uint4 v, unsigned tag) {
  return v.x >> 16 == tag && v.y >> 16 == tag && v.z >> 16 == tag && v.w >> 16 == tag;
}

__device__ __forceinline__ uint2 values4(uint4 v) {  // the bf16 values of 4 tagged words, packed
  return make_uint2((v.x & 0xffffu) | v.y << 16, (v.z & 0xffffu) | v.w << 16);
}

// 8 tagged words w[0..1] (16-byte halves a, b, already loaded once): when all carry `tag`,
// their bf16 values as one 16-byte chunk.
__device__ __forceinline__ uint4 settle8(const uint4* w, uint4 a, uint4 b, unsigned tag) {
  while (!tags_are(a, tag)) { a = ld_volatile4(w); }
  while (!tags_are(b, tag)) { b = ld_volatile4(w + 1); }
  const uint2 x = values4(a), y = values4(b);
  return make_uint4(x.x, x.y, y.x, y.y);
}

// A 16-byte chunk of 8 bf16 stored as 8 tagged words at w[0..1].
__device__ __forceinline__ void st_tagged8(uint4* w, uint4 v, unsigned tag) {
  const unsigned t = tag << 16;
  st_volatile4(w, make_uint4(t | (v.x & 0xffffu), t | v.x >> 16, t | (v.y & 0xffffu), t | v.y >> 16));
  st_volatile4(w + 1, make_uint4(t | (v.z & 0xffffu), t | v.z >> 16, t | (v.w & 0xffffu), t | v.w >> 16));
}

// The bf16 value of word *w once its tag is `tag` (spins until then).
__device__ __forceinline__ float await_word(const unsigned* w, unsigned tag) {
  unsigned v = ld_volatile(w);
  while (v >> 16 != tag) { v = ld_volatile(w); }
  return lo(v);
}

// 64-bit tagged words (attention's fp32 partials): tag << 32 | fp32 bits, one single-copy-
// atomic 8-byte store or load each.
__device__ __forceinline__ void st_volatile64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long ld_volatile64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// The fp32 value of word *w (already loaded once as v) once its tag is `tag` (spins until then).
__device__ __forceinline__ float await64(const unsigned long long* w, unsigned long long v, unsigned tag) {
  while ((unsigned)(v >> 32) != tag) { v = ld_volatile64(w); }
  return __uint_as_float((unsigned)v);
}

// x unpacked to fp32 once per stage (not once per tile): half the conversions per tile.
struct F8 {
  float v[8];
};

__device__ __forceinline__ F8 unpack(uint4 x) {
  F8 f;
  const unsigned* u = reinterpret_cast<const unsigned*>(&x);
#pragma unroll
  for (int e = 0; e < 4; ++e) { f.v[2 * e] = lo(u[e]); f.v[2 * e + 1] = hi(u[e]); }
#pragma unroll
  for (int e = 0; e < 8; ++e) asm volatile("" : "+f"(f.v[e]));  // opaque: ptxas keeps, not recomputes, them
  return f;
}

__device__ __forceinline__ float dot8(uint4 w, const F8& x, float s) {
  s = fmaf(lo(w.x), x.v[0], s);
  s = fmaf(hi(w.x), x.v[1], s);
  s = fmaf(lo(w.y), x.v[2], s);
  s = fmaf(hi(w.y), x.v[3], s);
  s = fmaf(lo(w.z), x.v[4], s);
  s = fmaf(hi(w.z), x.v[5], s);
  s = fmaf(lo(w.w), x.v[6], s);
  s = fmaf(hi(w.w), x.v[7], s);
  return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ unsigned* counter(const Params& p, int g) { return p.counters + g * CSTRIDE; }

// ---- the stages' shapes (producer and consumers walk the same tiles) ----------------

struct WStage {
  const bf16* w;
  int n, k, r;  // rows (gate/up: products), columns, rows (gate/up: products) per tile
  long long up;  // gate/up: elements from a gate row to its up row (I K); others 0
};

// g: the stage index (not an attention stage).
__device__ __forceinline__ WStage weight_stage(const Params& p, int g) {
  const unsigned long long* row = p.table + (g / 5) * NPTR;
  WStage st;
  if (g == 5 * p.L) {
    st.w = reinterpret_cast<const bf16*>(row[W_HEAD]); st.n = p.V; st.k = p.K; st.r = p.rows[4]; st.up = 0;
    return st;
  }
  st.up = 0;
  switch (g % 5) {
    case 0: st.w = reinterpret_cast<const bf16*>(row[WQKV]); st.n = (p.NQ + 2 * p.NKV) * p.D; st.k = p.K; st.r = p.rows[0]; break;
    case 2: st.w = reinterpret_cast<const bf16*>(row[WO]); st.n = p.K; st.k = p.NQ * p.D; st.r = p.rows[1]; break;
    // A gate/up tile: R / 2 gate rows, then their up rows (two bulk copies into one slot),
    // so the tile's warps hold both halves of its R / 2 SwiGLU products.
    case 3: st.w = reinterpret_cast<const bf16*>(row[W13]); st.n = p.I; st.k = p.K; st.r = p.rows[2] / 2; st.up = (long long)p.I * p.K; break;
    default: st.w = reinterpret_cast<const bf16*>(row[W2]); st.n = p.K; st.k = p.I; st.r = p.rows[3]; break;
  }
  return st;
}

// This CTA's attention task (the same every layer of a launch: it depends on pos only).
// The n = pos / BLOCK_S + 1 chunks of cached positions (the last holds pos, this step's
// row) of each KV head are cut into S contiguous splits, split j the chunks [j n / S,
// (j + 1) n / S) (none empty: S <= n), S = 1 while n <= attn_split_after (v4.10: 16, the
// split lost below ~1,000 positions), else S = min(smax, ceil(n / attn_split)), smax =
// min(SMAX, G / NKV). With S = 1 (short context) a task is one query head over all the
// chunks, as the per-head owners of v4.7 were (the same CTAs, work and rounding: no merge,
// 32 CTAs); with S > 1 a task is the whole GQA group of a KV head over one split (each K/V
// byte through one ring once; up to 13 splits at 4 K positions, 2 merge batches). Task
// t = (kv HS + hs) S + j (HS = group head subsets of gh = 1 head when S = 1, else 1 of gh
// = group) runs on CTA floor(t G / T), T = NKV HS S <= G tasks spread over the grid, so
// CTA b has task ceil(b T / G) if that is below ceil((b + 1) T / G), else none (kv = -1).
// Computed once per launch, by the producer and the consumers alike (integer divisions:
// never per tile or per head, see v4.1). Mirrored by megakernel.attention_tasks (the CPU
// tests check the dealing).
struct AttnTask {
  int kv, h0, gh, j, S, c0, c1;  // KV head (-1: no task), its query heads [h0, h0 + gh), split, splits, chunks [c0, c1)
};

__device__ __forceinline__ AttnTask attn_task(const Params& p, int pos) {
  const int b = blockIdx.x, G = gridDim.x, n = pos / BLOCK_S + 1, group = p.NQ / p.NKV;
  const int smax = max(1, min(SMAX, G / p.NKV));
  const int S = n <= p.attn_split_after ? 1 : max(1, min(smax, (n + p.attn_split - 1) / p.attn_split));
  const int HS = S == 1 ? group : 1;  // head subsets per KV head
  const int T = p.NKV * HS * S, t = (b * T + G - 1) / G;
  AttnTask a{-1, 0, group / HS, 0, S, 0, 0};
  if (t < ((b + 1) * T + G - 1) / G) {
    a.kv = t / (HS * S);
    a.h0 = t / S % HS * a.gh;
    a.j = t % S;
    a.c0 = a.j * n / S;
    a.c1 = (a.j + 1) * n / S;
  }
  return a;
}

// ---- consumer pieces ------------------------------------------------------------------

struct Shared {
  uint64_t full[NSTAGE], empty[NSTAGE];
  float part[MAXPT][CWARPS];  // P > 1: each warp's partial dot product, per tile of a batch
  float best_val[NC];
  int best_idx[NC];
  int last;  // this CTA finished the head last
  long long wait_cycles;  // trace: thread 0's ring waits in the current stage
  // attention: the group's rotated q heads, this step's k and v rows, the items' runs
  __align__(16) float q[GMAX][MAXD];
  __align__(16) bf16 k_new[MAXD];
  __align__(16) bf16 v_new[MAXD];
  float wm[NSLOT], wl[NSLOT];
  float sred[CWARPS];
  union {
    // the stage's input vector, staged once per CTA (see stage_normed)
    __align__(16) bf16 xs[MAXK];
    // attention's items' accumulators (the attention stage does not use xs: QKV's warps
    // took their slices before QKV's closing barrier, O's loader rewrites it after
    // attention's)
    float wacc[NSLOT][MAXD];
  };
};

// This warp's part of a stage's input vector: chunks j = part * cpp + lane + 32 i of the
// k / 8 16-byte chunks, valid where bit i of `valid` is set.
struct Slice {
  int part, cpp;
  unsigned valid;
};

__device__ __forceinline__ Slice slice_of(int kc, int parts, int part) {
  const int lane = threadIdx.x % 32, cpp = (kc + parts - 1) / parts;
  unsigned valid = 0;
#pragma unroll
  for (int i = 0; i < XCH; ++i)
    if (lane + 32 * i < cpp && part * cpp + lane + 32 * i < kc) valid |= 1u << i;
  return Slice{part, cpp, valid};
}

// The residual stream, elementwise: bf16(h + y), as the eager model's `h + proj(...)`.
__device__ __forceinline__ uint4 residual(uint4 h, uint4 y) {
  const unsigned* a = reinterpret_cast<const unsigned*>(&h);
  const unsigned* c = reinterpret_cast<const unsigned*>(&y);
  uint4 o;
  unsigned* u = reinterpret_cast<unsigned*>(&o);
#pragma unroll
  for (int e = 0; e < 4; ++e) u[e] = pack(lo(a[e]) + lo(c[e]), hi(a[e]) + hi(c[e]));
  return o;
}

__device__ __forceinline__ uint4 stream_chunk(const uint4* src, const uint4* add, bool from_l2, int j) {
  const uint4 v = from_l2 ? __ldcg(src + j) : src[j];
  return add ? residual(v, __ldcg(add + j)) : v;
}

__device__ __forceinline__ float sumsq(uint4 v) {
  const unsigned* u = reinterpret_cast<const unsigned*>(&v);
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) s += lo(u[e]) * lo(u[e]) + hi(u[e]) * hi(u[e]);
  return s;
}

// The stage's input vector goes through shared memory: the CTA's consumer threads read it
// from L2 once (a 16-byte chunk or a few each), then every warp takes its slice from
// shared memory. Every warp reading it from L2 itself moved ~9 MB through L2 per stage
// boundary over the chip (v3.2), on the boundary's critical path.

// xs <- RMSNorm(h) * gain, rounded as the eager model, where the stream h = src + add
// (add: the previous residual projection's output y, or null). The residual add happens
// here rather than as a read-modify-write in the O / down stages: that takes an L2 round
// trip off their critical path. `out` (CTA 0) also stores h for the next norm stage, in
// the other half of hbuf than `src`, which nobody reads any more (each norm stage reads the
// half the previous one wrote, two stages back). gv: this thread's chunks of the gain,
// loaded before the wait for the inputs.
// FLAGS: tags.x, .y, .z are those of src, add and out (0: src is the embedding row, plain
// bf16; then add is null); src and add are tagged words, and so is out.
__device__ __forceinline__ void stage_normed(const Params& p, const void* src, const void* add, bool from_l2,
                                             const uint4 (&gv)[TCH], void* out, uint3 tags, Shared& sh) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, kc = p.K / 8;
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  const uint4* a4 = reinterpret_cast<const uint4*>(add);
  uint4* o4 = reinterpret_cast<uint4*>(out);
  uint4 v[TCH];
  float ss = 0.f;
  if (FLAGS && tags.x) {  // every load out first, then each chunk awaited
    uint4 sv[TCH][2], av[TCH][2];
#pragma unroll
    for (int c = 0; c < TCH; ++c) {
      const int j = tid + c * NC;
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        sv[c][k] = j < kc ? ld_volatile4(s4 + 2 * j + k) : make_uint4(0, 0, 0, 0);
        av[c][k] = j < kc ? ld_volatile4(a4 + 2 * j + k) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int c = 0; c < TCH; ++c) {
      const int j = tid + c * NC;
      v[c] = j < kc ? residual(settle8(s4 + 2 * j, sv[c][0], sv[c][1], tags.x), settle8(a4 + 2 * j, av[c][0], av[c][1], tags.y))
                    : make_uint4(0, 0, 0, 0);
    }
  } else {
#pragma unroll
    for (int c = 0; c < TCH; ++c) {  // every load first (the stores to `out` could alias them)
      const int j = tid + c * NC;
      v[c] = j < kc ? stream_chunk(s4, a4, from_l2, j) : make_uint4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (int c = 0; c < TCH; ++c) {
    const int j = tid + c * NC;
    if (j < kc) {
      ss += sumsq(v[c]);
      if (out) {
        if (FLAGS) st_tagged8(o4 + 2 * j, v[c], tags.z);
        else o4[j] = v[c];
      }
    }
  }
  ss = warp_sum(ss);
  if (lane == 0) sh.sred[warp] = ss;
  consumers_sync();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < CWARPS; ++w) total += sh.sred[w];
  const float inv = rsqrtf(total / p.K + p.eps);
#pragma unroll
  for (int c = 0; c < TCH; ++c) {
    const int j = tid + c * NC;
    if (j < kc) {
      unsigned* u = reinterpret_cast<unsigned*>(&v[c]);
      const unsigned* g = reinterpret_cast<const unsigned*>(&gv[c]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float a = lo(u[e]) * inv, b = hi(u[e]) * inv;
        if (p.round_twice) { a = bf(a); b = bf(b); }
        u[e] = pack(a * lo(g[e]), b * hi(g[e]));
      }
      reinterpret_cast<uint4*>(sh.xs)[j] = v[c];
    }
  }
  consumers_sync();
}

// xs <- a tagged vector of length k (FLAGS: the attention output), once every word carries
// `tag`: all loads first, then a spin on each 16-byte chunk that was not ready.
__device__ __forceinline__ void stage_tagged(const unsigned* src, int k, unsigned tag, Shared& sh) {
  constexpr int N = 2 * TCH;  // 16-byte chunks of 4 words per thread at most (k <= MAXK)
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  uint4 v[N];
#pragma unroll
  for (int c = 0; c < N; ++c) {
    const int j = threadIdx.x + c * NC;
    v[c] = j < k / 4 ? ld_volatile4(s4 + j) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int c = 0; c < N; ++c) {
    const int j = threadIdx.x + c * NC;
    if (j < k / 4) {
      while (!tags_are(v[c], tag)) { v[c] = ld_volatile4(s4 + j); }
      reinterpret_cast<uint2*>(sh.xs)[j] = values4(v[c]);
    }
  }
  consumers_sync();
}

// xs <- a bf16 vector of length k another CTA wrote in this launch.
__device__ __forceinline__ void stage_plain(const bf16* src, int k, Shared& sh) {
#pragma unroll
  for (int c = 0; c < TCH; ++c) {
    const int j = threadIdx.x + c * NC;
    if (j < k / 8) reinterpret_cast<uint4*>(sh.xs)[j] = __ldcg(reinterpret_cast<const uint4*>(src) + j);
  }
  consumers_sync();
}

// silu(gate) * up of two fp32 dot products, rounded as `norm_gate_up` (each output to
// bf16, silu, then the product). __fdividef: the IEEE division is a reciprocal, two Newton
// steps and a slow-path check; within 2 ulp of it.
__device__ __forceinline__ float swiglu(float gate, float up) {
  const float g = bf(gate);
  return bf(__fdividef(g, 1.f + __expf(-g))) * bf(up);
}

// Attention task `at` (see attn_task): query heads [at.h0, at.h0 + gh) of KV head at.kv
// (S = 1: one head; S > 1: the whole group, gh = NQ / NKV) over the cached chunks [at.c0,
// at.c1) of positions [0, pos] (see the file comment). v4.9: `attention` below runs S = 1
// with v4.7's owner code, line for line (v4.8 ran it through this function's two-item
// loop: the slot released only after the reductions, q reloaded per item, twice the
// code); this function runs S > 1 (attention calls it). The
// cached K/V rows [0, pos) arrive through the ring, one BLOCK_S-position chunk per slot (K,
// then V at byte BLOCK_S * D * 2), streamed by the producer with the weights: they do not
// depend on this step, so they are in shared memory before the QKV stage completes.
// Position pos (this step's row) comes from the QKV output. `it`: the ring position.
// c, s (attention, S = 1): this thread's RoPE cos and sin at pos, tid < D / 2 (loaded
// before the wait: they depend on pos only; attention_grouped loads them for every thread,
// index tid % (D / 2)). tr: this stage's trace words (thread 0, with a trace), else null.
//
// D is a template parameter (16, 32, 64 or 128) so that every loop below is unrolled
// without run-time guards: a guarded loop compiles to one branch per 16-byte load, and
// each load then waits for the previous one's FMAs (v3.5 spent ~8 us per layer there).
// Work split: a chunk's work is gh x QPC items (a query head h, a 16-position quarter qq).
// Each is softmaxed on its own maximum (scores and probabilities rounded to bf16, as
// fused's `decode_attention` within its split) and carried in an fp32 run (flash-decoding
// with 16-position splits). One head (S = 1, v4.7's work and rounding): quarter qq of
// chunk ch on warp (QPC ch + qq) % CWARPS (rotating: at ~150 positions, 3 chunks, every
// warp has work), a warp's run over its quarters, the warps' runs merged in warp order.
// Several heads: item i = QPC h + qq on warp i % CWARPS at every chunk (group 4: 16 items,
// 2 per warp), a run per item, a head's QPC runs merged in order, then the splits in split
// order (below).
// Layout inside an item: LP = D / 8 lanes per position, lane = LP * pp + j holds dims
// [8 j, 8 j + 8) of q and takes positions PPI * i + pp (PPI = 32 / LP per step i): its K
// and V reads are 16 bytes of one row, LP lanes a row, a warp reading PPI whole rows at
// once (no bank conflicts, unlike a row per lane at a 2 D stride).
//
// Output. S = 1: the task stores every head's normalised output (tagged words with FLAGS)
// as the per-head owners did before v4.8. S > 1: tasks j > 0 store their partials (lse =
// m + log l, o[D] = acc / l, fp32) into apart[hq][j] as 64-bit words tag << 32 | fp32 bits
// (one single-copy-atomic store each, no fence: readiness is in the data, as for the
// tagged bf16 words), and the CTA of task (kv, 0) merges: its own split (m, l, acc), then
// the others as (lse, 1, o), MB = 6 per batch (two words each per thread: every load of a batch
// out before the first spin), in split order; it stores the output O's loader waits for.
// Only the merging CTAs (NKV of them, group D threads each) spin, each on its group's
// partials (<= 25 KB at S = 13; v4.6: 132 x 256 threads spinning on 32 KB each cost
// 90 us). Deadlock-free: a split task waits for nothing of this stage (only its q/k/v
// words and its own ring), and a CTA has one task, so the mergers' waits point at CTAs
// that finish without waiting. Write-after-read on apart: the next layer's tasks write it after their q/k/v
// words, which QKV wrote after down's y, i.e. after every O loader, which waited for every
// merged output, written after the merger's reads; tags grow by one per layer and launch,
// as qkv's, so a stale partial never carries the awaited tag.
template <int D>
__device__ __forceinline__ void attention_grouped(const Params& p, int layer, int pos, Shared& sh, const unsigned char* ring,
                                                  int& it, long long* tr, unsigned tag) {
  // The task again (a few integer divisions per layer, S > 1 only): the kernel's copy of
  // its seven words kept live to here cost 8 bytes of spills.
  const AttnTask at = attn_task(p, pos);
  constexpr int half = D / 2, LP = D / 8, PPI = 32 / LP, SPLIT = BLOCK_S / QPC, NIT = SPLIT / PPI, PW = D + 1;
  static_assert(NIT >= 1, "a quarter holds at least one step of positions");
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, j = lane % LP, pp = lane / LP;
  // This thread's RoPE cos and sin at pos, pair tid % (D / 2) (the group's q heads take
  // threads x = tid + k NC); loaded here, not by the kernel, which keeps v4.7's tid < D / 2.
  const float c = __bfloat162float(p.cos[(long long)pos * half + tid % half]);
  const float s = __bfloat162float(p.sin[(long long)pos * half + tid % half]);
  const int group = p.NQ / p.NKV, kv = at.kv, gh = at.gh, hq0 = kv * group + at.h0;
  const int length = pos + 1;
  const unsigned long long* row = p.table + layer * NPTR;
  bf16* kc = reinterpret_cast<bf16*>(row[K_CACHE]) + kv * p.stride_head;
  bf16* vc = reinterpret_cast<bf16*>(row[V_CACHE]) + kv * p.stride_head;
  const unsigned* qkv_w = reinterpret_cast<const unsigned*>(p.qkv);  // FLAGS: tagged words
  const int kw = (p.NQ + kv) * D, vw = (p.NQ + p.NKV + kv) * D;
  // RoPE of the group's q heads and of this step's k, each product rounded as `rope_pair`;
  // this step's v. FLAGS: the k and v loads go out with the first q loads, before any spin.
  unsigned wk0 = 0, wk1 = 0, wv = 0;
  if (FLAGS) {
    if (tid < half) { wk0 = ld_volatile(qkv_w + kw + tid); wk1 = ld_volatile(qkv_w + kw + tid + half); }
    if (tid < D) wv = ld_volatile(qkv_w + vw + tid);
  }
  for (int x = tid; x < gh * half; x += NC) {  // x % half == tid % half: NC is a multiple of half
    const int h = x / half, i = x % half, q = (hq0 + h) * D;
    float qa, qb;
    if (FLAGS) {
      const unsigned w0 = ld_volatile(qkv_w + q + i), w1 = ld_volatile(qkv_w + q + i + half);
      qa = w0 >> 16 == tag ? lo(w0) : await_word(qkv_w + q + i, tag);
      qb = w1 >> 16 == tag ? lo(w1) : await_word(qkv_w + q + i + half, tag);
    } else {
      qa = __bfloat162float(__ldcg(p.qkv + q + i)), qb = __bfloat162float(__ldcg(p.qkv + q + i + half));
    }
    const float ra = bf(bf(qa * c) - bf(qb * s)), rb = bf(bf(qb * c) + bf(qa * s));
    sh.q[h][i] = bf(ra * p.scale);  // the eager model scales q in its dtype
    sh.q[h][i + half] = bf(rb * p.scale);
  }
  if (tid < half) {
    float ka, kb;
    if (FLAGS) {
      ka = wk0 >> 16 == tag ? lo(wk0) : await_word(qkv_w + kw + tid, tag);
      kb = wk1 >> 16 == tag ? lo(wk1) : await_word(qkv_w + kw + tid + half, tag);
    } else {
      ka = __bfloat162float(__ldcg(p.qkv + kw + tid)), kb = __bfloat162float(__ldcg(p.qkv + kw + tid + half));
    }
    sh.k_new[tid] = __float2bfloat16(bf(ka * c) - bf(kb * s));
    sh.k_new[tid + half] = __float2bfloat16(bf(kb * c) + bf(ka * s));
  }
  if (tid < D) {
    if (FLAGS) sh.v_new[tid] = __float2bfloat16(wv >> 16 == tag ? lo(wv) : await_word(qkv_w + vw + tid, tag));
    else sh.v_new[tid] = __ldcg(p.qkv + vw + tid);
  }
  consumers_sync();
  if (tr) tr[4] = now_ns();
  // Every warp waits for and releases every slot (the ring's empty barrier counts all warps).
  float run_m[HPW], run_l[HPW], run_acc[HPW][8];
#pragma unroll
  for (int k = 0; k < HPW; ++k) {
    run_m[k] = -INFINITY;
    run_l[k] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) run_acc[k][e] = 0.f;
  }
  for (int ch = at.c0; ch < at.c1; ++ch, ++it) {
    const int slot = it % NSTAGE;
    mbar_wait_timed(&sh.full[slot], (it / NSTAGE) & 1, tr != nullptr, &sh.wait_cycles);
    const bf16* ks = reinterpret_cast<const bf16*>(ring + slot * TILE_BYTES);
    const bf16* vs = ks + BLOCK_S * D;
    const int c0 = ch * BLOCK_S;  // the slot's first position
#pragma unroll
    for (int k = 0; k < HPW; ++k) {
      // One head (S = 1): quarter qq of chunk ch on warp (QPC ch + qq) % CWARPS, rotating,
      // so at ~150 positions (3 chunks) every warp has work, as in v4.7; the warp's run
      // then spans quarters of several chunks. Several heads: item i = QPC h + qq on warp
      // i % CWARPS at every chunk (a run is one (head, quarter)).
      const int item = warp + k * CWARPS;
      const int h = gh == 1 ? (k == 0 ? 0 : 1) : item / QPC;
      const int qq = gh == 1 ? (warp - QPC * ch % CWARPS + CWARPS) % CWARPS : item % QPC;
      const int s0 = c0 + qq * SPLIT;
      if (h >= gh || qq >= QPC || s0 >= length) continue;  // none, or past the last position (warp-uniform)
      float qf[8];  // this lane's 8 dims of head h's q
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[e] = sh.q[h][8 * j + e];
      // Scores of the quarter (positions past `length` masked; rows at or past pos read
      // this step's row, which is finite, so a masked product is 0, never NaN).
      float sc[NIT];
#pragma unroll
      for (int i = 0; i < NIT; ++i) {
        const int ps = s0 + PPI * i + pp;
        const bf16* kr = ps < pos ? ks + (ps - c0) * D : sh.k_new;
        const uint4 k8 = *reinterpret_cast<const uint4*>(kr + 8 * j);
        const unsigned* u = reinterpret_cast<const unsigned*>(&k8);
        float d0 = 0.f, d1 = 0.f;
        d0 = fmaf(lo(u[0]), qf[0], d0); d1 = fmaf(hi(u[0]), qf[1], d1);
        d0 = fmaf(lo(u[1]), qf[2], d0); d1 = fmaf(hi(u[1]), qf[3], d1);
        d0 = fmaf(lo(u[2]), qf[4], d0); d1 = fmaf(hi(u[2]), qf[5], d1);
        d0 = fmaf(lo(u[3]), qf[6], d0); d1 = fmaf(hi(u[3]), qf[7], d1);
        sc[i] = d0 + d1;
      }
      float m = -INFINITY;
#pragma unroll
      for (int i = 0; i < NIT; ++i) {
#pragma unroll
        for (int o = 1; o < LP; o <<= 1) sc[i] += __shfl_xor_sync(0xffffffffu, sc[i], o);  // the row's LP lanes
        const int ps = s0 + PPI * i + pp;
        sc[i] = ps < length ? bf(sc[i]) : -INFINITY;
        m = fmaxf(m, sc[i]);
      }
#pragma unroll
      for (int o = LP; o < 32; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));  // finite: s0 is live
      float l = 0.f, acc[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = 0.f;
#pragma unroll
      for (int i = 0; i < NIT; ++i) {  // P V: this lane's positions, its 8 dims
        const float e_ = __expf(sc[i] - m);
        l += e_;
        const float pi = bf(e_);
        const int ps = s0 + PPI * i + pp;
        const bf16* vr = ps < pos ? vs + (ps - c0) * D : sh.v_new;
        const uint4 v8 = *reinterpret_cast<const uint4*>(vr + 8 * j);
        const unsigned* u = reinterpret_cast<const unsigned*>(&v8);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc[2 * e] = fmaf(pi, lo(u[e]), acc[2 * e]);
          acc[2 * e + 1] = fmaf(pi, hi(u[e]), acc[2 * e + 1]);
        }
      }
#pragma unroll
      for (int o = LP; o < 32; o <<= 1) {  // sum over the quarter's position groups
        l += __shfl_xor_sync(0xffffffffu, l, o);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], o);
      }
      const float new_m = fmaxf(run_m[k], m);
      const float w = __expf(m - new_m), alpha = __expf(run_m[k] - new_m);  // alpha 0 on the first
      run_l[k] = run_l[k] * alpha + w * l;
#pragma unroll
      for (int e = 0; e < 8; ++e) run_acc[k][e] = run_acc[k][e] * alpha + w * acc[e];
      run_m[k] = new_m;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&sh.empty[slot]);  // this warp is done with the slot
  }
#pragma unroll
  for (int k = 0; k < HPW; ++k) {  // the runs, by item (one head: by warp); -inf: no live quarter
    const int slot = gh == 1 ? warp : warp + k * CWARPS;
    if (gh == 1 ? k == 0 : slot / QPC < gh) {
      if (lane == 0) { sh.wm[slot] = run_m[k]; sh.wl[slot] = run_l[k]; }
      if (pp == 0) {
#pragma unroll
        for (int e = 0; e < 8; ++e) sh.wacc[slot][8 * j + e] = run_acc[k][e];
      }
    }
  }
  consumers_sync();
  unsigned long long* part = p.apart;
  const unsigned long long t64 = (unsigned long long)tag << 32;
  const int nslot = gh == 1 ? CWARPS : QPC;  // a head's runs: every warp's (one head), or its QPC items
  for (int x = tid; x < gh * D; x += NC) {
    const int h = x / D, d = x % D, hq = hq0 + h;
    float m = -INFINITY, l = 0.f, acc = 0.f;
    for (int r = 0; r < nslot; ++r) {  // this split: the head's runs, in order (at least one is live)
      const int item = h * nslot + r;
      if (sh.wm[item] == -INFINITY) continue;
      const float new_m = fmaxf(m, sh.wm[item]);
      const float a = __expf(m - new_m), b = __expf(sh.wm[item] - new_m);
      l = l * a + b * sh.wl[item];
      acc = acc * a + b * sh.wacc[item][d];
      m = new_m;
    }
    unsigned long long* ph = part + (long long)hq * SMAX * PW;  // this head's partials, split j at j PW
    if (at.S > 1 && at.j > 0) {  // a partial for the merging CTA
      st_volatile64(ph + at.j * PW + 1 + d, t64 | __float_as_uint(acc / l));
      if (d == 0) st_volatile64(ph + at.j * PW, t64 | __float_as_uint(m + __logf(l)));
      continue;
    }
    for (int jb = 1; jb < at.S; jb += MB) {  // the merging CTA: the other splits, MB per batch, in order
      unsigned long long wl8[MB], wo8[MB];
#pragma unroll
      for (int u = 0; u < MB; ++u) {
        const int js = jb + u;
        if (js < at.S) {
          wl8[u] = ld_volatile64(ph + js * PW);
          wo8[u] = ld_volatile64(ph + js * PW + 1 + d);
        }
      }
#pragma unroll
      for (int u = 0; u < MB; ++u) {
        const int js = jb + u;
        if (js < at.S) {
          const float lse = await64(ph + js * PW, wl8[u], tag), o = await64(ph + js * PW + 1 + d, wo8[u], tag);
          const float new_m = fmaxf(m, lse);  // both finite: every split has a live quarter
          const float a = __expf(m - new_m), b = __expf(lse - new_m);
          l = l * a + b;
          acc = acc * a + b * o;
          m = new_m;
        }
      }
    }
    if (FLAGS) st_volatile(reinterpret_cast<unsigned*>(p.attn) + hq * D + d, tagged(tag, bf(acc / l)));
    else p.attn[hq * D + d] = __float2bfloat16(acc / l);
  }
  // The last split appends this step's K/V row (its chunk holds pos), last: the stores'
  // addresses need the pointer table (a global load), and first they held warps back.
  if (at.j == at.S - 1 && at.h0 == 0 && tid < D) {
    kc[(long long)pos * p.stride_pos + tid] = sh.k_new[tid];
    vc[(long long)pos * p.stride_pos + tid] = sh.v_new[tid];
  }
}

// S = 1 (up to attn_split_after chunks, and every position of the no-split row): one query
// head hq over all its chunks, v4.7's owner code (the same SASS loop: the slot released
// right after the P V loads, before the shuffle reduction). S > 1: attention_grouped.
template <int D>
__device__ void attention(const Params& p, int layer, const AttnTask& at, int pos, float c, float s, Shared& sh,
                          const unsigned char* ring, int& it, long long* tr, unsigned tag) {
  if (at.S > 1) {  // grouped tasks over position splits, and their merge
    attention_grouped<D>(p, layer, pos, sh, ring, it, tr, tag);
    return;
  }
  constexpr int half = D / 2, LP = D / 8, PPI = 32 / LP, SPLIT = BLOCK_S / QPC, NIT = SPLIT / PPI;
  static_assert(NIT >= 1, "a split holds at least one step of positions");
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, j = lane % LP, pp = lane / LP;
  const int group = p.NQ / p.NKV, kv = at.kv, hq = kv * group + at.h0;  // S = 1: one query head, all chunks
  const int length = pos + 1;
  const unsigned long long* row = p.table + layer * NPTR;
  bf16* kc = reinterpret_cast<bf16*>(row[K_CACHE]) + kv * p.stride_head;
  bf16* vc = reinterpret_cast<bf16*>(row[V_CACHE]) + kv * p.stride_head;
  const unsigned* qkv_w = reinterpret_cast<const unsigned*>(p.qkv);  // FLAGS: tagged words
  if (tid < half) {  // RoPE of q and of this step's k, each product rounded as `rope_pair`
    const int q = hq * D, k = (p.NQ + kv) * D;
    float qa, qb, ka, kb;
    if (FLAGS) {  // all four loads out before the first spin
      const unsigned w0 = ld_volatile(qkv_w + q + tid), w1 = ld_volatile(qkv_w + q + tid + half);
      const unsigned w2 = ld_volatile(qkv_w + k + tid), w3 = ld_volatile(qkv_w + k + tid + half);
      qa = w0 >> 16 == tag ? lo(w0) : await_word(qkv_w + q + tid, tag);
      qb = w1 >> 16 == tag ? lo(w1) : await_word(qkv_w + q + tid + half, tag);
      ka = w2 >> 16 == tag ? lo(w2) : await_word(qkv_w + k + tid, tag);
      kb = w3 >> 16 == tag ? lo(w3) : await_word(qkv_w + k + tid + half, tag);
    } else {
      qa = __bfloat162float(__ldcg(p.qkv + q + tid)), qb = __bfloat162float(__ldcg(p.qkv + q + tid + half));
      ka = __bfloat162float(__ldcg(p.qkv + k + tid)), kb = __bfloat162float(__ldcg(p.qkv + k + tid + half));
    }
    const float ra = bf(bf(qa * c) - bf(qb * s)), rb = bf(bf(qb * c) + bf(qa * s));
    sh.q[0][tid] = bf(ra * p.scale);  // the eager model scales q in its dtype
    sh.q[0][tid + half] = bf(rb * p.scale);
    sh.k_new[tid] = __float2bfloat16(bf(ka * c) - bf(kb * s));
    sh.k_new[tid + half] = __float2bfloat16(bf(kb * c) + bf(ka * s));
  }
  if (tid < D) {
    const int v = (p.NQ + p.NKV + kv) * D + tid;
    sh.v_new[tid] = FLAGS ? __float2bfloat16(await_word(qkv_w + v, tag)) : __ldcg(p.qkv + v);
  }
  consumers_sync();
  if (tr) tr[4] = now_ns();
  float qf[8];  // this lane's 8 dims of q
#pragma unroll
  for (int e = 0; e < 8; ++e) qf[e] = sh.q[0][8 * j + e];
  // Every warp waits for and releases every slot (the ring's empty barrier counts all warps).
  float run_m = -INFINITY, run_l = 0.f, run_acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) run_acc[e] = 0.f;
  const int nchunks = (length + BLOCK_S - 1) / BLOCK_S;
  for (int ch = 0; ch < nchunks; ++ch, ++it) {
    const int slot = it % NSTAGE;
    mbar_wait_timed(&sh.full[slot], (it / NSTAGE) & 1, tr != nullptr, &sh.wait_cycles);
    const int qq = (warp - QPC * ch % CWARPS + CWARPS) % CWARPS;  // this warp's split of the chunk
    const int s0 = ch * BLOCK_S + qq * SPLIT;
    if (qq >= QPC || s0 >= length) {  // none, or past the last position
      __syncwarp();
      if (lane == 0) mbar_arrive(&sh.empty[slot]);
      continue;
    }
    const bf16* ks = reinterpret_cast<const bf16*>(ring + slot * TILE_BYTES);
    const bf16* vs = ks + BLOCK_S * D;
    const int c0 = ch * BLOCK_S;  // the slot's first position
    // Scores of the whole chunk (positions past `length` masked; rows at or past pos read
    // this step's row, which is finite, so a masked product is 0, never NaN).
    float sc[NIT];
#pragma unroll
    for (int i = 0; i < NIT; ++i) {
      const int ps = s0 + PPI * i + pp;
      const bf16* kr = ps < pos ? ks + (ps - c0) * D : sh.k_new;
      const uint4 k8 = *reinterpret_cast<const uint4*>(kr + 8 * j);
      const unsigned* u = reinterpret_cast<const unsigned*>(&k8);
      float d0 = 0.f, d1 = 0.f;
      d0 = fmaf(lo(u[0]), qf[0], d0); d1 = fmaf(hi(u[0]), qf[1], d1);
      d0 = fmaf(lo(u[1]), qf[2], d0); d1 = fmaf(hi(u[1]), qf[3], d1);
      d0 = fmaf(lo(u[2]), qf[4], d0); d1 = fmaf(hi(u[2]), qf[5], d1);
      d0 = fmaf(lo(u[3]), qf[6], d0); d1 = fmaf(hi(u[3]), qf[7], d1);
      sc[i] = d0 + d1;
    }
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < NIT; ++i) {
#pragma unroll
      for (int o = 1; o < LP; o <<= 1) sc[i] += __shfl_xor_sync(0xffffffffu, sc[i], o);  // the row's LP lanes
      const int ps = s0 + PPI * i + pp;
      sc[i] = ps < length ? bf(sc[i]) : -INFINITY;
      m = fmaxf(m, sc[i]);
    }
#pragma unroll
    for (int o = LP; o < 32; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));  // finite: s0 is live
    float l = 0.f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
#pragma unroll
    for (int i = 0; i < NIT; ++i) {  // P V: this lane's positions, its 8 dims
      const float e_ = __expf(sc[i] - m);
      l += e_;
      const float pi = bf(e_);
      const int ps = s0 + PPI * i + pp;
      const bf16* vr = ps < pos ? vs + (ps - c0) * D : sh.v_new;
      const uint4 v8 = *reinterpret_cast<const uint4*>(vr + 8 * j);
      const unsigned* u = reinterpret_cast<const unsigned*>(&v8);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[2 * e] = fmaf(pi, lo(u[e]), acc[2 * e]);
        acc[2 * e + 1] = fmaf(pi, hi(u[e]), acc[2 * e + 1]);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&sh.empty[slot]);
#pragma unroll
    for (int o = LP; o < 32; o <<= 1) {  // sum over the chunk's position groups
      l += __shfl_xor_sync(0xffffffffu, l, o);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], o);
    }
    const float new_m = fmaxf(run_m, m);
    const float w = __expf(m - new_m), alpha = __expf(run_m - new_m);  // alpha 0 on the first
    run_l = run_l * alpha + w * l;
#pragma unroll
    for (int e = 0; e < 8; ++e) run_acc[e] = run_acc[e] * alpha + w * acc[e];
    run_m = new_m;
  }
  if (lane == 0) { sh.wm[warp] = run_m; sh.wl[warp] = run_l; }
  if (pp == 0) {
#pragma unroll
    for (int e = 0; e < 8; ++e) sh.wacc[warp][8 * j + e] = run_acc[e];
  }
  consumers_sync();
  if (tid < D) {  // merge the warps' runs in warp order (a warp without a live split: -inf)
    float m = -INFINITY, l = 0.f, acc = 0.f;
    for (int w = 0; w < CWARPS; ++w) {
      if (sh.wm[w] == -INFINITY) continue;
      const float new_m = fmaxf(m, sh.wm[w]);
      const float a = __expf(m - new_m), b = __expf(sh.wm[w] - new_m);
      l = l * a + b * sh.wl[w];
      acc = acc * a + b * sh.wacc[w][tid];
      m = new_m;
    }
    if (FLAGS) st_volatile(reinterpret_cast<unsigned*>(p.attn) + hq * D + tid, tagged(tag, bf(acc / l)));
    else p.attn[hq * D + tid] = __float2bfloat16(acc / l);
    // One head of the group appends this step's K/V row, last: the stores' addresses need
    // the pointer table (a global load), and before the chunks they held warps 0-1 back.
    if (hq % group == 0) {
      kc[(long long)pos * p.stride_pos + tid] = sh.k_new[tid];
      vc[(long long)pos * p.stride_pos + tid] = sh.v_new[tid];
    }
  }
}

// ---- the producer's tile sequence --------------------------------------------------

// One ring slot's worth: up to two contiguous ranges (a weight tile: one; a K/V chunk: K
// at slot offset 0 and V at BLOCK_S * D * 2; 0 bytes where a chunk holds only pos).
struct Tile {
  const void* src[2];
  unsigned bytes[2], offset[2];
};

// Position in this CTA's sequence of tiles for the step: weight stage g's tiles b, b + G,
// ...; attention stages: its task's chunks. The consumers walk the same sequence.
struct TileSeq {
  int g, t, c;  // zero-initialised: before the first tile
  bool started;
};

__device__ bool next_tile(const Params& p, int pos, const AttnTask& at, TileSeq& q, Tile& out) {
  const int b = blockIdx.x, G = gridDim.x, nstages = 5 * p.L + 1;
  while (q.g < nstages) {
    if (q.g % 5 == 1 && q.g < 5 * p.L) {  // attention: its task's chunks of cached K/V rows [0, pos)
      if (!q.started) { q.started = true; q.c = at.c0 - 1; }
      if (at.kv >= 0 && q.c + 1 < at.c1) {
        ++q.c;
        const unsigned long long* row = p.table + (q.g / 5) * NPTR;
        const long long off = at.kv * p.stride_head + (long long)q.c * BLOCK_S * p.stride_pos;
        const unsigned bytes = (unsigned)(min(BLOCK_S, pos - q.c * BLOCK_S) * p.D * 2);  // 0: only pos
        out = Tile{{reinterpret_cast<const bf16*>(row[K_CACHE]) + off, reinterpret_cast<const bf16*>(row[V_CACHE]) + off},
                   {bytes, bytes}, {0u, (unsigned)(BLOCK_S * p.D * 2)}};
        return true;
      }
    } else {
      const WStage st = weight_stage(p, q.g);
      q.t = q.started ? q.t + G : b;
      q.started = true;
      if (q.t * st.r < st.n) {
        const bf16* src = st.w + (long long)q.t * st.r * st.k;
        const unsigned bytes = (unsigned)(min(st.r, st.n - q.t * st.r) * st.k * 2);
        out = st.up ? Tile{{src, src + st.up}, {bytes, bytes}, {0u, (unsigned)(st.r * st.k * 2)}}
                    : Tile{{src, nullptr}, {bytes, 0u}, {0u, 0u}};
        return true;
      }
    }
    ++q.g;
    q.started = false;
  }
  return false;
}

// ---- the kernel -----------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(NTHREADS, 1) megakernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ Shared sh;
  const int tid = threadIdx.x, b = blockIdx.x, G = gridDim.x, nstages = 5 * p.L + 1;
  if (tid == 0) {
    for (int s = 0; s < NSTAGE; ++s) {
      mbar_init(&sh.full[s], 1);
      mbar_init(&sh.empty[s], CWARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (tid >= NC) {  // ---- the producer warp: stream this CTA's tiles, in order
    if (tid == NC) {
      uint64_t policy;
      asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
      const int pos = (int)*p.pos;
      // (Warming L2 ahead of the ring, always or only while the ring was full, measured
      // slower at every depth: docs/kernels-notes.md, v3.3 and run 14.)
      TileSeq copy{};
      Tile tile;
      const AttnTask at = attn_task(p, pos);
      for (int it = 0; next_tile(p, pos, at, copy, tile); ++it) {
        const int slot = it % NSTAGE;
        if (it >= NSTAGE) mbar_wait(&sh.empty[slot], ((it / NSTAGE) - 1) & 1);
        // Throttle: the copy IN_FLIGHT tiles back must have landed. Bytes queued in the
        // memory system beyond what keeps DRAM busy only add latency (Little's law: 132 x
        // 192 KB outstanding at 4.2 TB/s is ~6 us per request), and every stage boundary
        // is a chain of dependent round trips that waits in the same queues.
        if (IN_FLIGHT < NSTAGE && it >= IN_FLIGHT)
          mbar_wait(&sh.full[(it - IN_FLIGHT) % NSTAGE], ((it - IN_FLIGHT) / NSTAGE) & 1);
        mbar_expect_tx(&sh.full[slot], tile.bytes[0] + tile.bytes[1]);
        unsigned char* dst = ring + slot * TILE_BYTES;
        for (int k = 0; k < 2; ++k)
          if (tile.bytes[k]) bulk_copy(dst + tile.offset[k], tile.src[k], tile.bytes[k], &sh.full[slot], policy);
      }
    }
    return;
  }

  // ---- the consumer warps
  const int warp = tid / 32, lane = tid % 32;
  long long* trace = p.trace ? p.trace + (long long)b * nstages * TRACE_WORDS : nullptr;
  const int pos = (int)*p.pos;
  const AttnTask at = attn_task(p, pos);
  // The tags' launch part (attention's partials use it with counters too); the last CTA
  // advances it at the end, when every CTA has read it.
  const unsigned epoch = *p.epoch;
  F8 xf[XCH];
  float best_val = -INFINITY;
  int best_idx = 0x7fffffff, it = 0;
  for (int g = 0; g < nstages; ++g) {
    const int layer = g / 5, s = g % 5;
    const bool head = g == 5 * p.L, attn_stage = s == 1 && !head;
    long long* tr = trace && tid == 0 ? trace + g * TRACE_WORDS : nullptr;  // thread 0 stamps
    long long t_ready = 0;
    if (tr) { tr[0] = now_ns(); sh.wait_cycles = 0; }
    const WStage st = attn_stage ? WStage{} : weight_stage(p, g);
    const int ntiles = attn_stage ? 0 : (st.n + st.r - 1) / st.r;
    const bool work = attn_stage ? at.kv >= 0 : b < ntiles;
    if (work) {
      // Before the wait: what does not depend on the previous stage (this warp's share of
      // the tiles, its slice of the norm's gain).
      // Rows of a tile in the ring: R, or (gate/up) R gate rows then their R up rows.
      const int kc = attn_stage ? 0 : st.k / 8, parts = attn_stage ? 1 : CWARPS / (st.up ? 2 * st.r : st.r);
      const int my_row = warp / parts, my_out = my_row < st.r ? my_row : my_row - st.r;  // (gate/up: its product)
      const Slice sl = slice_of(kc, parts, warp % parts);
      const unsigned long long* row = p.table + layer * NPTR;
      const bool norm = !attn_stage && (s == 0 || s == 3 || head);
      uint4 gv[TCH];
#pragma unroll
      for (int c = 0; c < TCH; ++c) {
        const int j = tid + c * NC;
        gv[c] = norm && j < kc ? reinterpret_cast<const uint4*>(row[head ? FINAL_NORM : s == 0 ? ATTN_NORM : MLP_NORM])[j]
                               : make_uint4(0, 0, 0, 0);
      }
      float rc = 0.f, rs = 0.f;  // attention, S = 1: this thread's RoPE cos / sin at pos (attention_grouped loads its own)
      if (attn_stage && tid < p.D / 2) {
        rc = __bfloat162float(p.cos[(long long)pos * (p.D / 2) + tid]);
        rs = __bfloat162float(p.sin[(long long)pos * (p.D / 2) + tid]);
      }
      const unsigned tag = tag_of(p, epoch, layer);
      // FLAGS: the stages whose inputs are tagged wait on the data (all but down: gate/up's
      // counter); attention for its q/k/v words, O's loader for the attention output's, the
      // norm loaders for h's and y's.
      if (g > 0 && !(FLAGS && s != 4)) {  // wait for the previous stage, everywhere
        if (tid == 0)
          while (ld_acquire(counter(p, g - 1)) < (unsigned)G) {
          }  // (a nanosleep between polls measured no different, run 14)
        consumers_sync();
      }
      if (tr) tr[4] = now_ns();
      if (attn_stage) {
        if (tr) { tr[1] = now_ns(); t_ready = clock64(); }
        attention<HEAD_DIM>(p, layer, at, pos, rc, rs, sh, ring, it, tr, tag);  // p.D == HEAD_DIM (the host's)
      } else {
        // The residual stream h alternates between the halves of hbuf: the QKV stages read
        // half 1 (layer 0: the embedding row) and write half 0, gate/up reads 0 writes 1.
        // (FLAGS: 32-bit words, so the second half starts 4 K bytes in.)
        unsigned char* h0 = reinterpret_cast<unsigned char*>(p.hbuf);
        unsigned char* h1 = h0 + (long long)p.K * (FLAGS ? 4 : 2);
        const bool writer = b == 0;  // CTA 0 always has tile 0
        if (norm) {  // one call site: one copy of the loader in the code, not one per stage
          const bool embed = s == 0 && layer == 0;
          const void* src = embed ? static_cast<const void*>(p.embed + *p.token * p.K) : s == 3 ? h0 : h1;
          void* out = head || !writer ? nullptr : s == 3 ? h1 : h0;
          // FLAGS: QKV and the head read the previous layer's h (gate/up wrote it) and down's
          // y; gate/up reads this layer's h (QKV wrote it) and O's y; both write this layer's.
          const uint3 tags = embed ? make_uint3(0u, 0u, tag)
                             : s == 3 ? make_uint3(tag, y_tag(p, epoch, layer, 0), tag)
                                      : make_uint3(tag_of(p, epoch, layer - 1), y_tag(p, epoch, layer - 1, 1), tag);
          stage_normed(p, src, embed ? nullptr : p.y, !embed, gv, out, tags, sh);
        } else if (s == 2 && FLAGS) stage_tagged(reinterpret_cast<const unsigned*>(p.attn), p.NQ * p.D, tag, sh);
        else stage_plain(s == 2 ? p.attn : p.gu, s == 2 ? p.NQ * p.D : p.I, sh);  // down: gate/up's SwiGLU products
#pragma unroll
        for (int i = 0; i < XCH; ++i)  // this warp's slice, unpacked to fp32 for the whole stage
          xf[i] = unpack(sl.valid >> i & 1 ? reinterpret_cast<const uint4*>(sh.xs)[sl.part * sl.cpp + lane + 32 * i]
                                           : make_uint4(0, 0, 0, 0));
        if (tr) { tr[1] = now_ns(); t_ready = clock64(); }
        // Row r's value y (rounded to bf16) goes to the stage's output.
        // (O, down: y, which the next norm stage adds to h.)
        bf16* const out = head ? p.logits : s == 0 ? p.qkv : s == 3 ? p.gu : p.y;
        // FLAGS: q/k/v and y are tagged words (O and down's y tagged apart: y is written twice a layer).
        unsigned* const out_w = reinterpret_cast<unsigned*>(out);
        const unsigned out_tag = s == 0 ? tag : y_tag(p, epoch, layer, s == 4);  // qkv: once a layer
        const bool tagged_out = FLAGS && !head && s != 3;
        auto emit = [&](int r, float v) {
          const float y = bf(v);
          if (tagged_out) st_volatile(out_w + r, tagged(out_tag, y));
          else out[r] = __float2bfloat16(y);
          if (head && y > best_val) { best_val = y; best_idx = r; }  // a thread's rows grow: ties keep the first
        };
        // TPI tiles per step: at 2 warps per scheduler one tile's chain (loads, 64 FMAs, a
        // 5-step shuffle) left the schedulers mostly idle (~0.66 us per tile in v3.7/3.8);
        // two tiles' chains interleave. `tb`: this CTA's tiles so far in the stage.
        for (int t = b, tb = 0; t < ntiles; t += TPI * G, tb += TPI) {
          // This step's tiles (the ring holds only these): TPI, or 1 for a last odd one. (Not
          // min(TPI, ceil((ntiles - t) / G)): an integer division by the run-time G per
          // tile, a ~25-instruction dependent chain in the loop's path, ncu run 18.)
          const int nk = TPI == 1 || t + G >= ntiles ? 1 : TPI;
          bool live[TPI];
          const uint4* w[TPI];
#pragma unroll
          for (int k = 0; k < TPI; ++k) {
            const int tk = t + k * G, slot = (it + k) % NSTAGE;
            live[k] = tk < ntiles && my_out < min(st.r, st.n - tk * st.r);  // the last tile may be short
            if (tk < ntiles) mbar_wait_timed(&sh.full[slot], ((it + k) / NSTAGE) & 1, tr != nullptr, &sh.wait_cycles);
            w[k] = reinterpret_cast<const uint4*>(ring + slot * TILE_BYTES) + my_row * kc + sl.part * sl.cpp + lane;
          }
          // All loads first (predicated, not branched: a branch per load made each wait for
          // the previous one's FMAs, ~0.85 us per tile in v3.5), then four FMA chains per
          // tile. A chunk outside the slice, or of a dead row, is zero: it adds +0.
          uint4 wv[TPI][XCH];
#pragma unroll
          for (int k = 0; k < TPI; ++k)
#pragma unroll
            for (int i = 0; i < XCH; ++i)
              wv[k][i] = live[k] && (sl.valid >> i & 1) ? w[k][32 * i] : make_uint4(0, 0, 0, 0);
          float v[TPI];
#pragma unroll
          for (int k = 0; k < TPI; ++k) {
            float a[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int i = 0; i < XCH; ++i) a[i % 4] = dot8(wv[k][i], xf[i], a[i % 4]);
            v[k] = (a[0] + a[1]) + (a[2] + a[3]);
          }
#pragma unroll
          for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int k = 0; k < TPI; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
          __syncwarp();
#pragma unroll
          for (int k = 0; k < TPI; ++k) {
            const int tk = t + k * G;
            if (tk >= ntiles) break;
            if (lane == 0) {
              mbar_arrive(&sh.empty[(it + k) % NSTAGE]);  // this warp is done with the slot
              if (live[k]) {
                if (parts == 1 && !st.up) emit(tk * st.r + my_row, v[k]);
                else sh.part[(tb + k) % MAXPT][warp] = v[k];
              }
            }
          }
          const int last = tb + nk - 1;  // this step's last tile
          // P > 1: a row's parts are summed, in part order, once per MAXPT tiles and at the
          // stage's end, after a block barrier. (v3.5 had the last of a row's warps sum
          // them at every tile behind a shared-memory fence, which also waited for that
          // warp's global stores: down took 1.24 us per tile against gate/up's 0.85.)
          // Gate/up pairs each gate row's sum with its up row's the same way (a CTA's ~16
          // tiles of a Llama-3.2-1B layer in one batch at its end, before its release: down
          // waits for every product anyway).
          if ((parts > 1 || st.up) && (last % MAXPT == MAXPT - 1 || t + TPI * G >= ntiles)) {
            consumers_sync();
            const int nb = last % MAXPT + 1, t0 = b + (last - nb + 1) * G;
            for (int x = tid; x < nb * st.r; x += NC) {
              const int bt = x / st.r, rr = x % st.r, r = (t0 + bt * G) * st.r + rr;
              if (r < st.n) {
                float sum = 0.f;
                for (int q = 0; q < parts; ++q) sum += sh.part[bt][rr * parts + q];
                if (st.up) {
                  float up = 0.f;
                  for (int q = 0; q < parts; ++q) up += sh.part[bt][(rr + st.r) * parts + q];
                  sum = swiglu(sum, up);
                }
                emit(r, sum);
              }
            }
            consumers_sync();  // sh.part is reused by the next batch
          }
          it += nk;
        }
      }
    }
    if (tr && work) { tr[6] = now_ns(); tr[5] = sh.wait_cycles; tr[7] = clock64() - t_ready; }
    // Signal: this CTA's part of stage g is done (stores first). The barrier stays with
    // FLAGS too (the next stage's loader rewrites sh.xs, which a slower warp may still be
    // reading), but only down waits for a counter (gate/up's): no release elsewhere.
    if (!head) {
      consumers_sync();
      if (tid == 0 && !(FLAGS && s != 3))
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter(p, g)) : "memory");
    }
    if (tr) { tr[2] = now_ns(); tr[3] = smid(); }
  }

  // ---- the argmax: this CTA's first best logit, then the last CTA reduces all of them
  sh.best_val[tid] = best_val;
  sh.best_idx[tid] = best_idx;
  consumers_sync();
  if (tid == 0) {
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int t = 0; t < NC; ++t)
      if (sh.best_val[t] > v || (sh.best_val[t] == v && sh.best_idx[t] < i)) { v = sh.best_val[t]; i = sh.best_idx[t]; }
    p.part_val[b] = v;
    p.part_idx[b] = i;
    __threadfence();
    sh.last = atomicAdd(counter(p, 5 * p.L), 1u) == (unsigned)G - 1;
    __threadfence();
  }
  consumers_sync();
  if (sh.last && warp == 0) {
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int c = lane; c < G; c += 32) {
      const float cv = __ldcg(p.part_val + c);
      const int ci = __ldcg(p.part_idx + c);
      if (cv > v || (cv == v && ci < i)) { v = cv; i = ci; }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, i, o);
      if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
    }
    if (lane == 0) {
      *p.next_token = i;
      *p.epoch = (epoch + 1) % 65535u;
    }
    for (int c = lane; c < nstages; c += 32) p.counters[c * CSTRIDE] = 0;  // every CTA is past its waits
  }
}
