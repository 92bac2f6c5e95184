/* SPDX-License-Identifier: Apache-2.0 */
/* jobs.c - a bucket's bytes read in jailed workers (jobs.h).
 *
 * The one-shot jobs (XML, manifest) get their input in a sealed memfd and write their
 * answer into a second memfd that kosa8d reads once the worker has ended, so neither side
 * waits on the other. The decoder speaks on two pipes, one request and one answer at a
 * time: kosa8d writes a whole request before it reads, the decoder reads a whole request
 * before it writes, so neither can block the other for good. Workers are fresh images of
 * the running binary (worker.h): a job gets its descriptors and numbers in struct
 * worker_in, and a program that starts them calls worker_main() first. */
#include "store/jobs.h"
#include "common/worker.h"
#include "store/chunk.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEC_MSG 256

/* A memfd holding n bytes at p, sealed, its offset at 0. */
static int job_memfd_with(const char *name, const void *p, size_t n, struct k8_err *err)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return k8_err_set(err, -errno, "memfd: %s", strerror(errno));
	if (write_full(fd, p, n) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0 ||
	    lseek(fd, 0, SEEK_SET) < 0) {
		int e = -errno;
		close(fd);
		return k8_err_set(err, e, "memfd: %s", strerror(-e));
	}
	return fd;
}

/* Read all of fd (at most max bytes) into a buffer of max + 1 (NUL-terminated). */
static int job_slurp(int fd, size_t max, char **out, size_t *n)
{
	struct stat st;
	char *b;

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size > max)
		return -E2BIG;
	b = xmalloc(max + 1);
	if (pread(fd, b, (size_t)st.st_size, 0) != st.st_size) {
		free(b);
		return -EIO;
	}
	b[st.st_size] = '\0';
	*out = b;
	*n = (size_t)st.st_size;
	return 0;
}

/* Run a one-shot job over n bytes at p (its input, a sealed memfd): 0 with the memfd it
 * wrote its answer into in *out (the caller's to close), or -errno with err set. */
static int job_oneshot(const char *name, const struct worker_job *job, const void *p,
		       size_t n, uint64_t arg, int userns, const char *what, int *out,
		       struct k8_err *err)
{
	int in, o, r;

	*out = -1;
	if ((in = job_memfd_with(name, p, n, err)) < 0)
		return in;
	o = memfd_create(name, MFD_CLOEXEC);
	if (o < 0) {
		r = k8_err_set(err, -errno, "memfd: %s", strerror(errno));
		close(in);
		return r;
	}
	struct worker w = {
		.name = name, .job = job, .userns = userns, .caps = 0, .ndirs = 0,
		.keep = { in, o }, .nkeep = 2, .arg = { arg },
	};
	r = worker_run(&w, what, NULL, err);
	close(in);
	if (r) {
		close(o);
		return r;
	}
	lseek(o, 0, SEEK_SET);
	*out = o;
	return 0;
}

/* ---- XML ---- */

/* fd[0] the answer, fd[1] where its struct goes; arg[0] its kind. */
static int xml_job(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	size_t size = s3xml_size((enum s3xml_kind)in->arg[0]), n;
	char *text, *res;
	int r;

	if (!size)
		return k8_err_set(err, -EINVAL, "no such answer");
	if ((r = job_slurp(in->fd[0], S3XML_MAX_BYTES, &text, &n)))
		return k8_err_set(err, r, "reading the answer: %s", strerror(-r));
	res = xcalloc(1, size);
	r = s3xml_parse((enum s3xml_kind)in->arg[0], text, n, res, err);
	if (!r)
		r = write_full(in->fd[1], res, size);
	free(res);
	free(text);
	return r;
}
WORKER_JOB(s3xml, xml_job);

int store_job_xml(void *ctx, enum s3xml_kind kind, const char *p, size_t n, void *out,
		  struct k8_err *err)
{
	size_t size = s3xml_size(kind);
	struct stat st;
	int fd, r;

	if (!size)
		return k8_err_set(err, -EINVAL, "no reader for XML answers of kind %d", (int)kind);
	if (n > S3XML_MAX_BYTES)
		return k8_err_set(err, -E2BIG, "the server's XML answer is over %u bytes",
				  S3XML_MAX_BYTES);
	if ((r = job_oneshot("kosa8d-s3xml", &worker_job_s3xml, p, n, (uint64_t)kind,
			     ctx ? *(const int *)ctx : -1, "the reader of the server's answer",
			     &fd, err)))
		return r;
	if (fstat(fd, &st) < 0 || (size_t)st.st_size != size ||
	    pread(fd, out, size, 0) != (ssize_t)size || s3xml_check(kind, out))
		r = k8_err_set(err, -EBADMSG, "the reader of the server's answer sent a malformed "
			       "result");
	close(fd);
	return r;
}

/* ---- manifest ---- */

/* fd[0] the manifest's zstd frame, fd[1] where its records go. */
static int manifest_job(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	static struct manifest m;
	void *d = chunk_dctx();
	char *z = NULL, *text = NULL;
	size_t zn = 0, n = 0;
	int r;

	if (!d)
		return k8_err_set(err, -ENOMEM, "no zstd context");
	if ((r = job_slurp(in->fd[0], chunk_seal_bound(MF_JSON_MAX), &z, &zn))) {
		k8_err_set(err, r, "reading the manifest: %s", strerror(-r));
		goto out;
	}
	text = xmalloc(MF_JSON_MAX + 1);
	if ((r = chunk_inflate_max((uint8_t *)z, zn, (uint8_t *)text, MF_JSON_MAX, &n, d, err))) {
		k8_err_wrap(err, "the manifest");
		goto out;
	}
	r = manifest_parse(text, n, &m, err);
	if (!r)
		r = manifest_pack(&m, in->fd[1]);
	manifest_free(&m);
out:
	free(z);
	free(text);
	chunk_dctx_free(d);
	return r;
}
WORKER_JOB(manifest, manifest_job);

int store_job_manifest(const uint8_t *z, size_t zn, int userns, struct manifest *m,
		       struct k8_err *err)
{
	int fd, r;

	memset(m, 0, sizeof(*m));
	if ((r = job_oneshot("kosa8d-manifest", &worker_job_manifest, z, zn, 0, userns,
			     "the manifest's reader", &fd, err)))
		return r;
	r = manifest_unpack(fd, m, err);
	close(fd);
	return r;
}

/* ---- the decoder ---- */

struct dec_req {
	uint32_t want, zlen;
};

struct dec_ans {
	int32_t code;
	uint32_t n;
	char msg[DEC_MSG];
};

/* fd[0] the requests, fd[1] the answers, one at a time until fd[0] ends. */
static int decoder_job(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	size_t zcap = chunk_seal_bound(CHUNK_SIZE_MAX);
	uint8_t *z = xmalloc(zcap), *plain = xmalloc(CHUNK_SIZE_MAX);
	void *d = chunk_dctx();
	int r = 0;

	if (!d) {
		r = k8_err_set(err, -ENOMEM, "no zstd context");
		goto out;
	}
	for (;;) {
		struct dec_req q;
		struct dec_ans a = { 0 };
		struct k8_err e = { 0 };
		int rr = read_full(in->fd[0], &q, sizeof(q));
		if (rr == -EPIPE)
			break;          /* the pull is over */
		if (rr || q.want > CHUNK_SIZE_MAX || q.zlen > zcap || read_full(in->fd[0], z, q.zlen)) {
			r = k8_err_set(err, -EPROTO, "a malformed request");
			break;
		}
		a.code = chunk_inflate(z, q.zlen, plain, q.want, d, &e);
		if (a.code)
			snprintf(a.msg, sizeof(a.msg), "%s", e.msg);
		else
			a.n = q.want;
		if (write_full(in->fd[1], &a, sizeof(a)) ||
		    (a.n && write_full(in->fd[1], plain, a.n))) {
			r = k8_err_set(err, -EPIPE, "the answer could not be written");
			break;
		}
		(*value)++;
	}
out:
	chunk_dctx_free(d);
	free(z);
	free(plain);
	return r;
}
WORKER_JOB(chunks, decoder_job);

int store_decoder_start(struct store_decoder *dec, int userns, struct k8_err *err)
{
	int to[2], from[2];

	dec->pid = -1;
	dec->to = dec->from = dec->report = -1;
	if (pipe2(to, O_CLOEXEC) < 0)
		return k8_err_set(err, -errno, "pipe: %s", strerror(errno));
	if (pipe2(from, O_CLOEXEC) < 0) {
		close(to[0]);
		close(to[1]);
		return k8_err_set(err, -errno, "pipe: %s", strerror(errno));
	}
	/* a chunk in one go where the kernel lets us (1 MiB for an unprivileged user) */
	fcntl(to[1], F_SETPIPE_SZ, 1 << 20);
	fcntl(from[1], F_SETPIPE_SZ, 1 << 20);
	struct worker w = {
		.name = "kosa8d-chunks", .job = &worker_job_chunks, .userns = userns, .caps = 0,
		.ndirs = 0, .keep = { to[0], from[1] }, .nkeep = 2,
	};
	dec->pid = worker_start(&w, &dec->report, err);
	close(to[0]);
	close(from[1]);
	if (dec->pid < 0) {
		close(to[1]);
		close(from[0]);
		return err->code;
	}
	dec->to = to[1];
	dec->from = from[0];
	return 0;
}

int store_decoder_run(struct store_decoder *dec, const uint8_t *z, size_t zn, uint8_t *out,
		      size_t want, const char *what, struct k8_err *err)
{
	struct dec_req q = { .want = (uint32_t)want, .zlen = (uint32_t)zn };
	struct dec_ans a;

	if (dec->pid < 0)
		return k8_err_set(err, -EIO, "the chunk decoder is not running");
	if (want > CHUNK_SIZE_MAX || zn > chunk_seal_bound(CHUNK_SIZE_MAX))
		return k8_err_set(err, -EBADMSG, "%s is larger than a chunk can be", what);
	if (write_full(dec->to, &q, sizeof(q)) || write_full(dec->to, z, zn) ||
	    read_full(dec->from, &a, sizeof(a)))
		goto dead;
	a.msg[DEC_MSG - 1] = '\0';
	if (a.code) {
		char msg[DEC_MSG];
		str_escape_to(msg, sizeof(msg), a.msg);
		return k8_err_set(err, -EBADMSG, "%s: %s", what, msg);
	}
	if (a.n != want || read_full(dec->from, out, want))
		goto dead;
	return 0;
dead:
	{
		struct k8_err e = { 0 };
		close(dec->to);
		dec->to = -1;
		worker_wait(dec->pid, dec->report, "the chunk decoder", NULL, &e);
		close(dec->report);
		close(dec->from);
		dec->pid = -1;
		dec->report = dec->from = -1;
		return k8_err_set(err, -EIO, "decoding %s: %s", what,
				  e.msg[0] ? e.msg : "the chunk decoder ended");
	}
}

void store_decoder_stop(struct store_decoder *dec)
{
	struct k8_err e = { 0 };

	if (dec->pid < 0)
		return;
	close(dec->to);
	worker_wait(dec->pid, dec->report, "the chunk decoder", NULL, &e);
	close(dec->report);
	close(dec->from);
	dec->pid = -1;
	dec->to = dec->from = dec->report = -1;
}
