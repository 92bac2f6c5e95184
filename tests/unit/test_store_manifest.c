/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_manifest.c - a snapshot's manifest (src/store/manifest.c): written and read
 * back, packed across a pipe and unpacked, and refused when a bucket hands back paths
 * that leave the snapshot (../, /etc), counts past the bounds, chunks its chunking never
 * makes, lengths that do not add up, or a packed answer cut short or inflated. */
#include "store/manifest.h"
#include "t.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

static void sample(struct manifest *m)
{
	uint8_t id[CHUNK_ID_LEN];
	struct mf_file *f;

	memset(m, 0, sizeof(*m));
	snprintf(m->kind, sizeof(m->kind), "checkpoint");
	snprintf(m->sandbox, sizeof(m->sandbox), "interp");
	snprintf(m->label, sizeof(m->label), "clean");
	snprintf(m->created, sizeof(m->created), "2026-12-06T07:48:06Z");
	snprintf(m->kosa8_version, sizeof(m->kosa8_version), "0.9");
	snprintf(m->guest_digest, sizeof(m->guest_digest), "sha256:%064d", 0);
	snprintf(m->config, sizeof(m->config), "{\"cpus\":1,\"memory_mib\":512}");
	m->chunk_size = 1u << 20;
	f = manifest_file(m, "memory", (5u << 20) + 17, 0600);
	memset(id, 0xab, sizeof(id));
	manifest_chunk(f, 0, 1u << 20, id);
	id[0] = 1;
	manifest_chunk(f, 3u << 20, 1u << 20, id);
	manifest_chunk(f, 5u << 20, 17, id);
	f = manifest_file(m, "layers/scratch.qcow2", 100, 0644);
	manifest_chunk(f, 0, 100, id);
	manifest_file(m, "images/py.erofs", 0, 0444);
	m->nimages = 1;
	snprintf(m->images[0].ref, sizeof(m->images[0].ref), "python:3.12-slim");
	snprintf(m->images[0].digest, sizeof(m->images[0].digest), "sha256:%064x", 1);
	snprintf(m->images[0].file, sizeof(m->images[0].file), "images/py.erofs");
}

static void test_roundtrip(void)
{
	static struct manifest m, back, un;
	struct k8_err err = { 0 };
	char *text;
	int p[2];

	sample(&m);
	CHECK_EQ_INT(manifest_check(&m, &err), 0);
	text = manifest_json(&m);
	CHECK(text != NULL);
	CHECK(strstr(text, "\"chunks\":[\"abab") != NULL);
	CHECK(strstr(text, ",null,null,") != NULL);
	CHECK_EQ_INT(manifest_parse(text, strlen(text), &back, &err), 0);
	if (err.msg[0])
		fprintf(stderr, "%s\n", err.msg);
	CHECK_EQ_INT(back.nfiles, 3);
	CHECK_EQ_INT(back.files[0].nchunks, 3);
	CHECK_EQ_INT(back.files[0].chunks[1].off, 3u << 20);
	CHECK_EQ_INT(back.files[0].chunks[2].len, 17);
	CHECK_EQ_INT(back.files[1].mode, 0644);
	CHECK_STR(back.config, "{\"cpus\":1,\"memory_mib\":512}");
	CHECK_STR(back.images[0].file, "images/py.erofs");
	/* across a pipe */
	CHECK(pipe(p) == 0);
	fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
	CHECK_EQ_INT(manifest_pack(&back, p[1]), 0);
	close(p[1]);
	CHECK_EQ_INT(manifest_unpack(p[0], &un, &err), 0);
	close(p[0]);
	CHECK_EQ_INT(un.files[0].nchunks, 3);
	CHECK(!memcmp(un.files[0].chunks, back.files[0].chunks, 3 * sizeof(struct mf_chunk)));
	CHECK_STR(un.sandbox, "interp");
	manifest_free(&un);
	manifest_free(&back);
	manifest_free(&m);
	free(text);
}

/* The sample's JSON with `from` replaced by `to`, parsed: the error code. */
static int parse_edited(const char *from, const char *to, char *msg, size_t msglen)
{
	static struct manifest m, back;
	struct k8_err err = { 0 };
	char *text, *at, *ed;
	int r;

	sample(&m);
	text = manifest_json(&m);
	manifest_free(&m);
	at = strstr(text, from);
	if (!at) {
		fprintf(stderr, "no '%s' in %s\n", from, text);
		free(text);
		return 1;
	}
	ed = xasprintf("%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
	r = manifest_parse(ed, strlen(ed), &back, &err);
	manifest_free(&back);
	if (msg)
		snprintf(msg, msglen, "%s", err.msg);
	if (r == 0)
		fprintf(stderr, "accepted: %s\n", ed);
	free(ed);
	free(text);
	return r;
}

static void test_hostile(void)
{
	static const struct { const char *from, *to; } bad[] = {
		{ "\"path\":\"memory\"", "\"path\":\"../memory\"" },
		{ "\"path\":\"memory\"", "\"path\":\"/etc/shadow\"" },
		{ "\"path\":\"memory\"", "\"path\":\"a/../../b\"" },
		{ "\"path\":\"memory\"", "\"path\":\"a/./b\"" },
		{ "\"path\":\"memory\"", "\"path\":\"a//b\"" },
		{ "\"path\":\"memory\"", "\"path\":\"a/b/c/d/e\"" },
		{ "\"path\":\"memory\"", "\"path\":\"mem\\u0000ory\"" },
		{ "\"path\":\"memory\"", "\"path\":\"layers/scratch.qcow2\"" },   /* twice */
		{ "\"path\":\"memory\"", "\"path\":\"\"" },
		{ "\"path\":\"memory\"", "\"path\":\"a b\"" },
		{ "\"size\":5242897", "\"size\":5242880" },       /* ids no longer fit the size */
		{ "\"size\":5242897", "\"size\":-1" },
		{ "\"size\":5242897", "\"size\":1099511627777" },
		{ "\"size\":5242897", "\"size\":5242897.0" },
		{ "\"mode\":384", "\"mode\":2432" },              /* setuid */
		{ "\"chunks\":[\"abab", "\"chunks\":[\"ABAB" },
		{ "\"chunks\":[\"abab", "\"chunks\":[\"zz" },
		{ "\"chunks\":[\"abab", "\"chunks\":[7,\"abab" },
		{ "\"chunk_size\":1048576", "\"chunk_size\":1000000" },
		{ "\"chunk_size\":1048576", "\"chunk_size\":4096" },
		{ "\"chunk_size\":1048576", "\"chunk_size\":33554432" },
		{ "\"kosa8_manifest\":1", "\"kosa8_manifest\":2" },
		{ "\"kind\":\"checkpoint\"", "\"kind\":\"other\"" },
		{ "\"sandbox\":\"interp\"", "\"sandbox\":\"../x\"" },
		{ "\"label\":\"clean\"", "\"label\":\"cl/ean\"" },
		{ "\"encrypted\":false", "\"encrypted\":0" },
		{ "\"config\":{", "\"config\":[{" },
		{ "\"guest_digest\":\"sha256:", "\"guest_digest\":\"md5:" },
		{ "\"file\":\"images/py.erofs\"", "\"file\":\"images/other.erofs\"" },
		{ "\"slot\":0", "\"slot\":4" },
		{ "\"digest\":\"sha256:", "\"digest\":\"sha512:" },
		{ "\"kind\":\"checkpoint\"", "\"kind\":\"checkpoint\",\"kind\":\"paused\"" },
	};
	char msg[1024];

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int r = parse_edited(bad[i].from, bad[i].to, msg, sizeof(msg));
		if (r != -EBADMSG)
			fprintf(stderr, "case %zu (%s): %d %s\n", i, bad[i].to, r, msg);
		CHECK_EQ_INT(r, -EBADMSG);
		CHECK(msg[0] != '\0');
		CHECK(strchr(msg, '\n') == NULL);
	}
	/* the message names the path, escaped */
	CHECK_EQ_INT(parse_edited("\"path\":\"memory\"", "\"path\":\"../\\u001b[2J\"", msg,
				  sizeof(msg)), -EBADMSG);
	CHECK(strstr(msg, "../\\x1b[2J") != NULL);

	/* counts: a file of 2 TiB of nulls; 65 files; a manifest past its size */
	{
		struct manifest m;
		struct k8_err err = { 0 };
		const char *huge = "{\"kosa8_manifest\":1,\"kind\":\"paused\",\"sandbox\":\"a\","
				   "\"chunk_size\":65536,\"encrypted\":false,\"config\":{},"
				   "\"images\":[],\"files\":[{\"path\":\"m\",\"size\":1099511627776,"
				   "\"mode\":384,\"chunks\":[]}]}";
		CHECK_EQ_INT(manifest_parse(huge, strlen(huge), &m, &err), -EBADMSG);
		manifest_free(&m);
		size_t cap = 100000, o = 0;
		char *many = malloc(cap);
		o += (size_t)snprintf(many, cap, "{\"kosa8_manifest\":1,\"kind\":\"paused\",\"sandbox\":"
				      "\"a\",\"chunk_size\":65536,\"encrypted\":false,\"config\":{},"
				      "\"images\":[],\"files\":[");
		for (int i = 0; i < MF_FILES_MAX + 1; i++)
			o += (size_t)snprintf(many + o, cap - o, "%s{\"path\":\"f%d\",\"size\":0,"
					      "\"mode\":384,\"chunks\":[]}", i ? "," : "", i);
		snprintf(many + o, cap - o, "]}");
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(manifest_parse(many, strlen(many), &m, &err), -EBADMSG);
		manifest_free(&m);
		free(many);
		CHECK_EQ_INT(manifest_parse("{}", (size_t)MF_JSON_MAX + 1, &m, &err), -E2BIG);
		CHECK_EQ_INT(manifest_parse("[]", 2, &m, &err), -EBADMSG);
		CHECK_EQ_INT(manifest_parse("{\"kosa8_manifest\":1", 19, &m, &err), -EBADMSG);
	}
}

/* A packed answer is hostile too (a worker taken over writes what it likes). */
static void test_unpack_hostile(void)
{
	static struct manifest m, un;
	struct k8_err err = { 0 };
	char path[] = "/tmp/k8mf-XXXXXX";
	int fd = mkstemp(path);
	off_t full;

	unlink(path);
	sample(&m);
	CHECK_EQ_INT(manifest_pack(&m, fd), 0);
	full = lseek(fd, 0, SEEK_CUR);
	/* cut short at every 997th byte */
	for (off_t cut = 0; cut < full; cut += 997) {
		CHECK(ftruncate(fd, cut) == 0);
		lseek(fd, 0, SEEK_SET);
		CHECK(manifest_unpack(fd, &un, &err) < 0);
		manifest_free(&un);
		lseek(fd, 0, SEEK_SET);
		CHECK_EQ_INT(manifest_pack(&m, fd), 0);
	}
	/* a chunk count past what its file's size holds */
	{
		uint32_t big = 0x7fffffff;
		/* the first file's nchunks sits after the header, the struct's head and the
		 * file's path, size and mode */
		off_t at = 16 + (off_t)offsetof(struct manifest, files) + MF_PATH_MAX + 1 + 8 + 4;
		CHECK(pwrite(fd, &big, 4, at) == 4);
		lseek(fd, 0, SEEK_SET);
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(manifest_unpack(fd, &un, &err), -EBADMSG);
		manifest_free(&un);
	}
	close(fd);
	manifest_free(&m);
}

int main(void)
{
	test_roundtrip();
	test_hostile();
	test_unpack_hostile();
	return T_DONE();
}
