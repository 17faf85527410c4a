// CUPTI injection library for scripts/trace-decode.sh: loaded by the CUDA driver through
// CUDA_INJECTION64_PATH, it records every kernel's start and end (ns, GPU clock), grid size,
// registers per thread and name, and writes them to $TRACE_OUT at exit, one kernel per line;
// memory copies too (grid 0, registers 0, name memcpy_<CUpti_ActivityMemcpyKind>).
// Kernels launched from CUDA graphs are recorded too, which the eager `--profile` cannot show.
#include <cupti.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#ifndef KREC
#define KREC CUpti_ActivityKernel9
#endif
#ifndef MREC
#define MREC CUpti_ActivityMemcpy5
#endif
static FILE* g_out = nullptr;
static void CUPTIAPI buf_req(uint8_t** buf, size_t* size, size_t* max_records) {
  *size = 16 << 20;
  *buf = static_cast<uint8_t*>(aligned_alloc(64, *size));
  *max_records = 0;
}
static void CUPTIAPI buf_done(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      auto* k = reinterpret_cast<KREC*>(rec);
      if (g_out) fprintf(g_out, "%llu %llu %u %d %s\n", (unsigned long long)k->start, (unsigned long long)k->end,
                         k->gridX, k->registersPerThread, k->name);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      auto* m = reinterpret_cast<MREC*>(rec);
      if (g_out) fprintf(g_out, "%llu %llu 0 0 memcpy_%u\n", (unsigned long long)m->start, (unsigned long long)m->end,
                         unsigned(m->copyKind));
    }
  }
  free(buf);
}
static void at_exit() {
  cuptiActivityFlushAll(1);
  if (g_out) fclose(g_out);
  g_out = nullptr;
}
extern "C" int InitializeInjection() {
  const char* path = getenv("TRACE_OUT");
  g_out = fopen(path ? path : "/tmp/trace.txt", "w");
  cuptiActivityRegisterCallbacks(buf_req, buf_done);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  atexit(at_exit);
  return 1;
}
