/* SPDX-License-Identifier: Apache-2.0 */
/* audit.c - kosa8 audit ls|verify: read the daemon's hash-chained record of actions. */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

enum { OPT_JSON = 'j', OPT_SANDBOX = 's', OPT_ACTION = 'a', OPT_SINCE = 'S', OPT_LIMIT = 'l' };

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

static int cmd_ls(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = {
		{ "sandbox", 0, 1, OPT_SANDBOX }, { "action", 0, 1, OPT_ACTION },
		{ "since-seq", 0, 1, OPT_SINCE }, { "limit", 0, 1, OPT_LIMIT },
		{ "json", 0, 0, OPT_JSON }, { NULL, 0, 0, 0 },
	};
	static const char *const hdr[] = { "SEQ", "TIME", "ACTION", "SANDBOX", "DETAILS" };
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	json_t *res = NULL, *it;
	char query[2048] = "";
	cleanup_free char *path = NULL;
	size_t qoff = 0, i;
	int rc, json = 0;

	if (!cli_begin(self, argc, argv, opts, 0, 0, 0, home, &a, &cl, &rc))
		return rc;
	for (int k = 0; k < a.nopts; k++) {
		const char *v = a.opts[k].arg, *key = NULL;
		long n;

		switch (a.opts[k].id) {
		case OPT_JSON:
			json = 1;
			continue;
		case OPT_SANDBOX:
			if (cli_check_name(v, &err) < 0)
				goto usage;
			key = "sandbox";
			break;
		case OPT_ACTION:
			key = "action";
			break;
		case OPT_SINCE:
			if (cli_parse_range("--since-seq", v, 0, LONG_MAX, &n, &err) < 0)
				goto usage;
			key = "since_seq";
			break;
		case OPT_LIMIT:
			if (cli_parse_range("--limit", v, 1, 1000000, &n, &err) < 0)
				goto usage;
			key = "limit";
			break;
		}
		cleanup_free char *enc = cli_urlenc(v);
		int w = snprintf(query + qoff, sizeof(query) - qoff, "%c%s=%s", qoff ? '&' : '?',
				 key, enc);
		if (w < 0 || (size_t)w >= sizeof(query) - qoff) {
			k8_err_set(&err, -EINVAL, "the filters are too long");
			goto usage;
		}
		qoff += (size_t)w;
	}
	path = xasprintf("/v1/audit%s", query);
	if (client_call(&cl, "GET", path, NULL, NULL, NULL, 0, &res, &err) < 0) {
		rc = cli_fail(&err);
		goto out;
	}
	rc = CLI_EXIT_OK;
	if (json) {
		out_json(res, 1);
		goto out;
	}
	struct out_table *t = out_table_new(5, hdr);
	json_array_foreach(res, i, it) {
		char seq[24] = "", when[40], details[1024] = "";
		size_t doff = 0;
		json_t *tv = json_object_get(it, "time"), *d;

		if (!tv)
			tv = json_object_get(it, "ts");
		if (!tv)
			tv = json_object_get(it, "ts_ns");
		if (json_is_integer(json_object_get(it, "seq")))
			snprintf(seq, sizeof(seq), "%lld",
				 json_integer_value(json_object_get(it, "seq")));
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
	out_table_print(t, stdout);
	out_table_free(t);
	goto out;
usage:
	rc = cli_usage(self->name, "%s", err.msg);
out:
	json_decref(res);
	cli_args_free(&a);
	client_free(&cl);
	return rc;
}

static int cmd_verify(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	static const struct cli_opt opts[] = { { "json", 0, 0, OPT_JSON }, { NULL, 0, 0, 0 } };
	struct k8_err err = { 0 };
	struct cli_args a;
	struct client cl;
	json_t *res = NULL;
	int rc, ok;

	if (!cli_begin(self, argc, argv, opts, 0, 0, 0, home, &a, &cl, &rc))
		return rc;
	if (client_call(&cl, "GET", "/v1/audit/verify", NULL, NULL, NULL, 0, &res, &err) < 0) {
		rc = cli_fail(&err);
		goto out;
	}
	ok = json_is_true(json_object_get(res, "ok"));
	rc = ok ? CLI_EXIT_OK : CLI_EXIT_ERROR;
	if (a.nopts) {
		out_json(res, 1);
		goto out;
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
out:
	json_decref(res);
	cli_args_free(&a);
	client_free(&cl);
	return rc;
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
	  "record shows. Exits 0 when the log is intact, 1 naming the first bad record.\n"
	  "\n"
	  "Options:\n"
	  "  --json     the daemon's answer: {\"ok\",\"records\",\"first_bad\",\"reason\"}\n"
	  "\n"
	  "Example:\n"
	  "  kosa8 audit verify\n" },
	{ NULL, NULL, NULL, NULL },
};
