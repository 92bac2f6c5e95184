/* SPDX-License-Identifier: Apache-2.0 */
/* proxy.c - one client connection of kosa8-broker, served by one worker thread.
 *
 * Theory of operation, per request on a kept-alive connection:
 *   1. read and parse the head (http.c: strict, at most 64 KiB);
 *   2. pick the rule by the Host header: no rule, 421;
 *   3. check the placeholder in the rule's credential header (constant-time): 403;
 *   4. check the body size (Content-Length, or counted as chunks arrive): 413;
 *   5. rebuild the head: every incoming credential and hop-by-hop header dropped, Host
 *      set to the rule's host, Accept-Encoding identity, the real key added; open or
 *      reuse the TLS upstream;
 *   6. pass the body through untouched (its framing checked on the way), then the
 *      response: its head verbatim (refused when encoded), its body as each read
 *      returns (no buffering, so a server-sent event stream arrives event by event; a
 *      chunked one in chunks of our own).
 * A refusal answers with a JSON error body and closes the connection. Every outcome is
 * counted per host (rules.c). The key is copied into a stack buffer for the head (wiped
 * once sent) and kept until the response has passed, to check that the upstream does
 * not hand it back (a reflecting server): a response head holding it is refused, a body
 * holding it, across reads and chunks, is cut off before any of it (guard.c). Nothing
 * here logs a header value. */
#include "broker/broker.h"
#include "common/sidecar.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <openssl/crypto.h>

#define IN_CAP (HTTP_MAX_HEAD + 16384)
#define OUT_CAP (HTTP_MAX_HEAD + BROKER_SECRET_MAX + 1024)

struct conn {
	struct broker *b;
	int fd;
	char *in;                       /* client bytes not consumed yet */
	size_t inlen;
	char *rbuf;                     /* upstream bytes */
	size_t rlen;
	struct upstream up;
	int rule;
	uint64_t up_bytes, down_bytes;
	bool replied;                   /* a response head went to the client */
	SSL *tls;                       /* interception: the client's TLS session, else NULL */
	int sni_rule;                   /* interception: the rule its SNI named, else -1 */
	char method[17];                /* for the log: the request's bytes move on */
};

/* Headers never passed upstream: credentials (whatever the rule) and hop-by-hop ones. */
static const char *const proxy_strip[] = {
	"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie",
	"host", "connection", "keep-alive", "proxy-connection", "te", "upgrade", "expect",
	"trailer", "forwarded", "x-forwarded-for",
	"accept-encoding",      /* replaced by identity: the key guard reads plain bytes */
};

static void proxy_log(struct conn *c, int status, const char *why)
{
	struct broker *b = c->b;
	const char *host = c->rule < b->nrules ? b->rules[c->rule].host : "(no rule)";
	sc_log("%s %s -> %d%s%s (up %llu, down %llu bytes)", host,
		c->method[0] ? c->method : "-", status, why ? ": " : "", why ? why : "", (unsigned long long)c->up_bytes,
		(unsigned long long)c->down_bytes);
}

/* The client's bytes: the socket, or the TLS session of an intercepted connection. */
static int proxy_write(struct conn *c, const void *buf, size_t n)
{
	if (!c->tls)
		return write_full(c->fd, buf, n);
	size_t done = 0;
	while (done < n) {
		size_t w = 0;
		if (SSL_write_ex(c->tls, (const char *)buf + done, n - done, &w) != 1)
			return -EPIPE;
		done += w;
	}
	return 0;
}

static ssize_t proxy_read(struct conn *c, char *buf, size_t n)
{
	if (!c->tls)
		return read(c->fd, buf, n);
	size_t got = 0;
	errno = 0;
	if (SSL_read_ex(c->tls, buf, n, &got) == 1)
		return (ssize_t)got;
	int e = SSL_get_error(c->tls, 0);
	if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0))
		return 0;
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return -1;              /* errno says: the idle timeout */
	errno = EPROTO;
	return -1;
}

/* A refusal: the JSON error body, counted, logged; the connection is then closed. */
static void proxy_refuse(struct conn *c, const struct http_msg *m, int status,
			 enum broker_refusal why, const char *msg)
{
	static const char *const reasons[600] = {
		[400] = "Bad Request", [403] = "Forbidden", [408] = "Request Timeout",
		[413] = "Content Too Large", [417] = "Expectation Failed",
		[421] = "Misdirected Request", [431] = "Request Header Fields Too Large",
		[501] = "Not Implemented", [502] = "Bad Gateway", [503] = "Service Unavailable",
		[504] = "Gateway Timeout", [505] = "HTTP Version Not Supported",
	};
	broker_count(c->b, c->rule, why, 0, 0, true);
	proxy_log(c, status, broker_refusal_names[why]);
	if (c->replied)
		return;                 /* mid-response: closing is all that is left */
	json_t *o = json_pack("{s:{s:s,s:s,s:s}}", "error", "type", "kosa8_broker", "code",
			      broker_refusal_names[why], "message", msg);
	char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!body)
		return;
	const char *reason = status > 0 && status < 600 && reasons[status] ? reasons[status] : "Error";
	char head[256];
	int hn = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
			  "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, reason,
			  strlen(body));
	if (proxy_write(c, head, (size_t)hn) == 0)
		proxy_write(c, body, strlen(body));
	free(body);
	c->replied = true;
}

/* Read more client bytes into c->in: bytes read, 0 at EOF, negative errno. */
static ssize_t proxy_fill(struct conn *c)
{
	if (c->inlen >= IN_CAP)
		return -ENOBUFS;
	for (;;) {
		ssize_t r = proxy_read(c, c->in + c->inlen, IN_CAP - c->inlen);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
		c->inlen += (size_t)r;
		return r;
	}
}

static void proxy_consume(struct conn *c, size_t n)
{
	memmove(c->in, c->in + n, c->inlen - n);
	c->inlen -= n;
}

/* Index of the one header named `name`, -1 when absent, -2 when repeated. */
static int proxy_find_one(const struct http_msg *m, const char *name)
{
	int found = -1;
	for (int i = 0; i < m->nh; i++) {
		if (!http_name_is(&m->h[i], name))
			continue;
		if (found >= 0)
			return -2;
		found = i;
	}
	return found;
}

/* The placeholder is taken from the rule's header ("Bearer <ph>" for Authorization, the
 * bare value otherwise; a generic rule also takes "Bearer <ph>" and keeps the scheme) or,
 * when that header is absent, from "Authorization: Bearer <ph>": clients differ (the
 * Anthropic SDK sends its key as a bearer token in some versions). *bearer: whether the
 * key goes upstream as "Bearer <key>". Returns REF_N when it matches. */
static int proxy_check_placeholder(struct conn *c, const struct http_msg *m,
				   const struct broker_rule *r, bool *bearer, const char **msg)
{
	bool in_auth = false;
	if (r->kind == RULE_LOCAL) {
		/* No key to add: the placeholder still decides. OpenAI clients send it as a
		 * bearer token, Anthropic ones in x-api-key. */
		int f = proxy_find_one(m, "authorization"), x = proxy_find_one(m, "x-api-key");
		if (f == -2 || x == -2)
			return *msg = "more than one credential header", REF_BAD_REQUEST;
		const char *v = f >= 0 ? m->h[f].value : x >= 0 ? m->h[x].value : NULL;
		size_t n = f >= 0 ? m->h[f].vlen : x >= 0 ? m->h[x].vlen : 0;
		if (!v)
			return *msg = "missing placeholder: send the sandbox's placeholder as "
				"'Authorization: Bearer <placeholder>' or in 'x-api-key'",
			       REF_PLACEHOLDER_MISSING;
		if (f >= 0) {
			if (n <= 7 || strncasecmp(v, "Bearer ", 7))
				return *msg = "missing placeholder: expected 'Authorization: Bearer "
					"<placeholder>'", REF_PLACEHOLDER_MISSING;
			for (v += 7, n -= 7; n && *v == ' '; v++, n--)
				;
		}
		*bearer = false;
		if (!broker_placeholder_ok(c->b, v, n))
			return *msg = "wrong placeholder: this is not the placeholder of this sandbox",
			       REF_PLACEHOLDER_WRONG;
		return REF_N;
	}
	int found = proxy_find_one(m, r->header);
	if (found == -1 && strcasecmp(r->header, "authorization") != 0) {
		found = proxy_find_one(m, "authorization");
		in_auth = true;
	}
	if (found == -2)
		return *msg = "more than one credential header", REF_BAD_REQUEST;
	if (found < 0) {
		*msg = r->kind == RULE_OPENAI ? "missing placeholder: send the sandbox's placeholder "
			"as 'Authorization: Bearer <placeholder>' (OPENAI_API_KEY)" :
			r->kind == RULE_ANTHROPIC ? "missing placeholder: send the sandbox's placeholder "
			"in 'x-api-key' (ANTHROPIC_API_KEY)" :
			"missing placeholder: send the sandbox's placeholder in the rule's header";
		return REF_PLACEHOLDER_MISSING;
	}
	const char *v = m->h[found].value;
	size_t n = m->h[found].vlen;
	*bearer = n > 7 && strncasecmp(v, "Bearer ", 7) == 0;
	if (*bearer) {
		v += 7;
		n -= 7;
		while (n && *v == ' ')
			v++, n--;
	}
	if ((r->kind == RULE_OPENAI || in_auth) && !*bearer)
		return *msg = "missing placeholder: expected 'Authorization: Bearer <placeholder>'",
		       REF_PLACEHOLDER_MISSING;
	if (r->kind == RULE_ANTHROPIC || in_auth)
		*bearer = false;
	if (!broker_placeholder_ok(c->b, v, n))
		return *msg = "wrong placeholder: this is not the placeholder of this sandbox "
			"(real API keys are never accepted from a sandbox either)", REF_PLACEHOLDER_WRONG;
	return REF_N;
}

static bool proxy_stripped(const struct http_hdr *h, const struct broker_rule *r)
{
	for (size_t i = 0; i < ARRAY_SIZE(proxy_strip); i++)
		if (http_name_is(h, proxy_strip[i]))
			return true;
	return http_name_is(h, r->header);
}

/* The head sent upstream; its length, or -E2BIG. */
static int proxy_build_head(char *out, size_t cap, const struct http_msg *m,
			    const struct broker_rule *r, bool bearer, const char *key)
{
	size_t n = 0;
#define PUT(p, l) do { if (n + (l) > cap) return -E2BIG; memcpy(out + n, (p), (l)); n += (l); } while (0)
#define PUTS(s) PUT((s), strlen(s))
	PUT(m->method, m->mlen);
	PUTS(" ");
	PUT(m->target, m->tlen);
	PUTS(" HTTP/1.1\r\nHost: ");
	PUTS(r->kind == RULE_LOCAL ? "localhost" : r->host);
	PUTS("\r\nAccept-Encoding: identity\r\n");
	for (int i = 0; i < m->nh; i++) {
		const struct http_hdr *h = &m->h[i];
		if (proxy_stripped(h, r))
			continue;
		PUT(h->name, h->nlen);
		PUTS(": ");
		PUT(h->value, h->vlen);
		PUTS("\r\n");
	}
	if (r->kind != RULE_LOCAL) {            /* the model server takes no key */
		PUTS(r->header);
		PUTS(bearer ? ": Bearer " : ": ");
		PUTS(key);
		PUTS("\r\n");
	}
	PUTS("\r\n");
#undef PUTS
#undef PUT
	return (int)n;
}

/* Pass the request body upstream. 0, or the refusal that ended it. */
static int proxy_body(struct conn *c, const struct http_msg *m, const char **msg)
{
	struct broker *b = c->b;
	struct http_chunked ch;
	uint64_t left = m->clen, total = 0;

	if (m->body == HTTP_BODY_NONE)
		return REF_N;
	http_chunked_init(&ch, false);
	for (;;) {
		if (c->inlen == 0) {
			ssize_t r = proxy_fill(c);
			if (r == -ETIMEDOUT)
				return *msg = "timed out waiting for the request body", REF_TIMEOUT;
			if (r <= 0)
				return *msg = "client closed the connection inside the body", REF_BAD_REQUEST;
		}
		size_t take = c->inlen;
		if (m->body == HTTP_BODY_LENGTH) {
			if (take > left)
				take = (size_t)left;
			left -= take;
		} else {
			const char *why = NULL;
			ssize_t t = http_chunked_feed(&ch, c->in, c->inlen, &why);
			if (t < 0)
				return *msg = why, REF_BAD_REQUEST;
			take = (size_t)t;
			total += take;
			/* framing bytes are counted too, hence the slack; a chunk that announces
			 * more than the limit is refused before any of it is passed on */
			if (total + ch.left > b->max_body + b->max_body / 8 + 4096)
				return *msg = "request body larger than the broker's limit", REF_TOO_LARGE;
		}
		if (upstream_write(&c->up, c->in, take) < 0)
			return *msg = "upstream closed the connection during the request body",
			       REF_UPSTREAM_CONNECT;
		c->up_bytes += take;
		proxy_consume(c, take);
		if (m->body == HTTP_BODY_LENGTH ? left == 0 : ch.done)
			return REF_N;
	}
}

/* Read upstream bytes into c->rbuf: bytes read, 0 at EOF, negative errno. */
static ssize_t proxy_ufill(struct conn *c)
{
	if (c->rlen >= IN_CAP)
		return -ENOBUFS;
	ssize_t r = upstream_read(&c->up, c->rbuf + c->rlen, IN_CAP - c->rlen);
	if (r > 0)
		c->rlen += (size_t)r;
	return r;
}

static int proxy_response_body(struct conn *c, const struct http_msg *rm, const char *key,
			       size_t klen);

/* Response head and body to the client. 0 when the upstream connection may be kept;
 * -1 a refusal before anything reached the client (*why, *msg); -2 the connections must
 * close (cut short, close-delimited, client gone); -3 the key showed up in the body. */
static int proxy_response(struct conn *c, const struct http_msg *req, struct http_msg *rm,
			  const char **msg, enum broker_refusal *why, const char *key, size_t klen)
{
	int rc;
	c->rlen = 0;
	for (;;) {
		while ((rc = http_parse_response(c->rbuf, c->rlen, req->method, req->mlen, rm, msg)) == 0) {
			ssize_t r = proxy_ufill(c);
			if (r <= 0) {
				*why = r == -ETIMEDOUT ? REF_TIMEOUT : REF_UPSTREAM_PROTOCOL;
				*msg = r == -ETIMEDOUT ? "upstream did not answer in time" :
					"upstream closed the connection without a response";
				return -1;
			}
		}
		if (rc < 0) {
			*why = REF_UPSTREAM_PROTOCOL;
			return -1;
		}
		if (rm->status >= 200)
			break;
		if (rm->status == 101) {
			*why = REF_UPSTREAM_PROTOCOL;
			*msg = "upstream switched protocols; the broker passes HTTP/1.1 only";
			return -1;
		}
		/* 100 Continue (we asked for nothing) or 103 Early Hints: not passed on */
		memmove(c->rbuf, c->rbuf + rm->head_len, c->rlen - rm->head_len);
		c->rlen -= rm->head_len;
	}
	size_t hl = rm->head_len;
	/* An upstream that reflects the request's headers would hand the key to the sandbox. */
	if (klen && memmem(c->rbuf, hl, key, klen)) {
		*why = REF_UPSTREAM_PROTOCOL;
		*msg = "the upstream's answer contained the API key; it was not passed on";
		return -1;
	}
	/* Compressed, the key would pass the guard unseen: identity was asked for. */
	if (http_encoded(rm) >= 0) {
		*why = REF_UPSTREAM_PROTOCOL;
		*msg = "the upstream answered with a Content-Encoding other than identity, which "
			"the broker asked for: an encoded answer cannot be checked for the API key, "
			"so it is not passed on";
		return -1;
	}
	if (proxy_write(c, c->rbuf, hl) < 0)
		return -2;
	c->replied = true;
	c->down_bytes += hl;
	memmove(c->rbuf, c->rbuf + hl, c->rlen - hl);
	c->rlen -= hl;
	if (rm->body == HTTP_BODY_NONE)
		return c->rlen ? -2 : 0;
	return proxy_response_body(c, rm, key, klen);
}

/* A chunk of `n` data bytes to the client (the broker's own framing). */
static int proxy_write_chunk(struct conn *c, const char *p, size_t n)
{
	char size[24];
	int sn = snprintf(size, sizeof(size), "%zx\r\n", n);
	if (proxy_write(c, size, (size_t)sn) < 0 || proxy_write(c, p, n) < 0 ||
	    proxy_write(c, "\r\n", 2) < 0)
		return -EPIPE;
	c->down_bytes += (uint64_t)sn + n + 2;
	return 0;
}

/* The response body, checked for the key as one stream (guard.c): a chunked one is
 * decoded and passed on in chunks of the broker's own (extensions and trailers dropped),
 * so no boundary, of a read or of a chunk, can hide the key. Returns as proxy_response. */
static int proxy_response_body(struct conn *c, const struct http_msg *rm, const char *key,
			       size_t klen)
{
	struct http_chunked ch;
	uint64_t left = rm->clen;
	size_t held = 0;        /* rbuf[0..held): data not passed on, it could start the key */
	bool chunked = rm->body == HTTP_BODY_CHUNKED;

	http_chunked_init(&ch, true);
	for (;;) {
		bool end = false;
		if (c->rlen == held) {
			ssize_t r = proxy_ufill(c);
			if (r == 0 && rm->body == HTTP_BODY_CLOSE)
				end = true;     /* the close ends it; the client sees it too */
			else if (r <= 0)
				return -2;      /* cut short: closing tells the client */
		}
		size_t raw = c->rlen - held, n = raw;   /* raw bytes after the held ones */
		if (rm->body == HTTP_BODY_LENGTH) {
			if (n > left)
				n = raw = (size_t)left;
			left -= n;
			end = left == 0;
		} else if (chunked) {
			const char *w = NULL;
			ssize_t t = http_chunked_decode(&ch, c->rbuf + held, raw, &n, &w);
			if (t < 0)
				return -2;
			raw = (size_t)t;
			end = ch.done;
		}
		size_t extra = c->rlen - held - raw;    /* past the body's end */
		ssize_t pass = guard_pass(key, klen, c->rbuf, held + n, end);
		if (pass < 0)
			return -3;      /* the key: cut off before any of it is passed on */
		if (pass > 0 && (chunked ? proxy_write_chunk(c, c->rbuf, (size_t)pass) :
				 proxy_write(c, c->rbuf, (size_t)pass)) < 0)
			return -2;
		if (!chunked)
			c->down_bytes += (uint64_t)pass;
		size_t keep = held + n - (size_t)pass;
		memmove(c->rbuf, c->rbuf + pass, keep);
		memmove(c->rbuf + keep, c->rbuf + held + raw, extra);
		held = keep;
		c->rlen = keep + extra;
		if (!end)
			continue;
		if (chunked) {
			if (proxy_write(c, "0\r\n\r\n", 5) < 0)
				return -2;
			c->down_bytes += 5;
		}
		/* bytes past the end, or a close-delimited body: do not reuse */
		return extra || rm->body == HTTP_BODY_CLOSE ? -2 : 0;
	}
}

static void proxy_wipe_key(char (*k)[BROKER_SECRET_MAX + 1])
{
	OPENSSL_cleanse(*k, sizeof(*k));
}

/* Host header value `v` (a port and a trailing dot allowed) is exactly `host`: not one
 * of the broker's alias names. */
static bool proxy_host_is(const char *v, size_t n, const char *host)
{
	const char *colon = memchr(v, ':', n);
	if (colon)
		n = (size_t)(colon - v);
	if (n && v[n - 1] == '.')
		n--;
	return n == strlen(host) && !strncasecmp(v, host, n);
}

/* One request whose head is parsed. true when the client connection stays open. */
static bool proxy_request(struct conn *c, struct http_msg *m)
{
	struct broker *b = c->b;
	const struct http_hdr *host = &m->h[m->host];
	const struct broker_rule *r = broker_rule_for_host(b, host->value, host->vlen, &c->rule);
	const char *msg = NULL;
	char text[512];
	bool bearer = false;

	c->up_bytes = c->down_bytes = 0;
	c->replied = false;
	snprintf(c->method, sizeof(c->method), "%.*s", (int)(m->mlen < 16 ? m->mlen : 16), m->method);
	if (!r) {
		snprintf(text, sizeof(text), "no broker rule for host '%.*s': only hosts with a "
			 "rule are reachable through the broker", (int)(host->vlen > 200 ? 200 : host->vlen),
			 host->value);
		proxy_refuse(c, m, 421, REF_NO_RULE, text);
		return false;
	}
	if (c->sni_rule >= 0 && (c->rule != c->sni_rule ||
				 !proxy_host_is(host->value, host->vlen, r->host))) {
		/* intercepted: the Host must name the host the TLS session was made for */
		snprintf(text, sizeof(text), "Host '%.*s' is not the TLS server name '%s'",
			 (int)(host->vlen > 200 ? 200 : host->vlen), host->value,
			 b->rules[c->sni_rule].host);
		c->rule = c->sni_rule;
		proxy_refuse(c, m, 421, REF_NO_RULE, text);
		return false;
	}
	int why = proxy_check_placeholder(c, m, r, &bearer, &msg);
	if (why != REF_N) {
		proxy_refuse(c, m, why == REF_BAD_REQUEST ? 400 : 403, (enum broker_refusal)why, msg);
		return false;
	}
	if (m->body == HTTP_BODY_LENGTH && m->clen > b->max_body) {
		snprintf(text, sizeof(text), "request body of %llu bytes is over the broker's limit "
			 "of %llu bytes", (unsigned long long)m->clen, (unsigned long long)b->max_body);
		proxy_refuse(c, m, 413, REF_TOO_LARGE, text);
		return false;
	}

	/* wiped on every way out of this function */
	char key[BROKER_SECRET_MAX + 1] __attribute__((cleanup(proxy_wipe_key)));
	int klen = 0;
	key[0] = '\0';
	if (r->kind != RULE_LOCAL)
		klen = broker_secret_get(b, r->secret, key, sizeof(key));
	if (klen < 0) {
		snprintf(text, sizeof(text), "secret '%s' is not set on the host (kosa8 secret set "
			 "%s --stdin)", r->secret, r->secret);
		proxy_refuse(c, m, 503, REF_NO_SECRET, text);
		return false;
	}
	char *head = malloc(OUT_CAP);
	int hn = head ? proxy_build_head(head, OUT_CAP, m, r, bearer, key) : -ENOMEM;
	if (hn < 0) {
		free(head);
		proxy_refuse(c, m, 431, REF_TOO_LARGE, "request head too large");
		return false;
	}

	/* Upstream: reuse the kept-alive connection to the same host unless it went away. */
	int sent = -1;
	for (int attempt = 0; attempt < 2 && sent < 0; attempt++) {
		bool fresh = false;
		if (c->up.fd >= 0 && (c->up.rule != c->rule || upstream_stale(&c->up)))
			upstream_close(&c->up);
		if (c->up.fd < 0) {
			struct k8_err err = { 0 };
			enum broker_refusal uw;
			if (upstream_open(b, c->rule, &c->up, &uw, &err) < 0) {
				OPENSSL_cleanse(head, (size_t)hn);
				free(head);
				proxy_refuse(c, m, uw == REF_NO_MODEL ? 503 : 502, uw, err.msg);
				return false;
			}
			fresh = true;
		}
		sent = upstream_write(&c->up, head, (size_t)hn);
		if (sent < 0) {
			upstream_close(&c->up);
			if (fresh)
				break;
		}
	}
	OPENSSL_cleanse(head, (size_t)hn);
	free(head);
	if (sent < 0) {
		proxy_refuse(c, m, 502, REF_UPSTREAM_CONNECT, "upstream closed the connection");
		return false;
	}
	c->up_bytes += (uint64_t)hn;
	if (m->expect_continue && proxy_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0) {
		upstream_close(&c->up);
		return false;
	}
	proxy_consume(c, m->head_len);
	why = proxy_body(c, m, &msg);
	if (why != REF_N) {
		upstream_close(&c->up);
		proxy_refuse(c, m, why == REF_TOO_LARGE ? 413 : why == REF_TIMEOUT ? 408 :
			     why == REF_BAD_REQUEST ? 400 : 502, (enum broker_refusal)why, msg);
		return false;
	}

	struct http_msg rm;
	enum broker_refusal rw = REF_UPSTREAM_PROTOCOL;
	int rc = proxy_response(c, m, &rm, &msg, &rw, key, (size_t)klen);
	if (rc == -1) {
		upstream_close(&c->up);
		proxy_refuse(c, m, rw == REF_TIMEOUT ? 504 : 502, rw, msg);
		return false;
	}
	if (rc == -3) {
		upstream_close(&c->up);
		proxy_refuse(c, m, 502, REF_UPSTREAM_PROTOCOL, "the upstream's answer contained "
			     "the API key; the response was cut off before it");
		return false;
	}
	broker_count(b, c->rule, REF_N, c->up_bytes, c->down_bytes, true);
	if (b->verbose)
		proxy_log(c, rm.status, NULL);
	if (rc < 0 || !rm.keep_alive)
		upstream_close(&c->up);
	return rc == 0 && m->keep_alive && rm.keep_alive;
}

/* After a refusal the client may still be sending its body: read (and drop) a little of
 * it, so that closing with unread bytes does not reset the connection before the client
 * read our answer. */
static void proxy_drain(int fd)
{
	struct timeval tv = { .tv_usec = 200000 };
	char buf[16384];
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (int i = 0; i < 256; i++)
		if (read(fd, buf, sizeof(buf)) <= 0)
			break;
}

void proxy_serve(struct broker *b, int fd, bool tls)
{
	struct conn c = { .b = b, .fd = fd, .up = { .fd = -1, .rule = -1 }, .rule = -1,
			  .sni_rule = -1 };
	struct timeval tv = { .tv_sec = b->idle_ms / 1000, .tv_usec = (b->idle_ms % 1000) * 1000 };

	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  /* TCP clients; unix: no-op */
	pthread_mutex_lock(&b->lock);
	b->connections++;
	pthread_mutex_unlock(&b->lock);
	if (tls && !(c.tls = intercept_accept(b, fd, &c.sni_rule))) {
		/* no SNI, a name without a rule, or a client that does not trust the CA */
		c.rule = b->nrules;
		broker_count(b, b->nrules, REF_NO_RULE, 0, 0, true);
		proxy_log(&c, 0, "TLS handshake refused (server name without a rule, or the "
			  "client gave up)");
		close(fd);
		return;
	}
	c.in = malloc(IN_CAP);
	c.rbuf = malloc(IN_CAP);
	bool keep = c.in && c.rbuf;
	while (keep) {
		struct http_msg m;
		const char *why = NULL;
		int rc;
		c.rule = b->nrules;
		c.method[0] = '\0';
		while ((rc = http_parse_request(c.in, c.inlen, &m, &why)) == 0) {
			ssize_t r = proxy_fill(&c);
			if (r == -ETIMEDOUT && c.inlen) {
				proxy_refuse(&c, NULL, 408, REF_TIMEOUT, "timed out waiting for the request head");
				rc = 1;
				keep = false;
				break;
			}
			if (r <= 0) {
				keep = false;   /* closed or idle between requests: not a refusal */
				break;
			}
		}
		if (!keep)
			break;
		if (rc < 0) {
			proxy_refuse(&c, NULL, -rc, rc == -431 ? REF_TOO_LARGE : REF_BAD_REQUEST, why);
			break;
		}
		keep = proxy_request(&c, &m);
	}
	upstream_close(&c.up);
	free(c.in);
	free(c.rbuf);
	if (c.tls) {
		SSL_shutdown(c.tls);    /* one close_notify; the client's is not awaited */
		SSL_free(c.tls);
	} else {
		shutdown(fd, SHUT_WR);
		proxy_drain(fd);
	}
	close(fd);
}

void proxy_refuse_busy(struct broker *b, int fd)
{
	struct conn c = { .b = b, .fd = fd, .up = { .fd = -1 }, .rule = b->nrules };
	struct timeval tv = { .tv_sec = 1 };
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	proxy_refuse(&c, NULL, 503, REF_BUSY, "the broker is serving as many connections as it "
		     "may; retry later");
	close(fd);
}
