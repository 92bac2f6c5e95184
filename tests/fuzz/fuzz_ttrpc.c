/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_ttrpc.c - libFuzzer target: arbitrary bytes as what containerd (or anyone who can
 * reach the shim's socket) sends containerd-shim-kosa8-v2. The bytes go through the ttRPC
 * reader in chunks the input picks (src/shim/ttrpc.c); every whole frame is decoded as a
 * Request within the budget, and its payload as each message the Task service reads (and
 * the events and answers the shim itself decodes), through protobuf-c with the budget
 * allocator; what decodes is packed again and decoded again.
 *
 * abort() marks a broken invariant: a frame longer than the cap, a budget that does not
 * come back to zero, a reader that takes no byte without a frame to hand out. */
#include "shim/ttrpc.h"
#include "events.pb-c.h"
#include "task.pb-c.h"
#include "ttrpc.pb-c.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ProtobufCMessageDescriptor *const msgs[] = {
	&k8task__create_task_request__descriptor, &k8task__start_request__descriptor,
	&k8task__delete_request__descriptor, &k8task__exec_process_request__descriptor,
	&k8task__resize_pty_request__descriptor, &k8task__state_request__descriptor,
	&k8task__kill_request__descriptor, &k8task__close_iorequest__descriptor,
	&k8task__pids_request__descriptor, &k8task__checkpoint_task_request__descriptor,
	&k8task__update_task_request__descriptor, &k8task__wait_request__descriptor,
	&k8task__stats_request__descriptor, &k8task__connect_request__descriptor,
	&k8task__shutdown_request__descriptor, &k8task__pause_request__descriptor,
	&k8task__resume_request__descriptor, &k8task__delete_response__descriptor,
	&k8ttrpc__response__descriptor, &k8events__forward_request__descriptor,
};

static void roundtrip(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n)
{
	struct ttrpc_budget b;
	ProtobufCMessage *m, *again;
	unsigned char *packed;
	size_t len;

	ttrpc_budget_init(&b, TTRPC_DECODE_MAX);
	m = protobuf_c_message_unpack(d, &b.alloc, n, p);
	if (!m) {
		if (b.used)
			abort();
		return;
	}
	/* Packed again (the shim forwards containerd's mounts in TaskCreate). protobuf-c
	 * keeps what it does not know as unknown fields, field number 0 included, and
	 * refuses those when it reads them back: so a second decode may fail, but never
	 * leak or read out of bounds. */
	packed = ttrpc_pack(m, &len);
	again = protobuf_c_message_unpack(d, &b.alloc, len, packed);
	if (again)
		protobuf_c_message_free_unpacked(again, &b.alloc);
	protobuf_c_message_free_unpacked(m, &b.alloc);
	free(packed);
	if (b.used)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ttrpc_reader r;
	size_t off = 1, chunk;

	if (size < 1)
		return 0;
	chunk = (size_t)data[0] + 1;       /* how the bytes arrive: 1..256 at a time */
	ttrpc_reader_init(&r);
	while (off < size) {
		size_t n = size - off < chunk ? size - off : chunk;
		long used = ttrpc_reader_feed(&r, data + off, n);
		struct ttrpc_hdr h;
		const unsigned char *f;

		if (used < 0)
			break;
		if (used == 0 && n)
			abort();           /* no progress without a frame to take */
		off += (size_t)used;
		while (ttrpc_reader_frame(&r, &h, &f)) {
			struct ttrpc_request req;

			if (h.len > TTRPC_MAX_DATA)
				abort();
			if (ttrpc_request_decode(f, h.len, &req) == 0) {
				for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++)
					roundtrip(msgs[i], req.payload, req.payload_len);
				if (!req.method[0] || !req.service[0])
					abort();
				ttrpc_request_free(&req);
			}
			int code;
			char msg[64];
			(void)ttrpc_response_decode(f, h.len, &code, msg, sizeof(msg));
			/* the frame's data as a payload of its own, too */
			roundtrip(msgs[h.stream % (sizeof(msgs) / sizeof(msgs[0]))], f, h.len);
		}
	}
	ttrpc_reader_free(&r);
	return 0;
}
