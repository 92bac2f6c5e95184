/* SPDX-License-Identifier: Apache-2.0 */
/* envd.c - envd's process service on the wire: requests checked, events built (envd.h). */
#include "e2b/envd.h"
#include "docker/stream.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

json_t *e2b_field(json_t *obj, const char *json_name, const char *proto_name)
{
	json_t *v;

	if (!json_is_object(obj))
		return NULL;
	v = json_object_get(obj, json_name);
	if ((!v || json_is_null(v)) && proto_name)
		v = json_object_get(obj, proto_name);
	return json_is_null(v) ? NULL : v;
}

int e2b_json_u32(json_t *v, uint32_t *out)
{
	if (!v || json_is_null(v))
		return -ENOENT;
	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);
		if (x < 0 || x > UINT32_MAX)
			return -EINVAL;
		*out = (uint32_t)x;
		return 0;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		uint64_t x = 0;
		size_t n = json_string_length(v);
		if (!n || n > 10)
			return -EINVAL;
		for (size_t i = 0; i < n; i++) {
			if (s[i] < '0' || s[i] > '9')
				return -EINVAL;
			x = x * 10 + (uint64_t)(s[i] - '0');
		}
		if (x > UINT32_MAX)
			return -EINVAL;
		*out = (uint32_t)x;
		return 0;
	}
	return -EINVAL;
}

/* A string without NUL bytes, at most max bytes. */
static bool plain_str(json_t *v, size_t max)
{
	return json_is_string(v) && json_string_length(v) <= max &&
	       strlen(json_string_value(v)) == json_string_length(v);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* envs (a map of strings) as sorted "K=V" strings; a key must be a name without '='. */
static int start_env(json_t *envs, json_t **out, size_t *total, struct k8_err *err)
{
	const char *k;
	json_t *v;
	size_t n = 0, i;
	const char **keys;

	*out = json_array();
	if (!envs)
		return 0;
	if (!json_is_object(envs))
		return k8_err_set(err, -EINVAL, "process.envs must be a map of strings");
	if (json_object_size(envs) > E2B_ARGV_MAX)
		return k8_err_set(err, -E2BIG, "process.envs has more than %d entries", E2B_ARGV_MAX);
	keys = xcalloc(json_object_size(envs) + 1, sizeof(*keys));
	json_object_foreach(envs, k, v) {
		if (!*k || strchr(k, '=') || strlen(k) > 4096 || !plain_str(v, E2B_CMD_MAX)) {
			free(keys);
			return k8_err_set(err, -EINVAL, "process.envs: '%.60s' must be a variable name "
					  "(no '=', no NUL) with a string value", k);
		}
		keys[n++] = k;
		*total += strlen(k) + json_string_length(v) + 6;
	}
	qsort(keys, n, sizeof(*keys), cmp_str);
	for (i = 0; i < n; i++)
		json_array_append_new(*out, json_sprintf("%s=%s", keys[i],
							 json_string_value(json_object_get(envs, keys[i]))));
	free(keys);
	return 0;
}

static int pty_size(json_t *pty, const char *what, unsigned *cols, unsigned *rows,
		    struct k8_err *err)
{
	json_t *size = e2b_field(pty, "size", NULL);
	uint32_t c = 0, r = 0;
	int e1, e2;

	if (!json_is_object(pty) || (size && !json_is_object(size)))
		return k8_err_set(err, -EINVAL, "%s must be {\"size\":{\"cols\",\"rows\"}}", what);
	e1 = e2b_json_u32(e2b_field(size, "cols", NULL), &c);
	e2 = e2b_json_u32(e2b_field(size, "rows", NULL), &r);
	if (e1 == -EINVAL || e2 == -EINVAL || c > 65535 || r > 65535)
		return k8_err_set(err, -EINVAL, "%s.size: cols and rows must be 0..65535", what);
	*cols = c;
	*rows = r;
	return 0;
}

int e2b_start_parse(json_t *msg, struct e2b_start *s, struct k8_err *err)
{
	json_t *proc = e2b_field(msg, "process", NULL), *args, *v, *pty, *tag, *in, *cwd;
	size_t total = 0, i;
	int r;

	memset(s, 0, sizeof(*s));
	if (!json_is_object(proc))
		return k8_err_set(err, -EINVAL, "field 'process' (a ProcessConfig) is required");
	v = e2b_field(proc, "cmd", NULL);
	if (!plain_str(v, E2B_PATH_MAX) || !json_string_length(v))
		return k8_err_set(err, -EINVAL, "process.cmd must be a non-empty string");
	s->argv = json_array();
	json_array_append(s->argv, v);
	total = json_string_length(v) + 4;
	args = e2b_field(proc, "args", NULL);
	if (args && (!json_is_array(args) || json_array_size(args) > E2B_ARGV_MAX)) {
		r = k8_err_set(err, -EINVAL, "process.args must be a list of at most %d strings",
			       E2B_ARGV_MAX);
		goto fail;
	}
	json_array_foreach(args, i, v) {
		if (!plain_str(v, E2B_CMD_MAX)) {
			r = k8_err_set(err, -EINVAL, "process.args must hold strings without NUL bytes");
			goto fail;
		}
		total += json_string_length(v) + 4;
		json_array_append(s->argv, v);
	}
	if ((r = start_env(e2b_field(proc, "envs", NULL), &s->env, &total, err)))
		goto fail;
	if (total > E2B_CMD_MAX) {
		r = k8_err_set(err, -E2BIG, "the command, its arguments and environment are too "
			       "long (at most %u KiB together)", E2B_CMD_MAX / 1024);
		goto fail;
	}
	cwd = e2b_field(proc, "cwd", NULL);
	if (cwd) {
		if (!plain_str(cwd, E2B_PATH_MAX)) {
			r = k8_err_set(err, -EINVAL, "process.cwd must be a path of at most %d bytes",
				       E2B_PATH_MAX);
			goto fail;
		}
		snprintf(s->cwd, sizeof(s->cwd), "%s", json_string_value(cwd));
	}
	pty = e2b_field(msg, "pty", NULL);
	if (pty) {
		if ((r = pty_size(pty, "pty", &s->cols, &s->rows, err)))
			goto fail;
		s->pty = true;
	}
	tag = e2b_field(msg, "tag", NULL);
	if (tag) {
		if (!plain_str(tag, E2B_TAG_MAX)) {
			r = k8_err_set(err, -EINVAL, "tag must be a string of at most %d bytes",
				       E2B_TAG_MAX);
			goto fail;
		}
		snprintf(s->tag, sizeof(s->tag), "%s", json_string_value(tag));
	}
	in = e2b_field(msg, "stdin", NULL);
	if (in && !json_is_boolean(in)) {
		r = k8_err_set(err, -EINVAL, "stdin must be true or false");
		goto fail;
	}
	s->stdin = json_is_true(in);
	v = e2b_field(proc, "envs", NULL);
	s->config = json_pack("{s:O,s:o,s:o}", "cmd", json_array_get(s->argv, 0), "args",
			      args ? json_incref(args) : json_array(), "envs",
			      v ? json_incref(v) : json_object());
	if (s->cwd[0])
		json_object_set_new(s->config, "cwd", json_string(s->cwd));
	return 0;
fail:
	e2b_start_clear(s);
	return r;
}

void e2b_start_clear(struct e2b_start *s)
{
	json_decref(s->argv);
	json_decref(s->env);
	json_decref(s->config);
	s->argv = s->env = s->config = NULL;
}

int e2b_sel_parse(json_t *msg, struct e2b_sel *sel, struct k8_err *err)
{
	json_t *p = e2b_field(msg, "process", NULL), *tag;
	int r;

	memset(sel, 0, sizeof(*sel));
	if (!json_is_object(p))
		return k8_err_set(err, -EINVAL, "field 'process' (a ProcessSelector) is required");
	r = e2b_json_u32(e2b_field(p, "pid", NULL), &sel->pid);
	if (r == -EINVAL)
		return k8_err_set(err, -EINVAL, "process.pid must be an integer 0..4294967295");
	if (r == 0)
		return 0;
	tag = e2b_field(p, "tag", NULL);
	if (!plain_str(tag, E2B_TAG_MAX) || !json_string_length(tag))
		return k8_err_set(err, -EINVAL, "the process selector needs a pid or a tag");
	snprintf(sel->tag, sizeof(sel->tag), "%s", json_string_value(tag));
	return 0;
}

int e2b_input_parse(json_t *msg, uint8_t **data, size_t *n, bool *pty, struct k8_err *err)
{
	json_t *in = e2b_field(msg, "input", NULL), *v;
	ssize_t got;
	size_t len;

	*data = NULL;
	*n = 0;
	if (!json_is_object(in))
		return k8_err_set(err, -EINVAL, "field 'input' ({\"stdin\"} or {\"pty\"}) is required");
	v = e2b_field(in, "stdin", NULL);
	*pty = !v;
	if (!v)
		v = e2b_field(in, "pty", NULL);
	if (!json_is_string(v))
		return k8_err_set(err, -EINVAL, "input.stdin or input.pty must be base64 bytes");
	len = json_string_length(v);
	if (len / 4 * 3 > E2B_INPUT_MAX)
		return k8_err_set(err, -E2BIG, "the input is larger than %u bytes", E2B_INPUT_MAX);
	/* proto3 JSON parsers accept base64 without padding; ours pads it back */
	char *padded = xmalloc(len + 4);
	memcpy(padded, json_string_value(v), len);
	while (len % 4)
		padded[len++] = '=';
	*data = xmalloc(len / 4 * 3 + 1);
	got = ds_b64_decode(padded, len, *data);
	free(padded);
	if (got < 0) {
		free(*data);
		*data = NULL;
		return k8_err_set(err, -EINVAL, "the input is not valid base64");
	}
	*n = (size_t)got;
	return 0;
}

int e2b_signal_parse(json_t *msg, int *sig, struct k8_err *err)
{
	json_t *v = e2b_field(msg, "signal", NULL);
	const char *s = json_string_value(v);
	uint32_t num;

	if (s && !strcmp(s, "SIGNAL_SIGKILL"))
		num = SIGKILL;
	else if (s && !strcmp(s, "SIGNAL_SIGTERM"))
		num = SIGTERM;
	else if (!s && e2b_json_u32(v, &num) == 0 && (num == SIGKILL || num == SIGTERM))
		;
	else
		return k8_err_set(err, -EINVAL, "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
	*sig = (int)num;
	return 0;
}

int e2b_timeout_parse(const char *header, uint64_t *ms, struct k8_err *err)
{
	size_t n = header ? strlen(header) : 0;
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++) {
		if (header[i] < '0' || header[i] > '9' || i == 10)
			return k8_err_set(err, -EINVAL, "Connect-Timeout-Ms must be a number of "
					  "milliseconds, at most 10 digits");
		v = v * 10 + (uint64_t)(header[i] - '0');
	}
	*ms = v;
	return 0;
}

int e2b_update_parse(json_t *msg, unsigned *cols, unsigned *rows, struct k8_err *err)
{
	json_t *pty = e2b_field(msg, "pty", NULL);

	if (!pty)
		return -ENOENT;
	return pty_size(pty, "pty", cols, rows, err);
}

int e2b_basic_user(const char *header, char out[E2B_USER_MAX + 1], struct k8_err *err)
{
	static const char basic[] = "Basic ";
	uint8_t dec[3 * 64 / 4 + 1];
	size_t n = header ? strlen(header) : 0, i;
	ssize_t got;

	if (n <= strlen(basic) || strncasecmp(header, basic, strlen(basic)))
		goto bad;
	header += strlen(basic);
	n -= strlen(basic);
	if (n > 64 || n % 4)
		goto bad;
	got = ds_b64_decode(header, n, dec);
	if (got <= 0)
		goto bad;
	for (i = 0; i < (size_t)got && dec[i] != ':'; i++) {
		bool ok = (dec[i] >= 'a' && dec[i] <= 'z') || (dec[i] >= 'A' && dec[i] <= 'Z') ||
			  (dec[i] >= '0' && dec[i] <= '9') || dec[i] == '.' || dec[i] == '_' ||
			  (dec[i] == '-' && i > 0);
		if (!ok || i >= E2B_USER_MAX)
			goto bad;
		out[i] = (char)dec[i];
	}
	if (!i)
		goto bad;
	out[i] = '\0';
	return 0;
bad:
	return k8_err_set(err, -EINVAL, "the Authorization header must be \"Basic \" and the "
			  "base64 of USER: (a user name of 1..%d letters, digits, '.', '_' or '-')",
			  E2B_USER_MAX);
}

/* ---- events ---- */

json_t *e2b_ev_start(uint32_t pid)
{
	return json_pack("{s:{s:{s:I}}}", "event", "start", "pid", (json_int_t)pid);
}

json_t *e2b_ev_data(const char *which, const uint8_t *p, size_t n)
{
	char *b = xmalloc(4 * ((n + 2) / 3) + 1);
	json_t *v;

	ds_b64_encode(p, n, b);
	v = json_pack("{s:{s:{s:s}}}", "event", "data", which, b);
	free(b);
	return v;
}

json_t *e2b_ev_keepalive(void)
{
	return json_pack("{s:{s:{}}}", "event", "keepalive");
}

const char *e2b_signal_text(int sig, char buf[16])
{
	/* Go's syscall signal table (zerrors_linux.go), which os.ProcessState prints */
	static const char *const names[] = {
		[SIGHUP] = "hangup", [SIGINT] = "interrupt", [SIGQUIT] = "quit",
		[SIGILL] = "illegal instruction", [SIGTRAP] = "trace/breakpoint trap",
		[SIGABRT] = "aborted", [SIGBUS] = "bus error",
		[SIGFPE] = "floating point exception", [SIGKILL] = "killed",
		[SIGUSR1] = "user defined signal 1", [SIGSEGV] = "segmentation fault",
		[SIGUSR2] = "user defined signal 2", [SIGPIPE] = "broken pipe",
		[SIGALRM] = "alarm clock", [SIGTERM] = "terminated",
	};

	if (sig > 0 && (size_t)sig < ARRAY_SIZE(names) && names[sig])
		return names[sig];
	snprintf(buf, 16, "signal %d", sig);
	return buf;
}

json_t *e2b_ev_end(json_t *exit_info)
{
	json_int_t code = json_integer_value(json_object_get(exit_info, "code"));
	json_int_t sig = json_integer_value(json_object_get(exit_info, "signal"));
	const char *error = json_string_value(json_object_get(exit_info, "error"));
	char status[64], buf[16];
	json_t *end;

	if (sig > 0 && sig < 65) {
		snprintf(status, sizeof(status), "signal: %s", e2b_signal_text((int)sig, buf));
		/* Go's cmd.Wait() error for a signalled process, which envd passes on */
		end = json_pack("{s:I,s:b,s:s,s:s}", "exitCode", (json_int_t)-1, "exited", 0,
				"status", status, "error", status);
	} else {
		if (code < -1 || code > 255)
			code = 255;
		snprintf(status, sizeof(status), "exit status %lld", (long long)code);
		end = json_pack("{s:I,s:b,s:s}", "exitCode", code, "exited", 1, "status", status);
	}
	if (error && *error)
		json_object_set_new(end, "error", json_string(error));
	return json_pack("{s:{s:o}}", "event", "end", end);
}

json_t *e2b_proc_info(json_t *config, uint32_t pid, const char *tag)
{
	json_t *v = json_pack("{s:O,s:I}", "config", config, "pid", (json_int_t)pid);

	if (tag && *tag)
		json_object_set_new(v, "tag", json_string(tag));
	return v;
}
