/* SPDX-License-Identifier: Apache-2.0 */
/* audit.c - kosa8 audit ls|verify: read the daemon's hash-chained record of actions. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

enum { OPT_SANDBOX = 's', OPT_ACTION = 'a', OPT_SINCE = 'S', OPT_LIMIT = 'l' };

/* Fields shown in their own columns, or that only the chain needs. */
static int is_column(const char *key)
{
	static const char *const keys[] = { "seq", "time", "ts", "ts_ns", "action", "sandbox",
					    "prev", "hash", "details" };
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		if (!strcmp(key, keys[i]))
			return 1;
	return 0;
}

/* "key=value key2=value2" from an object's fields, skipping the table's columns when
 * `skip` is set. Strings bare (quoted when they hold a space), the rest as JSON. */
static void details_append(const json_t *obj, int skip, char *buf, size_t len, size_t *off)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)obj, key, v) {
		cleanup_free char *text = NULL;
		const char *s;
		int n;

		if (skip && is_column(key))
			continue;
		if (json_is_string(v)) {
			s = json_string_value(v);
			if (strchr(s, ' '))
				s = text = json_dumps(v, JSON_ENCODE_ANY);
		} else {
			s = text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		}
		n = snprintf(buf + *off, len - *off, "%s%s=%s", *off ? " " : "", key, s ? s : "?");
		if (n < 0 || (size_t)n >= len - *off) {
			*off = len - 1;
			return;
		}
		*off += (size_t)n;
	}
}

/* The query string of `audit ls` from its filter flags ("" when none; each value checked
 * and URL-encoded) into query; *json is set by --json. 0 or -EINVAL with a message. */
static int ls_query(const struct cli_args *a, char *query, size_t len, int *json,
		    struct k8_err *err)
{
	size_t qoff = 0;

	query[0] = '\0';
	for (int k = 0; k < a->nopts; k++) {
		const char *v = a->opts[k].arg, *key = NULL;
		long n;

		switch (a->opts[k].id) {
		case CLI_OPT_JSON:
			*json = 1;
			continue;
		case OPT_SANDBOX:
			if (cli_check_name(v, err) < 0)
				return err->code;
			key = "sandbox";
			break;
		case OPT_ACTION:
			key = "action";
			break;
		case OPT_SINCE:
			if (cli_parse_range("--since-seq", v, 0, LONG_MAX, &n, err) < 0)
				return err->code;
			key = "since_seq";
			break;
		case OPT_LIMIT:
			if (cli_parse_range("--limit", v, 1, 1000000, &n, err) < 0)
				return err->code;
			key = "limit";
			break;
		}
		cleanup_free char *enc = cli_urlenc(v);
		int w = snprintf(query + qoff, len - qoff, "%c%s=%s", qoff ? '&' : '?', key, enc);
		if (w < 0 || (size_t)w >= len - qoff)
			return k8_err_set(err, -EINVAL, "the filters are too long");
		qoff += (size_t)w;
	}
	return 0;
}

/* A row of the `audit ls` table (an out_row_fn; times are absolute, `now` is unused). */
static void record_row(struct out_table *t, const json_t *it, double now)
{
	char seq[24] = "", when[40], details[1024] = "";
	size_t doff = 0;
	json_t *tv = json_object_get(it, "time"), *d;

	if (!tv)
		tv = json_object_get(it, "ts");
	if (!tv)
		tv = json_object_get(it, "ts_ns");
	if (json_is_integer(json_object_get(it, "seq")))
		snprintf(seq, sizeof(seq), "%lld", json_integer_value(json_object_get(it, "seq")));
	if (out_time_parse(tv) >= 0)
		out_localtime(out_time_parse(tv), when, sizeof(when));
	else
		snprintf(when, sizeof(when), "%s", json_string_value(tv) ?: "-");
	d = json_object_get(it, "details");
	if (json_is_object(d))
		details_append(d, 0, details, sizeof(details), &doff);
	else if (d) {
		json_t *wrap = json_pack("{s:O}", "details", d);
		details_append(wrap, 0, details, sizeof(details), &doff);
		json_decref(wrap);
	}
	details_append(it, 1, details, sizeof(details), &doff);
	const char *row[5] = {
		seq, when, json_string_value(json_object_get(it, "action")),
		json_string_value(json_object_get(it, "sandbox")), details,
	};
	out_table_row(t, row);
}

static int show_records(const json_t *res, void *ctx)
{
	static const char *const hdr[] = { "SEQ", "TIME", "ACTION", "SANDBOX", "DETAILS" };

	out_table_array(res, 5, hdr, record_row);
	return CLI_EXIT_OK;
}

static int cmd_ls(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "sandbox", 0, 1, OPT_SANDBOX }, { "action", 0, 1, OPT_ACTION },
		{ "since-seq", 0, 1, OPT_SINCE }, { "limit", 0, 1, OPT_LIMIT },
		{ "json", 0, 0, CLI_OPT_JSON }, { NULL, 0, 0, 0 },
	};
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	char query[2048];
	int rc, json = 0;

	if (!cli_begin(self, argc, argv, opts, 0, 0, 0, home, &a, &cl, &rc))
		return rc;
	if (ls_query(&a, query, sizeof(query), &json, &err) < 0) {
		rc = cli_usage(self->name, "%s", err.msg);
	} else {
		cleanup_free char *path = xasprintf("/v1/audit%s", query);
		rc = cli_get_show(&cl, path, 0, json, show_records, NULL);
	}
	return cli_end(&a, &cl, rc);
}

/* Say whether the chain holds (as JSON with `json`); exit 0 when it does, else 1. */
static int show_verify(const json_t *res, int json)
{
	int ok = json_is_true(json_object_get(res, "ok"));
	int rc = ok ? CLI_EXIT_OK : CLI_EXIT_ERROR;

	if (json) {
		out_json(res, 1);
		return rc;
	}
	long long n = json_integer_value(json_object_get(res, "records"));
	const char *reason = json_string_value(json_object_get(res, "reason"));
	json_t *bad = json_object_get(res, "first_bad");
	if (ok) {
		printf("audit log intact: %lld record%s\n", n, n == 1 ? "" : "s");
	} else if (json_is_integer(bad)) {
		cli_die(rc, "audit log broken at record %lld: %s", json_integer_value(bad),
			reason ? reason : "the chain does not verify");
	} else {
		cli_die(rc, "audit log broken: %s", reason ? reason : "the chain does not verify");
	}
	return rc;
}

static int cmd_verify(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct cli_args a;
	struct client cl;
	json_t *res = NULL;
	int rc;

	if (!cli_begin(self, argc, argv, cli_json_only, 0, 0, 0, home, &a, &cl, &rc))
		return rc;
	/* Not cli_get_show: the exit code says whether the chain holds, --json or not. */
	rc = cli_get(&cl, "/v1/audit/verify", 0, &res);
	if (rc == CLI_EXIT_OK)
		rc = show_verify(res, cli_has_opt(&a, CLI_OPT_JSON));
	json_decref(res);
	return cli_end(&a, &cl, rc);
}

const struct cli_cmd cli_audit_cmds[] = {
	{ "audit ls", cmd_ls, "list recorded actions",
	  "Usage: kosa8 audit ls [--sandbox NAME] [--action A] [--since-seq N] [--limit N] "
	  "[--json]\n"
	  "\n"
	  "List the audit log: every action the daemon took (sandbox created, command run,\n"
	  "egress refused, ...), oldest first, with its sequence number.\n"
	  "\n"
	  "Options:\n"
	  "  --sandbox NAME   only records about this sandbox\n"
	  "  --action A       only this action, e.g. sandbox.run or sandbox.egress.deny\n"
	  "  --since-seq N    only records after sequence number N\n"
	  "  --limit N        at most N records\n"
	  "  --json           the records as JSON\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 audit ls --sandbox interp --limit 20\n" },
	{ "audit verify", cmd_verify, "check the log's hash chain",
	  "Usage: kosa8 audit verify [--json]\n"
	  "\n"
	  "Walk the audit log's hash chain: each record carries the SHA-256 of the one\n"
	  "before, and the daemon keeps the head apart, so an edited, removed or cut-off\n"
	  "record shows, in audit.log and in its rotated segments (audit.log.NNNNNN).\n"
	  "Exits 0 when the log is intact, 1 naming the first bad record.\n"
	  "\n"
	  "Options:\n"
	  "  --json     the daemon's answer: {\"ok\",\"records\",\"first_bad\",\"line\",\n"
	  "             \"segment\",\"segments\",\"reason\"}\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 audit verify\n" },
	{ NULL, NULL, NULL, NULL },
};
