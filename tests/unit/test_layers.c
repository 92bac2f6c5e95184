/* SPDX-License-Identifier: Apache-2.0 */
/* test_layers.c - layers.json (daemon/layers.c): chains, garbage collection, a fork's
 * links, and records that are damaged or hostile. */
#include "daemon/layers.h"
#include "t.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static char base[256];

static void touch(const char *dir, const char *name)
{
	cleanup_free char *p = xasprintf("%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd >= 0)
		close(fd);
}

static int exists(const char *dir, const char *name)
{
	cleanup_free char *p = xasprintf("%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

static void put_file(const char *dir, const char *name, const char *text)
{
	cleanup_free char *p = xasprintf("%s/%s", dir, name);
	write_file_atomic(p, text, strlen(text), 0600);
}

static void test_chain_and_gc(void)
{
	cleanup_free char *d = xasprintf("%s/a", base);
	char **chain = NULL;
	int n;

	mkdir_p(d, 0700);
	/* no record: the root alone, which has no parent */
	CHECK_EQ_INT(layers_chain(d, LAYERS_ROOT, &chain), 0);
	CHECK(chain == NULL);
	CHECK_STR(layers_top(""), LAYERS_ROOT);
	CHECK_STR(layers_top("layer-1.qcow2"), "layer-1.qcow2");
	touch(d, LAYERS_ROOT);
	touch(d, "l1");
	touch(d, "l2");
	touch(d, "l3");
	CHECK_EQ_INT(layers_set(d, "l1", LAYERS_ROOT), 0);
	CHECK_EQ_INT(layers_set(d, "l2", "l1"), 0);
	CHECK_EQ_INT(layers_set(d, "l3", "l2"), 0);
	n = layers_chain(d, "l3", &chain);
	CHECK_EQ_INT(n, 3);
	if (n == 3) {
		cleanup_free char *want = xasprintf("%s/l2", d);
		cleanup_free char *root = xasprintf("%s/%s", d, LAYERS_ROOT);
		CHECK_STR(chain[0], want);
		CHECK_STR(chain[2], root);
	}
	layers_chain_free(chain, n);
	/* l1 kept (reached from l2), l3 dropped: nothing names it */
	const char *roots[] = { "l2" };
	layers_gc(d, roots, 1);
	CHECK(exists(d, "l1") && exists(d, "l2") && !exists(d, "l3"));
	CHECK(exists(d, LAYERS_ROOT));
	CHECK_EQ_INT(layers_chain(d, "l3", &chain), 0);
	/* no roots at all: everything but the root goes */
	layers_gc(d, NULL, 0);
	CHECK(!exists(d, "l1") && !exists(d, "l2") && exists(d, LAYERS_ROOT));
}

static void test_hostile_records(void)
{
	cleanup_free char *d = xasprintf("%s/h", base);
	char **chain = NULL;
	int n;

	mkdir_p(d, 0700);
	/* a loop ends at the depth cap, a path ends the chain, garbage reads as empty */
	put_file(d, "layers.json", "{\"a\":\"b\",\"b\":\"a\"}");
	n = layers_chain(d, "a", &chain);
	CHECK_EQ_INT(n, LAYERS_MAX_DEPTH);
	layers_chain_free(chain, n);
	put_file(d, "layers.json", "{\"a\":\"../../etc/passwd\"}");
	CHECK_EQ_INT(layers_chain(d, "a", &chain), 0);
	put_file(d, "layers.json", "[1,2");
	CHECK_EQ_INT(layers_chain(d, "a", &chain), 0);
	/* gc never follows a path out of the directory */
	cleanup_free char *outside = xasprintf("%s/outside", base);
	touch(base, "outside");
	put_file(d, "layers.json", "{\"x\":\"../outside\"}");
	const char *roots[] = { "x" };
	layers_gc(d, roots, 1);
	CHECK(access(outside, F_OK) == 0);
	put_file(d, "layers.json", "{\"../outside\":null}");
	layers_gc(d, NULL, 0);
	CHECK(access(outside, F_OK) == 0);
}

static void test_link(void)
{
	cleanup_free char *s = xasprintf("%s/src", base);
	cleanup_free char *t = xasprintf("%s/dst", base);
	cleanup_free char *t2 = xasprintf("%s/dst2", base);
	struct k8_err err = { 0 };
	char **chain = NULL;
	struct stat a, b;
	int n;

	mkdir_p(s, 0700);
	mkdir_p(t, 0700);
	mkdir_p(t2, 0700);
	touch(s, LAYERS_ROOT);
	touch(s, "l1");
	touch(s, "l2");
	layers_set(s, "l1", LAYERS_ROOT);
	layers_set(s, "l2", "l1");
	CHECK_EQ_INT(layers_link(s, t, "l1", &err), 0);
	CHECK(exists(t, "l1") && exists(t, LAYERS_ROOT) && !exists(t, "l2"));
	{
		cleanup_free char *pa = xasprintf("%s/l1", s);
		cleanup_free char *pb = xasprintf("%s/l1", t);
		CHECK(stat(pa, &a) == 0 && stat(pb, &b) == 0 && a.st_ino == b.st_ino);
	}
	layers_set(t, "top", "l1");
	n = layers_chain(t, "top", &chain);
	CHECK_EQ_INT(n, 2);
	layers_chain_free(chain, n);
	/* a damaged source: a loop is refused, not followed */
	put_file(s, "layers.json", "{\"l1\":\"l2\",\"l2\":\"l1\"}");
	CHECK_EQ_INT(layers_link(s, t2, "l1", &err), -EINVAL);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/k8-layers-%d", tmp ? tmp : "/tmp", (int)getpid());
	rm_rf(base);
	mkdir_p(base, 0700);
	test_chain_and_gc();
	test_hostile_records();
	test_link();
	if (!t_fail)
		rm_rf(base);
	return T_DONE();
}
