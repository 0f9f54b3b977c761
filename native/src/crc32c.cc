#include "crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace agentd {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;

// Bytes each of the three interleaved hardware streams covers per round (see Crc32cSse42).
constexpr size_t kStreamBytes = 8192;

struct Tables {
  uint32_t byte[8][256];   // slicing-by-8
  uint32_t powers[32];     // x^(2^k) mod P, for combining
  uint32_t shift[4][256];  // v -> v * x^(8 * kStreamBytes) mod P, byte by byte
};

// a(x) * b(x) mod P, both in reflected bit order.
uint32_t MultiplyModP(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31;
  uint32_t product = 0;
  for (;;) {
    if (a & m) {
      product ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// x^(8n) mod P from the table of x^(2^k).
uint32_t PowerOfX8N(const uint32_t (&powers)[32], size_t n) {
  uint32_t factor = 1u << 31;  // x^0
  unsigned k = 3;              // x^(8n) = x^(n * 2^3)
  while (n != 0) {
    if (n & 1) factor = MultiplyModP(powers[k & 31], factor);
    n >>= 1;
    ++k;
  }
  return factor;
}

const Tables& GetTables() {
  static const Tables tables = [] {
    Tables t;
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ kPolynomial : crc >> 1;
      t.byte[0][i] = crc;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int k = 1; k < 8; ++k) t.byte[k][i] = (t.byte[k - 1][i] >> 8) ^ t.byte[0][t.byte[k - 1][i] & 0xff];
    }
    uint32_t p = 1u << 30;  // x^1
    t.powers[0] = p;
    for (int k = 1; k < 32; ++k) t.powers[k] = p = MultiplyModP(p, p);
    // Multiplication by a constant is linear over XOR, so it splits into one table per byte of v.
    uint32_t factor = PowerOfX8N(t.powers, kStreamBytes);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) t.shift[k][b] = MultiplyModP(factor, b << (8 * k));
    }
    return t;
  }();
  return tables;
}

// crc register v followed by kStreamBytes zero bytes: v * x^(8 * kStreamBytes) mod P.
inline uint32_t ShiftStream(const Tables& t, uint32_t v) {
  return t.shift[0][v & 0xff] ^ t.shift[1][(v >> 8) & 0xff] ^ t.shift[2][(v >> 16) & 0xff] ^
         t.shift[3][v >> 24];
}

uint32_t Crc32cTable(uint32_t crc, const uint8_t* data, size_t length) {
  const Tables& t = GetTables();
  while (length >= 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    word ^= crc;
    crc = t.byte[7][word & 0xff] ^ t.byte[6][(word >> 8) & 0xff] ^ t.byte[5][(word >> 16) & 0xff] ^
          t.byte[4][(word >> 24) & 0xff] ^ t.byte[3][(word >> 32) & 0xff] ^ t.byte[2][(word >> 40) & 0xff] ^
          t.byte[1][(word >> 48) & 0xff] ^ t.byte[0][word >> 56];
    data += 8;
    length -= 8;
  }
  while (length-- > 0) crc = (crc >> 8) ^ t.byte[0][(crc ^ *data++) & 0xff];
  return crc;
}

#if defined(__x86_64__)
// The crc32 instruction has a latency of 3 cycles and a throughput of 1, so one
// dependency chain runs at a third of the speed the core allows. Long inputs go
// in rounds of three adjacent kStreamBytes blocks checksummed as independent
// chains (the 2nd and 3rd from register 0), joined with the linearity of the
// register: R(s, A|B) = R(s, A) * x^(8|B|) xor R(0, B).
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(uint32_t crc, const uint8_t* data, size_t length) {
  uint64_t c = crc;
  if (length >= 3 * kStreamBytes) {
    const Tables& t = GetTables();
    do {
      uint64_t c1 = 0;
      uint64_t c2 = 0;
      for (size_t i = 0; i < kStreamBytes; i += 8) {
        uint64_t w0, w1, w2;
        std::memcpy(&w0, data + i, 8);
        std::memcpy(&w1, data + kStreamBytes + i, 8);
        std::memcpy(&w2, data + 2 * kStreamBytes + i, 8);
        c = _mm_crc32_u64(c, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
      }
      c = ShiftStream(t, ShiftStream(t, uint32_t(c)) ^ uint32_t(c1)) ^ uint32_t(c2);
      data += 3 * kStreamBytes;
      length -= 3 * kStreamBytes;
    } while (length >= 3 * kStreamBytes);
  }
  while (length >= 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    c = _mm_crc32_u64(c, word);
    data += 8;
    length -= 8;
  }
  uint32_t c32 = uint32_t(c);
  while (length-- > 0) c32 = _mm_crc32_u8(c32, *data++);
  return c32;
}
#endif

}  // namespace

bool Crc32cHardware() {
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  return hardware;
#else
  return false;
#endif
}

uint32_t Crc32c(uint32_t crc, const uint8_t* data, size_t length) {
  crc = ~crc;
#if defined(__x86_64__)
  crc = Crc32cHardware() ? Crc32cSse42(crc, data, length) : Crc32cTable(crc, data, length);
#else
  crc = Crc32cTable(crc, data, length);
#endif
  return ~crc;
}

uint32_t Crc32cCombine(uint32_t crcA, uint32_t crcB, size_t lengthB) {
  // crc(A||B) = crc(A) * x^(8*lengthB) mod P  xor  crc(B)
  return MultiplyModP(PowerOfX8N(GetTables().powers, lengthB), crcA) ^ crcB;
}

}  // namespace agentd
