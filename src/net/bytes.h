/* SPDX-License-Identifier: Apache-2.0 */
/* bytes.h - big-endian reads and writes of wire fields (the caller checked the bounds). */
#ifndef K8_NET_BYTES_H
#define K8_NET_BYTES_H

#include <stdint.h>

static inline uint16_t net_rd16(const uint8_t *b) { return (uint16_t)(b[0] << 8 | b[1]); }
static inline uint32_t net_rd32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}
static inline void net_wr16(uint8_t *b, uint16_t v)
{
	b[0] = (uint8_t)(v >> 8);
	b[1] = (uint8_t)v;
}
static inline void net_wr32(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
}

#endif
