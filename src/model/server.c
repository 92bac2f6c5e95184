/* SPDX-License-Identifier: Apache-2.0 */
/* server.c - `kosa8-model serve`: one model behind the OpenAI and Anthropic HTTP APIs.
 *
 * Theory of operation:
 *  - libmicrohttpd, one thread per connection (handlers block), loopback unless --host says
 *    otherwise. A body is read up to REQ_MAX_BODY, then parsed (chatreq.c) and rendered
 *    (chat.c) before the request joins the queue, so a bad request never waits.
 *  - One generation at a time, FIFO: a job waits until it is the head of the queue. The KV
 *    cache keeps the last conversation; a request that extends it (a chat loop) reuses the
 *    common prefix.
 *  - Between tokens the job polls its client's socket; a client that has gone (POLLRDHUP)
 *    stops its generation, and a waiting client that goes leaves the queue.
 *  - Output is held back while it might still become a stop sequence, an incomplete UTF-8
 *    character or the start of a tool call; the rest streams as it comes.
 * Errors use each API's own shape: OpenAI {"error":{"message","type","param","code"}},
 * Anthropic {"type":"error","error":{"type","message"}}.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "model/chatreq.h"
#include "model/jail.h"
#include "model/model.h"
#include "model/sample.h"
#include "model/server.h"

#define MAX_QUEUE 64
#define MAX_CONNS 96

struct job;

struct srv {
	struct model m;
	struct tok t;
	struct chat_tmpl ct;
	bool have_tmpl;
	struct k8_err tmpl_err;
	struct model_ctx c;
	char *id;                      /* the model's name in the APIs */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *head, *tail;       /* FIFO; the head generates */
	int queued;
	int32_t *cache;                /* tokens whose keys and values are in c */
	int n_cache;
	atomic_ulong tokens, requests, cancelled;
	atomic_bool busy;
};

struct job {
	struct srv *s;
	struct job *next;
	enum api api;
	struct gen_req req;
	int32_t *prompt;
	int np;
	int fd;                        /* the client's socket */
	struct sampler smp;
	bool tools, entered, started, done, cancelled, tool_begun, block_open, any_text;
	char *out;                     /* everything generated */
	size_t out_len, out_cap, sent;
	int n_gen;
	const char *finish;            /* "stop", "length", "tool_calls" (OpenAI terms) */
	int stop_idx;                  /* which stop string ended it, or -1 */
	char *buf;                     /* SSE bytes not yet handed to microhttpd */
	size_t buf_len, buf_off, buf_cap;
	char rid[40];
	time_t created;
};

/* ---- helpers ---- */

static void rand_hex(char *out, size_t nbytes)
{
	uint8_t b[32];
	if (nbytes > sizeof(b))
		nbytes = sizeof(b);
	if (getrandom(b, nbytes, 0) != (ssize_t)nbytes)
		for (size_t i = 0; i < nbytes; i++)
			b[i] = (uint8_t)(rand() & 0xff);
	for (size_t i = 0; i < nbytes; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static bool client_gone(int fd)
{
	if (fd < 0)
		return false;
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned status, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s)
		return MHD_NO;
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	enum MHD_Result rc = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return rc;
}

/* An error in the shape of the API the client called. */
static enum MHD_Result send_error(struct MHD_Connection *conn, enum api api, unsigned status,
				  const char *code, const char *msg)
{
	const char *type;
	if (api == API_ANTHROPIC) {
		type = status == 413 ? "request_too_large" : status == 404 ? "not_found_error" :
		       status == 529 || status == 503 ? "overloaded_error" : status >= 500 ? "api_error" :
		       "invalid_request_error";
		return send_json(conn, status, json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error",
							 "type", type, "message", msg));
	}
	type = status >= 500 ? "server_error" : status == 404 ? "not_found_error" : "invalid_request_error";
	return send_json(conn, status, json_pack("{s:{s:s,s:s,s:n,s:o}}", "error", "message", msg,
						 "type", type, "param", "code",
						 code ? json_string(code) : json_null()));
}

/* ---- the queue ---- */

static int queue_enter(struct srv *s, struct job *j)
{
	pthread_mutex_lock(&s->mu);
	if (s->queued >= MAX_QUEUE) {
		pthread_mutex_unlock(&s->mu);
		return -EBUSY;
	}
	j->next = NULL;
	if (s->tail)
		s->tail->next = j;
	else
		s->head = j;
	s->tail = j;
	s->queued++;
	j->entered = true;
	while (s->head != j) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->cv, &s->mu, &ts);
		if (s->head != j && client_gone(j->fd)) {
			pthread_mutex_unlock(&s->mu);
			return -ECANCELED;   /* job_leave unlinks it */
		}
	}
	pthread_mutex_unlock(&s->mu);
	atomic_store(&s->busy, true);
	return 0;
}

static void queue_leave(struct srv *s, struct job *j)
{
	if (!j->entered)
		return;
	pthread_mutex_lock(&s->mu);
	struct job **pp = &s->head, *prev = NULL;
	while (*pp && *pp != j) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (*pp) {
		if (s->head == j)
			atomic_store(&s->busy, false);
		*pp = j->next;
		if (s->tail == j)
			s->tail = prev;
		s->queued--;
	}
	j->entered = false;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* ---- generation ---- */

static void job_free(void *cls)
{
	struct job *j = cls;
	if (!j)
		return;
	if (j->started && !j->done)
		atomic_fetch_add(&j->s->cancelled, 1);
	queue_leave(j->s, j);
	chatreq_free(&j->req);
	sample_free(&j->smp);
	free(j->prompt);
	free(j->out);
	free(j->buf);
	free(j);
}

static bool is_stop_token(const struct srv *s, int32_t id)
{
	if (s->have_tmpl) {
		for (int i = 0; i < s->ct.n_stop; i++)
			if (s->ct.stop[i] == id)
				return true;
		return false;
	}
	return id == s->t.eos;
}

static int out_append(struct job *j, const char *p, size_t n)
{
	if (j->out_len + n + 1 > j->out_cap) {
		size_t cap = j->out_cap ? 2 * j->out_cap : 1024;
		while (cap < j->out_len + n + 1)
			cap *= 2;
		char *o = realloc(j->out, cap);
		if (!o)
			return -ENOMEM;
		j->out = o;
		j->out_cap = cap;
	}
	memcpy(j->out + j->out_len, p, n);
	j->out_len += n;
	j->out[j->out_len] = 0;
	return 0;
}

/* Take the queue's head, then feed the prompt, reusing the cached prefix. */
static int job_start(struct job *j)
{
	struct srv *s = j->s;
	int rc = queue_enter(s, j);
	if (rc)
		return rc;
	j->started = true;
	atomic_fetch_add(&s->requests, 1);
	int k = 0;
	while (k < s->n_cache && k < j->np - 1 && s->cache[k] == j->prompt[k])
		k++;
	s->c.pos = k;
	s->n_cache = k;
	for (int i = k; i < j->np; i += s->c.n_batch) {
		int n = j->np - i < s->c.n_batch ? j->np - i : s->c.n_batch;
		if (client_gone(j->fd))
			return -ECANCELED;
		if ((rc = model_eval(&s->c, j->prompt + i, n)))
			return rc;
		memcpy(s->cache + s->n_cache, j->prompt + i, (size_t)n * sizeof(int32_t));
		s->n_cache += n;
	}
	return 0;
}

/* Bytes at the end of out that cannot be sent yet: an incomplete UTF-8 character, or the
 * longest tail that a stop sequence could still complete. */
static size_t hold_back(const struct job *j)
{
	size_t hold = 0, n = j->out_len;
	for (size_t k = 1; k <= 3 && k <= n; k++) {
		unsigned char c = (unsigned char)j->out[n - k];
		if ((c & 0xc0) != 0x80) {
			size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
			if (need > k)
				hold = k;
			break;
		}
	}
	for (int i = 0; i < j->req.n_stop; i++) {
		size_t sl = strlen(j->req.stop[i]);
		for (size_t k = sl - 1; k > hold; k--)
			if (k <= n && !memcmp(j->out + n - k, j->req.stop[i], k)) {
				hold = k;
				break;
			}
	}
	return hold;
}

/* One token: sample, check the ends, append its text, feed it. Sets j->done at the end. */
static int job_step(struct job *j)
{
	struct srv *s = j->s;
	if (client_gone(j->fd))
		return -ECANCELED;
	int32_t id = sample_next(&j->smp, s->c.logits);
	if (is_stop_token(s, id)) {
		j->finish = "stop";
		j->done = true;
		return 0;
	}
	char piece[1024];
	int l = tok_piece(&s->t, id, false, piece, sizeof(piece));
	size_t before = j->out_len;
	if (l > 0 && out_append(j, piece, (size_t)l))
		return -ENOMEM;
	j->n_gen++;
	atomic_fetch_add(&s->tokens, 1);
	for (int i = 0; i < j->req.n_stop; i++) {
		size_t sl = strlen(j->req.stop[i]);
		size_t from = before + 1 > sl ? before + 1 - sl : 0;
		if (from < j->sent)
			from = j->sent;
		char *hit = from < j->out_len ? memmem(j->out + from, j->out_len - from, j->req.stop[i], sl) : NULL;
		if (hit) {
			j->out_len = (size_t)(hit - j->out);
			j->out[j->out_len] = 0;
			j->finish = "stop";
			j->stop_idx = i;
			j->done = true;
			return 0;
		}
	}
	if (j->n_gen >= j->req.max_tokens || s->c.pos >= s->c.n_ctx) {
		j->finish = "length";
		j->done = true;
		return 0;
	}
	int rc = model_eval(&s->c, &id, 1);
	if (rc)
		return rc;
	s->cache[s->n_cache++] = id;
	return 0;
}

/* How far out may be streamed now (j->sent .. return value). */
static size_t stream_safe(struct job *j)
{
	if (j->tool_begun)
		return j->sent;
	size_t safe = j->out_len - hold_back(j);
	if (j->tools) {
		bool begun;
		size_t t = chat_stream_safe(&j->s->ct, j->out, j->out_len, &begun);
		if (begun)
			j->tool_begun = true;
		if (t < safe)
			safe = t;
	}
	return safe < j->sent ? j->sent : safe;
}

/* ---- SSE output ---- */

static int buf_add(struct job *j, const char *event, json_t *data)
{
	char *s = data ? json_dumps(data, JSON_COMPACT) : strdup("[DONE]");
	json_decref(data);
	if (!s)
		return -ENOMEM;
	size_t need = strlen(s) + (event ? strlen(event) : 0) + 32;
	if (j->buf_len + need > j->buf_cap) {
		size_t cap = (j->buf_len + need) * 2;
		char *b = realloc(j->buf, cap);
		if (!b) {
			free(s);
			return -ENOMEM;
		}
		j->buf = b;
		j->buf_cap = cap;
	}
	int n = event ? sprintf(j->buf + j->buf_len, "event: %s\ndata: %s\n\n", event, s) :
			sprintf(j->buf + j->buf_len, "data: %s\n\n", s);
	j->buf_len += (size_t)n;
	free(s);
	return 0;
}

static json_t *oai_chunk(struct job *j, json_t *delta, const char *finish)
{
	json_t *choice = json_pack("{s:i,s:o,s:n,s:s?}", "index", 0, "delta", delta, "logprobs",
				   "finish_reason", finish);
	if (!finish)
		json_object_set_new(choice, "finish_reason", json_null());
	return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", j->rid, "object", "chat.completion.chunk",
			 "created", (json_int_t)j->created, "model", j->s->id, "choices", choice);
}

static json_t *cmpl_chunk(struct job *j, json_t *text, const char *finish)
{
	json_t *choice = json_pack("{s:o,s:i,s:n,s:s?}", "text", text, "index", 0, "logprobs",
				   "finish_reason", finish);
	if (!finish)
		json_object_set_new(choice, "finish_reason", json_null());
	return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", j->rid, "object", "text_completion",
			 "created", (json_int_t)j->created, "model", j->s->id, "choices", choice);
}

static json_t *usage(struct job *j)
{
	if (j->api == API_ANTHROPIC)
		return json_pack("{s:i,s:i}", "input_tokens", j->np, "output_tokens", j->n_gen);
	return json_pack("{s:i,s:i,s:i}", "prompt_tokens", j->np, "completion_tokens", j->n_gen,
			 "total_tokens", j->np + j->n_gen);
}

/* Stream content j->out[j->sent..upto). */
static int emit_text(struct job *j, size_t upto)
{
	if (upto <= j->sent)
		return 0;
	json_t *t = chat_json_bytes(j->out + j->sent, upto - j->sent);
	j->sent = upto;
	if (!t)
		return -ENOMEM;
	j->any_text = true;
	if (j->api == API_OPENAI_CHAT)
		return buf_add(j, NULL, oai_chunk(j, json_pack("{s:o}", "content", t), NULL));
	if (j->api == API_OPENAI_COMPLETION)
		return buf_add(j, NULL, cmpl_chunk(j, t, NULL));
	int rc = 0;
	if (!j->block_open) {
		j->block_open = true;
		rc = buf_add(j, "content_block_start", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type",
			     "content_block_start", "index", 0, "content_block", "type", "text", "text", ""));
	}
	return rc ? rc : buf_add(j, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:o}}", "type",
				 "content_block_delta", "index", 0, "delta", "type", "text_delta", "text", t));
}

static const char *anthropic_reason(const struct job *j, bool calls)
{
	if (calls)
		return "tool_use";
	if (!strcmp(j->finish, "length"))
		return "max_tokens";
	return j->stop_idx >= 0 ? "stop_sequence" : "end_turn";
}

static json_t *call_args(const char *args)
{
	json_t *a = json_loads(args, 0, NULL);
	return json_is_object(a) ? a : (json_decref(a), json_object());
}

/* The end of a stream: the rest of the content, tool calls, the finish and usage. */
static int emit_end(struct job *j)
{
	struct chat_call *calls = NULL;
	size_t content_len = j->out_len;
	int nc = j->tools ? chat_parse_calls(&j->s->ct, j->out, j->out_len, &content_len, &calls) : 0;
	if (nc < 0)
		return nc;
	if (nc == 0)
		content_len = j->out_len;
	if (content_len < j->sent)
		content_len = j->sent;
	int rc = emit_text(j, content_len);
	if (j->api == API_OPENAI_CHAT) {
		for (int i = 0; !rc && i < nc; i++) {
			char id[32] = "call_";
			rand_hex(id + 5, 12);
			rc = buf_add(j, NULL, oai_chunk(j, json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}",
				     "tool_calls", "index", i, "id", id, "type", "function", "function",
				     "name", calls[i].name, "arguments", calls[i].args), NULL));
		}
		if (!rc)
			rc = buf_add(j, NULL, oai_chunk(j, json_object(), nc ? "tool_calls" : j->finish));
		if (!rc && j->req.include_usage) {
			json_t *u = oai_chunk(j, json_object(), NULL);
			json_array_clear(json_object_get(u, "choices"));
			json_object_set_new(u, "usage", usage(j));
			rc = buf_add(j, NULL, u);
		}
		if (!rc)
			rc = buf_add(j, NULL, NULL);
	} else if (j->api == API_OPENAI_COMPLETION) {
		rc = buf_add(j, NULL, cmpl_chunk(j, json_string(""), j->finish));
		if (!rc && j->req.include_usage) {
			json_t *u = cmpl_chunk(j, json_string(""), NULL);
			json_array_clear(json_object_get(u, "choices"));
			json_object_set_new(u, "usage", usage(j));
			rc = buf_add(j, NULL, u);
		}
		if (!rc)
			rc = buf_add(j, NULL, NULL);
	} else {
		int idx = 0;
		if (!j->block_open && !nc) {
			j->block_open = true;
			rc = buf_add(j, "content_block_start", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type",
				     "content_block_start", "index", 0, "content_block", "type", "text",
				     "text", ""));
		}
		if (j->block_open) {
			rc = rc ? rc : buf_add(j, "content_block_stop", json_pack("{s:s,s:i}", "type",
					       "content_block_stop", "index", 0));
			idx = 1;
		}
		for (int i = 0; !rc && i < nc; i++, idx++) {
			char id[32] = "toolu_";
			rand_hex(id + 6, 12);
			rc = buf_add(j, "content_block_start", json_pack("{s:s,s:i,s:{s:s,s:s,s:s,s:{}}}",
				     "type", "content_block_start", "index", idx, "content_block", "type",
				     "tool_use", "id", id, "name", calls[i].name, "input"));
			json_t *a = call_args(calls[i].args);
			char *as = json_dumps(a, JSON_COMPACT);
			json_decref(a);
			if (!rc && as)
				rc = buf_add(j, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:s}}",
					     "type", "content_block_delta", "index", idx, "delta", "type",
					     "input_json_delta", "partial_json", as));
			free(as);
			if (!rc)
				rc = buf_add(j, "content_block_stop", json_pack("{s:s,s:i}", "type",
					     "content_block_stop", "index", idx));
		}
		json_t *ss = !nc && j->stop_idx >= 0 ? json_string(j->req.stop[j->stop_idx]) : json_null();
		if (!rc)
			rc = buf_add(j, "message_delta", json_pack("{s:s,s:{s:s,s:o},s:{s:i}}", "type",
				     "message_delta", "delta", "stop_reason", anthropic_reason(j, nc > 0),
				     "stop_sequence", ss, "usage", "output_tokens", j->n_gen));
		else
			json_decref(ss);
		if (!rc)
			rc = buf_add(j, "message_stop", json_pack("{s:s}", "type", "message_stop"));
	}
	chat_calls_free(calls, nc);
	return rc;
}

static int emit_start(struct job *j)
{
	if (j->api == API_OPENAI_CHAT)
		return buf_add(j, NULL, oai_chunk(j, json_pack("{s:s,s:s}", "role", "assistant",
					"content", ""), NULL));
	if (j->api == API_ANTHROPIC)
		return buf_add(j, "message_start", json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:i,s:i}}}",
			       "type", "message_start", "message", "id", j->rid, "type", "message",
			       "role", "assistant", "model", j->s->id, "content", "stop_reason",
			       "stop_sequence", "usage", "input_tokens", j->np, "output_tokens", 0));
	return 0;
}

/* microhttpd's pull: run the job until there are bytes to hand over. */
static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
	(void)pos;
	struct job *j = cls;
	for (;;) {
		if (j->buf_off < j->buf_len) {
			size_t n = j->buf_len - j->buf_off < max ? j->buf_len - j->buf_off : max;
			memcpy(out, j->buf + j->buf_off, n);
			j->buf_off += n;
			if (j->buf_off == j->buf_len)
				j->buf_off = j->buf_len = 0;
			return (ssize_t)n;
		}
		if (j->cancelled)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (j->done && !j->entered)
			return MHD_CONTENT_READER_END_OF_STREAM;
		int rc = 0;
		if (!j->started) {
			rc = job_start(j);
			if (!rc)
				rc = emit_start(j);
		} else if (!j->done) {
			rc = job_step(j);
			if (!rc)
				rc = emit_text(j, stream_safe(j));
		}
		if (!rc && j->done && j->entered) {
			queue_leave(j->s, j);   /* let the next request run while this one drains */
			rc = emit_end(j);
		}
		if (rc) {
			j->cancelled = true;
			queue_leave(j->s, j);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
}

/* ---- non-streaming replies ---- */

static json_t *reply_json(struct job *j)
{
	struct chat_call *calls = NULL;
	size_t cl = j->out_len;
	int nc = j->tools ? chat_parse_calls(&j->s->ct, j->out, j->out_len, &cl, &calls) : 0;
	if (nc <= 0) {
		nc = 0;
		cl = j->out_len;
	}
	json_t *text = chat_json_bytes(j->out, cl);
	json_t *r;
	if (j->api == API_OPENAI_COMPLETION) {
		r = json_pack("{s:s,s:s,s:I,s:s,s:[{s:o,s:i,s:n,s:s}],s:o}", "id", j->rid, "object",
			      "text_completion", "created", (json_int_t)j->created, "model", j->s->id,
			      "choices", "text", text, "index", 0, "logprobs", "finish_reason", j->finish,
			      "usage", usage(j));
	} else if (j->api == API_OPENAI_CHAT) {
		json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
					nc && cl == 0 ? (json_decref(text), json_null()) : text);
		if (nc) {
			json_t *tc = json_array();
			for (int i = 0; i < nc; i++) {
				char id[32] = "call_";
				rand_hex(id + 5, 12);
				json_array_append_new(tc, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type",
						      "function", "function", "name", calls[i].name,
						      "arguments", calls[i].args));
			}
			json_object_set_new(msg, "tool_calls", tc);
		}
		r = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:n,s:s}],s:o}", "id", j->rid, "object",
			      "chat.completion", "created", (json_int_t)j->created, "model", j->s->id,
			      "choices", "index", 0, "message", msg, "logprobs", "finish_reason",
			      nc ? "tool_calls" : j->finish, "usage", usage(j));
	} else {
		json_t *content = json_array();
		if (cl || !nc)
			json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text", text));
		else
			json_decref(text);
		for (int i = 0; i < nc; i++) {
			char id[32] = "toolu_";
			rand_hex(id + 6, 12);
			json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use",
					      "id", id, "name", calls[i].name, "input", call_args(calls[i].args)));
		}
		json_t *ss = !nc && j->stop_idx >= 0 ? json_string(j->req.stop[j->stop_idx]) : json_null();
		r = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:o}", "id", j->rid, "type", "message", "role",
			      "assistant", "model", j->s->id, "content", content, "stop_reason",
			      anthropic_reason(j, nc > 0), "stop_sequence", ss, "usage", usage(j));
	}
	chat_calls_free(calls, nc);
	return r;
}

/* ---- requests ---- */

struct conn {
	char *body;
	size_t len;
	bool too_big;
};

static enum api api_of(const char *url)
{
	if (!strcmp(url, "/v1/messages"))
		return API_ANTHROPIC;
	if (!strcmp(url, "/v1/completions"))
		return API_OPENAI_COMPLETION;
	return API_OPENAI_CHAT;
}

/* Parse, render and tokenize; on failure an error reply is queued and NULL returned. */
static struct job *job_new(struct srv *s, struct MHD_Connection *conn, enum api api,
			   const struct conn *cn, enum MHD_Result *ret)
{
	struct k8_err err = { 0 };
	struct job *j = calloc(1, sizeof(*j));
	if (!j) {
		*ret = send_error(conn, api, 500, NULL, "out of memory");
		return NULL;
	}
	j->s = s;
	j->api = api;
	j->stop_idx = -1;
	j->created = time(NULL);
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	j->fd = ci ? ci->connect_fd : -1;
	strcpy(j->rid, api == API_ANTHROPIC ? "msg_" : api == API_OPENAI_CHAT ? "chatcmpl-" : "cmpl-");
	rand_hex(j->rid + strlen(j->rid), 12);
	if (chatreq_parse(api, cn->body, cn->len, &j->req, &err)) {
		*ret = send_error(conn, api, 400, NULL, err.msg);
		goto fail;
	}
	if (api == API_OPENAI_COMPLETION) {
		j->np = tok_encode(&s->t, j->req.prompt, strlen(j->req.prompt), s->t.add_bos, true, &j->prompt);
	} else {
		if (!s->have_tmpl) {
			*ret = send_error(conn, api, 400, "unsupported_chat_template", s->tmpl_err.msg);
			goto fail;
		}
		struct chat_prompt p;
		if (chat_render(&s->ct, &j->req.conv, &p, &err)) {
			*ret = send_error(conn, api, 400, NULL, err.msg);
			goto fail;
		}
		j->np = chat_tokenize(&p, &s->t, &j->prompt);
		chat_prompt_free(&p);
		j->tools = j->req.conv.tools != NULL;
	}
	if (j->np < 0) {
		*ret = send_error(conn, api, j->np == -E2BIG ? 413 : 500, NULL, "cannot tokenize the prompt");
		goto fail;
	}
	if (j->np == 0 || j->np >= s->c.n_ctx) {
		char m[200];
		snprintf(m, sizeof(m), "the prompt is %d tokens; this server's context holds %d "
			 "(kosa8-model serve --ctx)", j->np, s->c.n_ctx);
		*ret = send_error(conn, api, 400, j->np ? "context_length_exceeded" : NULL,
				  j->np ? m : "the prompt is empty");
		goto fail;
	}
	int room = s->c.n_ctx - j->np;
	if (j->req.max_tokens < 0 || j->req.max_tokens > room)
		j->req.max_tokens = room;
	uint64_t seed = j->req.seed;
	if (!j->req.has_seed && getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (uint64_t)time(NULL);
	if (sample_init(&j->smp, s->m.hp.n_vocab, j->req.temperature, j->req.top_p, seed)) {
		*ret = send_error(conn, api, 500, NULL, "out of memory");
		goto fail;
	}
	return j;
fail:
	job_free(j);
	return NULL;
}

static enum MHD_Result generate(struct srv *s, struct MHD_Connection *conn, enum api api,
				const struct conn *cn)
{
	enum MHD_Result ret = MHD_NO;
	struct job *j = job_new(s, conn, api, cn, &ret);
	if (!j)
		return ret;
	if (j->req.stream) {
		struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
									   stream_read, j, job_free);
		if (!r) {
			job_free(j);
			return MHD_NO;
		}
		MHD_add_response_header(r, "Content-Type", "text/event-stream");
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		ret = MHD_queue_response(conn, 200, r);
		MHD_destroy_response(r);
		return ret;
	}
	int rc = job_start(j);
	while (!rc && !j->done)
		rc = job_step(j);
	queue_leave(s, j);
	if (rc == -EBUSY)
		ret = send_error(conn, api, api == API_ANTHROPIC ? 529 : 503, NULL, "too many queued requests");
	else if (rc == -ECANCELED)
		ret = MHD_NO;   /* the client has gone */
	else if (rc)
		ret = send_error(conn, api, 500, NULL, strerror(-rc));
	else
		ret = send_json(conn, 200, reply_json(j));
	job_free(j);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *data,
			      size_t *data_size, void **con_cls)
{
	(void)version;
	struct srv *s = cls;
	struct conn *cn = *con_cls;
	if (!cn) {
		if (!(cn = calloc(1, sizeof(*cn))))
			return MHD_NO;
		*con_cls = cn;
		return MHD_YES;
	}
	enum api api = api_of(url);
	if (*data_size) {
		if (!cn->too_big && cn->len + *data_size > REQ_MAX_BODY) {
			cn->too_big = true;
			free(cn->body);
			cn->body = NULL;
		}
		if (!cn->too_big) {
			char *b = realloc(cn->body, cn->len + *data_size + 1);
			if (!b)
				return MHD_NO;
			memcpy(b + cn->len, data, *data_size);
			cn->body = b;
			cn->len += *data_size;
		}
		*data_size = 0;
		return MHD_YES;
	}
	if (!strcmp(method, "GET") && !strcmp(url, "/health")) {
		pthread_mutex_lock(&s->mu);
		int queued = s->queued;
		pthread_mutex_unlock(&s->mu);
		return send_json(conn, 200, json_pack("{s:s,s:s,s:b,s:i,s:I,s:I,s:I,s:s?}", "status", "ok",
			"model", s->id, "busy", atomic_load(&s->busy), "queued", queued,
			"generated_tokens", (json_int_t)atomic_load(&s->tokens),
			"requests", (json_int_t)atomic_load(&s->requests),
			"cancelled", (json_int_t)atomic_load(&s->cancelled),
			"chat_template", s->have_tmpl ? s->ct.name : NULL));
	}
	if (!strcmp(method, "GET") && !strcmp(url, "/v1/models"))
		return send_json(conn, 200, json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list",
			"data", "id", s->id, "object", "model", "created", (json_int_t)0, "owned_by", "kosa8"));
	bool known = !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/v1/completions") ||
		     !strcmp(url, "/v1/messages");
	if (!known)
		return send_error(conn, api, 404, NULL, "no such endpoint");
	if (strcmp(method, "POST"))
		return send_error(conn, api, 405, NULL, "use POST");
	if (cn->too_big) {
		char m[100];
		snprintf(m, sizeof(m), "the request body is over %u bytes", REQ_MAX_BODY);
		return send_error(conn, api, 413, NULL, m);
	}
	return generate(s, conn, api, cn);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)conn;
	(void)toe;
	struct conn *cn = *con_cls;
	if (cn) {
		free(cn->body);
		free(cn);
		*con_cls = NULL;
	}
}

/* ---- start-up ---- */

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

K8_PRINTF(1, 2) static int fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "kosa8-model serve: ");
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

#define SERVE_USAGE "usage: kosa8-model serve FILE [--port P] [--host H | --listen-fd N] " \
	"[--threads N] [--ctx N] [--name NAME] [--user UID:GID | --no-jail]"

/* --listen-fd: a listening TCP socket the parent bound (kosa8d passes fd 3, so that the
 * port is never free between its check and our bind). Its address replaces --host and
 * --port. 0, or -EINVAL when fd is not one. */
static int listen_given(int fd, struct sockaddr_storage *ss)
{
	int v = 0, t = 0;
	socklen_t l = sizeof(v), tl = sizeof(t), sl = sizeof(*ss);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) < 0 || !v ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &tl) < 0 || t != SOCK_STREAM ||
	    getsockname(fd, (struct sockaddr *)ss, &sl) < 0 ||
	    (ss->ss_family != AF_INET && ss->ss_family != AF_INET6))
		return -EINVAL;
	return fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 ? -errno : 0;
}

/* The listening socket, bound before the jail takes bind() away. fd or -errno. */
static int listen_on(const struct sockaddr_storage *ss)
{
	socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	int one = 1, fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss->ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)ss, len) < 0 || listen(fd, 128) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

int server_main(int argc, char **argv)
{
	const char *path = NULL, *host = "127.0.0.1", *name = NULL, *user = NULL;
	int port = 7434, threads = 2, ctx = 4096, given = -1;
	bool no_jail = false;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--port") && v) port = atoi(argv[++i]);
		else if (!strcmp(a, "--host") && v) host = argv[++i];
		else if (!strcmp(a, "--listen-fd") && v) given = atoi(argv[++i]);
		else if (!strcmp(a, "--threads") && v) threads = atoi(argv[++i]);
		else if (!strcmp(a, "--ctx") && v) ctx = atoi(argv[++i]);
		else if (!strcmp(a, "--name") && v) name = argv[++i];
		else if (a[0] != '-' && !path) path = a;
		else if (!strcmp(a, "--user") && v) user = argv[++i];
		else if (!strcmp(a, "--no-jail")) no_jail = true;
		else return fail("%s", SERVE_USAGE);
	}
	if (!path || port < 0 || port > 65535 || threads < 1 || threads > 256 || ctx < 16 ||
	    ctx > (1 << 20) || (given != -1 && given < 3))
		return fail("%s", SERVE_USAGE);
	/* Root jails itself (jail.h); anyone else gets the seccomp filter only. */
	struct mjail jail = { .jail = geteuid() == 0 && !no_jail, .uid = MODEL_JAIL_UID,
			      .gid = MODEL_JAIL_UID };
	if (user && (no_jail || mjail_parse_user(user, &jail)))
		return fail("--user %s: expected UID:GID, both above 0 (and not with --no-jail)", user);
	if (user)
		jail.jail = true;       /* asked for: a user that cannot switch fails, not runs as is */
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
	char given_host[INET6_ADDRSTRLEN];
	if (given >= 0) {
		if (listen_given(given, &ss) < 0)
			return fail("--listen-fd %d: not a listening TCP socket", given);
		host = inet_ntop(ss.ss_family, ss.ss_family == AF_INET6 ? (void *)&s6->sin6_addr :
				 (void *)&s4->sin_addr, given_host, sizeof(given_host));
		if (!host)
			host = "?";
		port = ntohs(ss.ss_family == AF_INET6 ? s6->sin6_port : s4->sin_port);
		if (ss.ss_family == AF_INET6)
			flags |= MHD_USE_IPv6;
	} else if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
	} else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		flags |= MHD_USE_IPv6;
	} else {
		return fail("--host %s: not an IP address", host);
	}
	static struct srv s;
	struct k8_err err = { 0 };
	/* Mapped now, read only once jailed: the header, tensors, tokenizer and template are
	 * a hostile file's bytes (test_98 watches the load from /proc). */
	if (model_map(&s.m, path, &err))
		return fail("%s", err.msg);
	if (name) {
		s.id = strdup(name);
	} else {
		const char *b = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
		s.id = strdup(b);
		char *dot = strstr(s.id, ".gguf");
		if (dot)
			*dot = 0;
	}
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.cv, NULL);
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	int lfd = given >= 0 ? given : listen_on(&ss);
	if (lfd < 0)
		return fail("cannot listen on %s port %d: %s", host, port, strerror(-lfd));
	/* Read before the jail what would be read lazily from files it hides: jansson's hash
	 * seed (/dev/urandom) and the time zone. Then no thread may exist yet. */
	json_object_seed(0);
	tzset();
	if (mjail_enter(&jail, &err))
		return fail("jail: %s", err.msg);
	if (model_parse(&s.m, path, &err) || tok_load(&s.t, &s.m.g, &err))
		return fail("%s", err.msg);
	if (ctx > s.m.hp.n_ctx_train && s.m.hp.n_ctx_train > 0)
		ctx = s.m.hp.n_ctx_train;
	s.have_tmpl = chat_detect(&s.ct, &s.m.g, &s.t, &s.tmpl_err) == 0;
	if (!s.have_tmpl)
		fprintf(stderr, "kosa8-model serve: chat endpoints disabled: %s\n", s.tmpl_err.msg);
	if (!(s.cache = malloc((size_t)ctx * sizeof(int32_t))))
		return fail("out of memory");
	if (model_ctx_new(&s.c, &s.m, ctx, threads, &err))
		return fail("%s", err.msg);
	struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handle, &s,
		MHD_OPTION_LISTEN_SOCKET, lfd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNS,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
		MHD_OPTION_NOTIFY_COMPLETED, completed, &s,
		MHD_OPTION_END);
	if (!d)
		return fail("cannot listen on %s port %d", host, port);
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	fprintf(stderr, "kosa8-model serve: %s on http://%s:%u (template %s, ctx %d, %d threads, %s)\n",
		s.id, host, di ? di->port : (unsigned)port, s.have_tmpl ? s.ct.name : "none", ctx,
		pool_threads(s.c.pool), jail.jail ? "jailed" : "not jailed: seccomp only");
	while (!stop_flag)
		pause();
	MHD_stop_daemon(d);
	return 0;
}
