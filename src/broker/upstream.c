/* SPDX-License-Identifier: Apache-2.0 */
/* upstream.c - kosa8-broker's TLS connection to a rule's host: resolve (or the --resolve
 * override), connect within the connect timeout, TLS 1.2+ with SNI, the certificate
 * verified against the CA file (the system bundle by default) and the rule's host name,
 * ALPN http/1.1. OpenSSL directly, blocking sockets with SO_RCVTIMEO/SO_SNDTIMEO: each
 * worker thread owns its connections, and a read returns as soon as bytes arrive, so a
 * streamed response is passed on chunk by chunk. */
#include "broker/broker.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

SSL_CTX *upstream_ctx(const char *ca_file, struct k8_err *err)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	static const unsigned char alpn[] = "\x08http/1.1";

	if (!ctx) {
		k8_err_set(err, -ENOMEM, "TLS context: out of memory");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	/* Loaded whole now: after the seccomp filter no directory of hashed certs is read. */
	if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
		k8_err_set(err, -EINVAL, "CA file %s: %s", ca_file,
			   ERR_reason_error_string(ERR_get_error()));
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	return ctx;
}

static void upstream_timeouts(int fd, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Non-blocking connect bounded by `ms`; the socket is blocking again on return. */
static int upstream_connect_addr(const struct sockaddr *sa, socklen_t len, int ms)
{
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int rc = connect(fd, sa, len);
	if (rc < 0 && errno == EINPROGRESS) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		rc = poll(&p, 1, ms);
		if (rc == 0) {
			close(fd);
			return -ETIMEDOUT;
		}
		int e = 0;
		socklen_t el = sizeof(e);
		if (rc < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
			e = errno;
		rc = e ? -1 : 0;
		errno = e;
	}
	if (rc < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
}

static int upstream_tcp(struct broker *b, const char *host, struct k8_err *err)
{
	for (int i = 0; i < b->nresolve; i++) {
		if (strcasecmp(b->resolve[i].host, host))
			continue;
		int fd = upstream_connect_addr((struct sockaddr *)&b->resolve[i].addr,
					       b->resolve[i].alen, b->connect_ms);
		if (fd < 0)
			return k8_err_set(err, fd, "connecting to %s (--resolve): %s", host,
					  strerror(-fd));
		return fd;
	}
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG };
	struct addrinfo *res = NULL;
	int g = getaddrinfo(host, "443", &hints, &res);
	if (g)
		return k8_err_set(err, -EHOSTUNREACH, "resolving %s: %s", host, gai_strerror(g));
	int fd = -EHOSTUNREACH;
	for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next)
		fd = upstream_connect_addr(a->ai_addr, a->ai_addrlen, b->connect_ms);
	freeaddrinfo(res);
	if (fd < 0)
		return k8_err_set(err, fd, "connecting to %s:443: %s", host, strerror(-fd));
	return fd;
}

int upstream_open(struct broker *b, int rule, struct upstream *u, enum broker_refusal *why,
		  struct k8_err *err)
{
	const char *host = b->rules[rule].host;

	u->fd = -1;
	u->ssl = NULL;
	u->rule = -1;
	*why = REF_UPSTREAM_CONNECT;
	if (b->rules[rule].kind == RULE_LOCAL) {
		/* The model server on the host: plain HTTP on its loopback address, reached by
		 * this process only (the guest never gets a route to the host's loopback). */
		struct sockaddr_storage sa;
		pthread_mutex_lock(&b->lock);   /* the daemon may move it (control op) */
		socklen_t sl = b->local_len;
		sa = b->local;
		pthread_mutex_unlock(&b->lock);
		if (!sl) {
			*why = REF_NO_MODEL;
			return k8_err_set(err, -ENOENT, "no model server is running for this "
					  "sandbox's local-model rule: start one with `kosa8 model "
					  "serve NAME`");
		}
		int fd = upstream_connect_addr((struct sockaddr *)&sa, sl, b->connect_ms);
		if (fd < 0)
			return k8_err_set(err, fd, "connecting to the local model server: %s "
					  "(is `kosa8 model serve` still running?)", strerror(-fd));
		upstream_timeouts(fd, b->idle_ms);
		u->fd = fd;
		u->rule = rule;
		return 0;
	}
	int fd = upstream_tcp(b, host, err);
	if (fd < 0)
		return fd;
	upstream_timeouts(fd, b->connect_ms);
	*why = REF_UPSTREAM_TLS;
	SSL *ssl = SSL_new(b->ssl);
	if (!ssl || SSL_set_fd(ssl, fd) != 1 || SSL_set_tlsext_host_name(ssl, host) != 1 ||
	    SSL_set1_host(ssl, host) != 1) {
		SSL_free(ssl);
		close(fd);
		return k8_err_set(err, -ENOMEM, "TLS to %s: out of memory", host);
	}
	ERR_clear_error();
	if (SSL_connect(ssl) != 1) {
		long v = SSL_get_verify_result(ssl);
		unsigned long e = ERR_get_error();
		if (v != X509_V_OK)
			k8_err_set(err, -EPROTO, "upstream certificate of %s not trusted: %s", host,
				   X509_verify_cert_error_string(v));
		else
			k8_err_set(err, -EPROTO, "TLS handshake with %s failed: %s", host,
				   e ? ERR_reason_error_string(e) : "connection closed or timed out");
		SSL_free(ssl);
		close(fd);
		return -EPROTO;
	}
	upstream_timeouts(fd, b->idle_ms);
	u->fd = fd;
	u->ssl = ssl;
	u->rule = rule;
	return 0;
}

void upstream_close(struct upstream *u)
{
	if (u->ssl) {
		SSL_shutdown(u->ssl);   /* one close_notify, not waiting for the peer's */
		SSL_free(u->ssl);
	}
	if (u->fd >= 0)
		close(u->fd);
	u->ssl = NULL;
	u->fd = -1;
	u->rule = -1;
}

ssize_t upstream_read(struct upstream *u, char *buf, size_t n)
{
	size_t got = 0;
	if (!u->ssl) {
		for (;;) {
			ssize_t r = read(u->fd, buf, n);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
			return r;
		}
	}
	ERR_clear_error();
	errno = 0;
	if (SSL_read_ex(u->ssl, buf, n, &got) == 1)
		return (ssize_t)got;
	int e = SSL_get_error(u->ssl, 0);
	if (e == SSL_ERROR_ZERO_RETURN)
		return 0;
	if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_SSL) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return -ETIMEDOUT;
		/* A close without close_notify: an end for a body delimited by the close, and
		 * an error the caller sees for every other framing (too few bytes). */
		if (errno == 0)
			return 0;
		return -errno;
	}
	return -EPROTO;
}

int upstream_write(struct upstream *u, const void *buf, size_t n)
{
	size_t done = 0;
	if (!u->ssl) {
		int rc = write_full(u->fd, buf, n);
		return rc == -EAGAIN || rc == -EWOULDBLOCK ? -ETIMEDOUT : rc;
	}
	while (done < n) {
		size_t w = 0;
		ERR_clear_error();
		errno = 0;
		if (SSL_write_ex(u->ssl, (const char *)buf + done, n - done, &w) != 1)
			return errno == EAGAIN ? -ETIMEDOUT : errno ? -errno : -EPIPE;
		done += w;
	}
	return 0;
}

bool upstream_stale(struct upstream *u)
{
	struct pollfd p = { .fd = u->fd, .events = POLLIN | POLLRDHUP };
	if (u->ssl && SSL_pending(u->ssl) > 0)
		return true;
	return poll(&p, 1, 0) != 0;
}
