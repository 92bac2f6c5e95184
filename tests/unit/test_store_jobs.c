/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_jobs.c - a bucket's bytes read in jailed workers (src/store/jobs.c): an XML
 * answer and a manifest read there and checked again here; the decoder of a pull
 * decompressing chunk after chunk, refusing a frame that is not its chunk's (named), and
 * a decoder killed mid-pull failing that pull, not the process. */
#include "common/worker.h"
#include "store/jobs.h"
#include "store/chunk.h"
#include "t.h"

#include <signal.h>
#include <stdlib.h>
#include <zstd.h>

static void test_xml(void)
{
	static struct s3xml_list l;
	struct s3xml_error e;
	struct k8_err err = { 0 };
	const char *xml = "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>chunks/a"
			  "</Key><Size>3</Size></Contents></ListBucketResult>";

	CHECK_EQ_INT(store_job_xml(NULL, S3XML_LIST, xml, strlen(xml), &l, &err), 0);
	CHECK_EQ_INT(l.n, 1);
	CHECK_STR(l.o[0].key, "chunks/a");
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(store_job_xml(NULL, S3XML_ERROR, "<!DOCTYPE x><Error/>", 20, &e, &err), -EBADMSG);
	CHECK(strstr(err.msg, "DOCTYPE") != NULL);
}

static void test_manifest(void)
{
	static struct manifest m, back;
	struct chunk_keys plain = { 0 };
	struct k8_err err = { 0 };
	uint8_t id[CHUNK_ID_LEN] = { 1, 2, 3 };
	void *z = ZSTD_createCCtx();
	char *text;
	uint8_t *obj, *frame;
	size_t on = 0, zn = 0, cap;

	snprintf(m.kind, sizeof(m.kind), "paused");
	snprintf(m.sandbox, sizeof(m.sandbox), "interp");
	snprintf(m.config, sizeof(m.config), "{}");
	m.chunk_size = 1u << 20;
	manifest_chunk(manifest_file(&m, "paused/memory", 4u << 20, 0600), 1u << 20, 1u << 20, id);
	text = manifest_json(&m);
	cap = chunk_seal_bound(strlen(text));
	obj = malloc(cap);
	frame = malloc(cap);
	CHECK_EQ_INT(chunk_seal(&plain, "manifests/x", text, strlen(text), 3, z, obj, cap, &on,
				&err), 0);
	CHECK_EQ_INT(chunk_unseal(&plain, "manifests/x", obj, on, frame, cap, &zn, "manifest",
				  &err), 0);
	CHECK_EQ_INT(store_job_manifest(frame, zn, -1, &back, &err), 0);
	CHECK_EQ_INT(back.nfiles, 1);
	CHECK_EQ_INT(back.files[0].nchunks, 1);
	CHECK_EQ_INT(back.files[0].chunks[0].off, 1u << 20);
	CHECK_STR(back.sandbox, "interp");
	manifest_free(&back);
	/* not a frame */
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(store_job_manifest((const uint8_t *)"junkjunk", 8, -1, &back, &err), -EBADMSG);
	CHECK(strstr(err.msg, "manifest") != NULL);
	manifest_free(&back);
	manifest_free(&m);
	free(text);
	free(obj);
	free(frame);
	ZSTD_freeCCtx(z);
}

static void test_decoder(void)
{
	struct store_decoder dec;
	struct k8_err err = { 0 };
	size_t n = 1u << 20, zc = ZSTD_compressBound(n);
	uint8_t *plain = malloc(n), *z = malloc(zc), *back = malloc(n);
	size_t zl;

	for (size_t i = 0; i < n; i++)
		plain[i] = (uint8_t)(i * 31 >> 7);
	zl = ZSTD_compress(z, zc, plain, n, 3);
	CHECK_EQ_INT(store_decoder_start(&dec, -1, &err), 0);
	for (int k = 0; k < 5; k++) {
		memset(back, 0, n);
		CHECK_EQ_INT(store_decoder_run(&dec, z, zl, back, n, "chunk 1", &err), 0);
		CHECK(memcmp(back, plain, n) == 0);
	}
	/* another size than the frame's: refused, named; the decoder goes on */
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(store_decoder_run(&dec, z, zl, back, n / 2, "chunk abc", &err), -EBADMSG);
	CHECK(strstr(err.msg, "chunk abc") != NULL);
	CHECK_EQ_INT(store_decoder_run(&dec, z, zl, back, n, "chunk 1", &err), 0);
	/* garbage */
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(store_decoder_run(&dec, (const uint8_t *)"garbage", 7, back, 7, "chunk g",
				       &err), -EBADMSG);
	/* killed: this pull fails, nothing else */
	kill(dec.pid, SIGKILL);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(store_decoder_run(&dec, z, zl, back, n, "chunk 1", &err), -EIO);
	CHECK(strstr(err.msg, "signal 9") != NULL);
	CHECK_EQ_INT(store_decoder_run(&dec, z, zl, back, n, "chunk 1", &err), -EIO);
	store_decoder_stop(&dec);
	/* stopping a running one */
	CHECK_EQ_INT(store_decoder_start(&dec, -1, &err), 0);
	store_decoder_stop(&dec);
	CHECK_EQ_INT(dec.pid, -1);
	free(plain);
	free(z);
	free(back);
}

int main(int argc, char **argv)
{
	worker_main(argc, argv);        /* its workers are this binary, exec'd */
	signal(SIGPIPE, SIG_IGN);
	test_xml();
	test_manifest();
	test_decoder();
	return T_DONE();
}
