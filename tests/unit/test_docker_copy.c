/* SPDX-License-Identifier: Apache-2.0 */
/* test_docker_copy.c - COPY and ADD of the classic builder (src/docker/copy.c) against a
 * real context directory: what lands in the layer, what is refused (paths out of the
 * context, .dockerignore'd sources, archives that climb), symlinks copied as links and
 * never followed, --chown, the content digest, and the image's symlink map a
 * destination resolves through (layers with links and whiteouts). */
#include "docker/copy.h"
#include "t.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static char ctx[64];

static void put(const char *rel, const char *content)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s", ctx, rel);
	FILE *f = fopen(p, "w");
	fputs(content, f);
	fclose(f);
}

/* A tar of (name, type, content or link target) triples into the context (or, with
 * rel NULL, a memfd returned). */
static int tar_of(const char *rel, const char *const *e, size_t n)
{
	char p[256];
	int fd;
	struct archive *a = archive_write_new();

	if (rel) {
		snprintf(p, sizeof(p), "%s/%s", ctx, rel);
		fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
	} else {
		fd = memfd_create("layer", 0);
	}
	archive_write_set_format_pax_restricted(a);
	archive_write_open_fd(a, fd);
	for (size_t i = 0; i + 2 < n * 3; i += 3) {
		struct archive_entry *x = archive_entry_new();
		archive_entry_set_pathname(x, e[i]);
		if (!strcmp(e[i + 1], "l")) {
			archive_entry_set_filetype(x, AE_IFLNK);
			archive_entry_set_symlink(x, e[i + 2]);
			archive_entry_set_perm(x, 0777);
		} else if (!strcmp(e[i + 1], "d")) {
			archive_entry_set_filetype(x, AE_IFDIR);
			archive_entry_set_perm(x, 0755);
		} else {
			archive_entry_set_filetype(x, AE_IFREG);
			archive_entry_set_perm(x, 0644);
			archive_entry_set_size(x, (la_int64_t)strlen(e[i + 2]));
		}
		archive_write_header(a, x);
		if (!strcmp(e[i + 1], "f"))
			archive_write_data(a, e[i + 2], strlen(e[i + 2]));
		archive_entry_free(x);
	}
	archive_write_close(a);
	archive_write_free(a);
	lseek(fd, 0, SEEK_SET);
	if (rel) {
		close(fd);
		return 0;
	}
	return fd;
}

struct got {
	size_t n;
	char name[32][128], link[32][128], data[32][64];
	int type[32], uid[32];
};

/* What a layer holds. */
static void read_layer(int fd, struct got *g)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;

	memset(g, 0, sizeof(*g));
	lseek(fd, 0, SEEK_SET);
	archive_read_support_format_all(a);
	archive_read_open_fd(a, fd, 4096);
	while (archive_read_next_header(a, &e) == ARCHIVE_OK && g->n < 32) {
		snprintf(g->name[g->n], 128, "%s", archive_entry_pathname(e));
		g->type[g->n] = (int)archive_entry_filetype(e);
		g->uid[g->n] = (int)archive_entry_uid(e);
		if (archive_entry_symlink(e))
			snprintf(g->link[g->n], 128, "%s", archive_entry_symlink(e));
		ssize_t k = archive_read_data(a, g->data[g->n], 63);
		if (k > 0)
			g->data[g->n][k] = '\0';
		g->n++;
	}
	archive_read_free(a);
}

static int has(const struct got *g, const char *name, int type)
{
	for (size_t i = 0; i < g->n; i++)
		if (!strcmp(g->name[i], name) && g->type[i] == type)
			return (int)i;
	return -1;
}

static json_t *the_links;
static const json_t *links_cb(void *c, struct k8_err *err)
{
	(void)c;
	(void)err;
	return the_links;
}

/* One COPY (or ADD) of srcs... dest; the layer into g. Returns dcopy_layer's answer. */
static int copy(enum df_kind kind, const char *chown, struct got *g, char digest[65],
		struct k8_err *err, const char *a0, const char *a1, const char *a2)
{
	const char *w[3] = { a0, a1, a2 };
	struct df_step s = { .kind = kind, .chown = (char *)chown };
	struct dignore ig = { 0 };
	static const char ign[] = "secret.txt\n";
	int fd = memfd_create("out", 0), r, ctxfd = open(ctx, O_RDONLY | O_DIRECTORY);
	struct dcopy_in in = { .ctxfd = ctxfd, .ig = &ig, .workdir = "/work",
			       .links = links_cb };

	dignore_parse(ign, sizeof(ign) - 1, &ig, err);
	s.argv.v = (char **)w;
	s.argv.n = a2 ? 3 : 2;
	k8_err_clear(err);
	r = dcopy_layer(&in, &s, fd, digest, err);
	if (!r)
		read_layer(fd, g);
	dignore_free(&ig);
	close(fd);
	close(ctxfd);
	return r;
}

static void test_copy(void)
{
	struct k8_err err = { 0 };
	char d1[65], d2[65];
	struct got g;
	int i;

	/* a file into a directory; a relative destination is below WORKDIR */
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d1, &err, "a.txt", "/app/", NULL), 0);
	i = has(&g, "app/a.txt", AE_IFREG);
	CHECK(i >= 0 && !strcmp(g.data[i], "hello\n"));
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d2, &err, "a.txt", "rel/", NULL), 0);
	CHECK(has(&g, "work/rel/a.txt", AE_IFREG) >= 0);
	/* a directory: its tree, a symlink as a symlink (never followed) */
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d1, &err, "dir", "/d", NULL), 0);
	CHECK(has(&g, "d", AE_IFDIR) >= 0 || has(&g, "d/", AE_IFDIR) >= 0);
	CHECK(has(&g, "d/b.txt", AE_IFREG) >= 0 && has(&g, "d/sub/c.txt", AE_IFREG) >= 0);
	i = has(&g, "d/link", AE_IFLNK);
	CHECK(i >= 0 && !strcmp(g.link[i], "/etc/passwd"));
	/* globs; two sources make the destination a directory */
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d1, &err, "a*.txt", "/g/", NULL), 0);
	CHECK(has(&g, "g/a.txt", AE_IFREG) >= 0);
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d1, &err, "a.txt", "dir/b.txt", "/two"), 0);
	CHECK(has(&g, "two/a.txt", AE_IFREG) >= 0 && has(&g, "two/b.txt", AE_IFREG) >= 0);
	/* refused: out of the context, ignored, through a symlink out, no match */
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d1, &err, "../etc/passwd", "/x", NULL), -EPERM);
	CHECK(strstr(err.msg, "forbidden path outside the build context") != NULL);
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d1, &err, "secret.txt", "/x", NULL), -ENOENT);
	CHECK(strstr(err.msg, "excluded by .dockerignore") != NULL);
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d1, &err, "root/etc/passwd", "/x", NULL), -ENOENT);
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d1, &err, "*.none", "/x", NULL), -ENOENT);
	/* --chown: numbers (or root) only */
	CHECK_EQ_INT(copy(DF_COPY, "1000:1000", &g, d1, &err, "a.txt", "/c", NULL), 0);
	CHECK(g.n == 1 && g.uid[0] == 1000);
	CHECK_EQ_INT(copy(DF_COPY, "someone", &g, d1, &err, "a.txt", "/c", NULL), -ENOTSUP);
	/* the content digest ignores mtimes, not contents */
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d1, &err, "a.txt", "/app/", NULL), 0);
	char p[256];
	snprintf(p, sizeof(p), "%s/a.txt", ctx);
	struct timespec t[2] = { { 1, 0 }, { 1, 0 } };
	utimensat(AT_FDCWD, p, t, 0);
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d2, &err, "a.txt", "/app/", NULL), 0);
	CHECK_STR(d1, d2);
	put("a.txt", "changed\n");
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d2, &err, "a.txt", "/app/", NULL), 0);
	CHECK(strcmp(d1, d2) != 0);
	put("a.txt", "hello\n");
	/* ADD: a local archive is extracted below the destination, one that climbs refused */
	CHECK_EQ_INT(copy(DF_ADD, NULL, &g, d1, &err, "good.tar", "/ex/", NULL), 0);
	i = has(&g, "ex/x/y.txt", AE_IFREG);
	CHECK(i >= 0 && !strcmp(g.data[i], "in the tar"));
	CHECK_EQ_INT(copy(DF_ADD, NULL, &g, d1, &err, "evil.tar", "/ex/", NULL), -EPERM);
	CHECK(strstr(err.msg, "leaves its directory") != NULL);
	/* COPY keeps a tar a tar */
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d1, &err, "good.tar", "/ex/", NULL), 0);
	CHECK(has(&g, "ex/good.tar", AE_IFREG) >= 0);
}

static int reads;

/* A layer's entries into lk as kosa8d's links worker sends them (type, name, target). */
static int apply_tar(struct dcopy_links *lk, int fd, struct k8_err *err)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	int r = 0;

	archive_read_support_format_tar(a);
	if (archive_read_open_fd(a, fd, 4096) != ARCHIVE_OK) {
		archive_read_free(a);
		return -EINVAL;
	}
	while (!r && archive_read_next_header(a, &e) == ARCHIVE_OK) {
		char name[4200];
		mode_t t = archive_entry_filetype(e);
		snprintf(name, sizeof(name), "%s", archive_entry_pathname(e));
		r = dcopy_links_entry(lk, t == AE_IFLNK ? DCOPY_L_LINK : t == AE_IFDIR ? DCOPY_L_DIR
							  : DCOPY_L_OTHER,
				      name, archive_entry_symlink(e), err);
	}
	archive_read_free(a);
	return r;
}

/* dcopy_layer_read for dcopy_links_update: the layers are the fds of ctx, by digest
 * "sha256:<index>". */
static int layer_of(void *fdsp, struct dcopy_links *lk, const char *digest, struct k8_err *err)
{
	const int *fds = fdsp;

	++reads;
	lseek(fds[digest[7] - '0'], 0, SEEK_SET);
	return apply_tar(lk, fds[digest[7] - '0'], err);
}

static void test_links(void)
{
	struct k8_err err = { 0 };
	struct dcopy_links lk = { 0 };
	char out[256];
	struct got g;
	char d[65];

	/* a layer with links, then one that whites one out and replaces another */
	static const char *const l1[] = {
		"usr/", "d", "", "usr/lib/", "d", "", "l", "l", "/usr/lib",
		"up", "l", "../../..", "usr/old", "l", "/nowhere", "a", "l", "b", "b", "l", "a",
	};
	static const char *const l2[] = {
		"usr/.wh.old", "f", "", "a", "f", "now a file",
	};
	int fd1 = tar_of(NULL, l1, 7), fd2 = tar_of(NULL, l2, 2);

	lk.links = json_object();
	lk.layers = json_array();
	lk.below = json_object();
	CHECK_EQ_INT(apply_tar(&lk, fd1, &err), 0);
	CHECK_STR(json_string_value(json_object_get(lk.links, "l")), "/usr/lib");
	CHECK(json_object_get(lk.links, "usr/old") != NULL);
	CHECK_EQ_INT(apply_tar(&lk, fd2, &err), 0);
	CHECK(json_object_get(lk.links, "usr/old") == NULL);      /* whiteout */
	CHECK(json_object_get(lk.links, "a") == NULL);            /* a file now */
	{
		/* names that climb or are whiteouts of nothing never become links */
		char up[] = "../etc/x", abs[] = "/etc/y", opq[] = "usr/.wh..wh..opq";
		CHECK_EQ_INT(dcopy_links_entry(&lk, DCOPY_L_LINK, up, "/", &err), 0);
		CHECK(json_object_get(lk.links, "../etc/x") == NULL);
		CHECK(json_object_get(lk.links, "etc/x") == NULL);
		CHECK_EQ_INT(dcopy_links_entry(&lk, DCOPY_L_LINK, abs, "/", &err), 0);
		CHECK(json_object_get(lk.links, "/etc/y") == NULL);
		CHECK(json_object_get(lk.links, "etc/y") == NULL);
		json_object_set_new(lk.links, "usr/zz", json_string("/q"));
		CHECK_EQ_INT(dcopy_links_entry(&lk, DCOPY_L_OTHER, opq, NULL, &err), 0);
		/* an empty name (a one-byte buffer: cleaning it in place would write "." past
		 * it, which fuzz_dcopy found) is no entry */
		char *empty = strdup("");
		size_t before = json_object_size(lk.links);
		CHECK_EQ_INT(dcopy_links_entry(&lk, DCOPY_L_LINK, empty, "/x", &err), 0);
		CHECK_EQ_INT(json_object_size(lk.links), before);
		CHECK_STR(empty, "");                   /* the caller's name is not written */
		free(empty);
		CHECK(json_object_get(lk.links, "usr/zz") == NULL);       /* opaque dir */
	}
	{
		/* update reads only the layers not applied yet; another list starts again */
		struct dcopy_links u = { 0 };
		int fds[2] = { fd1, fd2 };
		json_t *one = json_pack("[{s:s}]", "digest", "sha256:0");
		json_t *two = json_pack("[{s:s},{s:s}]", "digest", "sha256:0", "digest", "sha256:1");
		json_t *other = json_pack("[{s:s}]", "digest", "sha256:1");
		bool added;
		reads = 0;
		CHECK_EQ_INT(dcopy_links_update(&u, one, layer_of, fds, &added, &err), 0);
		CHECK(added && reads == 1 && json_object_get(u.links, "usr/old"));
		CHECK_EQ_INT(dcopy_links_update(&u, two, layer_of, fds, &added, &err), 0);
		CHECK(added && reads == 2 && !json_object_get(u.links, "usr/old"));
		CHECK_EQ_INT(dcopy_links_update(&u, two, layer_of, fds, &added, &err), 0);
		CHECK(!added && reads == 2);
		CHECK_EQ_INT(dcopy_links_update(&u, other, layer_of, fds, &added, &err), 0);
		CHECK(added && reads == 3 && !json_object_get(u.links, "l"));
		dcopy_links_clear(&u);
		json_decref(one);
		json_decref(two);
		json_decref(other);
	}
	close(fd1);
	close(fd2);

	CHECK_EQ_INT(dcopy_resolve(lk.links, "l/f", false, out, sizeof(out), &err), 0);
	CHECK_STR(out, "usr/lib/f");
	CHECK_EQ_INT(dcopy_resolve(lk.links, "up/x", false, out, sizeof(out), &err), 0);
	CHECK_STR(out, "x");                                        /* .. stops at / */
	CHECK_EQ_INT(dcopy_resolve(lk.links, "l", false, out, sizeof(out), &err), 0);
	CHECK_STR(out, "l");                                        /* not the last one */
	CHECK_EQ_INT(dcopy_resolve(lk.links, "l", true, out, sizeof(out), &err), 0);
	CHECK_STR(out, "usr/lib");
	CHECK_EQ_INT(dcopy_resolve(lk.links, "b/x", false, out, sizeof(out), &err), 0);
	CHECK_STR(out, "a/x");                                      /* b -> a, a a file now */
	json_object_set_new(lk.links, "a", json_string("b"));
	CHECK_EQ_INT(dcopy_resolve(lk.links, "a/x", false, out, sizeof(out), &err), -ELOOP);

	/* a COPY whose destination goes through the image's link */
	the_links = lk.links;
	CHECK_EQ_INT(copy(DF_COPY, NULL, &g, d, &err, "a.txt", "/l/", NULL), 0);
	CHECK(has(&g, "usr/lib/a.txt", AE_IFREG) >= 0);
	the_links = NULL;
	dcopy_links_clear(&lk);
	dcopy_links_clear(&lk);         /* twice is fine */

	json_t *pre = json_pack("[s]", "sha256:a"), *layers = json_pack("[{s:s},{s:s}]", "digest",
									"sha256:a", "digest", "sha256:b");
	CHECK(dcopy_links_prefix(pre, layers));
	CHECK(!dcopy_links_prefix(layers, pre));
	json_decref(pre);
	json_decref(layers);
}

int main(void)
{
	char p[256];

	snprintf(ctx, sizeof(ctx), "/tmp/k8copy-XXXXXX");
	if (!mkdtemp(ctx))
		return 1;
	put("a.txt", "hello\n");
	put("secret.txt", "do not copy\n");
	snprintf(p, sizeof(p), "%s/dir", ctx);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/dir/sub", ctx);
	mkdir(p, 0755);
	put("dir/b.txt", "b\n");
	put("dir/sub/c.txt", "c\n");
	snprintf(p, sizeof(p), "%s/dir/link", ctx);
	symlink("/etc/passwd", p);
	snprintf(p, sizeof(p), "%s/root", ctx);
	symlink("/", p);
	static const char *const good[] = { "x/", "d", "", "x/y.txt", "f", "in the tar" };
	static const char *const evil[] = { "ok.txt", "f", "fine", "../../escape", "f", "no" };
	tar_of("good.tar", good, 2);
	tar_of("evil.tar", evil, 2);
	test_copy();
	test_links();
	snprintf(p, sizeof(p), "rm -rf %s", ctx);
	if (system(p))
		return 1;
	return T_DONE();
}
