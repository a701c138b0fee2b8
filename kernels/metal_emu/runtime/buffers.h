// The guarded buffers of a launch (buffers.cpp): what the executor (runtime.cpp) asks of them
// when a fault names an address and when the launch has ended.
#pragma once

namespace emu {

struct Buffer {
  char* region = nullptr;
  unsigned long region_len = 0;
  char* base = nullptr;
  unsigned long nbytes = 0;
  unsigned elem = 1;
  char name[64] = {0};
  char* pages = nullptr;  // first accessible byte
  unsigned long pages_len = 0;
};

// The buffer whose mapping (guards included) holds `addr`, or null.
const Buffer* buffer_of(const char* addr);

// A write into the slack around a buffer (the bytes no guard page can cover): true, with one
// line naming the buffer and the element in `out`, for the first one found.
bool slack_written(char* out, unsigned long out_len);

}  // namespace emu

extern "C" {
void* emu_buffer(unsigned long nbytes, unsigned elem, const char* name);
void emu_release_buffers();
}
