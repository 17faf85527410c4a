// Layout algebra (after CuTe's shape:stride layouts), host and device, constexpr.
//
// A Layout maps a linear coordinate to an offset. It has up to kMaxModes top-level modes; each
// mode is a run of atoms (shape, stride), so layouts nest one level: ((2,4),8):((1,16),2).
// Coordinates are colexicographic: the first atom varies fastest, within a mode and across modes.
//
//   L(i)             offset of linear coordinate i
//   L(i, j)          offset of coordinate i in mode 0 and j in mode 1 (rank-2 layouts)
//   composition(A,B) A∘B: (A∘B)(i) = A(B(i)); keeps B's modes
//   complement(A,n)  the layout that fills the offsets A leaves out, up to n
//   logical_divide   A∘(T, complement(T)): splits A into (tile, rest)
//   logical_product  (A, complement(A)∘B): B copies of A
//   zipped_divide    2-D tiling: ((tile_m, tile_n), (rest_m, rest_n))
//   local_partition  a thread's elements when a thread grid is laid over a tile
//   Swizzle<B,M,S>   XOR of bits [M+S, M+S+B) into bits [M, M+B) of an offset (bank conflicts)
//
// Kernels build their layouts as constexpr values; with the shapes and strides known at compile
// time the index arithmetic folds to constants and shifts.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>

#if defined(__CUDACC__)
#define LAMINA_LHD __host__ __device__ constexpr
#else
#define LAMINA_LHD constexpr
#endif

namespace lamina::layout {

inline constexpr int kMaxModes = 4;
inline constexpr int kMaxAtoms = 12;

LAMINA_LHD void require(bool ok, const char* what) {
  if (!ok) {
#if defined(__CUDA_ARCH__)
    (void)what;
    __trap();
#else
    throw std::invalid_argument(what);
#endif
  }
}

struct Atom {
  int64_t shape = 1, stride = 0;
};

struct Layout {
  int rank = 0;                      // number of modes
  int natoms = 0;                    // atoms over all modes
  int begin[kMaxModes + 1] = {};     // atoms of mode m: [begin[m], begin[m+1])
  Atom atom[kMaxAtoms] = {};

  LAMINA_LHD int64_t size() const {
    int64_t s = 1;
    for (int a = 0; a < natoms; ++a) s *= atom[a].shape;
    return s;
  }
  LAMINA_LHD int64_t size(int m) const {
    int64_t s = 1;
    for (int a = begin[m]; a < begin[m + 1]; ++a) s *= atom[a].shape;
    return s;
  }
  // Offset of linear coordinate i (colexicographic over all atoms).
  LAMINA_LHD int64_t operator()(int64_t i) const {
    int64_t off = 0;
    for (int a = 0; a < natoms; ++a) {
      off += (i % atom[a].shape) * atom[a].stride;
      i /= atom[a].shape;
    }
    return off;
  }
  // Offset of coordinate i in mode `m`.
  LAMINA_LHD int64_t mode_offset(int m, int64_t i) const {
    int64_t off = 0;
    for (int a = begin[m]; a < begin[m + 1]; ++a) {
      off += (i % atom[a].shape) * atom[a].stride;
      i /= atom[a].shape;
    }
    return off;
  }
  LAMINA_LHD int64_t operator()(int64_t i, int64_t j) const { return mode_offset(0, i) + mode_offset(1, j); }
  LAMINA_LHD int64_t operator()(int64_t i, int64_t j, int64_t k) const {
    return mode_offset(0, i) + mode_offset(1, j) + mode_offset(2, k);
  }
  // One past the largest offset (for layouts with non-negative strides).
  LAMINA_LHD int64_t cosize() const {
    int64_t hi = 0;
    for (int a = 0; a < natoms; ++a) hi += (atom[a].shape - 1) * atom[a].stride;
    return hi + 1;
  }

  // Building: append a new mode, or an atom to the last mode.
  LAMINA_LHD Layout& add_mode() {
    require(rank < kMaxModes, "layout: too many modes");
    ++rank;
    begin[rank] = begin[rank - 1];
    return *this;
  }
  LAMINA_LHD Layout& add_atom(int64_t shape, int64_t stride) {
    require(rank > 0 && natoms < kMaxAtoms, "layout: too many atoms");
    require(shape >= 1, "layout: shapes must be positive");
    atom[natoms++] = {shape, stride};
    begin[rank] = natoms;
    return *this;
  }
  // Mode m alone, as a rank-1 layout.
  LAMINA_LHD Layout mode(int m) const {
    Layout r;
    r.add_mode();
    for (int a = begin[m]; a < begin[m + 1]; ++a) r.add_atom(atom[a].shape, atom[a].stride);
    return r;
  }
  // All atoms in a single mode.
  LAMINA_LHD Layout flat() const {
    Layout r;
    r.add_mode();
    for (int a = 0; a < natoms; ++a) r.add_atom(atom[a].shape, atom[a].stride);
    return r;
  }
};

// (s0, s1, ...) : (d0, d1, ...), one atom per mode.
LAMINA_LHD Layout make_layout(std::initializer_list<int64_t> shape, std::initializer_list<int64_t> stride) {
  require(shape.size() == stride.size(), "layout: shape and stride ranks differ");
  Layout l;
  const int64_t* d = stride.begin();
  for (const int64_t* s = shape.begin(); s != shape.end(); ++s, ++d) l.add_mode().add_atom(*s, *d);
  return l;
}
LAMINA_LHD Layout row_major(int64_t rows, int64_t cols, int64_t ld = 0) {
  return make_layout({rows, cols}, {ld ? ld : cols, 1});
}
LAMINA_LHD Layout col_major(int64_t rows, int64_t cols, int64_t ld = 0) {
  return make_layout({rows, cols}, {1, ld ? ld : rows});
}
// Concatenation of modes: (A, B).
LAMINA_LHD Layout concat(const Layout& a, const Layout& b) {
  Layout r = a;
  for (int m = 0; m < b.rank; ++m) {
    r.add_mode();
    for (int x = b.begin[m]; x < b.begin[m + 1]; ++x) r.add_atom(b.atom[x].shape, b.atom[x].stride);
  }
  return r;
}

// Merges neighbouring atoms that continue each other (s0*d0 == d1) and drops shape-1 atoms:
// a single mode with the same mapping.
LAMINA_LHD Layout coalesce(const Layout& l) {
  Layout r;
  r.add_mode();
  for (int a = 0; a < l.natoms; ++a) {
    const Atom x = l.atom[a];
    if (x.shape == 1) continue;
    if (r.natoms > 0) {
      Atom& last = r.atom[r.natoms - 1];
      if (last.shape * last.stride == x.stride) {
        last.shape *= x.shape;
        continue;
      }
    }
    r.add_atom(x.shape, x.stride);
  }
  if (r.natoms == 0) r.add_atom(1, 0);
  return r;
}

namespace detail {
// A∘(s:d) for a coalesced A, appended as atoms to the last mode of `out`.
LAMINA_LHD void compose_atom(const Layout& a, Atom b, Layout& out) {
  if (b.shape == 1) {
    out.add_atom(1, 0);
    return;
  }
  int64_t rest_stride = b.stride, rest_shape = b.shape;
  require(rest_stride >= 0, "composition: negative strides are not supported");
  if (rest_stride == 0) {
    out.add_atom(rest_shape, 0);
    return;
  }
  for (int i = 0; i < a.natoms - 1 && rest_shape > 1; ++i) {
    const Atom x = a.atom[i];
    if (rest_stride >= x.shape) {
      require(rest_stride % x.shape == 0, "composition: stride does not divide the shape");
      rest_stride /= x.shape;
      continue;
    }
    require(x.shape % rest_stride == 0, "composition: shape does not divide the stride");
    const int64_t avail = x.shape / rest_stride;
    const int64_t take = avail < rest_shape ? avail : rest_shape;
    require(rest_shape % take == 0, "composition: shapes are not divisible");
    out.add_atom(take, x.stride * rest_stride);
    rest_shape /= take;
    rest_stride = 1;
  }
  if (rest_shape > 1) out.add_atom(rest_shape, a.atom[a.natoms - 1].stride * rest_stride);
}
}  // namespace detail

// (A∘B)(i) = A(B(i)), with B's modes.
LAMINA_LHD Layout composition(const Layout& a, const Layout& b) {
  const Layout ac = coalesce(a);
  Layout r;
  for (int m = 0; m < b.rank; ++m) {
    r.add_mode();
    for (int x = b.begin[m]; x < b.begin[m + 1]; ++x) detail::compose_atom(ac, b.atom[x], r);
    if (r.begin[r.rank] == r.begin[r.rank - 1]) r.add_atom(1, 0);
  }
  return r;
}

// The layout R with R's offsets filling the gaps of A up to `cotarget`: (A, R) is a bijection
// onto [0, cotarget) when A is injective with divisible strides.
LAMINA_LHD Layout complement(const Layout& a, int64_t cotarget) {
  Atom sorted[kMaxAtoms] = {};
  int n = 0;
  for (int i = 0; i < a.natoms; ++i)
    if (a.atom[i].shape > 1 && a.atom[i].stride != 0) sorted[n++] = a.atom[i];
  for (int i = 1; i < n; ++i)  // insertion sort by stride
    for (int j = i; j > 0 && sorted[j].stride < sorted[j - 1].stride; --j) {
      const Atom t = sorted[j];
      sorted[j] = sorted[j - 1];
      sorted[j - 1] = t;
    }
  Layout r;
  r.add_mode();
  int64_t cur = 1;
  for (int i = 0; i < n; ++i) {
    require(sorted[i].stride % cur == 0, "complement: strides are not divisible");
    if (sorted[i].stride / cur > 1) r.add_atom(sorted[i].stride / cur, cur);
    cur = sorted[i].shape * sorted[i].stride;
  }
  const int64_t rest = (cotarget + cur - 1) / cur;
  r.add_atom(rest > 1 ? rest : 1, cur);
  return coalesce(r);
}

// (tile, rest): A∘(T, complement(T, size(A))).
LAMINA_LHD Layout logical_divide(const Layout& a, const Layout& tile) {
  return composition(a, concat(tile.flat(), complement(tile, a.size())));
}

// (A, complement(A, size(A)*cosize(B))∘B): the layout A repeated as B says.
LAMINA_LHD Layout logical_product(const Layout& a, const Layout& b) {
  return concat(a.flat(), composition(complement(a, a.size() * b.cosize()), b));
}

// 2-D tiling of a rank-2 layout by (tm, tn): ((tile_m, tile_n), (rest_m, rest_n)).
LAMINA_LHD Layout zipped_divide(const Layout& a, int64_t tm, int64_t tn) {
  const Layout dm = logical_divide(a.mode(0), make_layout({tm}, {1}));
  const Layout dn = logical_divide(a.mode(1), make_layout({tn}, {1}));
  Layout r;
  r.add_mode();
  for (int x = dm.begin[0]; x < dm.begin[1]; ++x) r.add_atom(dm.atom[x].shape, dm.atom[x].stride);
  for (int x = dn.begin[0]; x < dn.begin[1]; ++x) r.add_atom(dn.atom[x].shape, dn.atom[x].stride);
  r.add_mode();
  for (int x = dm.begin[1]; x < dm.begin[2]; ++x) r.add_atom(dm.atom[x].shape, dm.atom[x].stride);
  for (int x = dn.begin[1]; x < dn.begin[2]; ++x) r.add_atom(dn.atom[x].shape, dn.atom[x].stride);
  return r;
}

// A sub-layout and where it starts.
struct Part {
  int64_t offset = 0;
  Layout layout;
};

// Tile (bm, bn) of size (tm, tn) of a rank-2 layout: its offset and its (tm, tn) layout.
LAMINA_LHD Part local_tile(const Layout& a, int64_t tm, int64_t tn, int64_t bm, int64_t bn) {
  Part p;
  p.offset = a.mode_offset(0, bm * tm) + a.mode_offset(1, bn * tn);
  const Layout dm = logical_divide(a.mode(0), make_layout({tm}, {1}));
  const Layout dn = logical_divide(a.mode(1), make_layout({tn}, {1}));
  p.layout = concat(dm.mode(0), dn.mode(0));
  return p;
}

// The elements of a rank-2 tile that thread `tid` owns when the thread grid `thr` (a rank-2
// layout from (thread_m, thread_n) to thread index, e.g. row_major(4, 8)) is repeated over the
// tile: thread (i, j) owns elements (i + a*thr_m, j + b*thr_n). Returns the thread's first
// offset and the layout over (a, b).
LAMINA_LHD Part local_partition(const Layout& tile, const Layout& thr, int64_t tid) {
  const int64_t tm = thr.size(0), tn = thr.size(1);
  require(tile.size(0) % tm == 0 && tile.size(1) % tn == 0, "local_partition: thread grid does not divide the tile");
  int64_t ti = 0, tj = 0;  // invert thr: find the thread coordinate with thr(ti, tj) == tid
  bool found = false;
  for (int64_t j = 0; j < tn && !found; ++j)
    for (int64_t i = 0; i < tm && !found; ++i)
      if (thr(i, j) == tid) ti = i, tj = j, found = true;
  require(found, "local_partition: thread index outside the thread layout");
  Part p;
  p.offset = tile.mode_offset(0, ti) + tile.mode_offset(1, tj);
  const Layout dm = logical_divide(tile.mode(0), make_layout({tm}, {1}));
  const Layout dn = logical_divide(tile.mode(1), make_layout({tn}, {1}));
  p.layout = concat(dm.mode(1), dn.mode(1));
  return p;
}

// XOR swizzle on offsets: bits [M+S, M+S+B) are XORed into bits [M, M+B). Swizzle<3,3,3> on an
// f16 tile with 64-element rows spreads the eight 16-byte chunks of a row over all banks.
template <int B, int M, int S>
struct Swizzle {
  static constexpr int64_t kMask = ((int64_t(1) << B) - 1) << (M + S);
  LAMINA_LHD int64_t operator()(int64_t off) const { return off ^ ((off & kMask) >> S); }
};

// A layout followed by a swizzle of its offsets.
template <class Sw>
struct Swizzled {
  Sw swizzle;
  Layout layout;
  LAMINA_LHD int64_t operator()(int64_t i, int64_t j) const { return swizzle(layout(i, j)); }
  LAMINA_LHD int64_t operator()(int64_t i) const { return swizzle(layout(i)); }
};

}  // namespace lamina::layout
