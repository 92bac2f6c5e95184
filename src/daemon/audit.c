/* SPDX-License-Identifier: Apache-2.0 */
/* audit.c - the hash-chained audit log: append, crash repair, query, verify (see audit.h).
 *
 * Theory of operation (the user-facing description is docs/audit.md)
 *
 * Each record is one line: the record object serialized by jansson with
 * JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII, so a line is pure ASCII, has no
 * newline inside and keeps the keys in the order they were inserted (seq, time, action,
 * sandbox, details, prev). Nothing is ever re-serialized to be checked: a record's hash
 * is SHA-256 over the exact bytes of its line without the '\n', and the next record's
 * "prev" carries it. audit.head carries the last record's seq and hash.
 *
 * Append: build the line, write line+'\n' with one write() on an O_APPEND descriptor,
 * fdatasync, then replace audit.head atomically. fsync is batched by group commit:
 * concurrent appenders queue their records, the first becomes the leader and writes
 * every queued line, one fdatasync and one head update then cover them all, and each
 * appender returns only once its own record is durable (so the guarantee per call is
 * unchanged; a burst costs one sync per batch, not one per record). A crash can therefore leave (a) a
 * partial last line (the head still names the last complete record) or (b) a complete
 * last line with the head one record behind. audit_open repairs exactly these two and
 * says so in an "audit.repair" record. Anything else is a log that does not verify: the
 * daemon keeps going (the chain continues from the actual last line) and writes an
 * "audit.warning" record; audit_verify reports such a record as a failure, so the
 * damage stays visible however the chain goes on.
 *
 * Locks: a pthread mutex orders this process's appends. Between processes (and between
 * descriptors in one process) open file description locks on two bytes far past the end
 * of audit.lock (an empty file that, unlike audit.log, is never renamed): OWNER, held
 * exclusively by the one writer for as long as it is open, and APPEND, held exclusively
 * around each append (and the repair at open, and a rotation) and shared by readers, so
 * that query and verify see the segments, the log and the head in step.
 *
 * Segments: once audit.log holds seg_max bytes, it is renamed audit.log.NNNNNN (numbers
 * from 000001, consecutive) and a new audit.log begins. Nothing else changes: seq goes
 * on, and the first record of the new file carries the hash of the last record of the
 * previous one as its prev, so the chain runs through all segments in order and a
 * reader walks them as one log (oldest segment first, audit.log last). Line numbers in
 * messages are per file ("line 5 of audit.log.000002") once there are segments.
 */
#include "daemon/audit.h"
#include "common/sha.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define AUDIT_JSON_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII)
#define AUDIT_LINE_MAX (64u * 1024u)      /* longest line append writes (all caps add up below) */
#define AUDIT_READ_KEEP (256u * 1024u)    /* readers keep this much of a line; longer is bad */
#define AUDIT_READ_CHUNK (64u * 1024u)
#define AUDIT_HEAD_MAX 4096u
#define AUDIT_DEPTH_MAX 32                /* nesting kept in details */
#define AUDIT_SEQ_MAX ((json_int_t)1 << 62) /* so that seq + 1 never overflows */

#define LOCK_OWNER_OFF ((off_t)1 << 62)
#define LOCK_APPEND_OFF (((off_t)1 << 62) + 1)

static const char zero_hash[65] =
	"0000000000000000000000000000000000000000000000000000000000000000";

struct audit {
	pthread_mutex_t mu;
	int fd;                 /* audit.log, O_RDWR | O_APPEND */
	int lockfd;             /* audit.lock: holds the OWNER lock */
	char *dir, *log_path, *head_path, *lock_path;
	uint64_t seg_max;       /* rotate audit.log once it holds this many bytes */
	unsigned next_seg;      /* number the next rotated segment gets */
	uint64_t seq;           /* seq of the last line in the log */
	char hash[65];          /* SHA-256 of the last line (zeros when empty) */
	off_t size;             /* bytes in the log: an append that fails is cut back to it */
	bool failed;            /* the log could not be cut back after a failed append */
	char failed_msg[512];
	/* Group commit (audit_append): appenders queue their record; one of them, the
	 * leader, writes every queued record, then one fdatasync and one head update cover
	 * them all, and the others return when their record is durable. */
	pthread_mutex_t qmu;
	pthread_cond_t qcv;
	struct audit_pending *qhead, **qtail;
	bool leader;
	uint64_t commits;       /* fdatasync + head updates done by audit_append */
};

struct audit_pending {
	struct audit_pending *next;
	const char *action;
	json_t *sandbox, *details;
	int r;
	struct k8_err err;
	bool done;
};

/* ---- small helpers ---- */

static bool is_hex64(const char *s)
{
	if (!s || strlen(s) != 64)
		return false;
	for (int i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* OFD lock on one byte at `off`: F_WRLCK, F_RDLCK or F_UNLCK. -EAGAIN when `wait` is
 * false and someone else holds it. Kernels without OFD locks (before 3.15) get no
 * locking rather than no audit log. */
static int audit_lock(int fd, short type, off_t off, bool wait)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = off, .l_len = 1 };

	for (;;) {
		if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno == EINVAL || errno == ENOLCK || errno == EOPNOTSUPP)
			return 0;
		return errno == EACCES ? -EAGAIN : -errno;
	}
}

/* The record's "time": hashed into the chain, so byte for byte the format of k8_time_fmt
 * with milliseconds. */
static void audit_time(char out[32])
{
	k8_time_now(out, 1);
}

static bool action_valid(const char *a)
{
	size_t n = a ? strlen(a) : 0;

	if (n == 0 || n > AUDIT_ACTION_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((a[i] >= 'a' && a[i] <= 'z') || (a[i] >= '0' && a[i] <= '9') ||
		      a[i] == '.' || a[i] == '_' || a[i] == '-'))
			return false;
	return true;
}

/* ---- details: a capped deep copy ---- */

/* A JSON string of at most AUDIT_STRING_MAX bytes: longer input keeps its head (cut on
 * a UTF-8 character boundary) and says how long it was. NULL for invalid UTF-8. */
static json_t *clip_string(const char *s, size_t n)
{
	char tail[48];
	size_t keep, tl;

	if (n <= AUDIT_STRING_MAX)
		return json_stringn(s, n);
	tl = (size_t)snprintf(tail, sizeof(tail), "...[truncated: %zu bytes]", n);
	keep = AUDIT_STRING_MAX - tl;
	while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80)
		keep--;
	cleanup_free char *buf = xmalloc(keep + tl);
	memcpy(buf, s, keep);
	memcpy(buf + keep, tail, tl);
	return json_stringn(buf, keep + tl);
}

static json_t *sanitize(json_t *v, int depth)
{
	const char *key;
	json_t *val, *out, *c;
	size_t i;

	if (depth > AUDIT_DEPTH_MAX)
		return json_string("[nested too deep]");
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		out = json_object();
		json_object_foreach(v, key, val) {
			size_t kl = strlen(key);
			cleanup_free char *kbuf = NULL;
			if (kl > AUDIT_STRING_MAX) {
				kl = AUDIT_STRING_MAX;
				while (kl > 0 && ((unsigned char)key[kl] & 0xC0) == 0x80)
					kl--;
				kbuf = xmalloc(kl + 1);
				memcpy(kbuf, key, kl);
				kbuf[kl] = '\0';
			}
			c = sanitize(val, depth + 1);
			json_object_set_new(out, kbuf ? kbuf : key, c); /* drops non-UTF-8 keys */
		}
		return out;
	case JSON_ARRAY:
		out = json_array();
		json_array_foreach(v, i, val)
			json_array_append_new(out, sanitize(val, depth + 1));
		return out;
	case JSON_STRING:
		c = clip_string(json_string_value(v), json_string_length(v));
		return c ? c : json_string("[not valid UTF-8]");
	default:
		return json_copy(v);
	}
}

/* The details object as it will be written: NULL input gives {}. */
static int details_prepare(json_t *details, json_t **out, struct k8_err *err)
{
	json_t *d;
	char *s;

	if (!details) {
		*out = json_object();
		return 0;
	}
	if (!json_is_object(details))
		return k8_err_set(err, -EINVAL, "audit details must be a JSON object");
	d = sanitize(details, 0);
	s = json_dumps(d, AUDIT_JSON_FLAGS);
	if (!s) {
		json_decref(d);
		return k8_err_set(err, -EINVAL, "audit details cannot be serialized");
	}
	size_t n = strlen(s);
	if (n > AUDIT_DETAILS_MAX) {
		char h[65];
		sha256_hex(s, n, h);
		json_decref(d);
		d = json_pack("{s:b,s:I,s:s}", "truncated", 1, "bytes", (json_int_t)n, "sha256", h);
	}
	free(s);
	*out = d;
	return 0;
}

/* ---- reading the log line by line, hashing as it goes ---- */

struct lreader {
	int fd;
	uint64_t end;           /* read no further than this offset */
	unsigned char *chunk;
	size_t clen, cpos;
	uint64_t pos;           /* file offset of chunk[cpos] */
	EVP_MD_CTX *md;
	/* the current line */
	char *line;             /* first AUDIT_READ_KEEP bytes, NUL-terminated */
	size_t len;             /* bytes kept in line */
	uint64_t total;         /* bytes of the line without '\n' */
	uint64_t off;           /* file offset of its first byte */
	bool complete;          /* ended with '\n' */
	char hash[65];          /* SHA-256 of all `total` bytes */
};

static int lr_init(struct lreader *r, int fd, uint64_t end)
{
	memset(r, 0, sizeof(*r));
	r->fd = fd;
	r->end = end;
	r->md = EVP_MD_CTX_new();
	if (!r->md)
		return -ENOMEM;
	r->chunk = xmalloc(AUDIT_READ_CHUNK);
	r->line = xmalloc(AUDIT_READ_KEEP + 1);
	return 0;
}

static void lr_free(struct lreader *r)
{
	EVP_MD_CTX_free(r->md);
	free(r->chunk);
	free(r->line);
}

static int lr_finish(struct lreader *r, bool complete)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (EVP_DigestFinal_ex(r->md, md, &mdlen) != 1 || mdlen != 32)
		return -EIO;
	k8_hex(md, 32, r->hash);
	r->line[r->len] = '\0';
	r->complete = complete;
	return 1;
}

/* 1 with the next line in r (a final line without '\n' has complete == false), 0 at the
 * end of the file, or a negative errno. */
static int lr_next(struct lreader *r)
{
	r->len = 0;
	r->total = 0;
	r->off = r->pos;
	if (EVP_DigestInit_ex(r->md, EVP_sha256(), NULL) != 1)
		return -EIO;
	for (;;) {
		if (r->cpos == r->clen) {
			size_t want = AUDIT_READ_CHUNK;
			if (r->end - r->pos < want)
				want = (size_t)(r->end - r->pos);
			ssize_t n = want ? pread(r->fd, r->chunk, want, (off_t)r->pos) : 0;
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return -errno;
			}
			if (n == 0)
				return r->total ? lr_finish(r, false) : 0;
			r->clen = (size_t)n;
			r->cpos = 0;
		}
		unsigned char *start = r->chunk + r->cpos;
		unsigned char *nl = memchr(start, '\n', r->clen - r->cpos);
		size_t seg = nl ? (size_t)(nl - start) : r->clen - r->cpos;
		if (EVP_DigestUpdate(r->md, start, seg) != 1)
			return -EIO;
		if (r->len < AUDIT_READ_KEEP) {
			size_t k = seg < AUDIT_READ_KEEP - r->len ? seg : AUDIT_READ_KEEP - r->len;
			memcpy(r->line + r->len, start, k);
			r->len += k;
		}
		r->total += seg;
		r->cpos += seg;
		r->pos += seg;
		if (nl) {
			r->cpos++;
			r->pos++;
			return lr_finish(r, true);
		}
	}
}

/* ---- segments ---- */

struct segs {
	unsigned *num;          /* rotated segments audit.log.NNNNNN, ascending */
	size_t n;
	uint64_t *first_line;   /* n + 1: the (overall) line number each file starts at */
};

static void segs_free(struct segs *sg)
{
	free(sg->num);
	free(sg->first_line);
	memset(sg, 0, sizeof(*sg));
}

static int seg_cmp(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;

	return x < y ? -1 : x > y;
}

/* The rotated segments in dir: "audit.log." and 6 to 9 digits. */
static int segs_list(const char *dir, struct segs *sg, struct k8_err *err)
{
	const size_t pl = strlen(AUDIT_LOG_NAME) + 1;
	struct dirent *de;
	size_t cap = 0;
	DIR *dh;

	memset(sg, 0, sizeof(*sg));
	dh = opendir(dir);
	if (!dh)
		return k8_err_set(err, -errno, "listing %s: %s", dir, strerror(errno));
	while ((de = readdir(dh))) {
		const char *d = de->d_name + pl;
		size_t nd;
		if (strncmp(de->d_name, AUDIT_LOG_NAME ".", pl))
			continue;
		nd = strlen(d);
		if (nd < 6 || nd > 9 || strspn(d, "0123456789") != nd)
			continue;
		if (sg->n == cap) {
			cap = cap ? cap * 2 : 16;
			sg->num = realloc(sg->num, cap * sizeof(*sg->num));
			if (!sg->num)
				abort();
		}
		sg->num[sg->n++] = (unsigned)strtoul(d, NULL, 10);
	}
	closedir(dh);
	if (sg->n)
		qsort(sg->num, sg->n, sizeof(*sg->num), seg_cmp);
	sg->first_line = xmalloc((sg->n + 1) * sizeof(*sg->first_line));
	for (size_t i = 0; i <= sg->n; i++)
		sg->first_line[i] = UINT64_MAX;
	return 0;
}

static void seg_name(unsigned num, char out[32])
{
	snprintf(out, 32, "%s.%06u", AUDIT_LOG_NAME, num);
}

/* Which file overall line `line` is in (or would be, past the end): its name and its
 * line number there. */
static void segs_locate(const struct segs *sg, uint64_t line, char name[32], uint64_t *local)
{
	size_t f = 0;

	for (size_t i = 0; sg && i <= sg->n; i++)
		if (sg->first_line[i] != UINT64_MAX && sg->first_line[i] <= line)
			f = i;
	if (!sg || f == sg->n)
		snprintf(name, 32, "%s", AUDIT_LOG_NAME);
	else
		seg_name(sg->num[f], name);
	*local = sg && sg->first_line[f] != UINT64_MAX ? line - sg->first_line[f] + 1 : line;
}

/* ---- records ---- */

struct rec {
	json_t *root;
	uint64_t seq;
	const char *action;
	const char *prev;
	json_t *details;
};

static void rec_clear(struct rec *r)
{
	json_decref(r->root);
	memset(r, 0, sizeof(*r));
}

/* Parse one line as a record: an object with exactly the six keys, of the right types.
 * 0, or -1 with `why` set. */
static int rec_parse(const struct lreader *lr, struct rec *r, char *why, size_t whylen)
{
	json_error_t je;
	json_t *v;

	memset(r, 0, sizeof(*r));
	if (lr->total > lr->len) {
		snprintf(why, whylen, "the line is %" PRIu64 " bytes long, more than kosa8d writes",
			 lr->total);
		return -1;
	}
	r->root = json_loadb(lr->line, lr->len, JSON_REJECT_DUPLICATES, &je);
	if (!r->root) {
		snprintf(why, whylen, "not valid JSON: %s at column %d", je.text, je.column);
		return -1;
	}
	if (!json_is_object(r->root)) {
		snprintf(why, whylen, "not a JSON object");
		goto bad;
	}
	v = json_object_get(r->root, "seq");
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > AUDIT_SEQ_MAX) {
		snprintf(why, whylen, "\"seq\" is missing or not an integer from 1 to 2^62");
		goto bad;
	}
	r->seq = (uint64_t)json_integer_value(v);
	if (!json_is_string(json_object_get(r->root, "time"))) {
		snprintf(why, whylen, "\"time\" is missing or not a string");
		goto bad;
	}
	r->action = json_string_value(json_object_get(r->root, "action"));
	if (!r->action || !*r->action) {
		snprintf(why, whylen, "\"action\" is missing or not a string");
		goto bad;
	}
	v = json_object_get(r->root, "sandbox");
	if (!json_is_string(v) && !json_is_null(v)) {
		snprintf(why, whylen, "\"sandbox\" is missing or neither a string nor null");
		goto bad;
	}
	r->details = json_object_get(r->root, "details");
	if (!json_is_object(r->details)) {
		snprintf(why, whylen, "\"details\" is missing or not an object");
		goto bad;
	}
	r->prev = json_string_value(json_object_get(r->root, "prev"));
	if (!is_hex64(r->prev)) {
		snprintf(why, whylen, "\"prev\" is missing or not 64 lowercase hex digits");
		goto bad;
	}
	if (json_object_size(r->root) != 6) {
		snprintf(why, whylen, "it has keys other than seq, time, action, sandbox, details, prev");
		goto bad;
	}
	return 0;
bad:
	rec_clear(r);
	return -1;
}

/* ---- the head ---- */

enum head_state { HEAD_MISSING, HEAD_BAD, HEAD_VALID };

struct head {
	enum head_state state;
	uint64_t seq;
	char hash[65];
	char why[256];
};

static int head_read(const char *path, struct head *h, struct k8_err *err)
{
	cleanup_free char *buf = NULL;
	size_t len;
	json_error_t je;
	json_t *root, *seq, *hash;
	int r;

	memset(h, 0, sizeof(*h));
	r = read_file(path, AUDIT_HEAD_MAX, &buf, &len);
	if (r == -ENOENT) {
		h->state = HEAD_MISSING;
		return 0;
	}
	if (r == -EFBIG) {
		h->state = HEAD_BAD;
		snprintf(h->why, sizeof(h->why), "it is larger than %u bytes", AUDIT_HEAD_MAX);
		return 0;
	}
	if (r < 0)
		return k8_err_set(err, r, "reading %s: %s", path, strerror(-r));
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	seq = json_object_get(root, "seq");
	hash = json_object_get(root, "hash");
	if (!json_is_integer(seq) || json_integer_value(seq) < 0 ||
	    json_integer_value(seq) > AUDIT_SEQ_MAX || !is_hex64(json_string_value(hash))) {
		h->state = HEAD_BAD;
		snprintf(h->why, sizeof(h->why), "%s", root ? "it is not {\"seq\":N,\"hash\":\"<64 hex>\"}"
			 : je.text);
	} else {
		h->state = HEAD_VALID;
		h->seq = (uint64_t)json_integer_value(seq);
		memcpy(h->hash, json_string_value(hash), 65);
	}
	json_decref(root);
	return 0;
}

static int head_write(struct audit *a, uint64_t seq, const char *hash, struct k8_err *err)
{
	char buf[128];
	int n = snprintf(buf, sizeof(buf), "{\"seq\":%" PRIu64 ",\"hash\":\"%s\"}\n", seq, hash);
	int r = write_file_atomic(a->head_path, buf, (size_t)n, 0600);

	if (r < 0)
		return k8_err_set(err, r, "updating %s: %s", a->head_path, strerror(-r));
	return 0;
}

/* ---- walking the chain ---- */

enum scan_mode {
	SCAN_VERIFY,    /* stop at the first failure; an audit.warning record is a failure */
	SCAN_OPEN,      /* an audit.warning that chains on from the line before it starts a
			 * new checked segment: the daemon already reported what came before */
};

struct scan {
	enum scan_mode mode;
	struct segs *segs;              /* the rotated segments walked before audit.log */
	uint64_t head_seq;              /* in: the head's seq, to remember that line's hash */
	/* the checked chain */
	uint64_t expected;              /* seq the next line must carry */
	char prev[65];                  /* hash the next line's "prev" must be */
	char prev_prev[65];             /* hash of the line before the last checked one */
	uint64_t last_line;             /* line number of the last checked record */
	bool head_line_seen;
	char head_line_hash[65];        /* hash of the checked record with seq == head_seq */
	/* the first failure */
	bool failed;
	uint64_t first_bad, bad_line;   /* 0 = none (null) */
	char reason[640];
	/* every complete line, failed or not */
	uint64_t lines;
	char tail_hash[65];             /* hash of the last complete line */
	uint64_t max_seq;
	char line_before[65];           /* hash of the complete line before the current one */
	/* bytes after the last '\n' */
	bool partial;
	uint64_t partial_off, partial_len;
	char partial_hash[65];
};

static void scan_fail(struct scan *s, uint64_t first_bad, uint64_t line, const char *fmt, ...)
	K8_PRINTF(4, 5);
static void scan_fail(struct scan *s, uint64_t first_bad, uint64_t line, const char *fmt, ...)
{
	va_list ap;

	s->failed = true;
	s->first_bad = first_bad;
	s->bad_line = line;
	va_start(ap, fmt);
	vsnprintf(s->reason, sizeof(s->reason), fmt, ap);
	va_end(ap);
	/* Parser messages quote bytes of the log: keep the reason printable ASCII, so it
	 * is always a valid JSON string (and safe on a terminal). */
	for (char *c = s->reason; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			*c = '?';
}

/* "line N", or "line N of audit.log.000002" once there are segments (messages only). */
static const char *scan_where(const struct scan *s, uint64_t line)
{
	static __thread char buf[4][64];
	static __thread unsigned k;
	char *b = buf[k++ & 3], name[32];
	uint64_t local;

	if (!s->segs || !s->segs->n) {
		snprintf(b, 64, "line %" PRIu64, line);
		return b;
	}
	segs_locate(s->segs, line, name, &local);
	snprintf(b, 64, "line %" PRIu64 " of %s", local, name);
	return b;
}

/* Line number of checked record `seq` (the checked records sit on consecutive lines). */
static uint64_t scan_line_of(const struct scan *s, uint64_t seq)
{
	uint64_t last = s->expected - 1;

	if (seq > last)
		return s->last_line + (seq - last);
	return s->last_line > last - seq ? s->last_line - (last - seq) : 0;
}

static void scan_accept(struct scan *s, const struct rec *r, const char *hash, uint64_t line)
{
	memcpy(s->prev_prev, s->prev, 65);
	memcpy(s->prev, hash, 65);
	s->expected = r->seq + 1;
	s->last_line = line;
	if (r->seq == s->head_seq) {
		s->head_line_seen = true;
		memcpy(s->head_line_hash, hash, 65);
	}
}

static void scan_line(struct scan *s, struct lreader *lr)
{
	uint64_t L = ++s->lines, E = s->expected;
	struct rec r;
	char why[256];
	bool ok;

	memcpy(s->line_before, s->tail_hash, 65);
	memcpy(s->tail_hash, lr->hash, 65);
	if (s->failed && s->mode == SCAN_VERIFY)
		return;         /* only counting lines now */
	ok = rec_parse(lr, &r, why, sizeof(why)) == 0;
	if (ok && r.seq > s->max_seq)
		s->max_seq = r.seq;
	if (s->mode == SCAN_OPEN && ok && !strcmp(r.action, "audit.warning") &&
	    !strcmp(r.prev, s->line_before)) {
		/* Written by an earlier start, right after the actual last line: it reported
		 * whatever was wrong before it, and checking starts over from it. */
		s->failed = false;
		memcpy(s->prev, s->line_before, 65);
		scan_accept(s, &r, lr->hash, L);
		goto out;
	}
	if (s->failed)
		goto out;
	if (!ok) {
		scan_fail(s, E, L, "record %" PRIu64 " (%s): the line is not a valid "
			  "audit record (%s); the log was damaged or changed after it was written",
			  E, scan_where(s, L), why);
		goto out;
	}
	if (r.seq > E) {
		scan_fail(s, E, L, "record %" PRIu64 " (%s): missing, %s holds record %" PRIu64
			  " instead; records were removed or reordered",
			  E, scan_where(s, L), scan_where(s, L), r.seq);
		goto out;
	}
	if (r.seq < E) {
		uint64_t at = scan_line_of(s, r.seq);
		scan_fail(s, r.seq, at ? at : L, "record %" PRIu64 " (%s): %s holds another "
			  "record %" PRIu64 " where record %" PRIu64
			  " should follow; a record was inserted or records were reordered",
			  r.seq, scan_where(s, at ? at : L), scan_where(s, L), r.seq, E);
		goto out;
	}
	if (strcmp(r.prev, s->prev)) {
		if (E == 1 || s->last_line == 0)
			scan_fail(s, E, L, "record %" PRIu64 " (%s): its prev is not "
				  "64 zeros, so it does not start the log; earlier records were removed "
				  "or it was changed after it was written", E, scan_where(s, L));
		else
			scan_fail(s, E - 1, s->last_line, "record %" PRIu64 " (%s): "
				  "its hash does not match the prev of record %" PRIu64 " (%s); "
				  "record %" PRIu64 " (or the prev in record %" PRIu64
				  ") was changed after it was written",
				  E - 1, scan_where(s, s->last_line), E, scan_where(s, L), E - 1, E);
		goto out;
	}
	scan_accept(s, &r, lr->hash, L);
	if (s->mode == SCAN_VERIFY && !strcmp(r.action, "audit.warning")) {
		json_t *fb = json_object_get(r.details, "first_bad");
		json_t *fl = json_object_get(r.details, "line");
		const char *rs = json_string_value(json_object_get(r.details, "reason"));
		scan_fail(s, json_is_integer(fb) ? (uint64_t)json_integer_value(fb) : 0,
			  json_is_integer(fl) ? (uint64_t)json_integer_value(fl) : 0,
			  "record %" PRIu64 " (%s) is an audit.warning: when kosa8d "
			  "started, the log did not verify: %s", r.seq, scan_where(s, L),
			  rs ? rs : "(no reason)");
	}
out:
	if (ok)
		rec_clear(&r);
}

/* Walk the rotated segments of `dir` (s->segs, oldest first), then the first `end`
 * bytes of audit.log open on `fd` (may be -1: no audit.log), as one log. */
static int scan_run(struct scan *s, const char *dir, int fd, uint64_t end, struct k8_err *err)
{
	struct segs *sg = s->segs;
	size_t nseg = sg ? sg->n : 0;
	struct lreader lr;
	int r = 0;

	s->expected = 1;
	memcpy(s->prev, zero_hash, 65);
	memcpy(s->prev_prev, zero_hash, 65);
	memcpy(s->tail_hash, zero_hash, 65);
	if (s->head_seq == 0) {         /* seq 0 is the empty log */
		s->head_line_seen = true;
		memcpy(s->head_line_hash, zero_hash, 65);
	}
	for (size_t i = 0; i <= nseg; i++) {
		cleanup_close int own = -1;
		char name[32];
		int f = fd;
		uint64_t size = end;

		if (i < nseg) {
			unsigned want = i ? sg->num[i - 1] + 1 : 1;
			struct stat st;
			seg_name(sg->num[i], name);
			cleanup_free char *path = xasprintf("%s/%s", dir, name);
			own = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
			if (own < 0 || fstat(own, &st) < 0)
				return k8_err_set(err, -errno, "reading %s: %s", path, strerror(errno));
			f = own;
			size = (uint64_t)st.st_size;
			if (sg->num[i] != want && !s->failed) {
				char miss[32];
				seg_name(want, miss);
				scan_fail(s, s->expected, s->lines + 1, "record %" PRIu64 " (line 1 of "
					  "%s): %s is missing, the segments go on with %s; a segment of the "
					  "log was removed", s->expected, miss, miss, name);
			}
		}
		if (sg)
			sg->first_line[i] = s->lines + 1;
		if (f < 0)
			break;
		if (lr_init(&lr, f, size) < 0)
			return k8_err_set(err, -ENOMEM, "reading the audit log: out of memory");
		while ((r = lr_next(&lr)) > 0) {
			if (!lr.complete && i == nseg) {
				s->partial = true;
				s->partial_off = lr.off;
				s->partial_len = lr.total;
				memcpy(s->partial_hash, lr.hash, 65);
				break;
			}
			if (!lr.complete && !s->failed)   /* a segment is only ever closed whole */
				scan_fail(s, s->expected, s->lines + 1, "record %" PRIu64 " (%s): "
					  "incomplete, %s ends without a newline; the segment was cut "
					  "or changed", s->expected, scan_where(s, s->lines + 1), name);
			scan_line(s, &lr);
		}
		lr_free(&lr);
		if (r < 0)
			return k8_err_set(err, r, "reading the audit log: %s", strerror(-r));
	}
	return 0;
}

enum verdict { V_OK, V_HEAD_BEHIND, V_BAD };

/* After a walk without failure and without a partial line: does the head agree? */
static enum verdict head_check(struct scan *s, const struct head *h)
{
	uint64_t S = s->expected - 1;

	if (h->state == HEAD_MISSING) {
		if (s->lines == 0 && !s->partial)
			return V_OK;
		scan_fail(s, 0, 0, "audit.head is missing but audit.log holds %" PRIu64 " records: "
			  "the head was removed, so a cut-off tail cannot be detected", s->lines);
		return V_BAD;
	}
	if (h->state == HEAD_BAD) {
		scan_fail(s, 0, 0, "audit.head is not valid (%s)", h->why);
		return V_BAD;
	}
	if (h->seq == S) {
		if (!strcmp(h->hash, s->prev))
			return V_OK;
		if (S == 0)
			scan_fail(s, 0, 0, "audit.head is not valid (seq 0 with a hash other than zeros)");
		else
			scan_fail(s, S, s->last_line, "record %" PRIu64 " (%s): does not "
				  "match the hash in audit.head; the last record (or audit.head) was "
				  "changed after it was written", S, scan_where(s, s->last_line));
		return V_BAD;
	}
	if (h->seq > S) {
		if (S == 0)
			scan_fail(s, 1, 1, "record 1 (line 1): missing, audit.log is empty but "
				  "audit.head says %" PRIu64 " records were written; the log was emptied "
				  "or removed", h->seq);
		else
			scan_fail(s, S + 1, s->last_line + 1, "record %" PRIu64 " (%s): "
				  "missing, the log ends at record %" PRIu64 " but audit.head says it ends "
				  "at record %" PRIu64 "; records were cut off the end of the log",
				  S + 1, scan_where(s, s->last_line + 1), S, h->seq);
		return V_BAD;
	}
	if (h->seq == S - 1 && !strcmp(h->hash, s->prev_prev)) {
		scan_fail(s, S, s->last_line, "record %" PRIu64 " (%s): not yet in "
			  "audit.head, which is one record behind (kosa8d stopped between writing "
			  "the record and updating the head; it repairs this when it next starts)",
			  S, scan_where(s, s->last_line));
		return V_HEAD_BEHIND;
	}
	if (s->head_line_seen && !strcmp(h->hash, s->head_line_hash))
		scan_fail(s, h->seq + 1, scan_line_of(s, h->seq + 1), "record %" PRIu64 " (%s): "
			  "audit.head says the log ends at record %" PRIu64 " but it goes on "
			  "to record %" PRIu64 "; audit.head was replaced by an older copy, or "
			  "records were added by someone else", h->seq + 1,
			  scan_where(s, scan_line_of(s, h->seq + 1)), h->seq, S);
	else
		scan_fail(s, h->seq ? h->seq : 1, scan_line_of(s, h->seq ? h->seq : 1),
			  "record %" PRIu64 " (%s): does not match audit.head, which "
			  "says the log ends at record %" PRIu64 " with another hash; the log or "
			  "audit.head was changed", h->seq ? h->seq : 1,
			  scan_where(s, scan_line_of(s, h->seq ? h->seq : 1)), h->seq);
	return V_BAD;
}

static void scan_fail_partial(struct scan *s)
{
	uint64_t S = s->expected - 1;

	scan_fail(s, S + 1, s->lines + 1, "record %" PRIu64 " (%s): incomplete, "
		  "the last %" PRIu64 " bytes of the log have no newline (kosa8d stopped while "
		  "writing it, or the log was cut)", S + 1, scan_where(s, s->lines + 1),
		  s->partial_len);
}

/* The lock file, opened for writing when possible (the writer and readers that may
 * create it), else for reading; -1 when there is none to be had (then no locking). */
static int lockfile_open(const char *dir)
{
	cleanup_free char *p = xasprintf("%s/%s", dir, AUDIT_LOCK_NAME);
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);

	if (fd < 0)
		fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	return fd;
}

/* A reader's consistent view: audit.log open for reading (-1 when there is none), its
 * size, the list of rotated segments and the head, taken together under the shared
 * APPEND lock. audit.log only grows while the daemon runs (a rotation renames it, and the
 * descriptor follows) and segments never change, so the first `size` bytes can then be
 * read without the lock, and appends are not held up by a long verify. */
static int reader_open(const char *dir, int *fd, uint64_t *size, struct head *h,
		       struct segs *sg, struct k8_err *err)
{
	cleanup_free char *log = xasprintf("%s/%s", dir, AUDIT_LOG_NAME);
	cleanup_free char *head = xasprintf("%s/%s", dir, AUDIT_HEAD_NAME);
	cleanup_close int lockfd = lockfile_open(dir);
	struct stat st;
	int r;

	*size = 0;
	memset(sg, 0, sizeof(*sg));
	if (lockfd >= 0) {
		r = audit_lock(lockfd, F_RDLCK, LOCK_APPEND_OFF, true);
		if (r < 0)
			return k8_err_set(err, r, "locking the audit log in %s: %s", dir,
					  strerror(-r));
	}
	*fd = open(log, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (*fd < 0 && errno != ENOENT) {
		r = k8_err_set(err, -errno, "opening %s: %s", log, strerror(errno));
	} else if (*fd >= 0 && fstat(*fd, &st) < 0) {
		r = k8_err_set(err, -errno, "stat %s: %s", log, strerror(errno));
	} else {
		if (*fd >= 0)
			*size = (uint64_t)st.st_size;
		r = segs_list(dir, sg, err);
		if (r == 0)
			r = head_read(head, h, err);
	}
	if (lockfd >= 0)
		audit_lock(lockfd, F_UNLCK, LOCK_APPEND_OFF, false);
	return r;
}

/* ---- appending ---- */

static void dir_sync(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
}

/* audit.log is full: it becomes segment audit.log.<next_seg> and a new audit.log starts
 * (a->mu and the APPEND lock are held, the record before is complete and in the head).
 * link + unlink rather than rename, so that an existing segment is never replaced; a
 * crash in between leaves two names for one file, which audit_open resolves. When the
 * rotation cannot be done, appends go on into the same audit.log and the next append
 * tries again. */
static void rotate_locked(struct audit *a)
{
	char name[32];
	int nfd;

	seg_name(a->next_seg, name);
	cleanup_free char *path = xasprintf("%s/%s", a->dir, name);
	if (link(a->log_path, path) < 0)
		return;
	if (unlink(a->log_path) < 0) {
		(void)unlink(path);
		return;
	}
	nfd = open(a->log_path, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
		   0600);
	if (nfd < 0) {
		/* put the name back: audit.log must exist for the next start */
		if (link(path, a->log_path) == 0)
			(void)unlink(path);
		return;
	}
	dir_sync(a->dir);
	close(a->fd);
	a->fd = nfd;
	a->size = 0;
	a->next_seg++;
}

/* Write one record; a->mu and the APPEND lock are held. `details` is borrowed. */
/* Write one record's line (not yet durable: see commit_locked). On failure the file is
 * cut back so the next append starts on a line. */
static int line_locked(struct audit *a, const char *action, json_t *sandbox, json_t *details,
		       struct k8_err *err)
{
	char tm[32], h[65];
	json_t *rec;
	char *s;
	size_t n;
	ssize_t w;
	int r;

	if (a->failed)
		return k8_err_set(err, -EIO, "%s", a->failed_msg);
	audit_time(tm);
	rec = json_object();
	json_object_set_new(rec, "seq", json_integer((json_int_t)(a->seq + 1)));
	json_object_set_new(rec, "time", json_string(tm));
	json_object_set_new(rec, "action", json_string(action));
	json_object_set(rec, "sandbox", sandbox ? sandbox : json_null());
	json_object_set(rec, "details", details);
	json_object_set_new(rec, "prev", json_string(a->hash));
	s = json_dumps(rec, AUDIT_JSON_FLAGS);
	json_decref(rec);
	if (!s)
		return k8_err_set(err, -EINVAL, "audit record cannot be serialized");
	n = strlen(s);
	if (n > AUDIT_LINE_MAX || memchr(s, '\n', n)) {
		free(s);
		return k8_err_set(err, -EMSGSIZE, "audit record too long (%zu bytes)", n);
	}
	sha256_hex(s, n, h);
	s[n] = '\n';    /* replaces the NUL: one write() of line and newline */
	do
		w = write(a->fd, s, n + 1);
	while (w < 0 && errno == EINTR);
	r = w < 0 ? -errno : (size_t)w != n + 1 ? -ENOSPC : 0;
	free(s);
	if (r) {
		if (w > 0 && ftruncate(a->fd, a->size) < 0) {
			a->failed = true;
			snprintf(a->failed_msg, sizeof(a->failed_msg), "audit log %s ends in a partial "
				 "record that could not be removed (%s); restart kosa8d to repair it",
				 a->log_path, strerror(errno));
		}
		return k8_err_set(err, r, "writing audit record %" PRIu64 " to %s: %s", a->seq + 1,
				  a->log_path, strerror(-r));
	}
	a->size += (off_t)(n + 1);
	a->seq++;
	memcpy(a->hash, h, 65);
	return 0;
}

/* Make the lines written since the last commit durable (fdatasync), then the head names
 * the last of them; rotate when the log is full. On a failed fdatasync the lines are cut
 * back to `size0` (and seq/hash to what they were), so nothing that was not reported
 * durable stays in the log. */
static int commit_locked(struct audit *a, off_t size0, uint64_t seq0, const char *hash0,
			 struct k8_err *err)
{
	int r;

	if (fdatasync(a->fd) < 0) {
		r = -errno;
		if (ftruncate(a->fd, size0) < 0) {
			a->failed = true;
			snprintf(a->failed_msg, sizeof(a->failed_msg), "audit log %s holds records "
				 "that were not synced and could not be removed (%s); restart kosa8d",
				 a->log_path, strerror(errno));
		}
		a->size = size0;
		a->seq = seq0;
		memcpy(a->hash, hash0, 65);
		return k8_err_set(err, r, "syncing %s: %s", a->log_path, strerror(-r));
	}
	r = head_write(a, a->seq, a->hash, err);
	if (r < 0)
		k8_err_wrap(err, "audit record %" PRIu64 " was written but its head was not", a->seq);
	else if (a->seg_max && (uint64_t)a->size >= a->seg_max)
		rotate_locked(a);
	return r;
}

/* One record, durable on return (for the repair at open, which runs alone). */
static int append_locked(struct audit *a, const char *action, json_t *sandbox, json_t *details,
			 struct k8_err *err)
{
	off_t size0 = a->size;
	uint64_t seq0 = a->seq;
	char hash0[65];
	int r;

	memcpy(hash0, a->hash, 65);
	r = line_locked(a, action, sandbox, details, err);
	return r ? r : commit_locked(a, size0, seq0, hash0, err);
}

/* The leader's work: every queued record's line, then one commit for all of them. */
static void commit_batch(struct audit *a, struct audit_pending *batch)
{
	struct k8_err cerr = { 0 };
	off_t size0;
	uint64_t seq0;
	char hash0[65];
	bool any = false;
	int r;

	pthread_mutex_lock(&a->mu);
	r = audit_lock(a->lockfd, F_WRLCK, LOCK_APPEND_OFF, true);
	if (r < 0) {
		for (struct audit_pending *p = batch; p; p = p->next)
			p->r = k8_err_set(&p->err, r, "locking %s: %s", a->lock_path, strerror(-r));
		pthread_mutex_unlock(&a->mu);
		return;
	}
	size0 = a->size;
	seq0 = a->seq;
	memcpy(hash0, a->hash, 65);
	for (struct audit_pending *p = batch; p; p = p->next) {
		p->r = line_locked(a, p->action, p->sandbox, p->details, &p->err);
		any |= p->r == 0;
	}
	if (any) {
		r = commit_locked(a, size0, seq0, hash0, &cerr);
		a->commits++;
		for (struct audit_pending *p = batch; r && p; p = p->next)
			if (!p->r) {
				p->r = r;
				p->err = cerr;
			}
	}
	audit_lock(a->lockfd, F_UNLCK, LOCK_APPEND_OFF, false);
	pthread_mutex_unlock(&a->mu);
}

uint64_t audit_commits(struct audit *a)
{
	uint64_t n;

	pthread_mutex_lock(&a->mu);
	n = a->commits;
	pthread_mutex_unlock(&a->mu);
	return n;
}

int audit_append(struct audit *a, const char *action, const char *sandbox, json_t *details,
		 struct k8_err *err)
{
	json_t *d = NULL, *sb = NULL;
	int r;

	if (!a)
		return k8_err_set(err, -EINVAL, "audit log is not open");
	if (!action_valid(action))
		return k8_err_set(err, -EINVAL, "audit action '%s' is not valid ([a-z0-9._-], 1 "
				  "to %u characters)", action ? action : "", AUDIT_ACTION_MAX);
	if (!strncmp(action, "audit.", 6))
		return k8_err_set(err, -EINVAL, "audit action '%s': audit.* records are written "
				  "by the audit log itself", action);
	if (sandbox) {
		sb = clip_string(sandbox, strlen(sandbox));
		if (!sb)
			return k8_err_set(err, -EINVAL, "audit: sandbox name is not valid UTF-8");
	}
	r = details_prepare(details, &d, err);
	if (r < 0) {
		json_decref(sb);
		return r;
	}
	struct audit_pending me = { .action = action, .sandbox = sb, .details = d };
	pthread_mutex_lock(&a->qmu);
	*a->qtail = &me;
	a->qtail = &me.next;
	while (!me.done) {
		if (a->leader) {
			pthread_cond_wait(&a->qcv, &a->qmu);
			continue;
		}
		/* Lead: take everything queued (this record included) and commit it. */
		struct audit_pending *batch = a->qhead;
		a->leader = true;
		a->qhead = NULL;
		a->qtail = &a->qhead;
		pthread_mutex_unlock(&a->qmu);
		commit_batch(a, batch);
		pthread_mutex_lock(&a->qmu);
		for (struct audit_pending *p = batch, *nx; p; p = nx) {
			nx = p->next;
			p->done = true;
		}
		a->leader = false;
		pthread_cond_broadcast(&a->qcv);
	}
	pthread_mutex_unlock(&a->qmu);
	r = me.r;
	if (r && err)
		*err = me.err;
	json_decref(sb);
	json_decref(d);
	return r;
}

/* ---- open and repair ---- */

static int write_warning(struct audit *a, struct scan *s, const struct head *h,
			 struct k8_err *err)
{
	json_t *d;
	uint64_t next = s->max_seq;
	int r;

	/* The chain goes on from the actual last line; a partial one becomes a (bad) line of
	 * its own rather than being deleted: this is evidence, not crash debris. */
	if (s->partial) {
		if (write_full(a->fd, "\n", 1) < 0 || fdatasync(a->fd) < 0) {
			r = -errno;
			return k8_err_set(err, r, "ending the partial last line of %s: %s",
					  a->log_path, strerror(-r));
		}
		memcpy(a->hash, s->partial_hash, 65);
	} else {
		memcpy(a->hash, s->tail_hash, 65);
	}
	/* seq never repeats: skip past anything the log or the head has seen */
	if (h->state == HEAD_VALID && h->seq > next)
		next = h->seq;
	if (s->expected - 1 > next)
		next = s->expected - 1;
	a->seq = next;
	struct stat st;
	if (fstat(a->fd, &st) < 0)
		return k8_err_set(err, -errno, "stat %s: %s", a->log_path, strerror(errno));
	a->size = st.st_size;
	d = json_pack("{s:o,s:o,s:s,s:I,s:o}",
		      "first_bad", s->first_bad ? json_integer((json_int_t)s->first_bad) : json_null(),
		      "line", s->bad_line ? json_integer((json_int_t)s->bad_line) : json_null(),
		      "reason", s->reason, "log_lines", (json_int_t)(s->lines + (s->partial ? 1 : 0)),
		      "head_seq", h->state == HEAD_VALID ? json_integer((json_int_t)h->seq)
							  : json_null());
	r = append_locked(a, "audit.warning", NULL, d, err);
	json_decref(d);
	return r;
}

static int recover(struct audit *a, struct segs *sg, struct k8_err *err)
{
	struct head h;
	struct scan s = { .mode = SCAN_OPEN, .segs = sg };
	enum verdict v;
	json_t *d;
	struct stat st;
	int r;

	r = head_read(a->head_path, &h, err);
	if (r < 0)
		return r;
	if (fstat(a->fd, &st) < 0)
		return k8_err_set(err, -errno, "stat %s: %s", a->log_path, strerror(errno));
	s.head_seq = h.state == HEAD_VALID ? h.seq : UINT64_MAX;
	r = scan_run(&s, a->dir, a->fd, (uint64_t)st.st_size, err);
	if (r < 0)
		return r;
	if (s.failed)
		return write_warning(a, &s, &h, err);
	v = head_check(&s, &h);
	if (s.partial) {
		if (v != V_OK) {
			s.failed = false;
			scan_fail_partial(&s);
			return write_warning(a, &s, &h, err);
		}
		/* A crash while writing: the head names the last complete record. */
		if (ftruncate(a->fd, (off_t)s.partial_off) < 0 || fdatasync(a->fd) < 0) {
			r = -errno;
			return k8_err_set(err, r, "removing the partial last line of %s: %s",
					  a->log_path, strerror(-r));
		}
	} else if (v == V_BAD) {
		return write_warning(a, &s, &h, err);
	}
	a->seq = s.expected - 1;
	memcpy(a->hash, s.prev, 65);
	if (fstat(a->fd, &st) < 0)
		return k8_err_set(err, -errno, "stat %s: %s", a->log_path, strerror(errno));
	a->size = st.st_size;
	if (s.partial) {
		d = json_pack("{s:s,s:I,s:I,s:I,s:s,s:s}", "repaired", "partial-line",
			      "line", (json_int_t)(s.lines + 1), "offset", (json_int_t)s.partial_off,
			      "bytes", (json_int_t)s.partial_len, "sha256", s.partial_hash,
			      "reason", "the last line had no newline (kosa8d stopped while writing "
			      "it) and audit.head named the record before it: the incomplete line "
			      "was removed");
	} else if (v == V_HEAD_BEHIND) {
		r = head_write(a, a->seq, a->hash, err);
		if (r < 0)
			return r;
		d = json_pack("{s:s,s:I,s:I,s:s}", "repaired", "head-behind",
			      "head_seq", (json_int_t)(a->seq - 1), "advanced_to", (json_int_t)a->seq,
			      "reason", "audit.head was one record behind the log (kosa8d stopped "
			      "between writing the last record and updating the head); the last "
			      "record chains on correctly, so the head was advanced to it");
	} else {
		if (h.state == HEAD_MISSING)    /* a new log: the head exists from now on */
			return head_write(a, 0, zero_hash, err);
		return 0;
	}
	r = append_locked(a, "audit.repair", NULL, d, err);
	json_decref(d);
	return r;
}

/* Open (creating) audit.log for appending, mode 0600. A rotation that stopped between
 * linking audit.log to its segment name and unlinking it leaves both names on one
 * file: the unlink is finished first. */
static int log_open(struct audit *a, const struct segs *sg, struct k8_err *err)
{
	struct stat st, ss;

	if (sg->n) {
		char name[32];
		seg_name(sg->num[sg->n - 1], name);
		cleanup_free char *last = xasprintf("%s/%s", a->dir, name);
		if (stat(last, &ss) == 0 && lstat(a->log_path, &st) == 0 && st.st_ino == ss.st_ino &&
		    st.st_dev == ss.st_dev && unlink(a->log_path) < 0)
			return k8_err_set(err, -errno, "finishing the rotation of %s: %s",
					  a->log_path, strerror(errno));
	}
	a->fd = open(a->log_path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (a->fd < 0)
		return k8_err_set(err, -errno, "opening %s: %s", a->log_path, strerror(errno));
	if (fstat(a->fd, &st) < 0 || !S_ISREG(st.st_mode))
		return k8_err_set(err, -EINVAL, "%s is not a regular file", a->log_path);
	if ((st.st_mode & 07777) != 0600 && fchmod(a->fd, 0600) < 0)
		return k8_err_set(err, -errno, "chmod 0600 %s: %s", a->log_path, strerror(errno));
	return 0;
}

int audit_open(const char *dir, struct audit **out, struct k8_err *err)
{
	struct segs sg = { 0 };
	struct audit *a;
	int r;

	*out = NULL;
	r = mkdir_p(dir, 0700);
	if (r < 0)
		return k8_err_set(err, r, "creating %s: %s", dir, strerror(-r));
	a = xcalloc(1, sizeof(*a));
	pthread_mutex_init(&a->mu, NULL);
	pthread_mutex_init(&a->qmu, NULL);
	pthread_cond_init(&a->qcv, NULL);
	a->qtail = &a->qhead;
	a->fd = -1;
	a->lockfd = -1;
	a->seg_max = AUDIT_SEGMENT_DEFAULT;
	a->dir = xstrdup(dir);
	a->log_path = xasprintf("%s/%s", dir, AUDIT_LOG_NAME);
	a->head_path = xasprintf("%s/%s", dir, AUDIT_HEAD_NAME);
	a->lock_path = xasprintf("%s/%s", dir, AUDIT_LOCK_NAME);
	a->lockfd = open(a->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (a->lockfd < 0) {
		r = -errno;
		k8_err_set(err, r, "opening %s: %s", a->lock_path, strerror(-r));
		goto fail;
	}
	r = audit_lock(a->lockfd, F_WRLCK, LOCK_OWNER_OFF, false);
	if (r == -EAGAIN) {
		r = -EBUSY;
		k8_err_set(err, r, "%s is already open for writing by another kosa8d; only one "
			   "daemon may use %s", a->log_path, dir);
		goto fail;
	}
	if (r < 0) {
		k8_err_set(err, r, "locking %s: %s", a->lock_path, strerror(-r));
		goto fail;
	}
	r = audit_lock(a->lockfd, F_WRLCK, LOCK_APPEND_OFF, true);
	if (r < 0) {
		k8_err_set(err, r, "locking %s: %s", a->lock_path, strerror(-r));
		goto fail;
	}
	r = segs_list(dir, &sg, err);
	if (r == 0)
		r = log_open(a, &sg, err);
	if (r == 0) {
		a->next_seg = sg.n ? sg.num[sg.n - 1] + 1 : 1;
		r = recover(a, &sg, err);
	}
	audit_lock(a->lockfd, F_UNLCK, LOCK_APPEND_OFF, false);
	segs_free(&sg);
	if (r < 0) {
		k8_err_wrap(err, "opening the audit log");
		goto fail;
	}
	*out = a;
	return 0;
fail:
	audit_close(a);
	return r;
}

void audit_set_segment_bytes(struct audit *a, uint64_t bytes)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->mu);
	a->seg_max = bytes < AUDIT_SEGMENT_MIN ? AUDIT_SEGMENT_MIN : bytes;
	pthread_mutex_unlock(&a->mu);
}

void audit_close(struct audit *a)
{
	if (!a)
		return;
	if (a->fd >= 0)
		close(a->fd);
	if (a->lockfd >= 0)
		close(a->lockfd);
	pthread_mutex_destroy(&a->mu);
	pthread_mutex_destroy(&a->qmu);
	pthread_cond_destroy(&a->qcv);
	free(a->dir);
	free(a->log_path);
	free(a->head_path);
	free(a->lock_path);
	free(a);
}

/* ---- query ---- */

static bool query_match(const struct rec *r, const char *sandbox, const char *action,
			uint64_t since_seq)
{
	if (r->seq <= since_seq)
		return false;
	if (sandbox && *sandbox) {
		const char *sb = json_string_value(json_object_get(r->root, "sandbox"));
		if (!sb || strcmp(sb, sandbox))
			return false;
	}
	if (action && *action) {
		size_t n = strlen(action);
		if (action[n - 1] == '*') {
			if (strncmp(r->action, action, n - 1))
				return false;
		} else if (strcmp(r->action, action)) {
			return false;
		}
	}
	return true;
}

struct qctx {
	const char *sandbox, *action;
	uint64_t since_seq;
	size_t limit;
	json_t *arr;
	json_t **ring;          /* since_seq 0 with a limit: the newest `limit` */
	size_t ring_cap, ring_n, ring_pos;
	bool done;              /* the limit was reached (paging forward) */
};

/* The matching records of one file (its first `size` bytes). 0 or a negative errno. */
static int query_file(struct qctx *q, int fd, uint64_t size)
{
	struct lreader lr;
	char why[256];
	int r;

	if (lr_init(&lr, fd, size) < 0)
		return -ENOMEM;
	while ((r = lr_next(&lr)) > 0 && lr.complete) {
		struct rec rec;
		if (rec_parse(&lr, &rec, why, sizeof(why)) < 0)
			continue;
		if (!query_match(&rec, q->sandbox, q->action, q->since_seq)) {
			rec_clear(&rec);
			continue;
		}
		if (!q->limit || q->since_seq) {
			json_array_append(q->arr, rec.root);
			rec_clear(&rec);
			if (q->limit && json_array_size(q->arr) >= q->limit) {
				q->done = true;
				break;
			}
			continue;
		}
		if (q->ring_n < q->limit) {
			if (q->ring_n == q->ring_cap) {
				size_t cap = q->ring_cap ? q->ring_cap * 2 : 64;
				json_t **nr;
				if (cap > q->limit)
					cap = q->limit;
				nr = realloc(q->ring, cap * sizeof(*q->ring));
				if (!nr) {
					rec_clear(&rec);
					r = -ENOMEM;
					break;
				}
				q->ring = nr;
				q->ring_cap = cap;
			}
			q->ring[q->ring_n++] = json_incref(rec.root);
		} else {
			json_decref(q->ring[q->ring_pos]);
			q->ring[q->ring_pos] = json_incref(rec.root);
			q->ring_pos = (q->ring_pos + 1) % q->limit;
		}
		rec_clear(&rec);
	}
	lr_free(&lr);
	return r < 0 ? r : 0;
}

int audit_query(const char *dir, const char *sandbox, const char *action, uint64_t since_seq,
		size_t limit, json_t **out, struct k8_err *err)
{
	struct qctx q = { .sandbox = sandbox, .action = action, .since_seq = since_seq,
			  .limit = limit };
	cleanup_close int fd = -1;
	struct segs sg;
	struct head h;
	uint64_t size;
	int r;

	*out = NULL;
	r = reader_open(dir, &fd, &size, &h, &sg, err);
	if (r < 0) {
		segs_free(&sg);
		return r;
	}
	q.arr = json_array();
	/* the rotated segments, oldest first, then audit.log */
	for (size_t f = 0; f < sg.n && !q.done && r >= 0; f++) {
		char name[32];
		struct stat st;
		seg_name(sg.num[f], name);
		cleanup_free char *path = xasprintf("%s/%s", dir, name);
		cleanup_close int sfd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (sfd < 0 || fstat(sfd, &st) < 0)
			continue;       /* a segment gone: verify reports it */
		r = query_file(&q, sfd, (uint64_t)st.st_size);
	}
	if (fd >= 0 && !q.done && r >= 0)
		r = query_file(&q, fd, size);
	segs_free(&sg);
	for (size_t i = 0; i < q.ring_n; i++) {
		json_t *v = q.ring[(q.ring_pos + i) % q.ring_n];
		if (r >= 0)
			json_array_append(q.arr, v);
		json_decref(v);
	}
	free(q.ring);
	if (r < 0) {
		json_decref(q.arr);
		return k8_err_set(err, r, "reading the audit log in %s: %s", dir, strerror(-r));
	}
	*out = q.arr;
	return 0;
}

/* ---- verify ---- */

int audit_verify(const char *dir, json_t **report, struct k8_err *err)
{
	cleanup_close int fd = -1;
	struct scan s = { .mode = SCAN_VERIFY };
	struct segs sg;
	struct head h;
	uint64_t size;
	int r;

	*report = NULL;
	r = reader_open(dir, &fd, &size, &h, &sg, err);
	s.segs = &sg;
	if (r == 0) {
		s.head_seq = h.state == HEAD_VALID ? h.seq : UINT64_MAX;
		r = scan_run(&s, dir, fd, size, err);
	}
	if (r < 0) {
		segs_free(&sg);
		return r;
	}
	if (!s.failed) {
		if (s.partial)
			scan_fail_partial(&s);
		else
			head_check(&s, &h);
	}
	char segname[32];
	uint64_t local = 0;
	if (s.bad_line)
		segs_locate(&sg, s.bad_line, segname, &local);
	*report = json_pack("{s:b,s:I,s:o,s:o,s:o,s:I,s:s}", "ok", !s.failed,
			    "records", (json_int_t)s.lines,
			    "first_bad", s.first_bad ? json_integer((json_int_t)s.first_bad)
						     : json_null(),
			    "line", s.bad_line ? json_integer((json_int_t)local) : json_null(),
			    "segment", s.bad_line ? json_string(segname) : json_null(),
			    "segments", (json_int_t)(sg.n + 1),
			    "reason", s.failed ? s.reason : "every record chains to the one before it "
			    "and audit.head names the last one");
	segs_free(&sg);
	return 0;
}
