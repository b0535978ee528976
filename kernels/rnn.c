/* The fused LSTM and GRU cells. Each output element depends on one (batch,
 * column) position only, except the bias gradients, which the backward
 * kernels sum over the batch in batch order inside the chunk that owns the
 * column: no result depends on the chunking or the thread count. */
#include "kernels/rnn.h"

#include <tgmath.h>

#include "kernels/nn_util.h"
#include "loom/status.h"

/* ---- the cell arithmetic ----------------------------------------------------
 * Written once for each accumulation type T by the macros below, and
 * instantiated for float and double. Values come in and go out as doubles,
 * which hold every float exactly, so the float versions compute exactly as
 * float code would; <tgmath.h> makes exp and tanh the float functions for
 * float arguments. Sums and products associate as in CUDA's kernels
 * (aten/src/ATen/native/cuda/RNN.cu), left to right. */

typedef struct lstm_in {
  double x[4], h[4], bx[4], bh[4]; /* input gates, hidden gates, biases */
  double cx;
} lstm_in;
typedef struct lstm_out {
  double hy, cy, gate[4]; /* gate: the activated i, f, g, o */
} lstm_out;

typedef struct lstm_grad_in {
  double ghy, gcy, cx, cy, gate[4];
} lstm_grad_in;
typedef struct lstm_grad_out {
  double gcx, dgate[4];
} lstm_grad_out;

typedef struct gru_in {
  double x[3], h[3], bx[3], bh[3], hx;
} gru_in;
typedef struct gru_out {
  double hy, ws[5]; /* r, z, n, hx, hn + b_hn */
} gru_out;

typedef struct gru_grad_out {
  double dx[3], dh[3], ghx; /* gradients of the input and hidden gates */
} gru_grad_out;

#define RNN_SIGMOID(T, a) ((T)1 / ((T)1 + exp(-(a))))

#define LSTM_FORWARD(T)                                                       \
  static void lstm_forward_##T(const lstm_in *in, lstm_out *out) {            \
    T g[4];                                                                   \
    for (int k = 0; k < 4; ++k) {                                             \
      const T a = (T)in->x[k] + (T)in->h[k] + (T)in->bx[k] + (T)in->bh[k];    \
      g[k] = k == 2 ? tanh(a) : RNN_SIGMOID(T, a);                            \
    }                                                                         \
    const T cy = g[1] * (T)in->cx + g[0] * g[2];                              \
    out->cy = cy;                                                             \
    out->hy = g[3] * tanh(cy);                                                \
    for (int k = 0; k < 4; ++k) out->gate[k] = g[k];                          \
  }

#define LSTM_BACKWARD(T)                                                      \
  static void lstm_backward_##T(const lstm_grad_in *in, lstm_grad_out *out) { \
    const T ig = (T)in->gate[0], fg = (T)in->gate[1], cg = (T)in->gate[2],    \
            og = (T)in->gate[3], go = (T)in->ghy;                             \
    const T tc = tanh((T)in->cy);                                             \
    const T gc = go * og * ((T)1 - tc * tc) + (T)in->gcy;                     \
    out->dgate[0] = gc * cg * ((T)1 - ig) * ig;                               \
    out->dgate[1] = gc * (T)in->cx * ((T)1 - fg) * fg;                        \
    out->dgate[2] = gc * ig * ((T)1 - cg * cg);                               \
    out->dgate[3] = go * tc * ((T)1 - og) * og;                               \
    out->gcx = gc * fg;                                                       \
  }

#define GRU_FORWARD(T)                                                        \
  static void gru_forward_##T(const gru_in *in, gru_out *out) {               \
    const T r = RNN_SIGMOID(T, (T)in->x[0] + (T)in->h[0] + (T)in->bx[0] +     \
                                   (T)in->bh[0]);                             \
    const T z = RNN_SIGMOID(T, (T)in->x[1] + (T)in->h[1] + (T)in->bx[1] +     \
                                   (T)in->bh[1]);                             \
    const T hn = (T)in->h[2] + (T)in->bh[2];                                  \
    const T n = tanh((T)in->x[2] + (T)in->bx[2] + r * hn);                    \
    out->hy = n + z * ((T)in->hx - n);                                        \
    out->ws[0] = r;                                                           \
    out->ws[1] = z;                                                           \
    out->ws[2] = n;                                                           \
    out->ws[3] = in->hx;                                                      \
    out->ws[4] = hn;                                                          \
  }

/* ws: the workspace row's r, z, n, hx, hn + b_hn. */
#define GRU_BACKWARD(T)                                                       \
  static void gru_backward_##T(double ghy, const double ws[5],                 \
                               gru_grad_out *out) {                           \
    const T go = (T)ghy, r = (T)ws[0], z = (T)ws[1], n = (T)ws[2],            \
            hx = (T)ws[3], hn = (T)ws[4];                                     \
    const T gz = go * (hx - n) * ((T)1 - z) * z;                              \
    const T gn = go * ((T)1 - z) * ((T)1 - n * n);                            \
    const T gr = gn * hn * ((T)1 - r) * r;                                    \
    out->dx[0] = out->dh[0] = gr;                                             \
    out->dx[1] = out->dh[1] = gz;                                             \
    out->dx[2] = gn;                                                          \
    out->dh[2] = gn * r;                                                      \
    out->ghx = go * z;                                                        \
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
#undef RNN_SIGMOID

/* ---- element access and argument checks ------------------------------------ */

static inline int64_t at2(const loom_tensor *t, int64_t r, int64_t c) {
  return r * t->strides[0] + c * t->strides[1];
}

static inline double get2(const loom_tensor *t, int64_t r, int64_t c) {
  return loom_nn_load(t->data, t->dtype, at2(t, r, c));
}

/* An optional rank-2 operand: absent reads as zero. */
static inline double get2_or_zero(const loom_tensor *t, int64_t r, int64_t c) {
  return t->data ? get2(t, r, c) : 0.0;
}

/* An optional bias element: absent reads as zero. */
static inline double get_bias(const loom_tensor *t, int64_t i) {
  return t->data ? loom_nn_load(t->data, t->dtype, i * t->strides[0]) : 0.0;
}

/* Stores v and returns the value as stored (rounded to t's dtype). */
static inline double put2(const loom_tensor *t, int64_t r, int64_t c, double v) {
  const int64_t off = at2(t, r, c);
  loom_nn_store(t->data, t->dtype, off, v);
  return loom_nn_load(t->data, t->dtype, off);
}

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

/* Bias gradients are summed for column blocks of this width at a time. */
#define RNN_COLUMN_BLOCK 64

/* ---- LSTM ------------------------------------------------------------------- */

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
  const int wide = t[5].dtype == LOOM_FLOAT64;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t b = i / H, j = i % H;
    lstm_in in;
    for (int k = 0; k < 4; ++k) {
      in.x[k] = get2(&t[0], b, k * H + j);
      in.h[k] = get2(&t[1], b, k * H + j);
      in.bx[k] = get_bias(&t[2], k * H + j);
      in.bh[k] = get_bias(&t[3], k * H + j);
    }
    in.cx = get2(&t[4], b, j);
    lstm_out out;
    if (wide) lstm_forward_double(&in, &out);
    else lstm_forward_float(&in, &out);
    put2(&t[5], b, j, out.hy);
    put2(&t[6], b, j, out.cy);
    for (int k = 0; k < 4; ++k) put2(&t[7], b, k * H + j, out.gate[k]);
  }
  return LOOM_OK;
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
  const loom_tensor *gbias = &t[7];
  const int wide = t[5].dtype == LOOM_FLOAT64;
  double acc[4][RNN_COLUMN_BLOCK];
  for (int64_t j0 = begin; j0 < end; j0 += RNN_COLUMN_BLOCK) {
    const int64_t j1 = end - j0 < RNN_COLUMN_BLOCK ? end : j0 + RNN_COLUMN_BLOCK;
    for (int k = 0; k < 4; ++k)
      for (int64_t j = j0; j < j1; ++j) acc[k][j - j0] = 0.0;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = j0; j < j1; ++j) {
        lstm_grad_in in = {.ghy = get2_or_zero(&t[0], b, j),
                           .gcy = get2_or_zero(&t[1], b, j),
                           .cx = get2(&t[2], b, j),
                           .cy = get2(&t[3], b, j)};
        for (int k = 0; k < 4; ++k) in.gate[k] = get2(&t[4], b, k * H + j);
        lstm_grad_out out;
        if (wide) lstm_backward_double(&in, &out);
        else lstm_backward_float(&in, &out);
        for (int k = 0; k < 4; ++k)
          acc[k][j - j0] += put2(&t[5], b, k * H + j, out.dgate[k]);
        put2(&t[6], b, j, out.gcx);
      }
    }
    if (!gbias->data) continue;
    for (int k = 0; k < 4; ++k)
      for (int64_t j = j0; j < j1; ++j)
        loom_nn_store(gbias->data, gbias->dtype, (k * H + j) * gbias->strides[0],
                      acc[k][j - j0]);
  }
  return LOOM_OK;
}

/* ---- GRU -------------------------------------------------------------------- */

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
  const int wide = t[5].dtype == LOOM_FLOAT64;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t b = i / H, j = i % H;
    gru_in in;
    for (int k = 0; k < 3; ++k) {
      in.x[k] = get2(&t[0], b, k * H + j);
      in.h[k] = get2(&t[1], b, k * H + j);
      in.bx[k] = get_bias(&t[2], k * H + j);
      in.bh[k] = get_bias(&t[3], k * H + j);
    }
    in.hx = get2(&t[4], b, j);
    gru_out out;
    if (wide) gru_forward_double(&in, &out);
    else gru_forward_float(&in, &out);
    put2(&t[5], b, j, out.hy);
    for (int k = 0; k < 5; ++k) put2(&t[6], b, k * H + j, out.ws[k]);
  }
  return LOOM_OK;
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
  /* input-gate sums in acc[0..2], hidden-gate sums in acc[3..5] */
  double acc[6][RNN_COLUMN_BLOCK];
  for (int64_t j0 = begin; j0 < end; j0 += RNN_COLUMN_BLOCK) {
    const int64_t j1 = end - j0 < RNN_COLUMN_BLOCK ? end : j0 + RNN_COLUMN_BLOCK;
    for (int k = 0; k < 6; ++k)
      for (int64_t j = j0; j < j1; ++j) acc[k][j - j0] = 0.0;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = j0; j < j1; ++j) {
        double ws[5];
        for (int k = 0; k < 5; ++k) ws[k] = get2(&t[1], b, k * H + j);
        gru_grad_out out;
        if (wide) gru_backward_double(get2(&t[0], b, j), ws, &out);
        else gru_backward_float(get2(&t[0], b, j), ws, &out);
        for (int k = 0; k < 3; ++k) {
          acc[k][j - j0] += put2(&t[2], b, k * H + j, out.dx[k]);
          acc[3 + k][j - j0] += put2(&t[3], b, k * H + j, out.dh[k]);
        }
        put2(&t[4], b, j, out.ghx);
      }
    }
    if (!bias) continue;
    for (int k = 0; k < 6; ++k) {
      const loom_tensor *g = &t[k < 3 ? 5 : 6];
      for (int64_t j = j0; j < j1; ++j)
        loom_nn_store(g->data, g->dtype, ((k % 3) * H + j) * g->strides[0],
                      acc[k][j - j0]);
    }
  }
  return LOOM_OK;
}
