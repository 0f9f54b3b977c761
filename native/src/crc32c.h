// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
// iSCSI/ext4/RocksDB: crc32c("123456789") = 0xE3069283. Uses the SSE4.2
// instruction (three interleaved chains) when the CPU has it, a table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace agentd {

// Continues `crc` (0 for a fresh checksum) over `length` bytes. Any thread.
uint32_t Crc32c(uint32_t crc, const uint8_t* data, size_t length);

// The CRC of A||B from crc(A), crc(B) and the length of B in bytes, so that
// slices checksummed on different threads combine into one value.
uint32_t Crc32cCombine(uint32_t crcA, uint32_t crcB, size_t lengthB);

bool Crc32cHardware();

}  // namespace agentd
