/* SPDX-License-Identifier: Apache-2.0 */
/* cli.h - what the files of the kosa8 command-line tool share: the parsed command line,
 * the daemon client, the exec stream pump, output helpers and the steps of a command.
 *
 * Errors inside the CLI follow the project convention (a negative errno plus a message in
 * a struct k8_err); main() turns the errno into the exit code of docs/reference/cli.md with
 * cli_exit_code(). The errno values carry these meanings:
 *
 *   -EINVAL        usage error, or the daemon answered bad_request      exit 2
 *   -ECONNREFUSED  the daemon is not running                            exit 3
 *   -ENOENT        not found                                            exit 4
 *   -EBUSY         conflict: name taken, busy, wrong state              exit 5
 *   -EAGAIN        unavailable: the sandbox's VM or agent is not answering exit 6
 *   anything else  error                                                exit 1
 */
#ifndef K8_CLI_H
#define K8_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/util.h"
#include "common/version.h"

/* Exit codes (docs/reference/cli.md). */
enum {
	CLI_EXIT_OK = 0,
	CLI_EXIT_ERROR = 1,
	CLI_EXIT_USAGE = 2,
	CLI_EXIT_NO_DAEMON = 3,
	CLI_EXIT_NOT_FOUND = 4,
	CLI_EXIT_CONFLICT = 5,
	CLI_EXIT_UNAVAILABLE = 6,
	CLI_EXIT_CANNOT_RUN = 125,
};

/* ---- args.c: command-line parsing and local validation (no I/O, unit tested) ---- */

/* One option a command accepts. `id` is the command's own tag for it. */
struct cli_opt {
	const char *name;     /* long name without "--" */
	char short_name;      /* single-letter form, 0 when none */
	int takes_arg;
	int id;
};

/* Ids every command accepts without listing them. */
enum { CLI_OPT_HELP = -1, CLI_OPT_HOME = -2 };

struct cli_optval {
	int id;
	const char *arg;      /* NULL for a flag without a value */
};

struct cli_args {
	struct cli_optval *opts;  /* in command-line order */
	int nopts;
	const char **pos;         /* positional arguments, pointers into argv */
	int npos;
	int help;                 /* --help or -h seen */
	const char *home;         /* --home DIR, NULL when not given */
};

/* Parse argv[0..argc) (the words after the command's name) against `opts` (terminated by
 * an entry whose name is NULL). Options and positionals may be mixed, "--" ends the
 * options; once `stop_after` positionals were seen (0: never), every later word is a
 * positional, verbatim. Returns 0, or -EINVAL with a message for an unknown flag, a
 * missing value or a value given to a flag that takes none. Free with cli_args_free. */
int cli_args_parse(int argc, char **argv, const struct cli_opt *opts, int stop_after,
		   struct cli_args *out, struct k8_err *err);
void cli_args_free(struct cli_args *a);

/* Sandbox name: [a-z0-9][a-z0-9_.-]{0,62}. 0 or -EINVAL with a message. */
int cli_check_name(const char *name, struct k8_err *err);
/* Whole decimal number in [min, max] for flag `flag`. 0 or -EINVAL with a message. */
int cli_parse_range(const char *flag, const char *s, long min, long max, long *out,
		    struct k8_err *err);

struct cli_mount {
	char *host;    /* as given (the caller makes it absolute) */
	char *guest;   /* absolute */
	int ro;
};
/* HOST:GUEST[:ro|:rw]. Fills *m with fresh strings; 0 or -EINVAL with a message. */
int cli_parse_mount(const char *spec, struct cli_mount *m, struct k8_err *err);
void cli_mount_free(struct cli_mount *m);
/* KEY=VAL or KEY: a non-empty key of letters, digits and '_' not starting with a digit.
 * 0 or -EINVAL with a message. */
int cli_check_env(const char *kv, struct k8_err *err);

/* $KOSA8_HOME decision: the flag, else the environment's KOSA8_HOME, else $HOME/.kosa8
 * when that folder exists, else the system service's home (KOSA8_SYSTEM_HOME) when it
 * exists, else $HOME/.kosa8. `is_dir` answers whether a folder exists (NULL: never asked,
 * $HOME/.kosa8 as before). Returns a fresh string or NULL with -EINVAL in err when none
 * applies. */
char *cli_home_pick(const char *flag, const char *env_home, const char *user_home,
		    int (*is_dir)(const char *path), struct k8_err *err);
/* The daemon's socket path under `home`; NULL with -ENAMETOOLONG when it does not fit in
 * a sockaddr_un. */
char *cli_sock_path(const char *home, struct k8_err *err);

/* Percent-encode everything but RFC 3986 unreserved characters. Fresh string. */
char *cli_urlenc(const char *s);
/* Map an API error code ("not_found", ...) to the errno convention above. */
int cli_api_errno(const char *code, long http_status);
/* Map a negative errno to the CLI's exit code. */
int cli_exit_code(int neg_errno);

/* ---- output.c: tables, sizes, times, JSON and progress rendering ---- */

struct out_table;
struct out_table *out_table_new(int ncols, const char *const *headers);
/* Add a row of `ncols` strings (copied; NULL prints as "-"). */
void out_table_row(struct out_table *t, const char *const *cells);
void out_table_print(struct out_table *t, FILE *f);
void out_table_free(struct out_table *t);
/* Add the row for one element of the array out_table_array prints. `now` is when the
 * table was started (seconds since the epoch), for "5m ago" cells. */
typedef void (*out_row_fn)(struct out_table *t, const json_t *item, double now);
/* Print the JSON array `items` on stdout as a table with these headers: a row an element,
 * made by row(). */
void out_table_array(const json_t *items, int ncols, const char *const *headers,
		     out_row_fn row);

/* "12.3 MB" style, decimal units. Writes into buf. */
const char *out_bytes(uint64_t n, char *buf, size_t len);
/* Seconds since the epoch of a JSON time (number of s/ms/ns, or an RFC 3339 string);
 * -1 when it cannot be read. */
double out_time_parse(const json_t *v);
/* "5m ago", relative to `now` (seconds since the epoch). */
const char *out_ago(double t, double now, char *buf, size_t len);
/* "2026-11-03 12:00:05" in local time. */
const char *out_localtime(double t, char *buf, size_t len);
/* "sha256:0123456789ab" (the first 12 hex digits). */
const char *out_short_digest(const char *digest, char *buf, size_t len);
/* Print `v` as JSON on stdout: pretty (indent 2) or one compact line. */
void out_json(const json_t *v, int pretty);
/* Write all of buf to fd; waits with poll() when fd is non-blocking. 0 or -errno. */
int out_write_all(int fd, const void *buf, size_t n);

#define OUT_PROGRESS_ITEMS 12
/* Progress of a long operation: updating lines per phase on a terminal (stderr), one per
 * item with a bar when the total is known,
 * JSON lines on stdout with --json, nothing otherwise. */
struct out_progress {
	int tty;
	int json;
	char phase[64];
	char line[256];
	uint64_t phase_start_ns;
	uint64_t last_draw_ns;
	int open;           /* a line is on screen without its newline */
	/* Within a phase, one bar per item ("what": e.g. each layer of a pull), so that
	 * parallel downloads each keep their own line. */
	struct {
		char what[72];
		uint64_t done, total;
	} items[OUT_PROGRESS_ITEMS];
	int nitems;
	int drawn;          /* item lines on screen (the cursor is on the last one) */
};
void out_progress_init(struct out_progress *p, int json);
void out_progress_update(struct out_progress *p, const json_t *progress);
/* out_progress_update with the client_progress_fn signature; ctx is the out_progress. */
void out_progress_cb(void *ctx, const json_t *progress);
/* Finish the line on screen, if any. */
void out_progress_end(struct out_progress *p);
/* A spinner line on stderr (tty only): "[/] message". */
void out_spinner(struct out_progress *p, const char *fmt, ...) K8_PRINTF(2, 3);
/* Erase the spinner line, if one is on screen. */
void out_spinner_clear(struct out_progress *p);

/* ---- client.c: HTTP/1.1 over the daemon's unix socket ---- */

struct client {
	char *home;
	char *sock;
	void *curl;     /* CURL *, created on first use */
};

int client_init(struct client *cl, const char *home_flag, struct k8_err *err);
void client_free(struct client *cl);

/* Called for each progress object of an NDJSON answer. */
typedef void (*client_progress_fn)(void *ctx, const json_t *progress);

/* One request. `body` may be NULL. On a 2xx answer *result gets the JSON answer (or the
 * "result" of a progress stream; `progress` sees the progress lines). On an error answer
 * returns the errno of cli_api_errno() with the daemon's message in err; -ECONNREFUSED
 * when nothing listens on the socket. `timeout_ms` 0 means none. */
int client_call(struct client *cl, const char *method, const char *path, const json_t *body,
		client_progress_fn progress, void *ctx, long timeout_ms, json_t **result,
		struct k8_err *err);
/* Called for each line of an event stream (a cell's); a negative return stops it. */
typedef int (*client_line_fn)(void *ctx, json_t *line);
/* Called about once a second while an event stream runs (libcurl's progress callback):
 * a non-zero return cancels it. */
typedef int (*client_tick_fn)(void *ctx);
/* One request whose 2xx answer is an NDJSON event stream (POST .../contexts/ID/run):
 * each line, parsed, goes to line(ctx) as it arrives; an error answer returns its errno
 * with the daemon's message. tick (may be NULL) cancelling ends it with -ECANCELED (the
 * daemon then interrupts the cell). */
int client_stream(struct client *cl, const char *method, const char *path, const json_t *body,
		  client_line_fn line, client_tick_fn tick, void *ctx, struct k8_err *err);
/* Is a daemon answering GET /v1/status? 1 and *status (may be NULL), or 0. */
int client_ping(struct client *cl, long timeout_ms, json_t **status);

/* Open an exec stream: POST `body` to `path` asking for an upgrade to kosa8-stream.
 * On 101 returns 0 with the connected socket in *fd and the bytes that followed the
 * answer's head in *extra (malloc'd, *extra_len may be 0). Otherwise returns the mapped
 * errno with the daemon's message. */
int client_exit_hint(void);
int client_upgrade(struct client *cl, const char *path, const json_t *body, int *fd,
		   unsigned char **extra, size_t *extra_len, struct k8_err *err);
/* The "not running" message for this client's socket, as a k8_err. */
int client_not_running(struct client *cl, int absent, struct k8_err *err);
/* -EACCES with the message saying who may use the socket when connecting to it is
 * refused for lack of permission (not in its group); 0 otherwise. */
int client_denied(struct client *cl, struct k8_err *err);

/* ---- stream.c: an exec stream between this terminal and a process in a sandbox ---- */

/* Pump frames until the process exits. Returns 0 with its exit status in *code, or a
 * negative errno: -ECONNRESET (connection lost), -EPROTO (bad frame), -ECANCELED (the
 * user disconnected; *code holds 128+signal). */
int stream_pump(int fd, const unsigned char *extra, size_t extra_len, int forward_stdin,
		int *code, struct k8_err *err);

/* ---- the verb groups ---- */

/* One command: `kosa8 GROUP NAME ...`. fn gets the words after NAME. */
struct cli_cmd {
	const char *name;
	int (*fn)(const struct cli_cmd *self, int argc, char **argv, const char *home);
	const char *summary;  /* one line for the group's listing */
	const char *help;     /* full --help text: usage, what it does, options, example */
};

extern const struct cli_cmd cli_daemon_cmds[];   /* daemon.c, NULL-name terminated */
extern const struct cli_cmd cli_sandbox_cmds[];  /* sandbox.c */
extern const struct cli_cmd cli_image_cmds[];    /* image.c */
extern const struct cli_cmd cli_audit_cmds[];    /* audit.c */
extern const struct cli_cmd cli_model_cmds[];    /* model.c */
extern const struct cli_cmd cli_bundle_cmds[];   /* bundle.c */
extern const struct cli_cmd cli_guest_cmds[];    /* guest.c */
extern const struct cli_cmd cli_checkpoint_cmds[]; /* checkpoint.c */
extern const struct cli_cmd cli_secret_cmds[];   /* secret.c */
extern const struct cli_cmd cli_e2b_cmds[];      /* e2b.c */
extern const struct cli_cmd cli_store_cmds[];    /* store.c */
extern const struct cli_cmd cli_rewind_cmd;      /* checkpoint.c: a verb of its own */
extern const struct cli_cmd cli_login_cmd;       /* image.c: likewise */
extern const struct cli_cmd cli_mcp_cmd;         /* mcp.c: likewise */
int cli_cmd_mcp(const struct cli_cmd *self, int argc, char **argv, const char *home);
int cli_cmd_pause(const struct cli_cmd *self, int argc, char **argv, const char *home);
int cli_cmd_cp(const struct cli_cmd *self, int argc, char **argv, const char *home); /* cp.c */
int cli_cmd_fork(const struct cli_cmd *self, int argc, char **argv, const char *home);
int cli_cmd_resume(const struct cli_cmd *self, int argc, char **argv, const char *home);
/* ports.c: sandbox port, and the "published ..." lines of sandbox create */
int cli_cmd_port(const struct cli_cmd *self, int argc, char **argv, const char *home);
/* interp.c: the interpreter (docs/interpreter.md) */
int cli_cmd_context(const struct cli_cmd *self, int argc, char **argv, const char *home);
int cli_cmd_cell(const struct cli_cmd *self, int argc, char **argv, const char *home);
int cli_cmd_repl(const struct cli_cmd *self, int argc, char **argv, const char *home);
void cli_ports_print(const json_t *ports);

/* main.c: print a command's --help on stdout; returns 0. */
int cli_help(const struct cli_cmd *cmd);

/* main.c: print "kosa8: <message>" for err and return the exit code for its errno. */
int cli_fail(const struct k8_err *err);
/* Print "kosa8: <message>" (printf-style) and return `code`. */
int cli_die(int code, const char *fmt, ...) K8_PRINTF(2, 3);
/* Usage error for command `cmd`: message, then a pointer to its --help; returns 2. */
int cli_usage(const char *cmd, const char *fmt, ...) K8_PRINTF(2, 3);
/* The home for a command: its own --home wins over the global one. */
const char *cli_home(const struct cli_args *a, const char *global_home);
/* ---- cmd.c: the steps commands share, from cli_begin to cli_end ----
 *
 * The helpers below that talk to the daemon report a failure themselves (cli_fail) and
 * return an exit code: CLI_EXIT_OK (0) on success, the failure's code otherwise. */

/* The id of --json, the same in every command that has it, and the option list of the
 * commands whose only flag it is. */
enum { CLI_OPT_JSON = 'j' };
extern const struct cli_opt cli_json_only[];

/* Was an option with this id given (once or more)? */
int cli_has_opt(const struct cli_args *a, int id);
/* The value of the last option with this id, NULL when none was given. */
const char *cli_opt_last(const struct cli_args *a, int id);

/* The common start of a command: parse argv against opts, answer --help, check that
 * there are min_pos..max_pos positionals (max_pos < 0: no limit), and, when cl is not
 * NULL, set up the client. Returns 1 to go on; 0 when the command is over, with its exit
 * code in *rc (help printed, or a usage error reported). */
int cli_begin(const struct cli_cmd *self, int argc, char **argv, const struct cli_opt *opts,
	      int stop_after, int min_pos, int max_pos, const char *home, struct cli_args *a,
	      struct client *cl, int *rc);
/* The common end of a command that cli_begin let go on: free its arguments and client,
 * return rc (its exit code). */
int cli_end(struct cli_args *a, struct client *cl, int rc);

/* GET path (timeout_ms 0: none). CLI_EXIT_OK with the answer in *res, which the caller
 * json_decref()s; else the failure is reported and its exit code returned. */
int cli_get(struct client *cl, const char *path, long timeout_ms, json_t **res);

/* Print a command's successful answer `res` for a person; returns the exit code. */
typedef int (*cli_show_fn)(const json_t *res, void *ctx);
/* GET path and print the answer: as indented JSON when `json` (then the exit code is
 * CLI_EXIT_OK), else with show(res, ctx). */
int cli_get_show(struct client *cl, const char *path, long timeout_ms, int json,
		 cli_show_fn show, void *ctx);
/* A whole command that takes no positionals and no flag but --json: cli_begin, then
 * cli_get_show of path with the command's struct client * as show's ctx, then cli_end. */
int cli_view(const struct cli_cmd *self, int argc, char **argv, const char *home,
	     const char *path, long timeout_ms, cli_show_fn show);

/* POST body to path (no timeout) showing the daemon's progress as out_progress does.
 * With `json` the progress objects and then the result go to stdout as JSON lines, and
 * the caller prints nothing more. CLI_EXIT_OK with the result in *res (the caller
 * json_decref()s it), else the failure is reported and its exit code returned. */
int cli_post_progress(struct client *cl, const char *path, const json_t *body, int json,
		      json_t **res);

/* One line of stdin into buf (at most cap - 1 bytes and a NUL, without its newline or a
 * CR before it), read a byte at a time so nothing after it is consumed; on a terminal
 * after "PROMPT: " on stderr, typed without echo when `hidden`. Its length, or -E2BIG
 * when it did not fit (the rest of the line is read and dropped). */
ssize_t cli_read_line(const char *prompt, bool hidden, char *buf, size_t cap);

/* Act on one item of a command that takes several (image rm REF..., sandbox rm
 * NAME...): 0, or a negative errno with the message in err (which starts zeroed). */
typedef int (*cli_item_fn)(struct client *cl, const char *item, void *ctx,
			   struct k8_err *err);
/* Call fn for each of items[0..n), reporting each failure and going on with the next
 * item, except after -ECONNREFUSED (no daemon: the rest would fail alike). Returns the
 * exit code of the last failure, or CLI_EXIT_OK when there was none. */
int cli_each(struct client *cl, const char *const *items, int n, cli_item_fn fn, void *ctx);

#endif
