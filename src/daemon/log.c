/* SPDX-License-Identifier: Apache-2.0 */
/* log.c - the daemon's log lines (stderr, i.e. kosa8d.log) and its audit helper. */
#include "daemon/daemon.h"
#include "daemon/api.h"
#include "daemon/audit.h"

#include <stdio.h>
#include <time.h>

struct daemon *g_daemon_for_signals;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void daemon_log(const char *fmt, ...)
{
	char ts[32];
	struct timespec now;
	struct tm tm;
	va_list ap;

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	/* One line per call, whatever the arguments hold: names and reasons that came from a
	 * sandbox or a sidecar cannot end the line or put escape sequences in the log. */
	char raw[2048], line[4096];
	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	str_escape_to(line, sizeof(line), raw);
	pthread_mutex_lock(&log_lock);
	fprintf(stderr, "%s.%03ldZ kosa8d: %s\n", ts, now.tv_nsec / 1000000, line);
	fflush(stderr);
	pthread_mutex_unlock(&log_lock);
}

/* Never fails the caller: an audit failure is logged loudly. Steals `details`. */
void daemon_audit(struct daemon *d, const char *action, const char *sandbox, json_t *details)
{
	struct k8_err err = { 0 };

	if (d && d->audit && audit_append(d->audit, action, sandbox, details, &err) < 0)
		daemon_log("AUDIT FAILURE (%s): %s", action, err.msg);
	json_decref(details);
}

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
	ok = audit_budget_take(&sb->audit_budget, &d->guest_audit, now_mono_ns(), weight, &fold);
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
	n = audit_budget_drain(&sb->audit_budget);
	if (n)
		audit_fold(d, sb, n);
	pthread_mutex_unlock(&sb->audit_mu);
}

/* config.json "audit": {"segment_bytes", "guest_per_minute", "guest_burst",
 * "guest_fold_seconds"} (docs/audit.md); read once at start. Out-of-range values are
 * logged and the default kept. */
void daemon_audit_settings(struct daemon *d)
{
	static const struct audit_rate def = AUDIT_RATE_DEFAULT;
	json_t *cfg = sb_daemon_config(d), *o = json_object_get(cfg, "audit"), *v;
	static const struct {
		const char *key;
		json_int_t min, max;
	} keys[] = {
		{ "segment_bytes", AUDIT_SEGMENT_MIN, (json_int_t)1 << 40 },
		{ "guest_per_minute", 0, 1000000 },
		{ "guest_burst", 1, 1000000 },
		{ "guest_fold_seconds", 1, 86400 },
	};
	json_int_t val[4] = { (json_int_t)AUDIT_SEGMENT_DEFAULT, def.per_minute, def.burst,
			      def.fold_s };

	for (size_t i = 0; json_is_object(o) && i < ARRAY_SIZE(keys); i++) {
		v = json_object_get(o, keys[i].key);
		if (!v)
			continue;
		if (json_is_integer(v) && json_integer_value(v) >= keys[i].min &&
		    json_integer_value(v) <= keys[i].max)
			val[i] = json_integer_value(v);
		else
			daemon_log("config.json: audit.%s must be an integer from %lld to %lld; "
				   "using %lld", keys[i].key, (long long)keys[i].min,
				   (long long)keys[i].max, (long long)val[i]);
	}
	json_decref(cfg);
	audit_set_segment_bytes(d->audit, (uint64_t)val[0]);
	d->guest_audit.per_minute = (uint32_t)val[1];
	d->guest_audit.burst = (uint32_t)val[2];
	d->guest_audit.fold_s = (uint32_t)val[3];
}

/* ---- API: GET /v1/audit and /v1/audit/verify (api.h; the reader is audit.c). ---- */

/* The most records one query returns when it asks for a limit (the CLI's --limit bound). */
#define AUDIT_API_LIMIT_MAX 1000000

int audit_api_query(struct api_call *call)
{
	char sbuf[256], abuf[256];
	const char *sandbox = NULL, *action = NULL;
	uint64_t since = 0, limit = 0;

	if (api_query_str(call, "sandbox", sbuf, sizeof(sbuf), &sandbox) ||
	    api_query_str(call, "action", abuf, sizeof(abuf), &action) ||
	    api_query_u64(call, "since_seq", 0, UINT64_MAX, &since) ||
	    api_query_u64(call, "limit", 0, AUDIT_API_LIMIT_MAX, &limit))
		return call->err.code;
	return audit_query(call->d->home, sandbox, action, since, (size_t)limit, &call->out,
			   &call->err);
}

int audit_api_verify(struct api_call *call)
{
	return audit_verify(call->d->home, &call->out, &call->err);
}
