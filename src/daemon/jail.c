/* SPDX-License-Identifier: Apache-2.0 */
/* jail.c - claiming the per-sandbox blocks of unprivileged uids (see jail.h). */
#include "daemon/jail.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int jail_range_parse(const char *spec, struct jail_range *r, struct k8_err *err)
{
	unsigned long first, last;
	char *e;

	errno = 0;
	first = strtoul(spec, &e, 10);
	if (errno || e == spec || *e != '-')
		goto bad;
	spec = e + 1;
	last = strtoul(spec, &e, 10);
	if (errno || e == spec || *e || last < first || first == 0 || last > 0xfffffffeUL ||
	    last - first + 1 < JAIL_ROLES)
		goto bad;
	r->base = (uid_t)first;
	r->blocks = (unsigned)((last - first + 1) / JAIL_ROLES);
	return 0;
bad:
	return k8_err_set(err, -EINVAL,
			  "jail_uids must be FIRST-LAST, unused uids above 0 with room for at "
			  "least %d (one sandbox), e.g. \"%s\"", JAIL_ROLES, JAIL_DEFAULT_RANGE);
}

/* 1: the claim file names `sbdir`; 0: free or stale (may be taken); -1: someone else's. */
static int claim_state(const char *path, const char *sbdir)
{
	cleanup_free char *text = NULL, *rec = NULL;
	size_t n;

	if (read_file(path, 8192, &text, &n))
		return 0;
	text[strcspn(text, "\n")] = '\0';
	if (!strcmp(text, sbdir))
		return 1;
	rec = xasprintf("%s/sandbox.json", text);
	return text[0] == '/' && access(rec, F_OK) == 0 ? -1 : 0;
}

int jail_claim(const struct jail_range *r, const char *sbdir, int *index, struct k8_err *err)
{
	cleanup_close int lk = -1;
	int rc;

	if ((rc = mkdir_p(JAIL_CLAIM_DIR, 0700)) < 0)
		return k8_err_set(err, rc, "mkdir %s: %s", JAIL_CLAIM_DIR, strerror(-rc));
	lk = open(JAIL_CLAIM_DIR "/.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lk < 0 || flock(lk, LOCK_EX) < 0)
		return k8_err_set(err, -errno, "lock %s: %s", JAIL_CLAIM_DIR, strerror(errno));
	for (long i = -1; i < (long)r->blocks; i++) {
		long idx = i < 0 ? *index : i;
		char path[128];
		cleanup_free char *line = NULL;

		if (idx < 0 || idx >= (long)r->blocks)
			continue;
		snprintf(path, sizeof(path), "%s/%lu", JAIL_CLAIM_DIR,
			 (unsigned long)jail_uid(r, (int)idx, JAIL_QEMU));
		if (claim_state(path, sbdir) < 0)
			continue;
		line = xasprintf("%s\n", sbdir);
		if ((rc = write_file_atomic(path, line, strlen(line), 0600)) < 0)
			return k8_err_set(err, rc, "write %s: %s", path, strerror(-rc));
		*index = (int)idx;
		return 0;
	}
	return k8_err_set(err, -ENOSPC,
			  "every uid block of jail_uids is in use (%u sandboxes); give the daemon a "
			  "larger range in config.json", r->blocks);
}

void jail_release(const struct jail_range *r, const char *sbdir, int index)
{
	cleanup_close int lk = -1;
	char path[128];

	if (index < 0 || index >= (int)r->blocks)
		return;
	lk = open(JAIL_CLAIM_DIR "/.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lk < 0 || flock(lk, LOCK_EX) < 0)
		return;
	snprintf(path, sizeof(path), "%s/%lu", JAIL_CLAIM_DIR,
		 (unsigned long)jail_uid(r, index, JAIL_QEMU));
	if (claim_state(path, sbdir) == 1)
		unlink(path);
}
