/* SPDX-License-Identifier: Apache-2.0 */
/* test_image_store.c - the image store end to end: OCI layouts, OCI archives and docker
 * save tarballs built here, load (and refusals that must leave the store untouched),
 * list, resolve, the EROFS disk (concurrent callers build it once), remove and GC. */
#include "image/image.h"
#include "common/sha.h"
#include "common/worker.h"
#include "t.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>

static char T[200];

/* ---------------------------------------------------------------- helpers */

struct buf {
	char *p;
	size_t n;
};

struct fent {
	const char *path;
	const char *data;        /* NULL: a directory */
};

/* Owners and modes the jailed unpacker must keep (unpack_jail.c): a setgid file of a
 * group not its own, a read-only directory of another owner that the next layer fills,
 * a private home. Other entries are 0:0, 0644 or 0755. */
static const struct {
	const char *path;
	unsigned uid, gid, mode;
} owned[] = {
	{ "usr/bin/sg", 0, 50, 02755 }, { "srv/", 999, 999, 0555 },
	{ "home/u/", 1000, 1000, 0700 }, { "home/u/f", 1000, 1001, 0600 },
	{ "srv/data", 999, 999, 0640 }, { "big", 70000, 0, 0644 },
};

/* A layer tar in memory: `gz` picks gzip. */
static struct buf mklayer(const struct fent *e, size_t n, bool gz)
{
	struct buf b = { malloc(1 << 20), 0 };
	struct archive *a = archive_write_new();

	archive_write_set_format_pax_restricted(a);
	if (gz)
		archive_write_add_filter_gzip(a);
	else
		archive_write_add_filter_none(a);
	archive_write_set_bytes_in_last_block(a, 1);
	archive_write_open_memory(a, b.p, 1 << 20, &b.n);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *ae = archive_entry_new();
		archive_entry_set_pathname(ae, e[i].path);
		archive_entry_set_mtime(ae, 1700000000, 0);
		if (e[i].data) {
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_perm(ae, 0644);
			archive_entry_set_size(ae, (la_int64_t)strlen(e[i].data));
		} else {
			archive_entry_set_filetype(ae, AE_IFDIR);
			archive_entry_set_perm(ae, 0755);
		}
		for (size_t k = 0; k < ARRAY_SIZE(owned); k++)
			if (!strcmp(owned[k].path, e[i].path)) {
				archive_entry_set_perm(ae, owned[k].mode);
				archive_entry_set_uid(ae, owned[k].uid);
				archive_entry_set_gid(ae, owned[k].gid);
			}
		archive_write_header(a, ae);
		if (e[i].data)
			archive_write_data(a, e[i].data, strlen(e[i].data));
		archive_entry_free(ae);
	}
	archive_write_close(a);
	archive_write_free(a);
	return b;
}

static void write_path(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(p, 1, n, f) != n)
		abort();
	fclose(f);
}

static void mkdirs(const char *p)
{
	char cmd[1200];

	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", p);
	if (system(cmd))
		abort();
}

static void sh(const char *fmt, ...) K8_PRINTF(1, 2);
static void sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd))
		fprintf(stderr, "command failed: %s\n", cmd);
}

/* Store a blob in layout `dir`; its digest "sha256:<hex>" into dg[72]. */
static void put_blob(const char *dir, const void *p, size_t n, char dg[72])
{
	char hex[65], path[1024];

	sha256_hex(p, n, hex);
	snprintf(dg, 72, "sha256:%s", hex);
	snprintf(path, sizeof(path), "%s/blobs/sha256", dir);
	mkdirs(path);
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", dir, hex);
	write_path(path, p, n);
}

static char *dumps_new(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);

	json_decref(j);
	return s;
}

static void put_json_blob(const char *dir, json_t *j, char dg[72], size_t *size)
{
	char *s = json_dumps(j, JSON_COMPACT);

	put_blob(dir, s, strlen(s), dg);
	*size = strlen(s);
	free(s);
	json_decref(j);
}

struct image_desc {
	char manifest[72], config[72], layers[2][72];
	size_t msize, lsize[2];
};

/* An image (config + manifest + the given layers) in layout `dir`. */
static void make_image(const char *dir, struct buf *layers, size_t nl, const bool *gz,
		       const char *cmd, struct image_desc *d)
{
	json_t *diff = json_array(), *ldesc = json_array();
	size_t csize;

	for (size_t i = 0; i < nl; i++) {
		char hex[65];
		put_blob(dir, layers[i].p, layers[i].n, d->layers[i]);
		d->lsize[i] = layers[i].n;
		sha256_hex(layers[i].p, layers[i].n, hex);   /* diff_id: fine for plain tars */
		json_array_append_new(diff, json_sprintf("sha256:%s", hex));
		json_array_append_new(ldesc, json_pack("{s:s, s:s, s:I}", "mediaType",
			gz[i] ? "application/vnd.oci.image.layer.v1.tar+gzip" :
				"application/vnd.oci.image.layer.v1.tar",
			"digest", d->layers[i], "size", (json_int_t)layers[i].n));
	}
	put_json_blob(dir, json_pack("{s:s, s:s, s:s, s:{s:[s,s], s:[s], s:s, s:s}, s:{s:s, s:o}}",
				     "architecture", "amd64", "os", "linux",
				     "created", "2024-01-02T03:04:05Z",
				     "config", "Env", "PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8",
				     "Cmd", cmd, "WorkingDir", "/work", "User", "1000",
				     "rootfs", "type", "layers", "diff_ids", diff),
		      d->config, &csize);
	put_json_blob(dir, json_pack("{s:i, s:s, s:{s:s, s:s, s:I}, s:o}", "schemaVersion", 2,
				     "mediaType", "application/vnd.oci.image.manifest.v1+json",
				     "config", "mediaType", "application/vnd.oci.image.config.v1+json",
				     "digest", d->config, "size", (json_int_t)csize, "layers", ldesc),
		      d->manifest, &d->msize);
}

static void write_index(const char *dir, json_t *manifests)
{
	char path[1024];
	char *s;

	snprintf(path, sizeof(path), "%s/oci-layout", dir);
	write_path(path, "{\"imageLayoutVersion\":\"1.0.0\"}", 30);
	json_t *idx = json_pack("{s:i, s:o}", "schemaVersion", 2, "manifests", manifests);

	s = json_dumps(idx, JSON_COMPACT);
	json_decref(idx);
	snprintf(path, sizeof(path), "%s/index.json", dir);
	write_path(path, s, strlen(s));
	free(s);
}

static json_t *desc_named(const char *mt, const char *dg, size_t size, const char *name)
{
	json_t *d = json_pack("{s:s, s:s, s:I}", "mediaType", mt, "digest", dg,
			      "size", (json_int_t)size);
	if (name)
		json_object_set_new(d, "annotations",
				    json_pack("{s:s}", "org.opencontainers.image.ref.name", name));
	return d;
}

static int count_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static bool file_exists(const char *fmt, ...) K8_PRINTF(1, 2);
static bool file_exists(const char *fmt, ...)
{
	char p[1024];
	struct stat s;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p, sizeof(p), fmt, ap);
	va_end(ap);
	return lstat(p, &s) == 0;
}

/* Do the entries of owned[] (but "big") under `root` have their owners and modes?
 * Says what one has when not. `setgid`: fsck.erofs --extract drops setgid bits. */
static bool owners_kept(const char *root, bool setgid)
{
	bool ok = true;

	for (size_t k = 0; k < ARRAY_SIZE(owned); k++) {
		unsigned mode = setgid ? owned[k].mode : owned[k].mode & ~02000u;
		char p[700];
		struct stat s;

		if (!strcmp(owned[k].path, "big"))
			continue;
		snprintf(p, sizeof(p), "%s/%s", root, owned[k].path);
		if (lstat(p, &s) < 0 || s.st_uid != owned[k].uid || s.st_gid != owned[k].gid ||
		    (s.st_mode & 07777) != mode) {
			fprintf(stderr, "%s: %u:%u %o, not %u:%u %o\n", p, (unsigned)s.st_uid,
				(unsigned)s.st_gid, (unsigned)(s.st_mode & 07777), owned[k].uid,
				owned[k].gid, mode);
			ok = false;
		}
	}
	return ok;
}

/* Tar up directory `dir` (its files, relative names) into `out`, plus hostile members. */
static void tar_dir(const char *dir, const char *out, bool hostile)
{
	struct archive *a = archive_write_new();
	char cmd[1024], line[1024];
	FILE *p;

	archive_write_set_format_pax_restricted(a);
	archive_write_open_filename(a, out);
	snprintf(cmd, sizeof(cmd), "cd '%s' && find . -type f | sort", dir);
	p = popen(cmd, "r");
	while (fgets(line, sizeof(line), p)) {
		char full[2048];
		struct stat s;
		struct archive_entry *ae = archive_entry_new();
		char *data;
		int fd;

		line[strcspn(line, "\n")] = '\0';
		snprintf(full, sizeof(full), "%s/%s", dir, line);
		stat(full, &s);
		data = malloc((size_t)s.st_size + 1);
		fd = open(full, O_RDONLY);
		if (read(fd, data, (size_t)s.st_size) != s.st_size)
			abort();
		close(fd);
		archive_entry_set_pathname(ae, line);
		archive_entry_set_filetype(ae, AE_IFREG);
		archive_entry_set_perm(ae, 0644);
		archive_entry_set_size(ae, s.st_size);
		archive_write_header(a, ae);
		archive_write_data(a, data, (size_t)s.st_size);
		archive_entry_free(ae);
		free(data);
	}
	pclose(p);
	if (hostile) {
		static const char *const evil[] = { "../../evil", "/tmp/k8-store-evil", "blobs/../../evil2" };
		for (size_t i = 0; i < ARRAY_SIZE(evil); i++) {
			struct archive_entry *ae = archive_entry_new();
			archive_entry_set_pathname(ae, evil[i]);
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_perm(ae, 0644);
			archive_entry_set_size(ae, 4);
			archive_write_header(a, ae);
			archive_write_data(a, "evil", 4);
			archive_entry_free(ae);
		}
	}
	archive_write_close(a);
	archive_write_free(a);
}

/* ---------------------------------------------------------------- disk threads */

struct disk_run {
	struct image_store *st;
	const char *digest;
	char *path;
	int r;
	struct k8_err err;
};

static int disk_starts;
static pthread_mutex_t disk_mu = PTHREAD_MUTEX_INITIALIZER;

static void disk_progress(void *ctx, const char *phase, const char *what, uint64_t done,
			  uint64_t total)
{
	(void)ctx;
	(void)what;
	(void)total;
	if (!strcmp(phase, "disk") && done == 0) {
		pthread_mutex_lock(&disk_mu);
		disk_starts++;
		pthread_mutex_unlock(&disk_mu);
	}
}

static void *disk_thread(void *arg)
{
	struct disk_run *d = arg;

	d->r = image_disk(d->st, d->digest, disk_progress, NULL, &d->path, &d->err);
	return NULL;
}

static bool have_mkfs_erofs(void)
{
	return access("/usr/bin/mkfs.erofs", X_OK) == 0 || access("/usr/sbin/mkfs.erofs", X_OK) == 0 ||
	       system("command -v mkfs.erofs >/dev/null 2>&1") == 0;
}

/* ---------------------------------------------------------------- main */

/* image_unpack_jailed itself (unpack_jail.c), its tree looked at directly: owners and
 * setgid bits kept through the worker's namespace (as root), an owner outside its id
 * range refused with a message that says which setting, a hostile name refused with
 * nothing written beside the tree. */
static void test_jailed_unpack(struct image_store *st)
{
	struct fent l[] = {
		{ "usr/", NULL }, { "usr/bin/", NULL }, { "usr/bin/sg", "sg\n" }, { "srv/", NULL },
		{ "srv/data", "d\n" }, { "home/u/", NULL }, { "home/u/f", "u\n" },
	};
	struct fent big[] = { { "big", "b\n" } };
	struct buf b = mklayer(l, ARRAY_SIZE(l), true), b2 = mklayer(big, 1, false);
	char tar[300], root[300], q[400];
	struct k8_err err = { 0 };
	uint64_t used = 0;
	int fd, rootfd;

	snprintf(tar, sizeof(tar), "%s/jl.tar", T);
	snprintf(root, sizeof(root), "%s/jroot", T);
	write_path(tar, b.p, b.n);
	mkdirs(root);
	fd = open(tar, O_RDONLY | O_CLOEXEC);
	rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK_EQ_INT(image_unpack_jailed(st, rootfd, fd, "jl", true, 1 << 20, &used, &err), 0);
	if (err.code)
		fprintf(stderr, "jailed unpack: %s\n", err.msg);
	CHECK_EQ_INT(used, 7);
	if (geteuid() == 0) {
		CHECK(owners_kept(root, true));
		/* uid 70000 is past the 65536 ids the namespace maps */
		close(fd);
		write_path(tar, b2.p, b2.n);
		fd = open(tar, O_RDONLY | O_CLOEXEC);
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_unpack_jailed(st, rootfd, fd, "jl", true, 1 << 20, &used, &err),
			     -EOVERFLOW);
		CHECK(strstr(err.msg, "owned by 70000:0") && strstr(err.msg, "unpack_uids"));
	}
	/* hostile names: refused, nothing beside the tree */
	close(fd);
	snprintf(q, sizeof(q), "%s/jl-evil", T);
	mkdirs(q);
	tar_dir(q, tar, true);
	fd = open(tar, O_RDONLY | O_CLOEXEC);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(image_unpack_jailed(st, rootfd, fd, "jl", true, 1 << 20, &used, &err),
		     -EPERM);
	CHECK(!file_exists("%s/evil", T) && !file_exists("/tmp/k8-store-evil"));
	close(fd);
	close(rootfd);
	free(b.p);
	free(b2.p);
}

int main(int argc, char **argv)
{
	char store[300], la[300], lb[300], lc[300], ld[300], le[300], ds[300], path[1200];
	char blobs[400], tmpdir[400];
	struct image_store *st = NULL, *st2 = NULL;
	struct k8_err err = { 0 };
	struct image_desc A, C, D_amd, D_arm;
	struct image_info info;
	json_t *loaded = NULL, *list = NULL;
	int r, nblobs;

	worker_main(argc, argv);        /* the unpacker's workers are this binary */
	snprintf(T, sizeof(T), "/tmp/k8-store-XXXXXX");
	if (!mkdtemp(T))
		return 1;
	snprintf(store, sizeof(store), "%s/store", T);
	snprintf(blobs, sizeof(blobs), "%s/blobs/sha256", store);
	snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", store);
	snprintf(la, sizeof(la), "%s/layout-a", T);
	snprintf(lb, sizeof(lb), "%s/layout-bad", T);
	snprintf(lc, sizeof(lc), "%s/layout-c", T);
	snprintf(ld, sizeof(ld), "%s/layout-multi", T);
	snprintf(le, sizeof(le), "%s/layout-arm", T);
	snprintf(ds, sizeof(ds), "%s/docker", T);

	/* Layer 1 (gzip): a small tree. Layer 2 (plain): whiteout + app; also used by docker. */
	struct fent l1[] = {
		{ "etc/", NULL }, { "etc/os-release", "ID=kosa8-test\n" }, { "etc/old", "old\n" },
		{ "usr/bin/tool", "#!/bin/sh\necho tool\n" }, { "usr/bin/sg", "sg\n" },
		{ "srv/", NULL }, { "home/u/", NULL }, { "home/u/f", "u\n" },
	};
	struct fent l2[] = {
		{ "etc/.wh.old", "" }, { "app/", NULL }, { "app/main.py", "print('hi')\n" },
		{ "srv/data", "d\n" },
	};
	struct buf layers[2] = { mklayer(l1, ARRAY_SIZE(l1), true), mklayer(l2, ARRAY_SIZE(l2), false) };
	bool gz[2] = { true, false };

	/* ---- layout A: named only by the tag "3.12-slim" */
	make_image(la, layers, 2, gz, "python3", &A);
	write_index(la, json_pack("[o]", desc_named("application/vnd.oci.image.manifest.v1+json",
						    A.manifest, A.msize, "3.12-slim")));

	r = image_store_open(store, &st, &err);
	if (r)
		fprintf(stderr, "open: %s\n", err.msg);
	CHECK_EQ_INT(r, 0);
	if (r)
		return T_DONE();
	{   /* a second owner is refused */
		struct k8_err e = { 0 };
		CHECK_EQ_INT(image_store_open(store, &st2, &e), -EBUSY);
		CHECK(strstr(e.msg, "in use") != NULL);
	}

	/* A bare tag and no --tag: refused, nothing stored. */
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(image_load(st, la, NULL, NULL, NULL, &loaded, &err), -EINVAL);
	CHECK(strstr(err.msg, "--tag NAME:3.12-slim") != NULL);
	CHECK(loaded == NULL);
	CHECK_EQ_INT(count_files(blobs), 0);
	CHECK_EQ_INT(count_files(tmpdir), 0);

	memset(&err, 0, sizeof(err));
	r = image_load(st, la, "python", NULL, NULL, &loaded, &err);
	if (r)
		fprintf(stderr, "load A: %s\n", err.msg);
	CHECK_EQ_INT(r, 0);
	CHECK_EQ_INT(json_array_size(loaded), 1);
	CHECK_STR(json_string_value(json_object_get(json_array_get(loaded, 0), "ref")),
		  "docker.io/library/python:3.12-slim");
	CHECK_STR(json_string_value(json_object_get(json_array_get(loaded, 0), "digest")), A.manifest);
	json_decref(loaded);
	loaded = NULL;
	CHECK_EQ_INT(count_files(blobs), 4);
	CHECK_EQ_INT(count_files(tmpdir), 0);

	/* Loading again is harmless; an explicit --tag adds a name. */
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(image_load(st, la, "mypy:dev", NULL, NULL, &loaded, &err), 0);
	CHECK_EQ_INT(json_array_size(loaded), 2);   /* mypy:3.12-slim and mypy:dev */
	json_decref(loaded);
	loaded = NULL;

	/* list */
	CHECK_EQ_INT(image_list(st, &list, &err), 0);
	CHECK_EQ_INT(json_array_size(list), 3);
	{
		json_t *e0 = json_array_get(list, 2);   /* sorted: mypy:3.12-slim, mypy:dev, python */
		CHECK_STR(json_string_value(json_object_get(e0, "ref")),
			  "docker.io/library/python:3.12-slim");
		CHECK_STR(json_string_value(json_object_get(e0, "created")), "2024-01-02T03:04:05Z");
		CHECK_EQ_INT(json_integer_value(json_object_get(e0, "size")), (long long)(A.lsize[0] + A.lsize[1]));
	}
	json_decref(list);

	/* resolve, in every form */
	{
		const char *forms[] = { "python:3.12-slim", "docker.io/library/python:3.12-slim",
					A.manifest, NULL, NULL, NULL, A.config };
		char pfx1[40], pfx2[40], cfgpfx[40];
		snprintf(pfx1, sizeof(pfx1), "sha256:%.12s", A.manifest + 7);
		snprintf(pfx2, sizeof(pfx2), "%.14s", A.manifest + 7);
		snprintf(cfgpfx, sizeof(cfgpfx), "%.12s", A.config + 7);   /* Docker's image ID */
		forms[3] = pfx1;
		forms[4] = pfx2;
		forms[5] = cfgpfx;
		for (size_t i = 0; i < ARRAY_SIZE(forms); i++) {
			memset(&err, 0, sizeof(err));
			r = image_resolve(st, forms[i], &info, &err);
			if (r)
				fprintf(stderr, "resolve %s: %s\n", forms[i], err.msg);
			CHECK_EQ_INT(r, 0);
			CHECK_STR(info.digest, A.manifest);
			image_info_clear(&info);
		}
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_resolve(st, "python:3.12-slim", &info, &err), 0);
		CHECK_STR(info.config_digest, A.config);
		CHECK_STR(info.workdir, "/work");
		CHECK_STR(info.user, "1000");
		CHECK_EQ_INT(json_array_size(info.env), 2);
		CHECK_STR(json_string_value(json_array_get(info.env, 0)), "PATH=/usr/local/bin:/usr/bin");
		CHECK_STR(json_string_value(json_array_get(info.cmd, 0)), "python3");
		CHECK(info.entrypoint == NULL);
		CHECK_EQ_INT(info.size, (long long)(A.lsize[0] + A.lsize[1]));
		image_info_clear(&info);
	}
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(image_resolve(st, "python:3.13", &info, &err), -ENOENT);
	CHECK(strstr(err.msg, "image 'python:3.13' is not loaded") != NULL);
	CHECK(strstr(err.msg, "kosa8 image load") && strstr(err.msg, "kosa8 image pull python:3.13"));
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(image_resolve(st, "sha256:abc", &info, &err), -EINVAL);
	memset(&err, 0, sizeof(err));
	CHECK_EQ_INT(image_resolve(st, "Bad Name", &info, &err), -EINVAL);

	/* ---- the disk: two threads at once, one build */
	if (!have_mkfs_erofs()) {
		printf("SKIP disk tests: mkfs.erofs is not installed (apt-get install erofs-utils)\n");
	} else {
		struct disk_run d1 = { st, A.manifest, NULL, 0, { 0, "" } }, d2 = d1;
		pthread_t t1, t2;
		struct stat s;

		d2.digest = "python:3.12-slim";
		pthread_create(&t1, NULL, disk_thread, &d1);
		pthread_create(&t2, NULL, disk_thread, &d2);
		pthread_join(t1, NULL);
		pthread_join(t2, NULL);
		if (d1.r)
			fprintf(stderr, "disk: %s\n", d1.err.msg);
		if (d2.r)
			fprintf(stderr, "disk: %s\n", d2.err.msg);
		CHECK_EQ_INT(d1.r, 0);
		CHECK_EQ_INT(d2.r, 0);
		CHECK_EQ_INT(disk_starts, 1);
		CHECK(d1.path && d2.path && !strcmp(d1.path, d2.path));
		CHECK(d1.path && stat(d1.path, &s) == 0 && S_ISREG(s.st_mode) && s.st_size > 0);
		snprintf(path, sizeof(path), "%s/disks/%s.erofs", store, A.manifest + 7);
		CHECK_STR(d1.path, path);
		free(d2.path);
		/* Cached: no rebuild. The build callback ran once, and the file is the same one
		 * (same inode, not rewritten), rather than a bound on time. */
		struct stat before;
		CHECK(stat(path, &before) == 0);
		CHECK_EQ_INT(image_disk(st, A.manifest, disk_progress, NULL, &d2.path, &err), 0);
		CHECK(d2.path && stat(d2.path, &s) == 0 && s.st_ino == before.st_ino &&
		      s.st_mtim.tv_sec == before.st_mtim.tv_sec &&
		      s.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
		CHECK_EQ_INT(disk_starts, 1);
		free(d2.path);
		CHECK_EQ_INT(count_files(tmpdir), 0);
		/* What is inside: layer 2's whiteout removed etc/old. */
		if (system("command -v fsck.erofs >/dev/null 2>&1") == 0) {
			char ex[400];
			snprintf(ex, sizeof(ex), "%s/extract", T);
			sh("fsck.erofs --extract='%s' '%s' >/dev/null 2>&1", ex, d1.path);
			CHECK(file_exists("%s/%s", ex, "etc/os-release"));
			CHECK(file_exists("%s/%s", ex, "app/main.py"));
			CHECK(file_exists("%s/%s", ex, "usr/bin/tool"));
			CHECK(!file_exists("%s/%s", ex, "etc/old"));
			CHECK(!file_exists("%s/%s", ex, "etc/.wh.old"));
			/* owners kept (through the worker's namespace); layer 2 filled srv/ */
			if (geteuid() == 0)
				CHECK(owners_kept(ex, false));
		} else {
			printf("SKIP disk content check: fsck.erofs is not installed\n");
		}
		free(d1.path);
	}

	/* ---- refusals leave the store as it was */
	nblobs = count_files(blobs);
	{
		struct buf bl[2] = { mklayer(l1, 2, true), mklayer(l2, 1, false) };
		struct image_desc B;
		make_image(lb, bl, 2, gz, "sh", &B);
		write_index(lb, json_pack("[o]", desc_named("application/vnd.oci.image.manifest.v1+json",
							    B.manifest, B.msize, "x.org/bad:1")));
		/* flip a byte of layer 2 (its name still claims the old digest) */
		snprintf(path, sizeof(path), "%s/blobs/sha256/%s", lb, B.layers[1] + 7);
		bl[1].p[100] ^= 1;
		write_path(path, bl[1].p, bl[1].n);
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_load(st, lb, NULL, NULL, NULL, &loaded, &err), -EBADMSG);
		CHECK(strstr(err.msg, "corrupt") != NULL);
		CHECK_EQ_INT(count_files(blobs), nblobs);
		CHECK_EQ_INT(count_files(tmpdir), 0);
		CHECK_EQ_INT(image_resolve(st, "x.org/bad:1", &info, &err), -ENOENT);
		/* restore it, but lie about a size in the index */
		bl[1].p[100] ^= 1;
		write_path(path, bl[1].p, bl[1].n);
		write_index(lb, json_pack("[o]", desc_named("application/vnd.oci.image.manifest.v1+json",
							    B.manifest, B.msize + 1, "x.org/bad:1")));
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_load(st, lb, NULL, NULL, NULL, &loaded, &err), -EBADMSG);
		CHECK(strstr(err.msg, "bytes") != NULL);
		CHECK_EQ_INT(count_files(blobs), nblobs);
		/* a missing layer */
		write_index(lb, json_pack("[o]", desc_named("application/vnd.oci.image.manifest.v1+json",
							    B.manifest, B.msize, "x.org/bad:1")));
		unlink(path);
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_load(st, lb, NULL, NULL, NULL, &loaded, &err), -ENOENT);
		CHECK(strstr(err.msg, "missing") != NULL);
		CHECK_EQ_INT(count_files(blobs), nblobs);
		CHECK_EQ_INT(count_files(tmpdir), 0);
		free(bl[0].p);
		free(bl[1].p);
	}
	{   /* not a layout at all */
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_load(st, T, NULL, NULL, NULL, &loaded, &err), -EINVAL);
		CHECK(strstr(err.msg, "not an OCI image layout") != NULL);
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_load(st, "/nonexistent/x", NULL, NULL, NULL, &loaded, &err), -ENOENT);
	}

	/* ---- OCI archive with a full name in ref.name and hostile members */
	{
		struct fent l3[] = { { "opt/tool/readme", "tool\n" } };
		struct buf bl[1] = { mklayer(l3, 1, true) };
		bool g1[1] = { true };
		char tarp[400];
		make_image(lc, bl, 1, g1, "tool", &C);
		write_index(lc, json_pack("[o]", desc_named("application/vnd.oci.image.manifest.v1+json",
							    C.manifest, C.msize, "ghcr.io/org/tool:1.0")));
		snprintf(tarp, sizeof(tarp), "%s/oci.tar", T);
		tar_dir(lc, tarp, true);
		memset(&err, 0, sizeof(err));
		r = image_load(st, tarp, NULL, NULL, NULL, &loaded, &err);
		if (r)
			fprintf(stderr, "load archive: %s\n", err.msg);
		CHECK_EQ_INT(r, 0);
		CHECK_STR(json_string_value(json_object_get(json_array_get(loaded, 0), "ref")),
			  "ghcr.io/org/tool:1.0");
		json_decref(loaded);
		loaded = NULL;
		CHECK(!file_exists("%s/../evil", T) && !file_exists("%s/evil", T));
		CHECK(!file_exists("/tmp/k8-store-evil"));
		CHECK(!file_exists("%s/evil2", T));
		CHECK_EQ_INT(image_resolve(st, "ghcr.io/org/tool:1.0", &info, &err), 0);
		CHECK_STR(info.digest, C.manifest);
		image_info_clear(&info);
		free(bl[0].p);
	}

	/* ---- a nested index: linux/amd64 is picked; none: a clear refusal */
	{
		struct fent la1[] = { { "arch", "amd64\n" } }, la2[] = { { "arch", "arm64\n" } };
		struct buf b1[1] = { mklayer(la1, 1, false) }, b2[1] = { mklayer(la2, 1, false) };
		bool g0[1] = { false };
		char idx[72];
		size_t isz;
		make_image(ld, b1, 1, g0, "amd", &D_amd);
		make_image(ld, b2, 1, g0, "arm", &D_arm);
		put_json_blob(ld, json_pack("{s:i, s:s, s:[{s:s, s:s, s:I, s:{s:s, s:s}}, "
					    "{s:s, s:s, s:I, s:{s:s, s:s}}]}",
					    "schemaVersion", 2, "mediaType",
					    "application/vnd.oci.image.index.v1+json", "manifests",
					    "mediaType", "application/vnd.oci.image.manifest.v1+json",
					    "digest", D_arm.manifest, "size", (json_int_t)D_arm.msize,
					    "platform", "architecture", "arm64", "os", "linux",
					    "mediaType", "application/vnd.oci.image.manifest.v1+json",
					    "digest", D_amd.manifest, "size", (json_int_t)D_amd.msize,
					    "platform", "architecture", "amd64", "os", "linux"),
			      idx, &isz);
		write_index(ld, json_pack("[o]", desc_named("application/vnd.oci.image.index.v1+json",
							    idx, isz, "multi")));
		memset(&err, 0, sizeof(err));
		r = image_load(st, ld, "example.com/multi", NULL, NULL, &loaded, &err);
		if (r)
			fprintf(stderr, "load multi: %s\n", err.msg);
		CHECK_EQ_INT(r, 0);
		CHECK_STR(json_string_value(json_object_get(json_array_get(loaded, 0), "ref")),
			  "example.com/multi:multi");
		CHECK_STR(json_string_value(json_object_get(json_array_get(loaded, 0), "digest")),
			  D_amd.manifest);
		json_decref(loaded);
		loaded = NULL;

		/* arm64 only */
		make_image(le, b2, 1, g0, "arm", &D_arm);
		write_index(le, json_pack("[{s:s, s:s, s:I, s:{s:s, s:s}}]",
					  "mediaType", "application/vnd.oci.image.manifest.v1+json",
					  "digest", D_arm.manifest, "size", (json_int_t)D_arm.msize,
					  "platform", "architecture", "arm64", "os", "linux"));
		nblobs = count_files(blobs);
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_load(st, le, "armonly", NULL, NULL, &loaded, &err), -ENOENT);
		CHECK(strstr(err.msg, "no linux/amd64 image") && strstr(err.msg, "linux/arm64"));
		CHECK_EQ_INT(count_files(blobs), nblobs);
		free(b1[0].p);
		free(b2[0].p);
	}

	/* ---- docker save: layer.tar + <id>.json, sharing layer 2 with image A */
	char docker_manifest[80] = "";
	{
		char cfghex[65], lhex[65], tarp[400], p2[700];
		char *cfg;
		json_t *mj;
		char *ms;

		mkdirs(ds);
		snprintf(p2, sizeof(p2), "%s/abc", ds);
		mkdirs(p2);
		snprintf(p2, sizeof(p2), "%s/abc/layer.tar", ds);
		write_path(p2, layers[1].p, layers[1].n);
		sha256_hex(layers[1].p, layers[1].n, lhex);
		cfg = dumps_new(json_pack("{s:s, s:s, s:s, s:{s:[s], s:[s]}, s:{s:s, s:[s+]}}",
					   "architecture", "amd64", "os", "linux",
					   "created", "2023-05-06T07:08:09Z", "config",
					   "Entrypoint", "/app/run", "Cmd", "--help", "rootfs",
					   "type", "layers", "diff_ids", "sha256:", lhex));
		sha256_hex(cfg, strlen(cfg), cfghex);
		snprintf(p2, sizeof(p2), "%s/%s.json", ds, cfghex);
		write_path(p2, cfg, strlen(cfg));
		mj = json_pack("[{s:s+, s:[s], s:[s]}]", "Config", cfghex, ".json",
			       "RepoTags", "myorg/app:1.0", "Layers", "abc/layer.tar");
		ms = json_dumps(mj, JSON_COMPACT);
		snprintf(p2, sizeof(p2), "%s/manifest.json", ds);
		write_path(p2, ms, strlen(ms));
		snprintf(tarp, sizeof(tarp), "%s/save.tar", T);
		tar_dir(ds, tarp, true);
		memset(&err, 0, sizeof(err));
		r = image_load(st, tarp, NULL, NULL, NULL, &loaded, &err);
		if (r)
			fprintf(stderr, "load docker save: %s\n", err.msg);
		CHECK_EQ_INT(r, 0);
		CHECK_STR(json_string_value(json_object_get(json_array_get(loaded, 0), "ref")),
			  "docker.io/myorg/app:1.0");
		snprintf(docker_manifest, sizeof(docker_manifest), "%s",
			 json_string_value(json_object_get(json_array_get(loaded, 0), "digest")));
		json_decref(loaded);
		loaded = NULL;
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_resolve(st, "myorg/app:1.0", &info, &err), 0);
		CHECK_STR(json_string_value(json_array_get(info.entrypoint, 0)), "/app/run");
		CHECK_STR(json_string_value(json_array_get(info.cmd, 0)), "--help");
		CHECK_EQ_INT(json_array_size(info.env), 0);
		CHECK_STR(info.workdir, "");
		CHECK_EQ_INT(info.size, (long long)layers[1].n);
		snprintf(p2, sizeof(p2), "sha256:%s", cfghex);
		CHECK_STR(info.config_digest, p2);
		image_info_clear(&info);

		/* A diff_id that does not match the layer: refused. */
		free(cfg);
		cfg = dumps_new(json_pack("{s:s, s:s, s:{s:[s]}, s:{s:s, s:[s]}}",
					   "architecture", "amd64", "os", "linux", "config",
					   "Cmd", "x", "rootfs", "type", "layers", "diff_ids",
					   "sha256:0000000000000000000000000000000000000000000000000000000000000000"));
		sha256_hex(cfg, strlen(cfg), cfghex);
		snprintf(p2, sizeof(p2), "%s/%s.json", ds, cfghex);
		write_path(p2, cfg, strlen(cfg));
		json_decref(mj);
		free(ms);
		mj = json_pack("[{s:s+, s:[s], s:[s]}]", "Config", cfghex, ".json",
			       "RepoTags", "myorg/broken:1", "Layers", "abc/layer.tar");
		ms = json_dumps(mj, JSON_COMPACT);
		snprintf(p2, sizeof(p2), "%s/manifest.json", ds);
		write_path(p2, ms, strlen(ms));
		tar_dir(ds, tarp, false);
		nblobs = count_files(blobs);
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_load(st, tarp, NULL, NULL, NULL, &loaded, &err), -EBADMSG);
		CHECK(strstr(err.msg, "diff_ids") || strstr(err.msg, "image config says"));
		CHECK_EQ_INT(count_files(blobs), nblobs);
		json_decref(mj);
		free(ms);
		free(cfg);
	}

	/* ---- remove + GC */
	{
		char p2[700];
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_remove(st, "nothere:1", &err), -ENOENT);
		/* by digest while it has several names: refused */
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_remove(st, A.manifest, &err), -EBUSY);
		CHECK_EQ_INT(image_remove(st, "mypy:dev", &err), 0);
		CHECK_EQ_INT(image_remove(st, "mypy:3.12-slim", &err), 0);
		CHECK(file_exists("%s/%s", blobs, A.layers[0] + 7));   /* still named by python */
		memset(&err, 0, sizeof(err));
		r = image_remove(st, "python:3.12-slim", &err);
		if (r)
			fprintf(stderr, "remove: %s\n", err.msg);
		CHECK_EQ_INT(r, 0);
		CHECK_EQ_INT(image_resolve(st, "python:3.12-slim", &info, &err), -ENOENT);
		CHECK(!file_exists("%s/%s", blobs, A.layers[0] + 7));
		CHECK(!file_exists("%s/%s", blobs, A.manifest + 7));
		CHECK(!file_exists("%s/%s", blobs, A.config + 7));
		CHECK(file_exists("%s/%s", blobs, A.layers[1] + 7));   /* shared with myorg/app */
		snprintf(p2, sizeof(p2), "%s/disks/%s.erofs", store, A.manifest + 7);
		CHECK(!file_exists("%s", p2));
		/* by digest prefix when it has one name */
		CHECK_EQ_INT(image_remove(st, C.manifest + 7, &err), 0);
		CHECK(!file_exists("%s/%s", blobs, C.manifest + 7));
	}

	test_jailed_unpack(st);

	/* ---- reopen: refs persist, tmp/ and stale temp files are wiped, orphans collected */
	image_store_close(st);
	st = NULL;
	{
		char p2[700];
		snprintf(p2, sizeof(p2), "%s/junk-from-a-crash", tmpdir);
		write_path(p2, "x", 1);
		snprintf(p2, sizeof(p2), "%s/refs.json.tmp.12345", store);
		write_path(p2, "{", 1);
		snprintf(p2, sizeof(p2), "%s/%064d", blobs, 7);   /* an orphan blob */
		write_path(p2, "x", 1);
		memset(&err, 0, sizeof(err));
		CHECK_EQ_INT(image_store_open(store, &st, &err), 0);
		CHECK_EQ_INT(count_files(tmpdir), 0);
		CHECK(!file_exists("%s/refs.json.tmp.12345", store));
		CHECK(!file_exists("%s", p2));
		CHECK_EQ_INT(image_list(st, &list, &err), 0);
		CHECK_EQ_INT(json_array_size(list), 2);   /* example.com/multi:multi, myorg/app:1.0 */
		json_decref(list);
		CHECK_EQ_INT(image_resolve(st, docker_manifest, &info, &err), 0);
		image_info_clear(&info);
		image_store_close(st);
	}
	{   /* a damaged refs.json is reported, not silently dropped */
		char p2[700];
		snprintf(p2, sizeof(p2), "%s/refs.json", store);
		write_path(p2, "{\"Not A Ref\": 1}", 16);
		memset(&err, 0, sizeof(err));
		st = NULL;
		CHECK_EQ_INT(image_store_open(store, &st, &err), -EINVAL);
		CHECK(strstr(err.msg, "refs.json") != NULL);
	}

	free(layers[0].p);
	free(layers[1].p);
	sh("rm -rf '%s'", T);
	return T_DONE();
}
