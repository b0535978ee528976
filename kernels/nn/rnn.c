/* The fused LSTM and GRU cells. Each output element depends on one (batch,
 * column) position only, except the bias gradients, which the backward
 * kernels sum over the batch in batch order inside the chunk that owns the
 * column: no result depends on the chunking or the thread count.
 *
 * float32, bfloat16 and float16 go through float buffers, a stretch of a
 * row at a time, so that the loops over columns vectorize; float64 goes
 * element by element. */
/* No contraction: a result must not depend on whether the compiler fused a
 * product into a sum. No trapping math: exceptions are never observed, so
 * both sides of a choice may be computed, which lets the loops over
 * kernels/pointwise/pointwise_exp.h's functions vectorize. */
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "kernels/nn/rnn.h"

#include <math.h>

#include "kernels/nn/nn_util.h"
#include "kernels/pointwise/pointwise_exp.h"
#include "kernels/registry.h"
#include "loom/status.h"

/* ---- the cell arithmetic ----------------------------------------------------
 * Written once for each accumulation type T by the macros below and
 * instantiated for float (float32 and the 16-bit types, as CUDA's
 * accscalar_t) and double (float64). Sums and products associate as in
 * CUDA's kernels (aten/src/ATen/native/cuda/RNN.cu), left to right. In
 * float, e^x and tanh are loom's own (kernels/pointwise/pointwise_exp.h, as in its
 * sigmoid and tanh ops), in double the C library's. */

#define RNN_EXP(x) _Generic((x), float: loom_expf_arith, default: exp)(x)
#define RNN_TANH(x) _Generic((x), float: loom_tanhf_arith, default: tanh)(x)
#define RNN_SIGMOID(T, a) \
  _Generic((T)0, float: loom_sigmoidf_arith((float)(a)), default: (T)1 / ((T)1 + RNN_EXP(-(a))))

/* x, h, bx, bh: the input gates, hidden gates and their biases, i, f, g, o.
 * g receives the activated gates (the workspace). */
#define LSTM_FORWARD(T)                                                        \
  static inline void lstm_forward_##T(const T x[4], const T h[4], const T bx[4], \
                                      const T bh[4], T cx, T g[4], T *hy,      \
                                      T *cy) {                                 \
    g[0] = RNN_SIGMOID(T, x[0] + h[0] + bx[0] + bh[0]);                        \
    g[1] = RNN_SIGMOID(T, x[1] + h[1] + bx[1] + bh[1]);                        \
    g[2] = RNN_TANH(x[2] + h[2] + bx[2] + bh[2]);                              \
    g[3] = RNN_SIGMOID(T, x[3] + h[3] + bx[3] + bh[3]);                        \
    *cy = g[1] * cx + g[0] * g[2];                                             \
    *hy = g[3] * RNN_TANH(*cy);                                                \
  }

/* g: the workspace's gates i, f, g, o; dg receives their gradients. */
#define LSTM_BACKWARD(T)                                                       \
  static inline void lstm_backward_##T(T ghy, T gcy, T cx, T cy, const T g[4], \
                                       T dg[4], T *gcx) {                      \
    const T tc = RNN_TANH(cy);                                                 \
    const T gc = ghy * g[3] * ((T)1 - tc * tc) + gcy;                          \
    dg[0] = gc * g[2] * ((T)1 - g[0]) * g[0];                                  \
    dg[1] = gc * cx * ((T)1 - g[1]) * g[1];                                    \
    dg[2] = gc * g[0] * ((T)1 - g[2] * g[2]);                                  \
    dg[3] = ghy * tc * ((T)1 - g[3]) * g[3];                                   \
    *gcx = gc * g[1];                                                          \
  }

/* x, h, bx, bh: gates and biases r, z, n; ws receives r, z, n, hx and
 * hn + b_hn. */
#define GRU_FORWARD(T)                                                         \
  static inline void gru_forward_##T(const T x[3], const T h[3], const T bx[3], \
                                     const T bh[3], T hx, T ws[5], T *hy) {    \
    const T r = RNN_SIGMOID(T, x[0] + h[0] + bx[0] + bh[0]);                   \
    const T z = RNN_SIGMOID(T, x[1] + h[1] + bx[1] + bh[1]);                   \
    const T hn = h[2] + bh[2];                                                 \
    const T n = RNN_TANH(x[2] + bx[2] + r * hn);                               \
    *hy = n + z * (hx - n);                                                    \
    ws[0] = r;                                                                 \
    ws[1] = z;                                                                 \
    ws[2] = n;                                                                 \
    ws[3] = hx;                                                                \
    ws[4] = hn;                                                                \
  }

/* ws: the workspace's r, z, n, hx, hn + b_hn; dx, dh receive the gradients
 * of the input and the hidden gates. */
#define GRU_BACKWARD(T)                                                        \
  static inline void gru_backward_##T(T ghy, const T ws[5], T dx[3], T dh[3],  \
                                      T *ghx) {                                \
    const T r = ws[0], z = ws[1], n = ws[2], hx = ws[3], hn = ws[4];           \
    const T gz = ghy * (hx - n) * ((T)1 - z) * z;                              \
    const T gn = ghy * ((T)1 - z) * ((T)1 - n * n);                            \
    const T gr = gn * hn * ((T)1 - r) * r;                                     \
    dx[0] = dh[0] = gr;                                                        \
    dx[1] = dh[1] = gz;                                                        \
    dx[2] = gn;                                                                \
    dh[2] = gn * r;                                                            \
    *ghx = ghy * z;                                                            \
  }

LSTM_FORWARD(float)
LSTM_FORWARD(double)
LSTM_BACKWARD(float)
LSTM_BACKWARD(double)
GRU_FORWARD(float)
GRU_FORWARD(double)
GRU_BACKWARD(float)
GRU_BACKWARD(double)

#undef LSTM_FORWARD
#undef LSTM_BACKWARD
#undef GRU_FORWARD
#undef GRU_BACKWARD

/* ---- argument checks --------------------------------------------------------- */

/* What one tensor of a launch must look like: rank 2 [rows, cols] or rank 1
 * [rows]. */
typedef struct rnn_expect {
  const char *name;
  int32_t rank;
  int64_t rows, cols;
  int optional;
} rnn_expect;

static int check_tensor(const char *op, const loom_tensor *t, rnn_expect e) {
  if (!t->data) {
    if (e.optional) return LOOM_OK;
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: %s is missing", op, e.name);
  }
  if (!loom_nn_is_float(t->dtype))
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: %s must have a float dtype",
                      op, e.name);
  const int ok = t->rank == e.rank && t->sizes[0] == e.rows &&
                 (e.rank == 1 || t->sizes[1] == e.cols);
  if (ok) return LOOM_OK;
  if (e.rank == 1)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: %s must be [%lld]", op,
                      e.name, (long long)e.rows);
  return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: %s must be [%lld, %lld]", op,
                    e.name, (long long)e.rows, (long long)e.cols);
}

static int check_tensors(const char *op, const loom_kernel_args *args,
                         const rnn_expect *expect, uint32_t n) {
  if (args->num_tensors < n)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: expected %u tensors, got %u",
                      op, n, args->num_tensors);
  for (uint32_t i = 0; i < n; ++i) {
    const int st = check_tensor(op, &args->tensors[i], expect[i]);
    if (st) return st;
  }
  return LOOM_OK;
}

/* The batch and hidden sizes of a launch, from a [B, H] state tensor. */
static int state_sizes(const char *op, const loom_kernel_args *args, uint32_t index,
                       int64_t *b, int64_t *h) {
  *b = *h = 0;
  if (args->num_tensors <= index || args->tensors[index].rank != 2)
    return loom_error(LOOM_ERROR_INVALID_ARGUMENT, "%s: the state must be [B, H]", op);
  *b = args->tensors[index].sizes[0];
  *h = args->tensors[index].sizes[1];
  return LOOM_OK;
}

/* ---- element access ------------------------------------------------------------ */

static inline int64_t at2(const loom_tensor *t, int64_t r, int64_t c) {
  return r * t->strides[0] + c * t->strides[1];
}

/* Element (r, c) of a rank-2 tensor, or element c of a rank-1 one (r
 * ignored); an absent tensor reads as zero. */
static inline double get(const loom_tensor *t, int64_t r, int64_t c) {
  if (!t->data) return 0.0;
  const int64_t off = t->rank == 1 ? c * t->strides[0] : at2(t, r, c);
  return loom_nn_load(t->data, t->dtype, off);
}

static inline void put(const loom_tensor *t, int64_t r, int64_t c, double v) {
  const int64_t off = t->rank == 1 ? c * t->strides[0] : at2(t, r, c);
  loom_nn_store(t->data, t->dtype, off, v);
}

/* Columns of one row handled together in the float paths. */
#define RNN_BLOCK 128

/* n elements of row r from column c0 (of a rank-1 tensor: elements c0...)
 * as floats; an absent tensor gives zeros. */
static void load_span(float *dst, const loom_tensor *t, int64_t r, int64_t c0,
                      int64_t n) {
  if (!t->data) {
    for (int64_t i = 0; i < n; ++i) dst[i] = 0.0f;
    return;
  }
  const int64_t step = t->strides[t->rank - 1];
  if (step == 1 && loom_nn_is_f32_like(t->dtype)) {
    const int64_t off = t->rank == 1 ? c0 : at2(t, r, c0);
    loom_nn_load_row_f32(dst, t->data, t->dtype, off, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = (float)get(t, r, c0 + i);
}

static void store_span(const loom_tensor *t, int64_t r, int64_t c0, const float *src,
                       int64_t n) {
  const int64_t step = t->strides[t->rank - 1];
  if (step == 1 && loom_nn_is_f32_like(t->dtype)) {
    const int64_t off = t->rank == 1 ? c0 : at2(t, r, c0);
    loom_nn_store_row_f32(t->data, t->dtype, off, src, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) put(t, r, c0 + i, src[i]);
}

/* v rounded to dtype and back: the values a store of v keeps. */
static void round_span(float *v, int32_t dtype, int64_t n) {
  if (dtype == LOOM_BFLOAT16)
    for (int64_t i = 0; i < n; ++i) v[i] = loom_bf16_to_f32(loom_f32_to_bf16(v[i]));
  else if (dtype == LOOM_FLOAT16)
    for (int64_t i = 0; i < n; ++i) v[i] = loom_f16_to_f32(loom_f32_to_f16(v[i]));
}

/* Calls fn(t, H, b, j, n) over the row stretches of elements [begin, end)
 * of a [B, H] range, at most RNN_BLOCK columns each. */
typedef void (*rnn_span_fn)(const loom_tensor *t, int64_t H, int64_t b, int64_t j,
                            int64_t n);

static void for_each_span(const loom_tensor *t, int64_t H, int64_t begin, int64_t end,
                          rnn_span_fn fn) {
  for (int64_t i = begin; i < end;) {
    const int64_t b = i / H, j = i % H;
    int64_t n = H - j < end - i ? H - j : end - i;
    if (n > RNN_BLOCK) n = RNN_BLOCK;
    fn(t, H, b, j, n);
    i += n;
  }
}

/* ---- LSTM ------------------------------------------------------------------- */
/* tensors: [input_gates, hidden_gates, input_bias?, hidden_bias?, cx, hy, cy,
 * workspace] */

static void lstm_forward_span(const loom_tensor *t, int64_t H, int64_t b, int64_t j0,
                              int64_t n) {
  float x[4][RNN_BLOCK], h[4][RNN_BLOCK], bx[4][RNN_BLOCK], bh[4][RNN_BLOCK];
  float cx[RNN_BLOCK], hy[RNN_BLOCK], cy[RNN_BLOCK], ws[4][RNN_BLOCK];
  for (int k = 0; k < 4; ++k) {
    load_span(x[k], &t[0], b, k * H + j0, n);
    load_span(h[k], &t[1], b, k * H + j0, n);
    load_span(bx[k], &t[2], 0, k * H + j0, n);
    load_span(bh[k], &t[3], 0, k * H + j0, n);
  }
  load_span(cx, &t[4], b, j0, n);
  for (int64_t j = 0; j < n; ++j) {
    const float xj[4] = {x[0][j], x[1][j], x[2][j], x[3][j]};
    const float hj[4] = {h[0][j], h[1][j], h[2][j], h[3][j]};
    const float bxj[4] = {bx[0][j], bx[1][j], bx[2][j], bx[3][j]};
    const float bhj[4] = {bh[0][j], bh[1][j], bh[2][j], bh[3][j]};
    float g[4];
    lstm_forward_float(xj, hj, bxj, bhj, cx[j], g, &hy[j], &cy[j]);
    for (int k = 0; k < 4; ++k) ws[k][j] = g[k];
  }
  store_span(&t[5], b, j0, hy, n);
  store_span(&t[6], b, j0, cy, n);
  for (int k = 0; k < 4; ++k) store_span(&t[7], b, k * H + j0, ws[k], n);
}

static void lstm_forward_element(const loom_tensor *t, int64_t H, int64_t b, int64_t j) {
  double x[4], h[4], bx[4], bh[4], g[4], hy, cy;
  for (int k = 0; k < 4; ++k) {
    x[k] = get(&t[0], b, k * H + j);
    h[k] = get(&t[1], b, k * H + j);
    bx[k] = get(&t[2], 0, k * H + j);
    bh[k] = get(&t[3], 0, k * H + j);
  }
  lstm_forward_double(x, h, bx, bh, get(&t[4], b, j), g, &hy, &cy);
  put(&t[5], b, j, hy);
  put(&t[6], b, j, cy);
  for (int k = 0; k < 4; ++k) put(&t[7], b, k * H + j, g[k]);
}

int loom_lstm_cell_forward(const loom_kernel_args *args, int64_t begin,
                           int64_t end) {
  static const char *op = "lstm_cell_forward";
  int64_t B = 0, H = 0;
  int st = state_sizes(op, args, 4, &B, &H);
  if (st) return st;
  const int bias = args->tensors[2].data != NULL;
  const rnn_expect expect[8] = {
      {"input_gates", 2, B, 4 * H, 0}, {"hidden_gates", 2, B, 4 * H, 0},
      {"input_bias", 1, 4 * H, 0, !bias}, {"hidden_bias", 1, 4 * H, 0, !bias},
      {"cx", 2, B, H, 0}, {"hy", 2, B, H, 0}, {"cy", 2, B, H, 0},
      {"workspace", 2, B, 4 * H, 0}};
  st = check_tensors(op, args, expect, 8);
  if (st) return st;
  const loom_tensor *t = args->tensors;
  if (t[5].dtype != LOOM_FLOAT64) {
    for_each_span(t, H, begin, end, lstm_forward_span);
    return LOOM_OK;
  }
  for (int64_t i = begin; i < end; ++i) lstm_forward_element(t, H, i / H, i % H);
  return LOOM_OK;
}

/* tensors: [grad_hy?, grad_cy?, cx, cy, workspace, grad_gates, grad_cx,
 * grad_bias?]. Columns [j0, j0 + n) of row b; adds the gate gradients as
 * stored to acc. */
static void lstm_backward_span(const loom_tensor *t, int64_t H, int64_t b, int64_t j0,
                               int64_t n, double acc[4][RNN_BLOCK]) {
  float ghy[RNN_BLOCK], gcy[RNN_BLOCK], cx[RNN_BLOCK], cy[RNN_BLOCK], gcx[RNN_BLOCK];
  float g[4][RNN_BLOCK], dg[4][RNN_BLOCK];
  load_span(ghy, &t[0], b, j0, n);
  load_span(gcy, &t[1], b, j0, n);
  load_span(cx, &t[2], b, j0, n);
  load_span(cy, &t[3], b, j0, n);
  for (int k = 0; k < 4; ++k) load_span(g[k], &t[4], b, k * H + j0, n);
  for (int64_t j = 0; j < n; ++j) {
    const float gj[4] = {g[0][j], g[1][j], g[2][j], g[3][j]};
    float d[4];
    lstm_backward_float(ghy[j], gcy[j], cx[j], cy[j], gj, d, &gcx[j]);
    for (int k = 0; k < 4; ++k) dg[k][j] = d[k];
  }
  for (int k = 0; k < 4; ++k) {
    round_span(dg[k], t[5].dtype, n);
    store_span(&t[5], b, k * H + j0, dg[k], n);
    for (int64_t j = 0; j < n; ++j) acc[k][j] += dg[k][j];
  }
  store_span(&t[6], b, j0, gcx, n);
}

static void lstm_backward_element(const loom_tensor *t, int64_t H, int64_t b, int64_t j,
                                  double acc[4][RNN_BLOCK], int64_t a) {
  double g[4], dg[4], gcx;
  for (int k = 0; k < 4; ++k) g[k] = get(&t[4], b, k * H + j);
  lstm_backward_double(get(&t[0], b, j), get(&t[1], b, j), get(&t[2], b, j),
                       get(&t[3], b, j), g, dg, &gcx);
  for (int k = 0; k < 4; ++k) {
    put(&t[5], b, k * H + j, dg[k]);
    acc[k][a] += dg[k];
  }
  put(&t[6], b, j, gcx);
}

int loom_lstm_cell_backward(const loom_kernel_args *args, int64_t begin,
                            int64_t end) {
  static const char *op = "lstm_cell_backward";
  int64_t B = 0, H = 0;
  int st = state_sizes(op, args, 2, &B, &H);
  if (st) return st;
  const rnn_expect expect[8] = {
      {"grad_hy", 2, B, H, 1}, {"grad_cy", 2, B, H, 1}, {"cx", 2, B, H, 0},
      {"cy", 2, B, H, 0}, {"workspace", 2, B, 4 * H, 0},
      {"grad_gates", 2, B, 4 * H, 0}, {"grad_cx", 2, B, H, 0},
      {"grad_bias", 1, 4 * H, 0, 1}};
  st = check_tensors(op, args, expect, 8);
  if (st) return st;
  const loom_tensor *t = args->tensors;
  const int wide = t[5].dtype == LOOM_FLOAT64;
  double acc[4][RNN_BLOCK];
  for (int64_t j0 = begin; j0 < end; j0 += RNN_BLOCK) {
    const int64_t n = end - j0 < RNN_BLOCK ? end - j0 : RNN_BLOCK;
    for (int k = 0; k < 4; ++k)
      for (int64_t j = 0; j < n; ++j) acc[k][j] = 0.0;
    for (int64_t b = 0; b < B; ++b) {
      if (!wide) {
        lstm_backward_span(t, H, b, j0, n, acc);
        continue;
      }
      for (int64_t j = 0; j < n; ++j) lstm_backward_element(t, H, b, j0 + j, acc, j);
    }
    if (!t[7].data) continue;
    for (int k = 0; k < 4; ++k)
      for (int64_t j = 0; j < n; ++j) put(&t[7], 0, k * H + j0 + j, acc[k][j]);
  }
  return LOOM_OK;
}

/* ---- GRU -------------------------------------------------------------------- */
/* tensors: [input_gates, hidden_gates, input_bias?, hidden_bias?, hx, hy,
 * workspace] */

static void gru_forward_span(const loom_tensor *t, int64_t H, int64_t b, int64_t j0,
                             int64_t n) {
  float x[3][RNN_BLOCK], h[3][RNN_BLOCK], bx[3][RNN_BLOCK], bh[3][RNN_BLOCK];
  float hx[RNN_BLOCK], hy[RNN_BLOCK], ws[5][RNN_BLOCK];
  for (int k = 0; k < 3; ++k) {
    load_span(x[k], &t[0], b, k * H + j0, n);
    load_span(h[k], &t[1], b, k * H + j0, n);
    load_span(bx[k], &t[2], 0, k * H + j0, n);
    load_span(bh[k], &t[3], 0, k * H + j0, n);
  }
  load_span(hx, &t[4], b, j0, n);
  for (int64_t j = 0; j < n; ++j) {
    const float xj[3] = {x[0][j], x[1][j], x[2][j]};
    const float hj[3] = {h[0][j], h[1][j], h[2][j]};
    const float bxj[3] = {bx[0][j], bx[1][j], bx[2][j]};
    const float bhj[3] = {bh[0][j], bh[1][j], bh[2][j]};
    float w[5];
    gru_forward_float(xj, hj, bxj, bhj, hx[j], w, &hy[j]);
    for (int k = 0; k < 5; ++k) ws[k][j] = w[k];
  }
  store_span(&t[5], b, j0, hy, n);
  for (int k = 0; k < 5; ++k) store_span(&t[6], b, k * H + j0, ws[k], n);
}

static void gru_forward_element(const loom_tensor *t, int64_t H, int64_t b, int64_t j) {
  double x[3], h[3], bx[3], bh[3], ws[5], hy;
  for (int k = 0; k < 3; ++k) {
    x[k] = get(&t[0], b, k * H + j);
    h[k] = get(&t[1], b, k * H + j);
    bx[k] = get(&t[2], 0, k * H + j);
    bh[k] = get(&t[3], 0, k * H + j);
  }
  gru_forward_double(x, h, bx, bh, get(&t[4], b, j), ws, &hy);
  put(&t[5], b, j, hy);
  for (int k = 0; k < 5; ++k) put(&t[6], b, k * H + j, ws[k]);
}

int loom_gru_cell_forward(const loom_kernel_args *args, int64_t begin,
                          int64_t end) {
  static const char *op = "gru_cell_forward";
  int64_t B = 0, H = 0;
  int st = state_sizes(op, args, 4, &B, &H);
  if (st) return st;
  const int bias = args->tensors[2].data != NULL;
  const rnn_expect expect[7] = {
      {"input_gates", 2, B, 3 * H, 0}, {"hidden_gates", 2, B, 3 * H, 0},
      {"input_bias", 1, 3 * H, 0, !bias}, {"hidden_bias", 1, 3 * H, 0, !bias},
      {"hx", 2, B, H, 0}, {"hy", 2, B, H, 0}, {"workspace", 2, B, 5 * H, 0}};
  st = check_tensors(op, args, expect, 7);
  if (st) return st;
  const loom_tensor *t = args->tensors;
  if (t[5].dtype != LOOM_FLOAT64) {
    for_each_span(t, H, begin, end, gru_forward_span);
    return LOOM_OK;
  }
  for (int64_t i = begin; i < end; ++i) gru_forward_element(t, H, i / H, i % H);
  return LOOM_OK;
}

/* tensors: [grad_hy, workspace, grad_input_gates, grad_hidden_gates,
 * grad_hx, grad_input_bias?, grad_hidden_bias?]. acc[0..2] sum the input
 * gates' gradients, acc[3..5] the hidden gates'. */
static void gru_backward_span(const loom_tensor *t, int64_t H, int64_t b, int64_t j0,
                              int64_t n, double acc[6][RNN_BLOCK]) {
  float ghy[RNN_BLOCK], ws[5][RNN_BLOCK], d[6][RNN_BLOCK], ghx[RNN_BLOCK];
  load_span(ghy, &t[0], b, j0, n);
  for (int k = 0; k < 5; ++k) load_span(ws[k], &t[1], b, k * H + j0, n);
  for (int64_t j = 0; j < n; ++j) {
    const float w[5] = {ws[0][j], ws[1][j], ws[2][j], ws[3][j], ws[4][j]};
    float dx[3], dh[3];
    gru_backward_float(ghy[j], w, dx, dh, &ghx[j]);
    for (int k = 0; k < 3; ++k) {
      d[k][j] = dx[k];
      d[3 + k][j] = dh[k];
    }
  }
  for (int k = 0; k < 6; ++k) {
    const loom_tensor *out = &t[k < 3 ? 2 : 3];
    round_span(d[k], out->dtype, n);
    store_span(out, b, (k % 3) * H + j0, d[k], n);
    for (int64_t j = 0; j < n; ++j) acc[k][j] += d[k][j];
  }
  store_span(&t[4], b, j0, ghx, n);
}

static void gru_backward_element(const loom_tensor *t, int64_t H, int64_t b, int64_t j,
                                 double acc[6][RNN_BLOCK], int64_t a) {
  double ws[5], dx[3], dh[3], ghx;
  for (int k = 0; k < 5; ++k) ws[k] = get(&t[1], b, k * H + j);
  gru_backward_double(get(&t[0], b, j), ws, dx, dh, &ghx);
  for (int k = 0; k < 3; ++k) {
    put(&t[2], b, k * H + j, dx[k]);
    put(&t[3], b, k * H + j, dh[k]);
    acc[k][a] += dx[k];
    acc[3 + k][a] += dh[k];
  }
  put(&t[4], b, j, ghx);
}

int loom_gru_cell_backward(const loom_kernel_args *args, int64_t begin,
                           int64_t end) {
  static const char *op = "gru_cell_backward";
  int64_t B = 0, H = 0;
  int st = state_sizes(op, args, 0, &B, &H);
  if (st) return st;
  const int bias = args->num_tensors > 5 && args->tensors[5].data != NULL;
  const rnn_expect expect[7] = {
      {"grad_hy", 2, B, H, 0}, {"workspace", 2, B, 5 * H, 0},
      {"grad_input_gates", 2, B, 3 * H, 0}, {"grad_hidden_gates", 2, B, 3 * H, 0},
      {"grad_hx", 2, B, H, 0}, {"grad_input_bias", 1, 3 * H, 0, !bias},
      {"grad_hidden_bias", 1, 3 * H, 0, !bias}};
  st = check_tensors(op, args, expect, 7);
  if (st) return st;
  const loom_tensor *t = args->tensors;
  const int wide = t[2].dtype == LOOM_FLOAT64;
  double acc[6][RNN_BLOCK];
  for (int64_t j0 = begin; j0 < end; j0 += RNN_BLOCK) {
    const int64_t n = end - j0 < RNN_BLOCK ? end - j0 : RNN_BLOCK;
    for (int k = 0; k < 6; ++k)
      for (int64_t j = 0; j < n; ++j) acc[k][j] = 0.0;
    for (int64_t b = 0; b < B; ++b) {
      if (!wide) {
        gru_backward_span(t, H, b, j0, n, acc);
        continue;
      }
      for (int64_t j = 0; j < n; ++j) gru_backward_element(t, H, b, j0 + j, acc, j);
    }
    if (!bias) continue;
    for (int k = 0; k < 6; ++k)
      for (int64_t j = 0; j < n; ++j)
        put(&t[k < 3 ? 5 : 6], 0, (k % 3) * H + j0 + j, acc[k][j]);
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_rnn_kernels[] = {
    {"rnn.lstm_cell_forward", loom_lstm_cell_forward, NULL},
    {"rnn.lstm_cell_backward", loom_lstm_cell_backward, NULL},
    {"rnn.gru_cell_forward", loom_gru_cell_forward, NULL},
    {"rnn.gru_cell_backward", loom_gru_cell_backward, NULL},
    {NULL, NULL, NULL},
};
