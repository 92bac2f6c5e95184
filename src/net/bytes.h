/* SPDX-License-Identifier: Apache-2.0 */
/* bytes.h - big-endian reads and writes of wire fields (the caller checked the bounds).
 * memcpy and <endian.h>: any alignment, and the compiler makes one load and a bswap. */
#ifndef K8_NET_BYTES_H
#define K8_NET_BYTES_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t net_rd16(const uint8_t *b)
{
	uint16_t v;
	memcpy(&v, b, sizeof(v));
	return be16toh(v);
}
static inline uint32_t net_rd32(const uint8_t *b)
{
	uint32_t v;
	memcpy(&v, b, sizeof(v));
	return be32toh(v);
}
static inline void net_wr16(uint8_t *b, uint16_t v)
{
	v = htobe16(v);
	memcpy(b, &v, sizeof(v));
}
static inline void net_wr32(uint8_t *b, uint32_t v)
{
	v = htobe32(v);
	memcpy(b, &v, sizeof(v));
}

#endif
