/* SPDX-License-Identifier: Apache-2.0 */
/* fs.h - envd's filesystem service on the wire (filesystem.Filesystem): paths as envd
 * resolves them, the listing a guest helper prints read back into entries, EntryInfo in
 * proto3 JSON, and the events of a watched folder from two listings (docs/e2b.md). Pure.
 *
 * The listing is what GNU find prints with E2B_FIND_FORMAT: per entry eight fields, each
 * ended by a NUL byte: find's %y (type letter), %s (size), %m (permission bits, octal), %u
 * and %g (owner and group names, or numbers), %T@ (mtime, seconds with a fraction), %P
 * (the path below the starting point; "" for the starting point itself) and %l (a
 * symlink's target). A watch's listings are separated by one empty field. The bytes come
 * from inside a sandbox: every field is bounded and checked, and a bad one ends the
 * parse. */
#ifndef K8_E2B_FS_H
#define K8_E2B_FS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

#define E2B_FIND_FORMAT "%y\\0%s\\0%m\\0%u\\0%g\\0%T@\\0%P\\0%l\\0"
#define E2B_NAME_MAX 64                 /* owner and group names */
#define E2B_LIST_MAX 20000              /* entries of one listing */

/* An absolute, lexically clean path from a client's: "~" and relative paths are below
 * `home`; "." and ".." are resolved, "//" folded. 0, or -EINVAL with a message (empty,
 * NUL bytes, longer than E2B_PATH_MAX). */
int e2b_path(const char *in, const char *home, char *out, size_t n, struct k8_err *err);

/* A user named in a request (/files' username=), as the guest agent takes it: a name or
 * a number of [A-Za-z0-9_.-], not starting with '-', 1..E2B_USER_MAX bytes (envd.h, as
 * e2b_basic_user's). 0 or -EINVAL. */
int e2b_user_check(const char *name, struct k8_err *err);

struct e2b_entry {
	char type;                      /* %y: f d l b c p s */
	uint64_t size;
	unsigned perm;                  /* 07777 */
	char owner[E2B_NAME_MAX + 1], group[E2B_NAME_MAX + 1];
	int64_t mtime;
	int32_t mtime_ns;
	char *rel;                      /* below the starting point, "" for itself; owned */
	char *link;                     /* "" unless a symlink; owned */
};
void e2b_entry_clear(struct e2b_entry *e);

/* One entry from the n bytes at p: 1 with *e filled and *used set, 2 at a listings'
 * separator (*used 1), 0 when the bytes end inside the entry (feed more), -EBADMSG with a
 * message when a field is not what find prints. */
int e2b_entry_next(const uint8_t *p, size_t n, struct e2b_entry *e, size_t *used,
		   struct k8_err *err);

/* A whole listing (a Stat's one entry, a ListDir's entries): at most max entries, else
 * -E2BIG. *out is a malloc'd array of *count entries (free with e2b_entries_free). */
int e2b_listing_parse(const uint8_t *p, size_t n, size_t max, struct e2b_entry **out,
		      size_t *count, struct k8_err *err);
void e2b_entries_free(struct e2b_entry *e, size_t n);

/* Go's FileMode.String() of a POSIX mode ("drwxr-xr-x", "Lrwxrwxrwx", "-rw-r--r--"). */
void e2b_mode_string(unsigned posix_mode, char out[24]);
/* "FILE_TYPE_FILE", "FILE_TYPE_DIRECTORY", "FILE_TYPE_SYMLINK" or FILE_TYPE_UNSPECIFIED. */
const char *e2b_file_type(char type);
/* EntryInfo of e, found below the folder `dir` (an e2b_path; for a Stat, the path
 * itself with e->rel ""). */
json_t *e2b_entry_json(const struct e2b_entry *e, const char *dir);

/* A watched folder's last listing, sorted by rel; events come from comparing it with the
 * next one. */
struct e2b_watch {
	struct e2b_entry *e;
	size_t n;
	bool have;                      /* a first listing was taken (it reports nothing) */
};
/* Replace w's listing with `next` (taken, sorted here) and call fn once per event:
 * "EVENT_TYPE_CREATE", "EVENT_TYPE_WRITE" (size or mtime of a file changed; a file made
 * with content gives CREATE then WRITE, as inotify reports it), "EVENT_TYPE_REMOVE",
 * "EVENT_TYPE_CHMOD". fn's negative return stops and is returned. */
int e2b_watch_update(struct e2b_watch *w, struct e2b_entry *next, size_t n,
		     int (*fn)(void *ctx, const char *type, const struct e2b_entry *e),
		     void *ctx);
void e2b_watch_free(struct e2b_watch *w);

#endif
