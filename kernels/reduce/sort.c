/* Sorting slices: keys are loaded with their positions into (key, index)
 * pairs, ordered, and the first k (or one picked element) written out. The
 * stable sort is a bottom-up merge sort between two buffers. The other
 * orders are the steps of the CPU backend's own algorithms (its C++
 * library's introsort, partial sort and introselect, and its quickselect),
 * taken one by one, so that equal keys end up where the CPU puts them. */
#include "kernels/reduce/sort.h"

#include <string.h>

#include "kernels/nn/nn_util.h"
#include "kernels/registry.h"
#include "loom/status.h"

typedef struct sort_item {
  union {
    double f;
    int64_t i;
  } key;
  int64_t index;
} sort_item;

/* Whether a goes strictly before b (so ties keep their order). */
static inline int sort_before(const sort_item *a, const sort_item *b, int is_float,
                              int descending) {
  if (is_float) {
    const double x = a->key.f, y = b->key.f;
    const int xn = x != x, yn = y != y;
    if (descending) return (xn && !yn) || x > y;
    return (yn && !xn) || x < y;
  }
  return descending ? a->key.i > b->key.i : a->key.i < b->key.i;
}

/* Integer keys from 256 items on: a stable LSD radix sort on the keys'
 * bits (the sign bit flipped, so that unsigned order is the keys' order;
 * all bits flipped for descending), 8 bits a pass, a pass skipped where
 * every key has the same digit. Stable, so the same order as the merge
 * sort below: by key, ties in their first order. */
static sort_item *sort_radix(sort_item *v, sort_item *tmp, int64_t n, int descending) {
  const uint64_t flip = descending ? ~(uint64_t)0 >> 1 : (uint64_t)1 << 63;
  for (int shift = 0; shift < 64; shift += 8) {
    int64_t count[256] = {0};
    for (int64_t i = 0; i < n; ++i) ++count[(((uint64_t)v[i].key.i ^ flip) >> shift) & 255u];
    if (count[(((uint64_t)v[0].key.i ^ flip) >> shift) & 255u] == n) continue;
    int64_t at = 0;
    for (int d = 0; d < 256; ++d) {
      const int64_t c = count[d];
      count[d] = at;
      at += c;
    }
    for (int64_t i = 0; i < n; ++i) tmp[count[(((uint64_t)v[i].key.i ^ flip) >> shift) & 255u]++] = v[i];
    sort_item *t = v;
    v = tmp;
    tmp = t;
  }
  return v;
}

/* Sorts v[0..n) stably using tmp[0..n); returns the buffer holding the
 * result. */
static sort_item *sort_items(sort_item *v, sort_item *tmp, int64_t n, int is_float,
                             int descending) {
  if (!is_float && n >= 256) return sort_radix(v, tmp, n, descending);
  enum { RUN = 16 };
  for (int64_t s = 0; s < n; s += RUN) { /* insertion sort of short runs */
    const int64_t e = s + RUN < n ? s + RUN : n;
    for (int64_t i = s + 1; i < e; ++i) {
      const sort_item x = v[i];
      int64_t j = i;
      for (; j > s && sort_before(&x, &v[j - 1], is_float, descending); --j) v[j] = v[j - 1];
      v[j] = x;
    }
  }
  for (int64_t width = RUN; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      const int64_t mid = lo + width < n ? lo + width : n;
      const int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
      int64_t i = lo, j = mid, o = lo;
      while (i < mid && j < hi)
        tmp[o++] = sort_before(&v[j], &v[i], is_float, descending) ? v[j++] : v[i++];
      while (i < mid) tmp[o++] = v[i++];
      while (j < hi) tmp[o++] = v[j++];
    }
    sort_item *t = v;
    v = tmp;
    tmp = t;
  }
  return v;
}

/* ---- the C++ library's unstable algorithms -------------------------------
 * Each comparison is sort_before(); the element moves are those of the
 * library's introsort (std::sort), heap-based partial sort
 * (std::partial_sort) and introselect (std::nth_element). */

/* The comparisons the CPU's algorithms are run with. */
typedef enum sc_order {
  SC_KEYS,      /* sort_before: NaN greatest, optionally descending */
  SC_PLAIN,     /* a < b (mode): NaN compares equal to everything */
  SC_MEDIAN,    /* by key, then by index (median) */
  SC_NANMEDIAN, /* as SC_MEDIAN with NaN greatest (nanmedian) */
} sc_order;

typedef struct sort_cmp {
  int is_float, descending;
  sc_order order;
} sort_cmp;

static inline int sc_less(const sort_cmp *c, const sort_item *a, const sort_item *b) {
  if (c->order == SC_KEYS) return sort_before(a, b, c->is_float, c->descending);
  if (!c->is_float) {
    if (c->order == SC_PLAIN) return a->key.i < b->key.i;
    return a->key.i < b->key.i || (a->key.i == b->key.i && a->index < b->index);
  }
  const double x = a->key.f, y = b->key.f;
  if (c->order == SC_PLAIN) return x < y;
  return x < y || (x == y && a->index < b->index) ||
         (c->order == SC_NANMEDIAN && y != y && x == x);
}

static inline void sc_swap(sort_item *a, sort_item *b) {
  const sort_item t = *a;
  *a = *b;
  *b = t;
}

static int64_t sc_lg(int64_t n) { return 63 - __builtin_clzll((unsigned long long)n); }

static void sc_push_heap(const sort_cmp *c, sort_item *v, int64_t hole, int64_t top,
                         sort_item value) {
  int64_t parent = (hole - 1) / 2;
  while (hole > top && sc_less(c, &v[parent], &value)) {
    v[hole] = v[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  v[hole] = value;
}

static void sc_adjust_heap(const sort_cmp *c, sort_item *v, int64_t hole, int64_t len,
                           sort_item value) {
  const int64_t top = hole;
  int64_t child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (sc_less(c, &v[child], &v[child - 1])) child--;
    v[hole] = v[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    v[hole] = v[child - 1];
    hole = child - 1;
  }
  sc_push_heap(c, v, hole, top, value);
}

static void sc_make_heap(const sort_cmp *c, sort_item *v, int64_t len) {
  if (len < 2) return;
  for (int64_t parent = (len - 2) / 2;; --parent) {
    sc_adjust_heap(c, v, parent, len, v[parent]);
    if (parent == 0) return;
  }
}

/* Moves v[0] to v[result] and sifts the old v[result] into the heap
 * v[0..len). */
static void sc_pop_heap(const sort_cmp *c, sort_item *v, int64_t len, int64_t result) {
  const sort_item value = v[result];
  v[result] = v[0];
  sc_adjust_heap(c, v, 0, len, value);
}

static void sc_heap_select(const sort_cmp *c, sort_item *v, int64_t middle, int64_t n) {
  sc_make_heap(c, v, middle);
  for (int64_t i = middle; i < n; ++i)
    if (sc_less(c, &v[i], &v[0])) sc_pop_heap(c, v, middle, i);
}

static void sc_sort_heap(const sort_cmp *c, sort_item *v, int64_t len) {
  while (len > 1) {
    --len;
    sc_pop_heap(c, v, len, len);
  }
}

/* std::partial_sort(v, v + middle, v + n). */
static void sc_partial_sort(const sort_cmp *c, sort_item *v, int64_t middle, int64_t n) {
  sc_heap_select(c, v, middle, n);
  sc_sort_heap(c, v, middle);
}

static void sc_linear_insert(const sort_cmp *c, sort_item *v, int64_t last) {
  const sort_item value = v[last];
  int64_t next = last - 1;
  while (sc_less(c, &value, &v[next])) {
    v[last] = v[next];
    last = next--;
  }
  v[last] = value;
}

static void sc_insertion_sort(const sort_cmp *c, sort_item *v, int64_t n) {
  for (int64_t i = 1; i < n; ++i) {
    if (sc_less(c, &v[i], &v[0])) {
      const sort_item value = v[i];
      memmove(v + 1, v, (size_t)i * sizeof *v);
      v[0] = value;
    } else {
      sc_linear_insert(c, v, i);
    }
  }
}

static void sc_move_median_to_first(const sort_cmp *c, sort_item *r, sort_item *a,
                                    sort_item *b, sort_item *d) {
  if (sc_less(c, a, b)) {
    if (sc_less(c, b, d)) sc_swap(r, b);
    else if (sc_less(c, a, d)) sc_swap(r, d);
    else sc_swap(r, a);
  } else if (sc_less(c, a, d)) {
    sc_swap(r, a);
  } else if (sc_less(c, b, d)) {
    sc_swap(r, d);
  } else {
    sc_swap(r, b);
  }
}

/* Partitions v[0..n) around a median-of-three pivot moved to v[0]; returns
 * the cut. */
static int64_t sc_partition_pivot(const sort_cmp *c, sort_item *v, int64_t n) {
  sc_move_median_to_first(c, v, v + 1, v + n / 2, v + n - 1);
  int64_t first = 1, last = n;
  for (;;) {
    while (sc_less(c, &v[first], &v[0])) ++first;
    --last;
    while (sc_less(c, &v[0], &v[last])) --last;
    if (!(first < last)) return first;
    sc_swap(&v[first], &v[last]);
    ++first;
  }
}

enum { SC_THRESHOLD = 16 };

static void sc_introsort_loop(const sort_cmp *c, sort_item *v, int64_t n, int64_t depth) {
  while (n > SC_THRESHOLD) {
    if (depth == 0) {
      sc_partial_sort(c, v, n, n);
      return;
    }
    --depth;
    const int64_t cut = sc_partition_pivot(c, v, n);
    sc_introsort_loop(c, v + cut, n - cut, depth);
    n = cut;
  }
}

/* std::sort(v, v + n). */
static void sc_sort(const sort_cmp *c, sort_item *v, int64_t n) {
  if (n < 2) return;
  sc_introsort_loop(c, v, n, sc_lg(n) * 2);
  if (n > SC_THRESHOLD) {
    sc_insertion_sort(c, v, SC_THRESHOLD);
    for (int64_t i = SC_THRESHOLD; i < n; ++i) sc_linear_insert(c, v, i);
  } else {
    sc_insertion_sort(c, v, n);
  }
}

/* std::nth_element(v, v + nth, v + n). */
static void sc_nth_element(const sort_cmp *c, sort_item *v, int64_t nth, int64_t n) {
  if (n == 0 || nth == n) return;
  int64_t depth = sc_lg(n) * 2, first = 0, last = n;
  while (last - first > 3) {
    if (depth == 0) {
      sc_heap_select(c, v + first, nth + 1 - first, last - first);
      sc_swap(&v[first], &v[nth]);
      return;
    }
    --depth;
    const int64_t cut = first + sc_partition_pivot(c, v + first, last - first);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  sc_insertion_sort(c, v + first, last - first);
}

/* The first k of v[0..n) in the order the CPU's topk leaves them: a partial
 * sort when k is small against n, else a selection, then (if `sorted`) a
 * sort of all but the k-th. */
static void sc_topk(const sort_cmp *c, sort_item *v, int64_t k, int64_t n, int sorted) {
  if (k == 0) return;
  if (k * 64 <= n) {
    sc_partial_sort(c, v, k, n);
    return;
  }
  sc_nth_element(c, v, k - 1, n);
  if (sorted) sc_sort(c, v, k - 1);
}

/* The CPU's kthvalue selection (its own quickselect) of position k, with
 * gt(x, y) = sort_before(x, y) descending: x > y or x is the only NaN. */
static void sc_quick_select(int is_float, sort_item *v, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1;
#define SC_GT(x, y) sort_before(x, y, is_float, 1)
  for (;;) {
    if (hi <= lo) return;
    if (hi == lo + 1) {
      if (SC_GT(&v[lo], &v[hi])) sc_swap(&v[lo], &v[hi]);
      return;
    }
    sc_swap(&v[lo + (hi - lo) / 2], &v[lo + 1]);
    if (SC_GT(&v[lo + 1], &v[hi])) sc_swap(&v[lo + 1], &v[hi]);
    if (SC_GT(&v[lo], &v[hi])) sc_swap(&v[lo], &v[hi]);
    if (SC_GT(&v[lo + 1], &v[lo])) sc_swap(&v[lo + 1], &v[lo]);
    int64_t i = lo + 1, j = hi;
    const sort_item pivot = v[lo];
    for (;;) {
      do ++i; while (SC_GT(&pivot, &v[i]));
      do --j; while (SC_GT(&v[j], &pivot));
      if (j < i) break;
      sc_swap(&v[i], &v[j]);
    }
    sc_swap(&v[lo], &v[j]);
    if (j <= k) lo = i;
    if (j >= k) hi = j - 1;
  }
#undef SC_GT
}

/* The element the CPU's median, nanmedian or mode of v[0..n) returns. */
static const sort_item *sc_pick(sort_cmp *c, sort_item *v, int64_t n, int mode) {
  int64_t nan = 0, first_nan = -1;
  if (c->is_float)
    for (int64_t i = 0; i < n; ++i)
      if (v[i].key.f != v[i].key.f) {
        if (first_nan < 0) first_nan = i;
        ++nan;
      }
  if (mode == LOOM_SORT_MEDIAN || mode == LOOM_SORT_NANMEDIAN) {
    if (mode == LOOM_SORT_MEDIAN && first_nan >= 0) return &v[first_nan];
    c->order = mode == LOOM_SORT_MEDIAN ? SC_MEDIAN : SC_NANMEDIAN;
    const int64_t nth = (n - nan - 1) / 2; /* truncates to 0 when all are NaN */
    sc_nth_element(c, v, nth, n);
    return &v[nth];
  }
  /* mode: the longest run of equal keys after the CPU's sort with a < b,
   * the first such run, at its last element */
  c->order = SC_PLAIN;
  sc_sort(c, v, n);
  const sort_item *best = &v[0];
  int64_t run = 0, longest = 0;
  for (int64_t i = 0; i < n; ++i) {
    ++run;
    const int differs = i == n - 1 || (c->is_float ? v[i].key.f != v[i + 1].key.f
                                                   : v[i].key.i != v[i + 1].key.i);
    if (!differs) continue;
    if (run > longest) {
      best = &v[i];
      longest = run;
    }
    run = 0;
  }
  return best;
}

/* The CPU's topk hands 16-bit floats back through float32, which turns a
 * NaN into the quiet NaN its scalar conversions make. */
static void sort_topk_nan(char *dst, int32_t dtype) {
  uint16_t h;
  if (dtype == LOOM_BFLOAT16) {
    h = 0x7fc0;
  } else if (dtype == LOOM_FLOAT16) {
    memcpy(&h, dst, sizeof h);
    h = (uint16_t)((h & 0x8000u) | 0x7e00u);
  } else {
    return;
  }
  memcpy(dst, &h, sizeof h);
}

/* Offset, in elements of `t`, of the start of slice `s` along `dim`. */
static int64_t sort_slice(const loom_tensor *t, int32_t dim, int64_t s) {
  int64_t off = 0;
  for (int32_t d = t->rank - 1; d >= 0; --d) {
    if (d == dim) continue;
    off += (s % t->sizes[d]) * t->strides[d];
    s /= t->sizes[d];
  }
  return off;
}

int loom_kernel_sort(const loom_kernel_args *args, int64_t begin, int64_t end) {
  if (args->num_tensors != 4 || args->num_scalars < 5) return LOOM_ERROR_INVALID_ARGUMENT;
  const loom_tensor *val = &args->tensors[0], *ind = &args->tensors[1], *in = &args->tensors[2],
                    *ws = &args->tensors[3];
  const int32_t dim = (int32_t)args->scalars[0].i;
  const int descending = args->scalars[1].i != 0;
  const int64_t k = args->scalars[2].i, grain = args->scalars[3].i;
  const int mode = (int)args->scalars[4].i;
  const int32_t rank = in->rank;
  if (rank < 1 || dim < 0 || dim >= rank || val->rank != rank || ind->rank != rank ||
      ind->dtype != LOOM_INT64 || val->dtype != in->dtype || grain <= 0 ||
      mode < LOOM_SORT_STABLE || mode > LOOM_SORT_MODE)
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t n = in->sizes[dim];
  const int64_t out_k = mode >= LOOM_SORT_KTHVALUE ? 1 : k;
  if (k < 0 || k > n || val->sizes[dim] != out_k || ind->sizes[dim] != out_k ||
      (mode < LOOM_SORT_TOPK_SORTED && k != n) || (mode >= LOOM_SORT_KTHVALUE && k < 1))
    return LOOM_ERROR_INVALID_ARGUMENT;
  const int64_t chunk = begin / grain;
  if ((chunk + 1) * n * LOOM_SORT_WORKSPACE_PER_ELEMENT > loom_tensor_numel(ws) ||
      ws->dtype != LOOM_UINT8)
    return LOOM_ERROR_INVALID_ARGUMENT;
  sort_item *a = (sort_item *)((char *)ws->data + chunk * n * LOOM_SORT_WORKSPACE_PER_ELEMENT);
  sort_item *b = a + n;
  const int is_float = loom_nn_is_float(in->dtype);
  const int64_t is = in->strides[dim], vs = val->strides[dim], xs = ind->strides[dim];
  const int64_t es = loom_dtype_size(in->dtype);
  for (int64_t s = begin; s < end; ++s) {
    const int64_t ib = sort_slice(in, dim, s);
    for (int64_t i = 0; i < n; ++i) {
      if (is_float) a[i].key.f = loom_nn_load(in->data, in->dtype, ib + i * is);
      else a[i].key.i = loom_nn_load_index(in->data, in->dtype, ib + i * is);
      a[i].index = i;
    }
    const sort_item *r = a;
    sort_cmp cmp = {is_float, descending, SC_KEYS};
    switch (mode) {
      case LOOM_SORT_STABLE: r = sort_items(a, b, n, is_float, descending); break;
      case LOOM_SORT_CPU_ORDER: sc_sort(&cmp, a, n); break;
      case LOOM_SORT_TOPK_SORTED:
      case LOOM_SORT_TOPK_UNSORTED: sc_topk(&cmp, a, k, n, mode == LOOM_SORT_TOPK_SORTED); break;
      case LOOM_SORT_KTHVALUE:
        sc_quick_select(is_float, a, n, k - 1);
        r = a + k - 1;
        break;
      default: r = sc_pick(&cmp, a, n, mode); break;
    }
    const int64_t vb = sort_slice(val, dim, s), xb = sort_slice(ind, dim, s);
    for (int64_t i = 0; i < out_k; ++i) {
      char *dst = (char *)val->data + (vb + i * vs) * es;
      memcpy(dst, (const char *)in->data + (ib + r[i].index * is) * es, (size_t)es);
      if ((mode == LOOM_SORT_TOPK_SORTED || mode == LOOM_SORT_TOPK_UNSORTED) && is_float &&
          r[i].key.f != r[i].key.f)
        sort_topk_nan(dst, in->dtype);
      ((int64_t *)ind->data)[xb + i * xs] = r[i].index;
    }
  }
  return LOOM_OK;
}

const loom_kernel_entry loom_sort_kernels[] = {
    {"sort.along_dim", loom_kernel_sort, NULL},
    {NULL, NULL, NULL},
};
