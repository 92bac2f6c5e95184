/* SPDX-License-Identifier: Apache-2.0 */
/* guestaudit.c - audit records a sandbox's guest can cause (egress refusals, limit hits,
 * a sidecar's death), within the sandbox's budget (docs/audit.md). */
#include "daemon/audit.h"
#include "daemon/daemon.h"
#include "daemon/record.h"

static void audit_fold(struct daemon *d, struct sandbox *sb, uint64_t n)
{
	daemon_audit(d, "sandbox.audit.suppressed", sb->name,
		     json_pack("{s:I,s:i,s:i,s:s}", "suppressed", (json_int_t)(n > INT64_MAX ? INT64_MAX : n),
			       "per_minute", (int)d->guest_audit.per_minute, "burst",
			       (int)d->guest_audit.burst, "why", "the sandbox caused more records "
			       "than its audit budget; these were counted, not written"));
}

void daemon_audit_guest(struct daemon *d, struct sandbox *sb, const char *action,
			json_t *details, uint64_t weight)
{
	uint64_t fold;
	bool ok;

	if (!d || !sb) {
		json_decref(details);
		return;
	}
	pthread_mutex_lock(&sb->audit_mu);
	ok = rate_take(&sb->audit_budget, &d->guest_audit, now_mono_ns(), weight, &fold);
	/* Written under the sandbox's lock, so the folded count and the record stay in order. */
	if (fold)
		audit_fold(d, sb, fold);
	if (ok)
		daemon_audit(d, action, sb->name, json_incref(details));
	pthread_mutex_unlock(&sb->audit_mu);
	json_decref(details);
}

void daemon_audit_guest_flush(struct daemon *d, struct sandbox *sb)
{
	uint64_t n;

	if (!d || !sb)
		return;
	pthread_mutex_lock(&sb->audit_mu);
	n = rate_drain(&sb->audit_budget);
	if (n)
		audit_fold(d, sb, n);
	pthread_mutex_unlock(&sb->audit_mu);
}
