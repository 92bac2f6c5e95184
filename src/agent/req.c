/* SPDX-License-Identifier: Apache-2.0 */
/* req.c - REQ frames: JSON parsing, validation of every field, one handler per op.
 *
 * A handler returns 0 when it has answered (or will answer later: stop, rm), or a
 * negative errno with `err` filled, and req_handle answers {"ok":false,...}.
 * Strings from the host are length-checked here; nothing later trusts a length.
 */
#include "agent.h"

#include <ctype.h>
#include <fcntl.h>
#include <linux/random.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <time.h>

static int req_str(json_t *o, const char *key, size_t max, int required, const char **out,
		   struct k8_err *err)
{
	json_t *v = json_object_get(o, key);

	*out = NULL;
	if (!v || json_is_null(v)) {
		if (required)
			return k8_err_set(err, -EINVAL, "missing field '%s'", key);
		return 0;
	}
	if (!json_is_string(v))
		return k8_err_set(err, -EINVAL, "field '%s' must be a string", key);
	if (json_string_length(v) > max)
		return k8_err_set(err, -ENAMETOOLONG, "field '%s' is longer than %zu bytes", key, max);
	*out = json_string_value(v);
	return 0;
}

/* A NULL-terminated vector pointing into the JSON strings (valid while `o` lives). */
static int req_strv(json_t *o, const char *key, int required, int nonempty, char ***out,
		    struct k8_err *err)
{
	json_t *v = json_object_get(o, key), *e;
	size_t i, n, total = 0;
	char **vec;

	*out = NULL;
	if (!v || json_is_null(v)) {
		if (required)
			return k8_err_set(err, -EINVAL, "missing field '%s'", key);
		*out = xcalloc(1, sizeof(char *));
		return 0;
	}
	if (!json_is_array(v))
		return k8_err_set(err, -EINVAL, "field '%s' must be an array of strings", key);
	n = json_array_size(v);
	if (n > REQ_MAX_ARGV)
		return k8_err_set(err, -E2BIG, "field '%s' has more than %d entries", key, REQ_MAX_ARGV);
	if (nonempty && n == 0)
		return k8_err_set(err, -EINVAL, "field '%s' must not be empty", key);
	vec = xcalloc(n + 1, sizeof(char *));
	json_array_foreach(v, i, e) {
		if (!json_is_string(e)) {
			free(vec);
			return k8_err_set(err, -EINVAL, "field '%s' must be an array of strings", key);
		}
		total += json_string_length(e) + 1;
		if (total > REQ_MAX_STRV_BYTES) {
			free(vec);
			return k8_err_set(err, -E2BIG, "field '%s' is larger than %u bytes", key,
					  REQ_MAX_STRV_BYTES);
		}
		vec[i] = (char *)json_string_value(e);
	}
	*out = vec;
	return 0;
}

static int req_bool(json_t *o, const char *key, int *out, struct k8_err *err)
{
	json_t *v = json_object_get(o, key);

	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return k8_err_set(err, -EINVAL, "field '%s' must be true or false", key);
	*out = json_is_true(v);
	return 0;
}

static int req_int(json_t *o, const char *key, long long min, long long max, long long def,
		   long long *out, struct k8_err *err)
{
	json_t *v = json_object_get(o, key);

	*out = def;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return k8_err_set(err, -EINVAL, "field '%s' must be an integer in %lld..%lld", key,
				  min, max);
	*out = json_integer_value(v);
	return 0;
}

static int req_is_hex(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return s[n] == '\0';
}

static int req_ctr_id(json_t *o, const char **id, struct k8_err *err)
{
	int r = req_str(o, "container", 64, 1, id, err);

	if (r < 0)
		return r;
	if (strlen(*id) != 12 || !req_is_hex(*id, 12))
		return k8_err_set(err, -EINVAL, "field 'container' must be 12 lowercase hex digits");
	return 0;
}

static int req_digest(json_t *o, const char *key, const char **hex, struct k8_err *err)
{
	const char *d;
	int r = req_str(o, key, 80, 1, &d, err);

	if (r < 0)
		return r;
	if (strncmp(d, "sha256:", 7) || strlen(d) != 71 || !req_is_hex(d + 7, 64))
		return k8_err_set(err, -EINVAL, "field '%s' must be sha256:<64 hex digits>", key);
	*hex = d + 7;
	return 0;
}

static int req_user_part(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || n > 64 || s[0] == '-')
		return 0;
	for (i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.')
			return 0;
	return 1;
}

/* "user[:group]", each a name or a number, as in Docker and the OCI image config. The
 * names are looked up in the container's own /etc/passwd and /etc/group (launch.c). */
static int req_user(json_t *o, struct launch *l, struct k8_err *err)
{
	const char *u, *colon;
	int r = req_str(o, "user", 140, 0, &u, err);

	l->user = "0";
	if (r < 0 || !u || !*u)
		return r;
	colon = strchr(u, ':');
	if (!req_user_part(u, colon ? (size_t)(colon - u) : strlen(u)) ||
	    (colon && !req_user_part(colon + 1, strlen(colon + 1))))
		return k8_err_set(err, -EINVAL, "field 'user' must be user[:group] (names or numbers)");
	l->user = u;
	return 0;
}

/* "stdin": false (/dev/null), true (a pipe) or "tty" (a pseudo-terminal for all three,
 * with "tty_size": [rows, cols] optionally). "tty" is a string so that an agent that
 * predates it refuses the request (its stdin must be a boolean) instead of running the
 * process without a terminal. */
static int req_stdin(json_t *o, struct launch *l, struct k8_err *err)
{
	json_t *v = json_object_get(o, "stdin"), *sz = json_object_get(o, "tty_size");

	if (!json_is_string(v) || strcmp(json_string_value(v), "tty"))
		return req_bool(o, "stdin", &l->want_stdin, err);
	l->tty = l->want_stdin = 1;
	if (!sz || json_is_null(sz))
		return 0;
	if (!json_is_array(sz) || json_array_size(sz) != 2 ||
	    !json_is_integer(json_array_get(sz, 0)) || !json_is_integer(json_array_get(sz, 1)) ||
	    json_integer_value(json_array_get(sz, 0)) < 0 ||
	    json_integer_value(json_array_get(sz, 0)) > 65535 ||
	    json_integer_value(json_array_get(sz, 1)) < 0 ||
	    json_integer_value(json_array_get(sz, 1)) > 65535)
		return k8_err_set(err, -EINVAL, "field 'tty_size' must be [rows, cols], each 0..65535");
	l->rows = (unsigned short)json_integer_value(json_array_get(sz, 0));
	l->cols = (unsigned short)json_integer_value(json_array_get(sz, 1));
	return 0;
}

/* The fields run and exec share: argv, env, cwd, user, stdin. */
static int req_launch(json_t *o, struct launch *l, struct k8_err *err)
{
	const char *cwd;
	size_t i;
	int r;

	memset(l, 0, sizeof(*l));
	if ((r = req_strv(o, "argv", 1, 1, &l->argv, err)) < 0)
		return r;
	if (!l->argv[0][0])
		return k8_err_set(err, -EINVAL, "argv[0] must not be empty");
	if ((r = req_strv(o, "env", 0, 0, &l->envp, err)) < 0)
		return r;
	for (i = 0; l->envp[i]; i++) {
		const char *eq = strchr(l->envp[i], '=');
		if (!eq || eq == l->envp[i])
			return k8_err_set(err, -EINVAL, "env entry %zu is not KEY=VALUE", i);
	}
	if ((r = req_str(o, "cwd", REQ_MAX_PATH, 0, &cwd, err)) < 0)
		return r;
	if (cwd && *cwd && cwd[0] != '/')
		return k8_err_set(err, -EINVAL, "field 'cwd' must be an absolute path");
	l->cwd = cwd && *cwd ? cwd : "/";
	if ((r = req_user(o, l, err)) < 0)
		return r;
	return req_stdin(o, l, err);
}

static void req_launch_free(struct launch *l)
{
	free(l->argv);
	free(l->envp);
	free(l->binds);
	l->argv = l->envp = NULL;
	l->binds = NULL;
}

static int req_seed(const char *hex, struct k8_err *err)
{
	size_t n = strlen(hex), i;
	struct rand_pool_info *pool;
	unsigned char *buf;
	int fd, r = 0;

	if (n % 2 || n < 64 || n > 1024)
		return k8_err_set(err, -EINVAL, "field 'seed' must be 32 to 512 bytes in hex");
	pool = xcalloc(1, sizeof(*pool) + n / 2);
	buf = (unsigned char *)pool->buf;
	for (i = 0; i < n / 2; i++) {
		unsigned v = 0;
		for (int k = 0; k < 2; k++) {
			char ch = hex[2 * i + (size_t)k];
			v <<= 4;
			if (ch >= '0' && ch <= '9')
				v |= (unsigned)(ch - '0');
			else if (ch >= 'a' && ch <= 'f')
				v |= (unsigned)(ch - 'a' + 10);
			else if (ch >= 'A' && ch <= 'F')
				v |= (unsigned)(ch - 'A' + 10);
			else
				r = -EINVAL;
		}
		buf[i] = (unsigned char)v;
	}
	if (r < 0) {
		free(pool);
		return k8_err_set(err, r, "field 'seed' is not hex");
	}
	/* Both: the bytes mix into the pool (write), and are credited as entropy (ioctl). */
	fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		r = write_full(fd, buf, n / 2);
		close(fd);
	}
	fd = open("/dev/random", O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
	} else {
		pool->entropy_count = (int)(n / 2 * 8);
		pool->buf_size = (int)(n / 2);
		if (ioctl(fd, RNDADDENTROPY, pool) < 0)
			r = -errno;
		/* A restored checkpoint resumes the very same crng state in every copy:
		 * make the kernel reseed from the pool now, not at its next interval. */
		else if (ioctl(fd, RNDRESEEDCRNG) < 0 && errno != ENOTTY && errno != EINVAL)
			r = -errno;
		close(fd);
	}
	explicit_bzero(pool, sizeof(*pool) + n / 2);
	free(pool);
	return r < 0 ? k8_err_set(err, r, "seeding the RNG: %s", strerror(-r)) : 0;
}

/* The VM's generation, given by the host in every init of a new run of this memory (a
 * boot, a rewind, a fork, a resume from disk): `gen` is 32 lowercase hex digits (req_init
 * checked). It is
 * mixed into the RNG (uncredited, as the kernel's vmgenid driver does with the ACPI
 * generation ID) and written over AGENT_GEN_FILE in place: the file's inode is what the
 * containers' binds show, so a process alive at a checkpoint sees its copy's generation
 * change (docs/agent.md "The generation"). */
static int req_generation(const char *gen, struct k8_err *err)
{
	char line[34];
	int fd, r = 0;

	snprintf(line, sizeof(line), "%s\n", gen);
	fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, gen, 32);
		close(fd);
	}
	mkdir_p("/run", 0755);
	fd = open(AGENT_GEN_FILE, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);
	if (fd < 0)
		return k8_err_set(err, -errno, "%s: %s", AGENT_GEN_FILE, strerror(errno));
	/* Same length every time: a reader sees the old line or the new one. */
	if (pwrite(fd, line, 33, 0) != 33)
		r = -(errno ? errno : EIO);
	close(fd);
	return r < 0 ? k8_err_set(err, r, "writing %s: %s", AGENT_GEN_FILE, strerror(-r)) : 0;
}

/* The init's "net" and "mounts" take effect once per boot: a repeated init (after a
 * reconnect or a rewind) may leave them out or repeat them, not change them. */
static int req_init(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	const char *host, *seed, *gen;
	long long t, pids, reserve;
	json_t *lim = json_object_get(req, "limits"), *net = json_object_get(req, "net"),
	       *mounts = json_object_get(req, "mounts"), *ans;
	struct net_cfg ncfg;
	struct fs_cfg *fcfg;
	size_t i;
	int r, have_net = net && !json_is_null(net);

	if ((r = req_int(req, "time_ns", 0, INT64_MAX, 0, &t, err)) < 0 ||
	    (r = req_str(req, "hostname", 64, 0, &host, err)) < 0 ||
	    (r = req_str(req, "seed", 1024, 0, &seed, err)) < 0 ||
	    (r = req_str(req, "generation", 32, 0, &gen, err)) < 0)
		return r;
	if (gen && (strlen(gen) != 32 || strspn(gen, "0123456789abcdef") != 32))
		return k8_err_set(err, -EINVAL, "field 'generation' must be 32 lowercase hex digits");
	if (lim && !json_is_null(lim) && !json_is_object(lim))
		return k8_err_set(err, -EINVAL, "field 'limits' must be an object");
	if ((r = req_int(lim, "pids", 16, 4194304, a->pids_max, &pids, err)) < 0 ||
	    (r = req_int(lim, "memory_reserve_mib", 0, 1 << 20, a->reserve_mib, &reserve, err)) < 0)
		return r;
	if (host) {
		for (i = 0; host[i]; i++)
			if (!isalnum((unsigned char)host[i]) && host[i] != '-' && host[i] != '.')
				return k8_err_set(err, -EINVAL, "field 'hostname' may hold letters, digits, '-' and '.'");
	}
	if (have_net && (r = net_parse(net, &ncfg, err)) < 0)
		return r;
	if (have_net && a->net_up && memcmp(&ncfg, &a->net, sizeof(ncfg)))
		return k8_err_set(err, -EBUSY, "field 'net' differs from the network set up at boot; "
				  "it cannot change without a reboot");
	fcfg = xmalloc(sizeof(*fcfg));
	if ((r = fs_parse(mounts, fcfg, err)) < 0)
		goto out;
	if (mounts && !json_is_null(mounts) && a->fs && !fs_same(a, fcfg)) {
		r = k8_err_set(err, -EBUSY, "field 'mounts' differs from the shared folders set up at "
			       "boot; they cannot change without a reboot");
		goto out;
	}
	/* The clock first: the host read it just before sending, and every step before this
	 * one leaves the guest that much behind (the RNG's reseed is slow on a busy host). */
	if (t > 0) {
		struct timespec ts = { .tv_sec = (time_t)(t / 1000000000ll),
				       .tv_nsec = (long)(t % 1000000000ll) };
		if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
			r = k8_err_set(err, -errno, "clock_settime: %s", strerror(errno));
			goto out;
		}
	}
	if (gen && (r = req_generation(gen, err)) < 0)
		goto out;
	if (seed && (r = req_seed(seed, err)) < 0)
		goto out;
	if (host && *host && sethostname(host, strlen(host)) < 0) {
		r = k8_err_set(err, -errno, "sethostname: %s", strerror(errno));
		goto out;
	}
	a->pids_max = (long)pids;
	a->reserve_mib = (long)reserve;
	cg_apply_limits(a);
	if (have_net && !a->net_up && (r = net_apply(a, &ncfg, err)) < 0)
		goto out;
	if (!a->fs && (r = fs_start(a, fcfg, err)) < 0)
		goto out;
	ans = json_object();
	if (a->net_up)
		json_object_set_new(ans, "net", json_pack("{s:s}", "ifname", a->ifname));
	switch (fs_state(a, NULL, 0)) {
	case FS_NONE:
		break;
	case FS_PENDING:
		json_object_set_new(ans, "mounts", json_string("pending"));
		break;
	case FS_READY:
		json_object_set_new(ans, "mounts", json_string("ready"));
		break;
	case FS_FAILED:
		json_object_set_new(ans, "mounts", json_string("failed"));
		break;
	}
	chan_resp_ok(a, id, ans);
	r = 0;
out:
	free(fcfg);
	return r;
}

/* The "slot" (required, 0..AGENT_SLOTS-1) and "digest" of an image.mount/unmount. */
static int req_slot_digest(json_t *req, long long *slot, const char **hex, struct k8_err *err)
{
	int r;

	if ((r = req_int(req, "slot", 0, AGENT_SLOTS - 1, -1, slot, err)) < 0 ||
	    (r = req_digest(req, "digest", hex, err)) < 0)
		return r;
	if (*slot < 0)
		return k8_err_set(err, -EINVAL, "missing field 'slot'");
	return 0;
}

static int req_image_mount(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	const char *hex;
	long long slot;
	int r;

	if ((r = req_slot_digest(req, &slot, &hex, err)) < 0)
		return r;
	if ((r = mnt_image(a, (int)slot, hex, err)) < 0)
		return r;
	chan_resp_ok(a, id, json_pack("{s:s+}", "path", AGENT_IMAGES_DIR "/", hex));
	return 0;
}

static int req_image_mounted(struct agent *a, const char *hex)
{
	for (int i = 0; i < AGENT_SLOTS; i++)
		if (!strcmp(a->slot_image[i], hex))
			return 1;
	return 0;
}

/* {"op":"create","container","image"}: the container's root, no process yet (Docker's
 * created state: files can be copied in before its first start). */
static int req_create(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	const char *cid, *hex;
	int r;

	if ((r = req_ctr_id(req, &cid, err)) < 0 || (r = req_digest(req, "image", &hex, err)) < 0)
		return r;
	if (ctr_find(a, cid))
		return k8_err_set(err, -EEXIST, "container %s already exists", cid);
	if (!req_image_mounted(a, hex))
		return k8_err_set(err, -ENOENT, "image sha256:%s is not mounted (image.mount first)", hex);
	if ((r = ctr_create(a, cid, hex, err)) < 0)
		return r;
	chan_resp_ok(a, id, json_object());
	return 0;
}

/* {"op":"image.unmount","slot","digest"}: before the host swaps the slot's backing file.
 * Refused (EBUSY) while a running or created container uses the image: it would read
 * another image's blocks. A stopped container's files go with it (archive ops say so). */
static int req_image_unmount(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	const char *hex, *user;
	long long slot;
	int r;

	if ((r = req_slot_digest(req, &slot, &hex, err)) < 0)
		return r;
	if (strcmp(a->slot_image[slot], hex)) {
		chan_resp_ok(a, id, json_object());     /* not mounted there: nothing to do */
		return 0;
	}
	if ((user = ctr_image_user(a, hex)))
		return k8_err_set(err, -EBUSY, "sha256:%s is used by container %s", hex, user);
	if ((r = mnt_image_drop(a, (int)slot, err)) < 0)
		return r;
	chan_resp_ok(a, id, json_object());
	return 0;
}

static int req_stream_free(struct agent *a, uint32_t id, struct k8_err *err)
{
	if (id == 0)
		return k8_err_set(err, -EINVAL, "run/exec need a nonzero request id (it names the stream)");
	if (proc_by_stream(a, id))
		return k8_err_set(err, -EEXIST, "stream %u is still open", id);
	return 0;
}

/* Shared folders still being mounted: the request waits (req_fs_changed answers it).
 * Returns 1 when it was deferred, 0 to go on, or an error. */
static int req_fs_gate(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	char msg[512];
	struct req_defer *d, **pd;

	switch (fs_state(a, msg, sizeof(msg))) {
	case FS_NONE:
	case FS_READY:
		return 0;
	case FS_FAILED:
		return k8_err_set(err, -EIO, "shared folders are not ready: %s", msg);
	case FS_PENDING:
		break;
	}
	d = xcalloc(1, sizeof(*d));
	d->id = id;
	d->req = json_incref(req);
	d->deadline = now_mono_ns() + FS_READY_WAIT_MS * 1000000ull;
	for (pd = &a->defers; *pd; pd = &(*pd)->next)
		; /* in arrival order */
	*pd = d;
	return 1;
}

/* "cap_drop": capability numbers (0..63) taken out of the container's set (Docker's
 * CapDrop); absent: none. */
static int req_cap_drop(json_t *v, uint64_t *out, struct k8_err *err)
{
	json_t *e;
	size_t i;

	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v) || json_array_size(v) > 64)
		return k8_err_set(err, -EINVAL, "field 'cap_drop' must be a list of capability numbers");
	json_array_foreach(v, i, e) {
		if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 63)
			return k8_err_set(err, -EINVAL, "field 'cap_drop' must hold numbers 0..63");
		*out |= 1ull << json_integer_value(e);
	}
	return 0;
}

static int req_run(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	const char *cid, *hex, *netns;
	struct ctr *c;
	struct launch l;
	int auto_rm, detach, r;
	long long mem_max, nano_cpus;
	pid_t pid;

	if ((r = req_fs_gate(a, id, req, err)) != 0)
		return r < 0 ? r : 0;

	if ((r = req_ctr_id(req, &cid, err)) < 0 || (r = req_digest(req, "image", &hex, err)) < 0 ||
	    (r = req_bool(req, "rm", &auto_rm, err)) < 0 ||
	    (r = req_bool(req, "detach", &detach, err)) < 0)
		return r;
	if (!detach && (r = req_stream_free(a, id, err)) < 0)
		return r;
	if ((r = req_launch(req, &l, err)) < 0)
		goto out;
	if ((c = ctr_find(a, cid)) && (!c->created || strcmp(c->image_hex, hex))) {
		/* only a created container of the same image starts in its prepared root */
		r = k8_err_set(err, -EEXIST, "container %s already exists", cid);
		goto out;
	}
	if (!req_image_mounted(a, hex)) {
		r = k8_err_set(err, -ENOENT, "image sha256:%s is not mounted (image.mount first)", hex);
		goto out;
	}
	if ((r = req_str(req, "netns", 8, 0, &netns, err)) < 0 ||
	    (r = req_bool(req, "no_new_privs", &l.no_new_privs, err)) < 0)
		goto out;
	if (netns && strcmp(netns, "vm") && strcmp(netns, "none") && strcmp(netns, "own")) {
		r = k8_err_set(err, -EINVAL, "field 'netns' must be \"vm\", \"none\" or \"own\"");
		goto out;
	}
	l.own_netns = netns && strcmp(netns, "vm");
	if (netns && !strcmp(netns, "own")) {
		const char *ip;

		if ((r = req_str(req, "ip", sizeof(l.ctr_ip) - 1, 1, &ip, err)) < 0)
			goto out;
		if (!net_ctr_ip_ok(a, ip)) {
			r = k8_err_set(err, -EINVAL, "field 'ip' must be an IPv4 address of the VM's "
				       "network, host part 16-254 (docs/agent.md)");
			goto out;
		}
		/* one address per link: the kernel's ipvlan refuses a second holder
		 * (EADDRINUSE when the container starts) */
		memcpy(l.ctr_ip, ip, strlen(ip) + 1);
	}
	/* Docker's HostConfig.Memory (at least 6 MiB, as Docker) and NanoCpus */
	if ((r = req_int(req, "memory_max", 0, 1ll << 50, 0, &mem_max, err)) < 0 ||
	    (r = req_int(req, "nano_cpus", 0, 1000000000000ll, 0, &nano_cpus, err)) < 0)
		goto out;
	if (mem_max && mem_max < 6ll << 20) {
		r = k8_err_set(err, -EINVAL, "field 'memory_max' must be at least 6 MiB");
		goto out;
	}
	l.mem_max = (uint64_t)mem_max;
	l.nano_cpus = (uint64_t)nano_cpus;
	if ((r = req_cap_drop(json_object_get(req, "cap_drop"), &l.cap_drop, err)) < 0)
		goto out;
	if ((r = fs_binds_parse(a, json_object_get(req, "binds"), &l, err)) < 0)
		goto out;
	if (detach)
		l.want_stdin = 0; /* a detached tty keeps its terminal; nobody writes to it */
	l.detach = detach;
	r = ctr_run(a, id, cid, hex, json_object_get(req, "argv"), &l, auto_rm, detach, &pid, err);
	if (r == 0)
		chan_resp_ok(a, id, json_pack("{s:i,s:o,s:I}", "pid", (int)pid, "limits",
					      cg_limits_json(cid), "cap_drop", (json_int_t)l.cap_drop));
out:
	req_launch_free(&l);
	return r;
}

static int req_exec(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	const char *cid;
	struct launch l;
	struct ctr *c;
	pid_t pid;
	int r;

	if ((r = req_fs_gate(a, id, req, err)) != 0)
		return r < 0 ? r : 0;
	if ((r = req_ctr_id(req, &cid, err)) < 0 || (r = req_stream_free(a, id, err)) < 0)
		return r;
	if ((r = req_launch(req, &l, err)) < 0)
		goto out;
	c = ctr_find(a, cid);
	if (!c) {
		r = k8_err_set(err, -ENOENT, "no such container %s", cid);
		goto out;
	}
	r = ctr_exec(a, id, c, &l, &pid, err);
	if (r == 0)
		chan_resp_ok(a, id, json_pack("{s:i}", "pid", (int)pid));
out:
	req_launch_free(&l);
	return r;
}

static int req_ps(struct agent *a, uint32_t id, json_t *req K8_UNUSED, struct k8_err *err K8_UNUSED)
{
	chan_resp_ok(a, id, json_pack("{s:o}", "containers", ctr_list(a)));
	return 0;
}

static int req_ctr(struct agent *a, json_t *req, struct ctr **c, struct k8_err *err)
{
	const char *cid;
	int r = req_ctr_id(req, &cid, err);

	if (r < 0)
		return r;
	*c = ctr_find(a, cid);
	if (!*c)
		return k8_err_set(err, -ENOENT, "no such container %s", cid);
	return 0;
}

/* {"op":"resize","stream":N} (a run or exec stream) or {"container":id} (its init),
 * "rows", "cols": the window size of the process's pty. */
static int req_resize(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	long long stream, rows, cols;
	struct proc *p = NULL;
	int r;

	if ((r = req_int(req, "stream", 0, UINT32_MAX, 0, &stream, err)) < 0 ||
	    (r = req_int(req, "rows", 0, 65535, 0, &rows, err)) < 0 ||
	    (r = req_int(req, "cols", 0, 65535, 0, &cols, err)) < 0)
		return r;
	if (stream) {
		p = proc_by_stream(a, (uint32_t)stream);
		if (!p)
			return k8_err_set(err, -ESRCH, "no process on stream %lld", stream);
	} else {
		struct ctr *c;

		if ((r = req_ctr(a, req, &c, err)) < 0)
			return r;
		p = c->init;
		if (!p)
			return k8_err_set(err, -ESRCH, "container %s is not running", c->id);
	}
	if ((r = proc_resize(p, (unsigned)rows, (unsigned)cols, err)) < 0)
		return r;
	chan_resp_ok(a, id, json_object());
	return 0;
}

static int req_stop(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	struct ctr *c;
	long long sig, timeout;
	int r;

	if ((r = req_ctr(a, req, &c, err)) < 0 ||
	    (r = req_int(req, "signal", 1, 64, SIGTERM, &sig, err)) < 0 ||
	    (r = req_int(req, "timeout_ms", 0, 3600000, AGENT_STOP_TIMEOUT_MS, &timeout, err)) < 0)
		return r;
	ctr_stop(a, id, c, (int)sig, (uint64_t)timeout);
	return 0;
}

static int req_rm(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	struct ctr *c;
	int r = req_ctr(a, req, &c, err);

	if (r < 0)
		return r;
	ctr_rm(a, id, c);
	return 0;
}

/* archive.stat / archive.get / archive.put: {container, path[, noOverwriteDirNonDir]}
 * (archive.c). The path is absolute; get and put open a stream named by the REQ id. */
static int req_archive(struct agent *a, uint32_t id, json_t *req, enum archive_op op,
		       struct k8_err *err)
{
	const char *path;
	struct ctr *c;
	int no_over = 0, r;

	if ((r = req_ctr(a, req, &c, err)) < 0 ||
	    (r = req_str(req, "path", REQ_MAX_PATH, 1, &path, err)) < 0 ||
	    (r = req_bool(req, "noOverwriteDirNonDir", &no_over, err)) < 0)
		return r;
	if (path[0] != '/')
		return k8_err_set(err, -EINVAL, "field 'path' must be an absolute path");
	if (op != ARCHIVE_STAT && (r = req_stream_free(a, id, err)) < 0)
		return r;
	return archive_start(a, id, c, op, path, no_over, err);
}

static int req_archive_stat(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	return req_archive(a, id, req, ARCHIVE_STAT, err);
}

static int req_archive_get(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	return req_archive(a, id, req, ARCHIVE_GET, err);
}

static int req_archive_put(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	return req_archive(a, id, req, ARCHIVE_PUT, err);
}

/* archive.layer: {container, path "/"}: a stopped container's writable layer as an OCI
 * layer tar (docker build's RUN; archive.c). */
static int req_archive_layer(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	return req_archive(a, id, req, ARCHIVE_LAYER, err);
}

static uint64_t req_meminfo(const char *key)
{
	char *buf = NULL, *p;
	uint64_t v = 0;

	if (read_file("/proc/meminfo", 1 << 16, &buf, NULL) < 0)
		return 0;
	p = strstr(buf, key);
	if (p)
		v = strtoull(p + strlen(key), NULL, 10);
	free(buf);
	return v;
}

static int req_stat(struct agent *a, uint32_t id, json_t *req K8_UNUSED, struct k8_err *err K8_UNUSED)
{
	struct statfs sf;
	uint64_t dt = 0, df = 0;

	if (a->scratch_ok && statfs(AGENT_SCRATCH, &sf) == 0) {
		dt = (uint64_t)sf.f_blocks * (uint64_t)sf.f_frsize / 1024u;
		df = (uint64_t)sf.f_bavail * (uint64_t)sf.f_frsize / 1024u;
	}
	chan_resp_ok(a, id,
		     json_pack("{s:I,s:I,s:I,s:I,s:I,s:i,s:i}", "uptime_ms",
			       (json_int_t)agent_boottime_ms(), "mem_total_kib",
			       (json_int_t)req_meminfo("MemTotal:"), "mem_free_kib",
			       (json_int_t)req_meminfo("MemAvailable:"), "disk_total_kib", (json_int_t)dt,
			       "disk_free_kib", (json_int_t)df, "containers", ctr_count(a), "running",
			       ctr_running_count(a)));
	return 0;
}

/* {"op":"ctr.stats","container"}: its cgroup's counters, its network devices, the VM's
 * CPU time (stats.c; Docker's stats). {"op":"ctr.top","container"}: the processes of its
 * cgroup (Docker's top). A container that is not running has neither. */
static int req_ctr_stats(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	struct ctr *c;
	int r;

	if ((r = req_ctr(a, req, &c, err)) < 0)
		return r;
	if (!c->running)
		return k8_err_set(err, -ESRCH, "container %s is not running", c->id);
	chan_resp_ok(a, id, stats_ctr(a, c));
	return 0;
}

static int req_ctr_top(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	struct ctr *c;
	int r;

	if ((r = req_ctr(a, req, &c, err)) < 0)
		return r;
	if (!c->running)
		return k8_err_set(err, -ESRCH, "container %s is not running", c->id);
	chan_resp_ok(a, id, stats_top(a, c));
	return 0;
}

/* sync(2) can take seconds with much dirty data: a child does it, so the loop keeps
 * serving (PING, output) meanwhile; the answer goes out when the child is reaped. */
static int req_sync(struct agent *a, uint32_t id, json_t *req K8_UNUSED, struct k8_err *err)
{
	struct sync_wait *w;
	pid_t pid = fork();

	if (pid < 0)
		return k8_err_set(err, -errno, "fork: %s", strerror(errno));
	if (pid == 0) {
		syscall(SYS_close_range, 3u, ~0u, 0u);
		sync();
		_exit(0);
	}
	w = xcalloc(1, sizeof(*w));
	w->pid = pid;
	w->id = id;
	w->answer = 1;
	w->next = a->syncs;
	a->syncs = w;
	return 0;
}

int req_reaped(struct agent *a, pid_t pid)
{
	for (struct sync_wait **pw = &a->syncs, *w; (w = *pw); pw = &w->next) {
		if (w->pid != pid)
			continue;
		*pw = w->next;
		if (w->answer)
			chan_resp_ok(a, w->id, NULL);
		free(w);
		return 1;
	}
	return 0;
}

void req_drop_waiters(struct agent *a)
{
	struct req_defer *d, *next;

	for (struct sync_wait *w = a->syncs; w; w = w->next)
		w->answer = 0; /* still reaped, no longer answered */
	/* A run/exec of a host that left: it would start a process nobody hears. */
	for (d = a->defers; d; d = next) {
		next = d->next;
		json_decref(d->req);
		free(d);
	}
	a->defers = NULL;
}

#if AGENT_PROTO_MAX >= 2
/* {"op":"proto","version":N}: the host's choice for this session (version 2's
 * handshake). A version outside our range is refused; the host reports our answer. */
static int req_proto(struct agent *a, uint32_t id, json_t *req, struct k8_err *err)
{
	json_t *v = json_object_get(req, "version");
	json_int_t n;

	if (!json_is_integer(v))
		return k8_err_set(err, -EINVAL, "field 'version' must be an integer");
	n = json_integer_value(v);
	if (n < AGENT_PROTO_MIN || n > AGENT_PROTO_MAX)
		return k8_err_set(err, -EPROTONOSUPPORT,
				  "this agent speaks protocol %d..%d, not %lld", AGENT_PROTO_MIN,
				  AGENT_PROTO_MAX, (long long)n);
	if (a->proto != (int)n)
		agent_log("the host speaks protocol %d", (int)n);
	a->proto = (int)n;
	chan_resp_ok(a, id, json_pack("{s:i}", "proto", a->proto));
	return 0;
}
#endif

static const struct {
	const char *op;
	int (*fn)(struct agent *a, uint32_t id, json_t *req, struct k8_err *err);
} req_ops[] = {
#if AGENT_PROTO_MAX >= 2
	{ "proto", req_proto },
#endif
	{ "init", req_init },   { "image.mount", req_image_mount },
	{ "run", req_run },     { "exec", req_exec },
	{ "ps", req_ps },       { "stop", req_stop },
	{ "rm", req_rm },       { "stat", req_stat },
	{ "sync", req_sync },   { "resize", req_resize },
	{ "archive.stat", req_archive_stat }, { "archive.get", req_archive_get },
	{ "archive.layer", req_archive_layer },
	{ "archive.put", req_archive_put },
	{ "create", req_create }, { "image.unmount", req_image_unmount },
	{ "ctr.stats", req_ctr_stats }, { "ctr.top", req_ctr_top },
};

/* Run one parsed request and answer it when it fails. */
static void req_dispatch(struct agent *a, uint32_t id, json_t *req)
{
	struct k8_err err = { 0 };
	const char *op = NULL;
	size_t i;
	int r = -EOPNOTSUPP;

	if (req_str(req, "op", 64, 1, &op, &err) < 0)
		goto fail;
#if AGENT_PROTO_MIN > 1
	/* A host that chose no version speaks 1, which this agent does not. */
	if (!a->proto && strcmp(op, "proto")) {
		k8_err_set(&err, -EPROTONOSUPPORT,
			   "this agent speaks protocol %d..%d and the host chose none: the guest "
			   "image is newer than kosa8d", AGENT_PROTO_MIN, AGENT_PROTO_MAX);
		goto fail;
	}
#endif
	for (i = 0; i < ARRAY_SIZE(req_ops); i++) {
		if (strcmp(op, req_ops[i].op))
			continue;
		r = req_ops[i].fn(a, id, req, &err);
		if (r == 0)
			return;
		break;
	}
	if (i == ARRAY_SIZE(req_ops))
		k8_err_set(&err, -EOPNOTSUPP, "unknown op '%s'", op);
	else if (!err.code)
		k8_err_set(&err, r, "%s: %s", op, strerror(-r));
	else if (strncmp(err.msg, "field", 5) == 0 || strncmp(err.msg, "missing", 7) == 0)
		k8_err_wrap(&err, "%s", op);
fail:
	chan_resp_err(a, id, &err);
}

void req_handle(struct agent *a, uint32_t id, const unsigned char *payload, size_t len)
{
	struct k8_err err = { 0 };
	json_error_t jerr;
	json_t *req;

	req = json_loadb((const char *)payload, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!req || !json_is_object(req)) {
		k8_err_set(&err, -EINVAL, "request is not a JSON object: %s", req ? "" : jerr.text);
		chan_resp_err(a, id, &err);
		json_decref(req);
		return;
	}
	req_dispatch(a, id, req);
	json_decref(req);
}

void req_fs_changed(struct agent *a)
{
	struct req_defer *d = a->defers, *next;

	if (fs_state(a, NULL, 0) == FS_PENDING)
		return;
	/* In arrival order; a request handled now cannot be deferred again. */
	a->defers = NULL;
	for (; d; d = next) {
		next = d->next;
		req_dispatch(a, d->id, d->req);
		json_decref(d->req);
		free(d);
	}
}

void req_tick(struct agent *a, uint64_t now, uint64_t *next)
{
	struct req_defer **pd = &a->defers, *d;

	while ((d = *pd)) {
		if (now < d->deadline) {
			if (d->deadline < *next)
				*next = d->deadline;
			pd = &d->next;
			continue;
		}
		*pd = d->next;
		struct k8_err err = { 0 };
		k8_err_set(&err, -ETIMEDOUT,
			   "shared folders are not ready: no answer from the host's file server "
			   "(kosa8-fs) within %d s", FS_READY_WAIT_MS / 1000);
		chan_resp_err(a, d->id, &err);
		json_decref(d->req);
		free(d);
	}
}
