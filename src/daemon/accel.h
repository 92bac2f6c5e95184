/* SPDX-License-Identifier: Apache-2.0 */
/* accel.h - the accelerator, probed: KVM or TCG, and what kosa8 says about it (accel.c). */
#ifndef K8_ACCEL_H
#define K8_ACCEL_H

#include "common/util.h"

struct daemon;

int accel_choose(struct daemon *d, struct k8_err *err);
/* Said wherever the accelerator is TCG (daemon start and status, sandbox create). */
#define ACCEL_TCG_NOTE "TCG is not a security boundary (QEMU's own security policy); what " \
	"holds then is QEMU's jail: its own uid, no capabilities, seccomp, a root with no " \
	"host files (docs/threat-model.md)"
#define JAIL_OFF_NOTE "QEMU runs NOT jailed, as root (config.json \"jail\": false); for " \
	"benchmarks only: a guest that escapes QEMU owns the host"
#define JAIL_NOROOT_NOTE "QEMU runs NOT jailed: kosa8d is not root, and only root can " \
	"give QEMU a uid of its own, namespaces and an empty root; a guest that escapes " \
	"QEMU has this user's files"

#endif
