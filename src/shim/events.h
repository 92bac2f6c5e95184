/* SPDX-License-Identifier: Apache-2.0 */
/* events.h - task events published to containerd (the shim v2 contract's TaskCreate,
 * TaskStart, TaskExit, TaskDelete, TaskExecAdded, TaskExecStarted, TaskPaused,
 * TaskResumed, TaskOOM).
 *
 * containerd gives its ttRPC address in TTRPC_ADDRESS; each event goes there as a call of
 * containerd.services.events.ttrpc.v1.Events/Forward with an Envelope (time, namespace,
 * topic, the event as an Any named "containerd.events.<Type>"). One thread sends them in
 * the order they were published, so TaskStart always reaches containerd before that
 * task's TaskExit (the contract's "MUST follow"). A failed send is retried five times,
 * a second more each time, on a new connection; then the event is dropped and logged.
 */
#ifndef K8_SHIM_EVENTS_H
#define K8_SHIM_EVENTS_H

#include <protobuf-c/protobuf-c.h>

struct events;

/* NULL address: events are dropped (a shim started by hand). */
struct events *events_open(const char *address, const char *ns);
/* Queue one event; `type` is containerd's message name without the package
 * ("TaskExit"). Never blocks on containerd. */
void events_publish(struct events *e, const char *topic, const char *type,
		    const ProtobufCMessage *msg);
/* Wait until the queue is empty (at most timeout_ms), then stop the thread. */
void events_close(struct events *e, int timeout_ms);

#endif
