/* CRC-32C (Castagnoli) for the compiled record codec (_codec_c.pyx, _batch_c.pyx).
 *
 * The same function as google_crc32c.value (initial value and final xor 0xFFFFFFFF,
 * reflected polynomial 0x82F63B78): the hypothesis tests compare the two. On x86-64 the
 * SSE 4.2 crc32 instruction does 8 bytes a cycle; the CPU is asked once whether it has
 * it. Elsewhere spool_crc32c_available() is 0 and the callers use google_crc32c.
 */
#ifndef SPOOL_CRC32C_H
#define SPOOL_CRC32C_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

__attribute__((target("sse4.2")))
static uint32_t spool_crc32c_hw(const unsigned char *p, size_t n) {
    uint64_t crc = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = _mm_crc32_u64(crc, word);
        p += 8;
        n -= 8;
    }
    uint32_t c = (uint32_t)crc;
    while (n--) {
        c = _mm_crc32_u8(c, *p++);
    }
    return c ^ 0xFFFFFFFFu;
}

static int spool_crc32c_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}

static uint32_t spool_crc32c(const unsigned char *p, size_t n) {
    return spool_crc32c_hw(p, n);
}
#else
static int spool_crc32c_available(void) { return 0; }
static uint32_t spool_crc32c(const unsigned char *p, size_t n) { (void)p; (void)n; return 0; }
#endif

#endif
