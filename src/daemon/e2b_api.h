/* SPDX-License-Identifier: Apache-2.0 */
/* e2b_api.h - the E2B-compatible API on a TCP port (e2b_api.c, docs/e2b.md): E2B's
 * control plane, envd and the code interpreter on one listener, served by api.c with a
 * route table and error shape of their own. */
#ifndef K8_DAEMON_E2B_API_H
#define K8_DAEMON_E2B_API_H

#include "common/util.h"

struct daemon;

/* Bind config.json "e2b.listen" (default 127.0.0.1:7435; "off": none; an address other
 * than loopback only with --allow-public-ports), load the E2B sandboxes left by an earlier
 * daemon and serve. 0, or a negative errno with err saying why it is not served (the
 * daemon goes on without it). */
int e2b_listen(struct daemon *d, struct k8_err *err);

#endif
