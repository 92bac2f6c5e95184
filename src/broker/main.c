/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - kosa8-broker: one process per sandbox that adds the real API keys to the
 * sandbox's model-API requests. Arguments, the listening sockets, the secrets pipe,
 * privilege drop, seccomp, the worker pool and the control socket.
 *
 *   kosa8-broker --rules FILE --listen PATH [--listen-tcp IP:PORT] [--control PATH]
 *                [--secrets-fd N] [--ca-file FILE] [--resolve HOST:ADDR[:PORT]]...
 *                [--local-model IP:PORT] [--listen-tls PATH --intercept-ca-fd N]
 *                [--max-body BYTES] [--connect-timeout MS] [--idle-timeout MS]
 *                [--workers N] [--user UID:GID] [--verbose]
 *
 * Started as root, it drops to --user (default 65534:65534, nobody) before it serves.
 *
 * Start-up ends with "ready\n" (or "error: <message>\n" and exit 1) on stdout, which is
 * then closed. The control socket takes one JSON object per line and answers one per
 * line: {"op":"stats"}, {"op":"secret","name":N,"value":V} (set or rotate),
 * {"op":"unset","name":N} (the secret was removed), {"op":"local-model","addr":A}
 * (the model server moved), {"op":"ping"}. docs/broker.md describes the contract. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <malloc.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <openssl/crypto.h>
#include <seccomp.h>

#include "broker/broker.h"
#include "common/sidecar.h"

#define QUEUE_CAP 256
#define QUEUE_TLS (1 << 30)             /* a queued fd from the interception listener */
#define CTL_LINE_MAX (64 << 10)
#define SECRETS_MAX (1 << 20)

struct pool {
	struct broker *b;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int q[QUEUE_CAP];
	int head, len, idle;
};

/* jansson's memory is wiped before it is freed: secret values pass through it. */
static void broker_zfree(void *p)
{
	if (p) {
		OPENSSL_cleanse(p, malloc_usable_size(p));
		free(p);
	}
}

/* "IP:PORT" or "[IPv6]:PORT" into a socket address; port 0 when `need_port` is false and
 * there is none. */
static int broker_parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len,
			     int dflt_port)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *port = NULL;
	memset(ss, 0, sizeof(*ss));
	if (*s == '[') {
		const char *e = strchr(s, ']');
		if (!e || (size_t)(e - s - 1) >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, (size_t)(e - s - 1));
		host[e - s - 1] = '\0';
		if (e[1] == ':')
			port = e + 2;
		else if (e[1])
			return -EINVAL;
	} else {
		const char *c = strchr(s, ':');
		size_t n = c ? (size_t)(c - s) : strlen(s);
		if (n >= sizeof(host))
			return -EINVAL;
		memcpy(host, s, n);
		host[n] = '\0';
		if (c)
			port = c + 1;
	}
	long p = dflt_port;
	if (port) {
		char *e;
		p = strtol(port, &e, 10);
		if (*e || e == port || p < 1 || p > 65535)
			return -EINVAL;
	}
	if (p < 0)
		return -EINVAL;
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)p);
		*len = sizeof(*a4);
	} else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)p);
		*len = sizeof(*a6);
	} else {
		return -EINVAL;
	}
	return 0;
}

static int broker_listen_tcp(const char *spec)
{
	struct sockaddr_storage ss;
	socklen_t len;
	if (broker_parse_addr(spec, &ss, &len, -1) < 0)
		return -EINVAL;
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 128) < 0) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

/* The sidecars' base filter (src/common/sidecar_seccomp.c) plus what the workers,
 * OpenSSL and the resolver need. Anything else fails with EPERM; calls only an attacker
 * would make kill the process (here prctl too). Files may be opened read-only
 * (getaddrinfo reads /etc/hosts and /etc/resolv.conf), nothing written. */
static int broker_seccomp(void)
{
	static const int allow[] = {
		SCMP_SYS(sendmmsg), SCMP_SYS(connect), SCMP_SYS(bind), SCMP_SYS(getsockname),
		SCMP_SYS(getpeername), SCMP_SYS(newfstatat), SCMP_SYS(clock_nanosleep),
		SCMP_SYS(nanosleep), SCMP_SYS(sched_yield), SCMP_SYS(getuid), SCMP_SYS(geteuid),
		SCMP_SYS(getgid), SCMP_SYS(getegid), SCMP_SYS(uname), SCMP_SYS(dup2),
		SCMP_SYS(dup3),
	};
	/* New sockets: IP only (upstream TCP, the resolver's UDP). */
	static const int families[] = { AF_INET, AF_INET6 };
	scmp_filter_ctx ctx = sc_seccomp_new();
	int rc;

	if (!ctx)
		return -ENOMEM;
	/* The worker threads exist already: the filter goes on every one of them. */
	rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
	if (rc == 0)
		rc = sc_seccomp_add(ctx, SCMP_ACT_ALLOW, allow, ARRAY_SIZE(allow));
	if (rc == 0)
		rc = sc_seccomp_add(ctx, SCMP_ACT_KILL_PROCESS, (const int[]){ SCMP_SYS(prctl) }, 1);
	if (rc == 0)
		rc = sc_seccomp_socket(ctx, families, ARRAY_SIZE(families));
	/* Files: read-only opens. */
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC, O_RDONLY));
	if (rc < 0) {
		seccomp_release(ctx);
		return rc;
	}
	return sc_seccomp_load(ctx);
}

static void broker_drop_privileges(const char *spec)
{
	uid_t uid;
	gid_t gid;

	if (sc_parse_ids(spec, &uid, &gid) < 0)
		sc_die("--user %s: expected UID:GID", spec);
	if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
		sc_die("dropping privileges to %s: %s", spec, strerror(errno));
	if (setuid(0) == 0 && uid != 0)
		sc_die("dropping privileges to %s: could regain root", spec);
}

/* The secrets from the daemon: one JSON object on a pipe, read to its end. */
static void broker_read_secrets(struct broker *b, int fd)
{
	char *buf = malloc(SECRETS_MAX + 1);
	size_t len = 0;
	if (!buf)
		sc_die("out of memory");
	for (;;) {
		ssize_t r = read(fd, buf + len, SECRETS_MAX - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			sc_die("--secrets-fd %d: %s", fd, strerror(errno));
		if (r == 0)
			break;
		len += (size_t)r;
		if (len == SECRETS_MAX)
			sc_die("--secrets-fd %d: more than %d bytes", fd, SECRETS_MAX);
	}
	close(fd);
	json_error_t jerr;
	json_t *obj = json_loadb(buf, len, 0, &jerr);
	OPENSSL_cleanse(buf, len);
	free(buf);
	struct k8_err err = { 0 };
	if (!obj)
		sc_die("--secrets-fd %d: not JSON (line %d)", fd, jerr.line); /* no text: it may quote a value */
	if (broker_secrets_load(b, obj, &err) < 0)
		sc_die("--secrets-fd %d: %s", fd, err.msg);
	json_decref(obj);
}

static void *broker_worker(void *arg)
{
	struct pool *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		p->idle++;
		while (p->len == 0)
			pthread_cond_wait(&p->cond, &p->lock);
		p->idle--;
		int fd = p->q[p->head] & ~QUEUE_TLS;
		bool tls = p->q[p->head] & QUEUE_TLS;
		p->head = (p->head + 1) % QUEUE_CAP;
		p->len--;
		pthread_mutex_unlock(&p->lock);
		proxy_serve(p->b, fd, tls);
	}
	return NULL;
}

static void broker_dispatch(struct pool *p, int fd, bool tls)
{
	pthread_mutex_lock(&p->lock);
	/* Connections beyond the idle workers wait in the queue, up to its size. */
	if (p->len >= QUEUE_CAP || p->len - p->idle >= 64 || fd >= QUEUE_TLS) {
		pthread_mutex_unlock(&p->lock);
		if (tls)
			close(fd);      /* no plain-text refusal into a TLS handshake */
		else
			proxy_refuse_busy(p->b, fd);
		return;
	}
	p->q[(p->head + p->len) % QUEUE_CAP] = fd | (tls ? QUEUE_TLS : 0);
	p->len++;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

/* One control request (src/common/sidecar.c serves the lines). */
static json_t *broker_control(void *ctx, json_t *req, int *fd, struct k8_err *err)
{
	struct broker *b = ctx;
	const char *op = json_string_value(json_object_get(req, "op"));

	if (!strcmp(op, "ping"))
		return json_object();
	if (!strcmp(op, "stats"))
		return json_pack("{s:o}", "stats", broker_stats_json(b));
	if (!strcmp(op, "secret")) {
		const char *name = json_string_value(json_object_get(req, "name"));
		json_t *v = json_object_get(req, "value");
		if (!name || !json_is_string(v)) {
			k8_err_set(err, -EINVAL, "expected name and value");
			return NULL;
		}
		if (broker_secret_set(b, name, json_string_value(v), json_string_length(v), err) < 0)
			return NULL;
		sc_log("secret '%s' set", name);
		return json_object();
	}
	if (!strcmp(op, "local-model")) {
		/* the daemon's model server for the local-model rule moved (served, stopped):
		 * "IP:PORT", or null for none */
		json_t *a = json_object_get(req, "addr");
		struct sockaddr_storage ss = { 0 };
		socklen_t sl = 0;
		if (!json_is_null(a) && (!json_is_string(a) ||
		    broker_parse_addr(json_string_value(a), &ss, &sl, -1) < 0)) {
			k8_err_set(err, -EINVAL, "expected addr: \"IP:PORT\" or null");
			return NULL;
		}
		pthread_mutex_lock(&b->lock);
		b->local = ss;
		b->local_len = sl;
		pthread_mutex_unlock(&b->lock);
		sc_log("local model: %s", sl ? json_string_value(a) : "none");
		return json_object();
	}
	if (!strcmp(op, "unset")) {
		const char *name = json_string_value(json_object_get(req, "name"));
		if (!name) {
			k8_err_set(err, -EINVAL, "expected name");
			return NULL;
		}
		/* Gone already (never handed over, or a repeated rm) is not an error. */
		bool had = broker_secret_unset(b, name) == 0;
		if (had)
			sc_log("secret '%s' removed", name);
		return json_pack("{s:b}", "removed", had);
	}
	k8_err_set(err, -EINVAL, "unknown op");
	return NULL;
}

static void broker_usage(void)
{
	sc_die("usage: kosa8-broker --rules FILE --listen PATH [--listen-tcp IP:PORT] "
		   "[--control PATH] [--secrets-fd N] [--ca-file FILE] [--resolve HOST:ADDR[:PORT]]... "
		   "[--local-model IP:PORT] [--listen-tls PATH --intercept-ca-fd N] [--max-body BYTES] [--connect-timeout MS] [--idle-timeout MS] [--workers N] "
		   "[--user UID:GID] [--verbose]");
}

static long broker_num(const char *opt, const char *s, long lo, long hi)
{
	char *e;
	long v = strtol(s, &e, 10);
	if (e == s || *e || v < lo || v > hi)
		sc_die("--%s %s: expected a number from %ld to %ld", opt, s, lo, hi);
	return v;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "rules", required_argument, NULL, 'r' },
		{ "listen", required_argument, NULL, 'l' },
		{ "listen-tcp", required_argument, NULL, 't' },
		{ "control", required_argument, NULL, 'c' },
		{ "secrets-fd", required_argument, NULL, 's' },
		{ "ca-file", required_argument, NULL, 'a' },
		{ "resolve", required_argument, NULL, 'R' },
		{ "local-model", required_argument, NULL, 'L' },
		{ "listen-tls", required_argument, NULL, 'T' },
		{ "intercept-ca-fd", required_argument, NULL, 'A' },
		{ "max-body", required_argument, NULL, 'm' },
		{ "connect-timeout", required_argument, NULL, 'C' },
		{ "idle-timeout", required_argument, NULL, 'I' },
		{ "workers", required_argument, NULL, 'w' },
		{ "user", required_argument, NULL, 'u' },
		{ "verbose", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	static struct broker b;
	const char *rules = NULL, *listen_path = NULL, *listen_tcp = NULL, *control = NULL;
	const char *listen_tls = NULL;
	int ca_fd = -1;
	const char *ca_file = "/etc/ssl/certs/ca-certificates.crt", *user = NULL;
	int secrets_fd = -1, workers = 64;
	struct k8_err err = { 0 };
	int c;

	sc_init("kosa8-broker", NULL);
	json_set_alloc_funcs(malloc, broker_zfree);
	pthread_mutex_init(&b.lock, NULL);
	b.max_body = 32 << 20;
	b.connect_ms = 10000;
	b.idle_ms = 120000;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r': rules = optarg; break;
		case 'l': listen_path = optarg; break;
		case 't': listen_tcp = optarg; break;
		case 'c': control = optarg; break;
		case 'a': ca_file = optarg; break;
		case 'u': user = optarg; break;
		case 'v': b.verbose = true; break;
		case 's': secrets_fd = (int)broker_num("secrets-fd", optarg, 3, 1 << 20); break;
		case 'm': b.max_body = (uint64_t)broker_num("max-body", optarg, 1, 1L << 32); break;
		case 'C': b.connect_ms = (int)broker_num("connect-timeout", optarg, 100, 600000); break;
		case 'I': b.idle_ms = (int)broker_num("idle-timeout", optarg, 100, 3600000); break;
		case 'w': workers = (int)broker_num("workers", optarg, 1, 1024); break;
		case 'T': listen_tls = optarg; break;
		case 'A': ca_fd = (int)broker_num("intercept-ca-fd", optarg, 3, 1 << 20); break;
		case 'L':
			if (broker_parse_addr(optarg, &b.local, &b.local_len, -1) < 0 ||
			    b.local.ss_family == AF_UNSPEC)
				sc_die("--local-model %s: expected IP:PORT", optarg);
			break;
		case 'R': {
			char *colon = strchr(optarg, ':');
			struct broker_resolve *r = &b.resolve[b.nresolve];
			if (b.nresolve >= BROKER_MAX_RESOLVE || !colon ||
			    (size_t)(colon - optarg) >= sizeof(r->host) || colon == optarg)
				sc_die("--resolve %s: expected HOST:ADDR[:PORT] (at most %d)", optarg,
					   BROKER_MAX_RESOLVE);
			memcpy(r->host, optarg, (size_t)(colon - optarg));
			r->host[colon - optarg] = '\0';
			if (broker_parse_addr(colon + 1, &r->addr, &r->alen, 443) < 0)
				sc_die("--resolve %s: expected HOST:ADDR[:PORT]", optarg);
			b.nresolve++;
			break;
		}
		default:
			broker_usage();
		}
	}
	if (!rules || (!listen_path && !listen_tcp) || optind != argc || (!listen_tls != (ca_fd < 0)))
		broker_usage();

	/* Blocked before the workers start, so they inherit the mask: only the loop's
	 * ppoll takes SIGTERM. */
	sigset_t orig;
	sc_signals(&orig);

	cleanup_free char *text = NULL;
	size_t len;
	json_error_t jerr;
	int rc = read_file(rules, 1 << 20, &text, &len);
	if (rc < 0)
		sc_die("--rules %s: %s", rules, strerror(-rc));
	json_t *obj = json_loadb(text, len, 0, &jerr);
	if (!obj || !json_is_object(obj))
		sc_die("--rules %s: not a JSON object (line %d)", rules, jerr.line);
	if (broker_load_rules(&b, obj, &err) < 0)
		sc_die("--rules %s: %s", rules, err.msg);
	json_decref(obj);
	if (secrets_fd >= 0)
		broker_read_secrets(&b, secrets_fd);
	b.ssl = upstream_ctx(ca_file, &err);
	if (!b.ssl)
		sc_die("%s", err.msg);
	if (ca_fd >= 0 && intercept_init(&b, ca_fd, &err) < 0)
		sc_die("%s", err.msg);
	/* Load what the resolver would load lazily (NSS modules) while that is still allowed. */
	struct addrinfo *ai = NULL;
	if (getaddrinfo("localhost", "443", NULL, &ai) == 0)
		freeaddrinfo(ai);

	int lfd = -1, tfd = -1, clfd = -1, sfd = -1;
	if (listen_path && (lfd = sc_listen(listen_path, 128, false)) < 0)
		sc_die("--listen %s: %s", listen_path, strerror(-lfd));
	if (listen_tcp && (tfd = broker_listen_tcp(listen_tcp)) < 0)
		sc_die("--listen-tcp %s: %s", listen_tcp, strerror(-tfd));
	if (listen_tls && (sfd = sc_listen(listen_tls, 128, false)) < 0)
		sc_die("--listen-tls %s: %s", listen_tls, strerror(-sfd));
	if (control && (clfd = sc_listen(control, 128, true)) < 0)
		sc_die("--control %s: %s", control, strerror(-clfd));
	/* One client (the newest wins); its lines may hold secret values: wiped. */
	static struct sc_ctl ctl;
	sc_ctl_init(&ctl, clfd, &(struct sc_ctl_conf){ .line_max = CTL_LINE_MAX,
		.max_clients = 1, .wipe = true, .handle = broker_control, .ctx = &b });

	static struct pool pool;
	pool.b = &b;
	pthread_mutex_init(&pool.lock, NULL);
	pthread_cond_init(&pool.cond, NULL);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 << 10);
	for (int i = 0; i < workers; i++) {
		pthread_t t;
		if (pthread_create(&t, &attr, broker_worker, &pool) != 0)
			sc_die("starting worker threads: %s", strerror(errno));
		pthread_detach(t);
	}

	/* Every worker has started (glibc registers rseq and the robust list at a thread's
	 * start, calls the filter below does not allow) before we go on. */
	for (;;) {
		pthread_mutex_lock(&pool.lock);
		int idle = pool.idle;
		pthread_mutex_unlock(&pool.lock);
		if (idle == workers)
			break;
		usleep(1000);
	}
	/* Confined before "ready": whoever sees it finds the process as it will stay. Root
	 * never serves requests: without --user it becomes nobody. */
	if (!user && geteuid() == 0) {
		user = "65534:65534";
		sc_log("started as root without --user: running as %s", user);
	}
	if (user)
		broker_drop_privileges(user);
	rc = 0;
	if (prctl(PR_SET_DUMPABLE, 0) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    (rc = broker_seccomp()) < 0)
		sc_die("seccomp: %s", strerror(rc < 0 ? -rc : errno));
	sc_log("ready: %d rule(s), %d secret(s), %d workers, max body %llu",
	       b.nrules, b.nsecrets, workers, (unsigned long long)b.max_body);
	if ((rc = sc_ready()) < 0)
		sc_die("stdout: %s", strerror(-rc));

	while (!sc_stopping()) {
		struct pollfd p[3 + 1 + SC_CTL_MAX_CLIENTS] = {
			{ .fd = lfd, .events = POLLIN }, { .fd = tfd, .events = POLLIN },
			{ .fd = sfd, .events = POLLIN },
		};
		struct timespec ts = { .tv_sec = 1 };
		sc_ctl_poll_fill(&ctl, p + 3);
		if (ppoll(p, (nfds_t)(3 + sc_ctl_nfds(&ctl)), &ts, &orig) < 0)
			continue;
		for (int i = 0; i < 3; i++) {
			if (!(p[i].revents & POLLIN))
				continue;
			int fd = accept4(p[i].fd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0)
				broker_dispatch(&pool, fd, i == 2);
		}
		sc_ctl_poll_done(&ctl, p + 3);
	}
	sc_log("stopping");
	sc_ctl_free(&ctl);
	/* The sockets' files are the starter's to remove (no unlink after the filter). */
	/* Workers may be mid-request; the process exit ends them. Wipe the secrets first. */
	pthread_mutex_lock(&b.lock);
	for (int i = 0; i < b.nsecrets; i++)
		if (b.secrets[i].value)
			OPENSSL_cleanse(b.secrets[i].value, b.secrets[i].len);
	_exit(0);
}
