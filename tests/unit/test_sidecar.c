/* SPDX-License-Identifier: Apache-2.0 */
/* test_sidecar.c - the sidecar skeleton (src/common/sidecar.c): the JSON-lines control
 * server over a real socketpair (reply shape, ids, a line at the limit and one over it,
 * bad JSON, an fd passed along and which line it belongs to, events, the newest client
 * winning), the unix-socket listener, UID:GID parsing and the seccomp base in a child. */
#include "common/sidecar.h"
#include "t.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define LINE_MAX_T 256

static int handled;

/* ops: ping; fail (an error); take (keeps the fd, writes "x" to it); fd (says whether
 * one came, leaves it) */
static json_t *t_handle(void *ctx, json_t *req, int *fd, struct k8_err *err)
{
	const char *op = json_string_value(json_object_get(req, "op"));

	handled++;
	if (!strcmp(op, "ping"))
		return json_object();
	if (!strcmp(op, "fail")) {
		k8_err_set(err, -EINVAL, "it failed: %s", "on purpose");
		return NULL;
	}
	if (!strcmp(op, "take")) {
		if (*fd < 0)
			return json_pack("{s:b}", "got", 0);
		if (write(*fd, "x", 1) != 1)
			return NULL;
		close(*fd);
		*fd = -1;
		return json_pack("{s:b}", "got", 1);
	}
	if (!strcmp(op, "fd"))
		return json_pack("{s:b}", "got", *fd >= 0);
	k8_err_set(err, -EINVAL, "unknown op");
	return NULL;
}

/* One turn of the server's loop. */
static void pump(struct sc_ctl *c)
{
	struct pollfd p[1 + SC_CTL_MAX_CLIENTS];

	sc_ctl_poll_fill(c, p);
	poll(p, (nfds_t)sc_ctl_nfds(c), 100);
	sc_ctl_poll_done(c, p);
}

/* The next line the client receives (NULL at EOF or after 1 s), as JSON. */
static json_t *reply(struct sc_ctl *c, int fd)
{
	char buf[4096];
	size_t n = 0;

	for (int k = 0; k < 20 && n < sizeof(buf) - 1; k++) {
		pump(c);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			continue;
		/* byte by byte: leave the next line in the socket */
		while (n < sizeof(buf) - 1) {
			ssize_t r = recv(fd, buf + n, 1, MSG_DONTWAIT);
			if (r == 0)
				return NULL;
			if (r < 0)
				break;
			if (buf[n++] == '\n')
				return json_loadb(buf, n - 1, 0, NULL);
		}
	}
	return NULL;
}

static bool peer_closed(struct sc_ctl *c, int fd)
{
	char b;

	for (int k = 0; k < 20; k++) {
		pump(c);
		ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return true;
	}
	return false;
}

static void say(int fd, const char *s)
{
	CHECK_EQ_INT(write(fd, s, strlen(s)), (long long)strlen(s));
}

/* The first byte of `s` with `pass` along (SCM_RIGHTS), the rest after it, as the
 * daemon's sidecar_send_line does. */
static void say_fd(int sock, const char *s, int pass)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov = { .iov_base = (void *)s, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;

	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &pass, sizeof(int));
	CHECK_EQ_INT(sendmsg(sock, &mh, 0), 1);
	say(sock, s + 1);
}

static void check_ok(json_t *r, long long id)
{
	CHECK(json_is_true(json_object_get(r, "ok")));
	CHECK_EQ_INT(json_integer_value(json_object_get(r, "id")), id);
	json_decref(r);
}

static void check_err(json_t *r, const char *prefix)
{
	const char *e = json_string_value(json_object_get(r, "error"));

	CHECK(json_is_false(json_object_get(r, "ok")));
	CHECK(e && !strncmp(e, prefix, strlen(prefix)));
	if (!e || strncmp(e, prefix, strlen(prefix)))
		fprintf(stderr, "  error was: %s\n", e ? e : "(none)");
	json_decref(r);
}

static void new_server(struct sc_ctl *c, int sp[2], int max_clients, bool wipe)
{
	CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	sc_ctl_init(c, -1, &(struct sc_ctl_conf){ .line_max = LINE_MAX_T,
		.max_clients = max_clients, .take_fds = true, .wipe = wipe,
		.handle = t_handle });
	CHECK_EQ_INT(sc_ctl_adopt(c, sp[0]), 0);
}

static void test_ctl_replies(void)
{
	struct sc_ctl c;
	int sp[2];
	json_t *r;
	char line[LINE_MAX_T + 8];

	new_server(&c, sp, 1, true);
	say(sp[1], "{\"id\":7,\"op\":\"ping\"}\n");
	r = reply(&c, sp[1]);
	CHECK(r && json_object_size(r) == 2);          /* exactly {"id":7,"ok":true} */
	check_ok(r, 7);
	/* no id in, none out */
	say(sp[1], "{\"op\":\"ping\"}\n");
	r = reply(&c, sp[1]);
	CHECK(r && !json_object_get(r, "id") && json_is_true(json_object_get(r, "ok")));
	json_decref(r);
	/* an error: {"id":..,"ok":false,"error":"<message>"} */
	say(sp[1], "{\"id\":8,\"op\":\"fail\"}\n");
	r = reply(&c, sp[1]);
	CHECK_EQ_INT(json_integer_value(json_object_get(r, "id")), 8);
	check_err(r, "it failed: on purpose");
	/* bad JSON, not an object, no op, duplicate keys, unknown op: answered, not fatal */
	handled = 0;
	/* (wipe: jansson's message, which may quote the line, is left out) */
	say(sp[1], "{\"id\":9,\"op\":\"secret-value\n");
	r = reply(&c, sp[1]);
	CHECK_STR(json_string_value(json_object_get(r, "error")), "not a JSON object");
	json_decref(r);
	say(sp[1], "[1,2]\n");
	check_err(reply(&c, sp[1]), "not a JSON object");
	say(sp[1], "{\"id\":10}\n");
	check_err(reply(&c, sp[1]), "missing \"op\"");
	say(sp[1], "{\"id\":11,\"op\":\"ping\",\"op\":\"fail\"}\n");
	check_err(reply(&c, sp[1]), "not a JSON object");
	say(sp[1], "{\"id\":12,\"op\":\"nope\"}\n");
	check_err(reply(&c, sp[1]), "unknown op");
	CHECK_EQ_INT(handled, 1);                      /* only the last reached the handler */
	/* empty lines are passed over; two requests in one write both answered, in order */
	say(sp[1], "\n\n{\"id\":13,\"op\":\"ping\"}\n{\"id\":14,\"op\":\"ping\"}\n");
	check_ok(reply(&c, sp[1]), 13);
	check_ok(reply(&c, sp[1]), 14);
	/* wiped: the handled bytes are gone from the buffer */
	CHECK(c.cl[0].inlen == 0 && memchr(c.cl[0].in, 'p', LINE_MAX_T) == NULL);

	/* a line of exactly line_max bytes ('\n' included) is served */
	memset(line, ' ', sizeof(line));
	memcpy(line, "{\"id\":15,\"op\":\"ping\"}", 21);
	line[LINE_MAX_T - 1] = '\n';
	line[LINE_MAX_T] = '\0';
	say(sp[1], line);
	check_ok(reply(&c, sp[1]), 15);
	/* one byte more and the connection is dropped, nothing answered */
	line[LINE_MAX_T - 1] = ' ';
	line[LINE_MAX_T] = '\n';
	line[LINE_MAX_T + 1] = '\0';
	say(sp[1], line);
	CHECK(peer_closed(&c, sp[1]));
	CHECK_EQ_INT(c.cl[0].fd, -1);
	close(sp[1]);
	sc_ctl_free(&c);
}

static void test_ctl_fds(void)
{
	struct sc_ctl c;
	int sp[2], pp[2];
	char b;
	json_t *r;

	new_server(&c, sp, 1, false);
	/* without wipe, a parse error says where */
	say(sp[1], "{\"id\":1,\"op\":\n");
	check_err(reply(&c, sp[1]), "not a JSON object: ");
	/* an fd along a line reaches that line's handler, which keeps it */
	CHECK_EQ_INT(pipe(pp), 0);
	say_fd(sp[1], "{\"id\":1,\"op\":\"take\"}\n", pp[1]);
	close(pp[1]);
	r = reply(&c, sp[1]);
	CHECK(json_is_true(json_object_get(r, "got")));
	check_ok(r, 1);
	CHECK_EQ_INT(read(pp[0], &b, 1), 1);
	CHECK(b == 'x');
	CHECK_EQ_INT(read(pp[0], &b, 1), 0);           /* no copy of the write end is left */
	close(pp[0]);

	/* an fd the op does not want is closed by the server */
	CHECK_EQ_INT(pipe(pp), 0);
	say_fd(sp[1], "{\"id\":2,\"op\":\"ping\"}\n", pp[1]);
	close(pp[1]);
	check_ok(reply(&c, sp[1]), 2);
	CHECK_EQ_INT(read(pp[0], &b, 1), 0);
	close(pp[0]);

	/* a line without an fd, then one with: the fd is the second line's, even when
	 * both arrive in one read */
	CHECK_EQ_INT(pipe(pp), 0);
	say(sp[1], "{\"id\":3,\"op\":\"fd\"}\n");
	say_fd(sp[1], "{\"id\":4,\"op\":\"take\"}\n", pp[1]);
	close(pp[1]);
	r = reply(&c, sp[1]);
	CHECK(json_is_false(json_object_get(r, "got")));
	check_ok(r, 3);
	r = reply(&c, sp[1]);
	CHECK(json_is_true(json_object_get(r, "got")));
	check_ok(r, 4);
	CHECK_EQ_INT(read(pp[0], &b, 1), 1);
	close(pp[0]);

	/* an fd with a line that is never finished goes when the client does */
	CHECK_EQ_INT(pipe(pp), 0);
	say_fd(sp[1], "{\"id\":5", pp[1]);
	close(pp[1]);
	pump(&c);
	CHECK(c.cl[0].passed_fd >= 0);
	close(sp[1]);
	for (int k = 0; k < 10 && c.cl[0].fd >= 0; k++)
		pump(&c);
	CHECK_EQ_INT(c.cl[0].fd, -1);
	CHECK_EQ_INT(read(pp[0], &b, 1), 0);
	close(pp[0]);
	sc_ctl_free(&c);
}

static void test_ctl_clients_events(void)
{
	struct sc_ctl c;
	int a[2], b[2];
	json_t *r;

	/* one client: the newest wins, and events go to it */
	new_server(&c, a, 1, false);
	CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b), 0);
	CHECK_EQ_INT(sc_ctl_adopt(&c, b[0]), 0);
	CHECK(peer_closed(&c, a[1]));
	sc_ctl_event(&c, json_pack("{s:s}", "event", "deny"));
	r = reply(&c, b[1]);
	CHECK_STR(json_string_value(json_object_get(r, "event")), "deny");
	CHECK(!json_object_get(r, "id") && !json_object_get(r, "ok"));
	json_decref(r);
	close(a[1]);
	close(b[1]);
	sc_ctl_free(&c);

	/* several clients: each gets its own replies, and the limit holds */
	new_server(&c, a, 2, false);
	CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b), 0);
	CHECK_EQ_INT(sc_ctl_adopt(&c, b[0]), 0);
	int x[2];
	CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x), 0);
	CHECK_EQ_INT(sc_ctl_adopt(&c, x[0]), -EMFILE);
	close(x[1]);
	say(b[1], "{\"id\":2,\"op\":\"ping\"}\n");
	say(a[1], "{\"id\":1,\"op\":\"ping\"}\n");
	check_ok(reply(&c, a[1]), 1);
	check_ok(reply(&c, b[1]), 2);
	close(a[1]);
	close(b[1]);
	sc_ctl_free(&c);
}

static void test_listen(void)
{
	char dir[] = "/tmp/k8-sc-XXXXXX", path[128], longp[200];
	struct stat st;
	int fd, cfd;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/ctl", dir);
	fd = sc_listen(path, 4, true);
	CHECK(fd >= 0);
	CHECK(stat(path, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 0777) == 0600);
	CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK);
	CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	strcpy(sa.sun_path, path);
	cfd = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK_EQ_INT(connect(cfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(cfd);
	close(fd);
	/* a stale socket from an earlier run is replaced */
	fd = sc_listen(path, 4, false);
	CHECK(fd >= 0);
	CHECK(!(fcntl(fd, F_GETFL) & O_NONBLOCK));
	close(fd);
	unlink(path);
	/* anything else at the path is left alone */
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CHECK_EQ_INT(write(fd, "keep", 4), 4);
	close(fd);
	CHECK_EQ_INT(sc_listen(path, 4, true), -EEXIST);
	CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 4);
	unlink(path);
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	CHECK_EQ_INT(sc_listen(longp, 4, true), -ENAMETOOLONG);
	rmdir(dir);
}

static void test_ids(void)
{
	uid_t u;
	gid_t g;

	CHECK_EQ_INT(sc_parse_ids("1000:1001", &u, &g), 0);
	CHECK(u == 1000 && g == 1001);
	CHECK_EQ_INT(sc_parse_ids("1000", &u, &g), -EINVAL);
	CHECK_EQ_INT(sc_parse_ids(":1", &u, &g), -EINVAL);
	CHECK_EQ_INT(sc_parse_ids("1:", &u, &g), -EINVAL);
	CHECK_EQ_INT(sc_parse_ids("1:2x", &u, &g), -EINVAL);
	CHECK_EQ_INT(sc_parse_ids("99999999999:1", &u, &g), -EINVAL);
}

/* The base filter in a child: the loop's calls work, memory is never executable, an
 * unforeseen call gets EPERM, an attacker's call kills the process. */
static void test_seccomp(void)
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		scmp_filter_ctx ctx = sc_seccomp_new();
		if (!ctx || sc_seccomp_load(ctx) < 0)     /* libseccomp sets no_new_privs */
			_exit(10);
		if (write(-1, "", 0) >= 0 || errno != EBADF)      /* allowed: reaches the kernel */
			_exit(11);
		void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			_exit(12);
		if (mprotect(m, 4096, PROT_READ | PROT_EXEC) == 0 || errno != EPERM)
			_exit(13);
		if (getppid() >= 0 || errno != EPERM)            /* not in the list */
			_exit(14);
		unshare(0);                                      /* killed here */
		_exit(15);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS);
	if (WIFEXITED(status))
		fprintf(stderr, "  the child exited %d\n", WEXITSTATUS(status));
}

int main(void)
{
	sc_init("test_sidecar", "t");
	signal(SIGPIPE, SIG_IGN);
	test_ctl_replies();
	test_ctl_fds();
	test_ctl_clients_events();
	test_listen();
	test_ids();
	test_seccomp();
	return T_DONE();
}
