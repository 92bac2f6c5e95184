/* SPDX-License-Identifier: Apache-2.0 */
/* mcp_http.c - kosa8 mcp's streamable HTTP transport (MCP 2025-06-18 "Transports";
 * docs/mcp.md), on libmicrohttpd, one thread per connection.
 *
 * One endpoint, /mcp. POST carries one JSON-RPC message: a notification or a response
 * is answered 202; a request with application/json, except tools/call, whose answer is
 * a text/event-stream (its progress notifications, then its response) written by a
 * thread of its own through a pipe. initialize makes a session (Mcp-Session-Id, 32 hex
 * digits); every other request must name a live one (400 without, 404 unknown); DELETE
 * ends it and cancels its calls; GET is 405 (the server starts no stream of its own). A
 * client that closes a tools/call's stream cancels the call, as notifications/cancelled
 * does.
 *
 * The listener is loopback only. Every request must carry the bearer token (compared in
 * constant time), and a request with an Origin that is not this loopback address is
 * refused (403): a web page the user opens can neither guess the token nor rebind a name
 * to 127.0.0.1 and drive the sandbox.
 */
#include "cli.h"
#include "cli/mcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>

#define SESSIONS_MAX 64

struct http_srv {
	struct mcp_server *s;
	const char *token;
	char origin[2][80];             /* the Origins that are this listener */
	pthread_mutex_t lock;
	struct mcp_session *sessions[SESSIONS_MAX];
	bool closed[SESSIONS_MAX];
};

struct req {
	char *body;
	size_t len;
	bool too_big;
};

/* ---- replies ---- */

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, json_t *v,
			     const char *hname, const char *hval)
{
	char *t = v ? json_dumps(v, JSON_COMPACT) : xstrdup("");
	struct MHD_Response *r;
	enum MHD_Result ret;

	json_decref(v);
	r = MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE);
	if (*t)
		MHD_add_response_header(r, "Content-Type", "application/json");
	if (hname)
		MHD_add_response_header(r, hname, hval);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply_err(struct MHD_Connection *c, unsigned status, int code,
				 const char *msg)
{
	return reply(c, status, mcp_error(NULL, code, "%s", msg), NULL, NULL);
}

/* ---- sessions ---- */

static struct mcp_session *session_new(struct http_srv *h)
{
	unsigned char rnd[16];
	struct mcp_session *ss = NULL;
	int slot = -1;

	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return NULL;
	pthread_mutex_lock(&h->lock);
	for (int i = 0; i < SESSIONS_MAX && slot < 0; i++)
		if (!h->sessions[i])
			slot = i;
	/* full: take the place of a closed session no call still uses */
	for (int i = 0; i < SESSIONS_MAX && slot < 0; i++) {
		struct mcp_session *o = h->sessions[i];
		pthread_mutex_lock(&o->lock);
		bool idle = h->closed[i] && !o->calls;
		pthread_mutex_unlock(&o->lock);
		if (idle) {
			pthread_mutex_destroy(&o->lock);
			free(o);
			h->sessions[i] = NULL;
			slot = i;
		}
	}
	if (slot >= 0) {
		ss = xmalloc(sizeof(*ss));
		mcp_session_init(ss, "http");
		k8_hex(rnd, sizeof(rnd), ss->id);
		h->sessions[slot] = ss;
		h->closed[slot] = false;
	}
	pthread_mutex_unlock(&h->lock);
	return ss;
}

/* The live session of that id; NULL when there is none. */
static struct mcp_session *session_find(struct http_srv *h, const char *id, bool close)
{
	struct mcp_session *ss = NULL;

	pthread_mutex_lock(&h->lock);
	for (int i = 0; i < SESSIONS_MAX && !ss; i++)
		if (h->sessions[i] && !h->closed[i] && !strcmp(h->sessions[i]->id, id)) {
			ss = h->sessions[i];
			if (close) {
				h->closed[i] = true;
				mcp_session_cancel_all(ss);
			}
		}
	pthread_mutex_unlock(&h->lock);
	return ss;
}

/* ---- a tools/call answered as an event stream ---- */

struct sse {
	struct mcp_out out;
	struct mcp_server *s;
	struct mcp_session *ss;
	struct mcp_msg m;
	struct mcp_call *call;
	int rfd, wfd;
	int refs;                       /* the worker and the response */
};

static void sse_unref(struct sse *e)
{
	if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_SEQ_CST) == 0)
		free(e);
}

static int sse_send(struct mcp_out *o, json_t *msg)
{
	struct sse *e = o->ctx;
	char *t = json_dumps(msg, JSON_COMPACT);
	int r = -ENOMEM;

	bool final = json_object_get(msg, "id") && !json_object_get(msg, "method");

	json_decref(msg);
	if (t) {
		char *ev = xasprintf("event: message\ndata: %s\n\n", t);
		r = e->wfd >= 0 ? write_full(e->wfd, ev, strlen(ev)) : -EPIPE;
		free(ev);
		free(t);
	}
	if (final && e->wfd >= 0) {
		/* the response ends the stream; the audit record that follows is not waited for */
		close(e->wfd);
		e->wfd = -1;
	}
	return r;
}

static void *sse_worker(void *arg)
{
	struct sse *e = arg;

	mcp_call_run(e->s, e->ss, &e->m, e->call);     /* frees m and the call */
	if (e->wfd >= 0)
		close(e->wfd);
	sse_unref(e);
	return NULL;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct sse *e = cls;
	ssize_t n;

	(void)pos;
	do
		n = read(e->rfd, buf, max);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	return n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : n;
}

/* The response is over: read to the end, or the client went away, which cancels the
 * call if it still runs (it is still on the session's list only while it runs). */
static void sse_free(void *cls)
{
	struct sse *e = cls;
	struct mcp_session *ss = e->ss;

	pthread_mutex_lock(&ss->lock);
	for (struct mcp_call *c = ss->calls; c; c = c->next)
		if (c == e->call)
			mcp_call_cancel(c);
	pthread_mutex_unlock(&ss->lock);
	close(e->rfd);
	sse_unref(e);
}

static enum MHD_Result reply_sse(struct http_srv *h, struct MHD_Connection *c,
				 struct mcp_session *ss, struct mcp_msg *m)
{
	struct sse *e = xcalloc(1, sizeof(*e));
	struct MHD_Response *r;
	enum MHD_Result ret;
	pthread_attr_t attr;
	pthread_t t;
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0) {
		free(e);
		mcp_msg_free(m);
		return reply_err(c, 500, MCP_INTERNAL_ERROR, "pipe failed");
	}
	e->out = (struct mcp_out){ sse_send, e };
	e->s = h->s;
	e->ss = ss;
	e->m = *m;
	e->rfd = p[0];
	e->wfd = p[1];
	e->refs = 2;
	e->call = mcp_call_begin(ss, m, &e->out);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, sse_worker, e) != 0) {
		pthread_attr_destroy(&attr);
		e->refs = 1;
		sse_worker(e);  /* answers it here; the stream then reads it */
		e->refs = 1;
	} else {
		pthread_attr_destroy(&attr);
	}
	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, e, sse_free);
	MHD_add_response_header(r, "Content-Type", "text/event-stream");
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	MHD_add_response_header(r, "Mcp-Session-Id", ss->id);
	ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

/* ---- a request answered with its JSON ---- */

struct collect {
	struct mcp_out out;
	json_t *resp;
};

static int collect_send(struct mcp_out *o, json_t *msg)
{
	struct collect *k = o->ctx;

	if (json_object_get(msg, "id") && !k->resp)
		k->resp = msg;
	else
		json_decref(msg);       /* a notification: nowhere to put it in a JSON reply */
	return 0;
}

/* ---- the handler ---- */

static bool token_ok(struct http_srv *h, struct MHD_Connection *c)
{
	const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	size_t n;

	if (!h->token)
		return true;
	n = strlen(h->token);
	return a && !strncasecmp(a, "Bearer ", 7) && strlen(a + 7) == n &&
	       CRYPTO_memcmp(a + 7, h->token, n) == 0;
}

static enum MHD_Result post(struct http_srv *h, struct MHD_Connection *c, struct req *rq)
{
	const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
	const char *pv = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
	struct mcp_session *ss;
	struct mcp_msg m;
	json_t *err = NULL;

	if (rq->too_big)
		return reply_err(c, 413, MCP_INVALID_REQUEST, "the message is larger than 4 MiB");
	if (mcp_rpc_parse(rq->body ? rq->body : "", rq->len, &m, &err) < 0)
		return reply(c, 400, err, NULL, NULL);
	if (pv && !mcp_proto_known(pv)) {
		mcp_msg_free(&m);
		return reply_err(c, 400, MCP_INVALID_REQUEST, "Bad Request: unsupported "
				 "MCP-Protocol-Version");
	}
	if (m.kind == MCP_REQUEST && !strcmp(m.method, "initialize") && !sid) {
		ss = session_new(h);
		if (!ss) {
			mcp_msg_free(&m);
			return reply_err(c, 503, MCP_INTERNAL_ERROR, "too many sessions");
		}
	} else if (!sid) {
		mcp_msg_free(&m);
		return reply_err(c, 400, MCP_INVALID_REQUEST, "Bad Request: Mcp-Session-Id header "
				 "is required");
	} else if (!(ss = session_find(h, sid, false))) {
		mcp_msg_free(&m);
		return reply(c, 404, mcp_error(NULL, -32001, "Session not found"), NULL, NULL);
	}
	if (m.kind != MCP_REQUEST) {
		mcp_handle(h->s, ss, &m, NULL);
		return reply(c, 202, NULL, NULL, NULL);
	}
	if (!strcmp(m.method, "tools/call"))
		return reply_sse(h, c, ss, &m);
	struct collect k = { { collect_send, NULL }, NULL };
	k.out.ctx = &k;
	mcp_handle(h->s, ss, &m, &k.out);
	return reply(c, 200, k.resp ? k.resp : json_object(), "Mcp-Session-Id", ss->id);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload,
			       size_t *upload_size, void **con_cls)
{
	struct http_srv *h = cls;
	struct req *rq = *con_cls;
	const char *origin;

	(void)version;
	if (!rq) {
		*con_cls = xcalloc(1, sizeof(struct req));
		return MHD_YES;
	}
	if (*upload_size) {
		if (rq->len + *upload_size > MCP_MSG_MAX) {
			rq->too_big = true;
		} else {
			rq->body = realloc(rq->body, rq->len + *upload_size + 1);
			if (!rq->body)
				abort();
			memcpy(rq->body + rq->len, upload, *upload_size);
			rq->len += *upload_size;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (strcmp(url, "/mcp"))
		return reply_err(c, 404, MCP_INVALID_REQUEST, "the MCP endpoint is /mcp");
	origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
	if (origin && strcmp(origin, h->origin[0]) && strcmp(origin, h->origin[1]))
		return reply_err(c, 403, MCP_INVALID_REQUEST, "Forbidden: Origin is not this "
				 "server");
	if (!token_ok(h, c))
		return reply(c, 401, mcp_error(NULL, MCP_INVALID_REQUEST, "Unauthorized: a bearer "
					       "token is required"), "WWW-Authenticate", "Bearer");
	if (!strcmp(method, "POST"))
		return post(h, c, rq);
	if (!strcmp(method, "DELETE")) {
		const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
		if (!sid || !session_find(h, sid, true))
			return reply(c, 404, mcp_error(NULL, -32001, "Session not found"), NULL, NULL);
		return reply(c, 200, NULL, NULL, NULL);
	}
	return reply(c, 405, mcp_error(NULL, MCP_INVALID_REQUEST, "Method not allowed: this "
				       "server opens no stream of its own"), "Allow", "POST, DELETE");
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct req *rq = *con_cls;

	(void)cls;
	(void)c;
	(void)toe;
	if (rq) {
		free(rq->body);
		free(rq);
	}
	*con_cls = NULL;
}

/* "HOST:PORT" on loopback only: a bound, listening socket. */
static int listen_on(const char *addr, int *port, bool *v6, struct k8_err *err)
{
	char host[64];
	const char *colon = strrchr(addr, ':');
	struct sockaddr_storage ss = { 0 };
	socklen_t sl;
	long p;
	int fd, one = 1;

	if (!colon || (size_t)(colon - addr) >= sizeof(host) ||
	    cli_parse_range("--listen PORT", colon + 1, 0, 65535, &p, err) < 0)
		return k8_err_set(err, -EINVAL, "--listen %s: expected 127.0.0.1:PORT or [::1]:PORT",
				  addr);
	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1 && (ntohl(a4->sin_addr.s_addr) >> 24) == 127) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)p);
		sl = sizeof(*a4);
		*v6 = false;
	} else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1 &&
		   IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr)) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)p);
		sl = sizeof(*a6);
		*v6 = true;
	} else {
		return k8_err_set(err, -EINVAL, "--listen %s: kosa8 mcp listens on a loopback "
				  "address only (127.0.0.1 or ::1): whoever reaches it drives the "
				  "sandbox", addr);
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return k8_err_set(err, -errno, "socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 64) < 0) {
		int e = errno;
		close(fd);
		return k8_err_set(err, -e, "--listen %s: %s", addr, strerror(e));
	}
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	*port = ntohs(*v6 ? a6->sin6_port : a4->sin_port);
	return fd;
}

int mcp_http_serve(struct mcp_server *s, const char *addr, const char *token,
		   volatile int *stop, struct k8_err *err)
{
	struct http_srv h = { .s = s, .token = token };
	struct MHD_Daemon *mhd;
	bool v6 = false;
	int port = 0, fd = listen_on(addr, &port, &v6, err);

	if (fd < 0)
		return fd;
	pthread_mutex_init(&h.lock, NULL);
	snprintf(h.origin[0], sizeof(h.origin[0]), "http://%s:%d", v6 ? "[::1]" : "127.0.0.1",
		 port);
	snprintf(h.origin[1], sizeof(h.origin[1]), "http://localhost:%d", port);
	mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
			       MHD_USE_POLL | MHD_USE_ITC, 0, NULL, NULL, handler, &h,
			       MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED,
			       completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0,
			       MHD_OPTION_CONNECTION_LIMIT, (unsigned)128, MHD_OPTION_END);
	if (!mhd) {
		close(fd);
		return k8_err_set(err, -EIO, "cannot start the HTTP server (libmicrohttpd)");
	}
	fprintf(stderr, "kosa8 mcp: serving MCP (streamable HTTP) at http://%s:%d/mcp\n",
		v6 ? "[::1]" : "127.0.0.1", port);
	while (!*stop)
		usleep(200000);
	for (int i = 0; i < SESSIONS_MAX; i++)
		if (h.sessions[i])
			mcp_session_cancel_all(h.sessions[i]);
	MHD_stop_daemon(mhd);
	close(fd);
	return 0;
}
