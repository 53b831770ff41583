// LD_PRELOAD shim: a BLAS that returns wrong GEMM results for one shape, the way a library bug
// below libtorch would (wrong kernel pick for one M/N/K, dropped stores, a bad split-K). It
// interposes the Fortran entry points libtorch's CPU path imports (sgemm_, dgemm_ in
// libtorch_cpu.so 1.13; bf16/fp16 GEMMs go through oneDNN or ATen's own loops, not BLAS) and
// cblas_sgemm / cblas_dgemm for other callers; the real function comes from dlsym(RTLD_NEXT).
// Configured only by environment variables, read once:
//   RCL_SHIM_M, RCL_SHIM_N, RCL_SHIM_K  the BLAS call's m, n, k (column-major, as libtorch
//                                       calls it: for y = x W^T, m = out features, n = tokens)
//   RCL_SHIM_MODE   nan (C[0,0] = NaN) | large (C[0,0] = 1e6) | rel (every element * 1.01)
//   RCL_SHIM_SCHEDULE  once | every | from   (default from)
//   RCL_SHIM_CALL   C: the first matching call corrupted (1-based, default 1)
//   RCL_SHIM_EVERY  N: with "every", calls C, C+N, C+2N, ... (default 10)
//   RCL_SHIM_LOG    a file: one line per corrupted call ("call <i>") and, at exit, the count of
//                   calls of the shape, so a test knows when the fault struck
// Without RCL_SHIM_MODE the shim only forwards.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*gemm_f)(const char*, const char*, const int*, const int*, const int*, const void*, const void*,
                       const int*, const void*, const int*, const void*, void*, const int*);
typedef void (*cblas_gemm_f)(int, int, int, int, int, int, const void*, const void*, int, const void*, int, const void*,
                             void*, int);

enum mode { mode_off, mode_nan, mode_large, mode_rel };
enum schedule { sched_once, sched_every, sched_from };

static struct {
  int ready;
  enum mode mode;
  enum schedule schedule;
  long m, n, k, first, every;
  long calls;  // calls of the shape so far
  FILE* log;
} g;

static long env_long(const char* name, long fallback) {
  const char* v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : fallback;
}

static void report_count(void) {
  if (g.log) fprintf(g.log, "calls %ld\n", g.calls), fclose(g.log);
}

static void configure(void) {
  if (g.ready) return;
  g.ready = 1;
  const char* mode = getenv("RCL_SHIM_MODE");
  const char* schedule = getenv("RCL_SHIM_SCHEDULE");
  g.mode = !mode                    ? mode_off
           : !strcmp(mode, "nan")   ? mode_nan
           : !strcmp(mode, "large") ? mode_large
           : !strcmp(mode, "rel")   ? mode_rel
                                    : mode_off;
  if (mode && g.mode == mode_off)
    fprintf(stderr, "blas_fault_shim: RCL_SHIM_MODE '%s' is not nan, large or rel\n", mode);
  g.schedule = schedule && !strcmp(schedule, "once")    ? sched_once
               : schedule && !strcmp(schedule, "every") ? sched_every
                                                        : sched_from;
  g.m = env_long("RCL_SHIM_M", -1), g.n = env_long("RCL_SHIM_N", -1), g.k = env_long("RCL_SHIM_K", -1);
  g.first = env_long("RCL_SHIM_CALL", 1), g.every = env_long("RCL_SHIM_EVERY", 10);
  if (g.every < 1) g.every = 1;
  const char* log = getenv("RCL_SHIM_LOG");
  if (log && *log && (g.log = fopen(log, "w"))) setvbuf(g.log, NULL, _IOLBF, 0), atexit(report_count);
}

// Whether this call (of shape m x n x k) is one to corrupt.
static int strikes(long m, long n, long k) {
  configure();
  if (g.mode == mode_off || m != g.m || n != g.n || k != g.k) return 0;
  const long call = __atomic_add_fetch(&g.calls, 1, __ATOMIC_RELAXED);
  const int hit = g.schedule == sched_once    ? call == g.first
                  : g.schedule == sched_every ? call >= g.first && (call - g.first) % g.every == 0
                                              : call >= g.first;
  if (hit && g.log) fprintf(g.log, "call %ld\n", call);
  return hit;
}

// C is column-major m x n with leading dimension ldc (row-major callers pass their own layout:
// element [0] and "every element" are the same either way).
#define CORRUPT(T)                                              \
  static void corrupt_##T(T* c, long m, long n, long ldc) {     \
    if (g.mode == mode_nan) c[0] = (T)NAN;                      \
    if (g.mode == mode_large) c[0] = (T)1e6;                    \
    if (g.mode == mode_rel)                                     \
      for (long j = 0; j < n; ++j)                              \
        for (long i = 0; i < m; ++i) c[j * ldc + i] *= (T)1.01; \
  }
CORRUPT(float)
CORRUPT(double)

static void* real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) fprintf(stderr, "blas_fault_shim: no %s below the shim\n", name), abort();
  return f;
}

#define FORTRAN_GEMM(name, T)                                                                                          \
  void name(const char* ta, const char* tb, const int* m, const int* n, const int* k, const void* alpha,               \
            const void* a, const int* lda, const void* b, const int* ldb, const void* beta, void* c, const int* ldc) { \
    static gemm_f next;                                                                                                \
    if (!next) next = (gemm_f)real(#name);                                                                             \
    next(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);                                                        \
    if (strikes(*m, *n, *k)) corrupt_##T((T*)c, *m, *n, *ldc);                                                         \
  }
FORTRAN_GEMM(sgemm_, float)
FORTRAN_GEMM(dgemm_, double)

// CBLAS: order 101 = row-major (C is m x n with rows ldc apart), 102 = column-major.
#define CBLAS_GEMM(name, T)                                                                                           \
  void name(int order, int ta, int tb, int m, int n, int k, const void* alpha, const void* a, int lda, const void* b, \
            int ldb, const void* beta, void* c, int ldc) {                                                            \
    static cblas_gemm_f next;                                                                                         \
    if (!next) next = (cblas_gemm_f)real(#name);                                                                      \
    next(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);                                                \
    if (strikes(m, n, k)) corrupt_##T((T*)c, order == 101 ? n : m, order == 101 ? m : n, ldc);                        \
  }
CBLAS_GEMM(cblas_sgemm, float)
CBLAS_GEMM(cblas_dgemm, double)
