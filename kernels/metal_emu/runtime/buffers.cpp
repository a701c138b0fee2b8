// Buffers live in guarded mappings: each buffer's data ends at a page boundary (rounded to 16
// bytes for vector loads), with 8 GiB of inaccessible address space on either side, so an
// out-of-bounds access faults and is reported with the buffer's name and the element index. The
// few bytes of slack before the start and after a 16-byte-rounded end are filled with 0xFF and
// checked after the launch: a write there is reported too.

#include "buffers.h"

#include <cstdio>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

namespace {

constexpr unsigned long kGuard = 1ul << 33;  // 8 GiB of PROT_NONE on each side of a buffer
constexpr unsigned long kAlign = 16;
constexpr unsigned kMaxBuffers = 64;

emu::Buffer g_buffers[kMaxBuffers];
unsigned g_nbuffers = 0;

}  // namespace

namespace emu {

const Buffer* buffer_of(const char* addr) {
  for (unsigned i = 0; i < g_nbuffers; ++i) {
    const Buffer& b = g_buffers[i];
    if (addr >= b.region && addr < b.region + b.region_len) return &b;
  }
  return nullptr;
}

bool slack_written(char* out, unsigned long out_len) {
  for (unsigned i = 0; i < g_nbuffers; ++i) {
    const Buffer& b = g_buffers[i];
    for (char* p = b.pages; p < b.pages + b.pages_len; ++p) {
      if (p == b.base) p += b.nbytes;
      if (p >= b.pages + b.pages_len) break;
      if (static_cast<unsigned char>(*p) != 0xFF) {
        long long off = p - b.base;
        long long index = off >= 0 ? off / b.elem : -((-off + b.elem - 1) / b.elem);
        snprintf(out, out_len,
                 "out-of-bounds write of buffer '%s' at element index %lld (valid 0..%lld)",
                 b.name, index, static_cast<long long>(b.nbytes / b.elem) - 1);
        return true;
      }
    }
  }
  return false;
}

}  // namespace emu

extern "C" {

// A guarded buffer of `nbytes` (elements of `elem` bytes), named for error messages.
void* emu_buffer(unsigned long nbytes, unsigned elem, const char* name) {
  if (g_nbuffers >= kMaxBuffers) return nullptr;
  const unsigned long page = static_cast<unsigned long>(sysconf(_SC_PAGESIZE));
  const unsigned long rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
  const unsigned long pages_len = rounded == 0 ? page : (rounded + page - 1) / page * page;
  const unsigned long len = kGuard + pages_len + kGuard;
  void* region = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) return nullptr;
  char* pages = static_cast<char*>(region) + kGuard;
  if (mprotect(pages, pages_len, PROT_READ | PROT_WRITE) != 0) {
    munmap(region, len);
    return nullptr;
  }
  emu::Buffer& b = g_buffers[g_nbuffers++];
  b.region = static_cast<char*>(region);
  b.region_len = len;
  b.pages = pages;
  b.pages_len = pages_len;
  b.base = pages + pages_len - rounded;
  b.nbytes = nbytes;
  b.elem = elem ? elem : 1;
  snprintf(b.name, sizeof b.name, "%s", name);
  memset(pages, 0xFF, pages_len);
  return b.base;
}

void emu_release_buffers() {
  for (unsigned i = 0; i < g_nbuffers; ++i) munmap(g_buffers[i].region, g_buffers[i].region_len);
  g_nbuffers = 0;
}

}  // extern "C"
