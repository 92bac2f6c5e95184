/* SPDX-License-Identifier: Apache-2.0 */
/* guest.h - what kosa8d, kosa8-net and the guest agent agree on about every VM: its
 * network (slirp's layout, docs/network.md), its NIC's MAC, and its image slots.
 * One place: a change here reaches the daemon, the network sidecar and the agent alike.
 */
#ifndef K8_GUEST_H
#define K8_GUEST_H

/* IPv4: 10.0.2.0/24; the gateway stands for the host's loopback (when policy allows),
 * the resolver is kosa8-net's DNS server. */
#define GUEST_NET4 "10.0.2.0"
#define GUEST_PREFIX4 24
#define GUEST_GW4 "10.0.2.2"
#define GUEST_DNS4 "10.0.2.3"
#define GUEST_IP4 "10.0.2.15"
/* Engine containers with a network of their own (run "netns":"own", docs/network.md):
 * one address each, host part GUEST_CTR4_FIRST..GUEST_CTR4_LAST of the /24, on an ipvlan
 * link of the NIC (same MAC). kosa8-net takes them as the guest's. IPv4 only. */
#define GUEST_CTR4_FIRST 16
#define GUEST_CTR4_LAST 254
/* The egress broker (docs/broker.md), in a sandbox that has one: plain HTTP on port 80
 * of this address, which kosa8-net hands to the broker's unix socket, never to the host;
 * the name and every name below it resolve to it (kosa8-net's DNS, in every mode). */
#define GUEST_BROKER4 "10.0.2.4"
#define GUEST_BROKER_PORT 80
#define GUEST_BROKER_NAME "broker.kosa8.internal"
/* IPv6: fd00::/64, the same roles. */
#define GUEST_NET6 "fd00::"
#define GUEST_PREFIX6 64
#define GUEST_GW6 "fd00::2"
#define GUEST_DNS6 "fd00::3"
#define GUEST_IP6 "fd00::15"
/* The NIC's MAC (QEMU's -device and the agent, which finds the interface by it). */
#define GUEST_MAC "52:54:00:12:34:56"

/* microvm without ACPI has 8 virtio-mmio transports. The agent accepts a slot index on
 * any of them (serial "slot0".."slot7"); kosa8d attaches GUEST_IMAGE_SLOTS image disks,
 * what is left after the agent's serial port, the scratch disk, the rng and the NIC. */
#define GUEST_MMIO_TRANSPORTS 8
#define GUEST_IMAGE_SLOTS 4

#endif
