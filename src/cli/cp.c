/* SPDX-License-Identifier: Apache-2.0 */
/* cp.c - kosa8 sandbox cp: files between this machine and a container, as tar streams
 * through the daemon's archive endpoints (docs/reference/cli.md, docs/reference/api.md
 * "Copying files").
 *
 * Out: GET .../archive streams a tar, which libarchive extracts here, each name rebased
 * the way docker cp does (into DEST when it is a folder, else as DEST). The tar comes
 * from inside a container, so it is hostile: extraction refuses absolute names, `..`
 * and anything written through a symlink (ARCHIVE_EXTRACT_SECURE_*), and keeps neither
 * owners nor setuid bits. And it runs in a process of its own, jailed before it reads a
 * byte (a worker, src/common/worker.h): no capabilities, no_new_privs, Landlock (files beneath the folder it
 * extracts into, /usr read-only, nothing else), seccomp (no exec, sockets, io_uring,
 * ptrace, mounts, namespaces or id changes), so a flaw in the tar reader reaches no
 * further than the files the copy was going to write anyway; curl feeds it a pipe.
 * In: libarchive packs SRC (symlinks stored, not followed) into a pipe that curl sends
 * as the PUT body, so nothing is held whole in memory; each side in its own thread.
 * `-` is a tar on stdout or stdin, as in docker cp.
 */
#include "cli.h"
#include "common/uarchive.h"
#include "common/worker.h"

#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define CP_ERRBODY_MAX (64u << 10)

/* SANDBOX:CONTAINER:/PATH */
struct cp_remote {
	char sandbox[64], ctr[65];
	const char *path;
};

static int cp_parse_remote(const char *s, struct cp_remote *r)
{
	const char *c1 = strchr(s, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

	if (!c1 || !c2 || c2[1] != '/' || (size_t)(c1 - s) >= sizeof(r->sandbox) ||
	    (size_t)(c2 - c1 - 1) >= sizeof(r->ctr) || c1 == s || c2 == c1 + 1)
		return 0;
	memcpy(r->sandbox, s, (size_t)(c1 - s));
	r->sandbox[c1 - s] = '\0';
	memcpy(r->ctr, c1 + 1, (size_t)(c2 - c1 - 1));
	r->ctr[c2 - c1 - 1] = '\0';
	r->path = c2 + 1;
	return 1;
}

static char *cp_url(const struct cp_remote *r, const char *what, const char *path,
		    const char *extra)
{
	cleanup_free char *sb = cli_urlenc(r->sandbox), *id = cli_urlenc(r->ctr),
			  *p = cli_urlenc(path);
	return xasprintf("http://kosa8/v1/sandboxes/%s/containers/%s/%s?path=%s%s", sb, id, what,
			 p, extra ? extra : "");
}

/* ---- one streamed HTTP request: body from in_fd (PUT), reply to out_fd (GET) ---- */

struct cp_http {
	struct client *cl;
	const char *method;
	char *url;
	int in_fd, out_fd;
	long status;
	char *errbody;          /* a non-2xx reply, kept for its message */
	size_t errlen;
	int failed_write;
	json_t *result;
	int rc;
	struct k8_err err;
};

static size_t cp_http_write(char *data, size_t size, size_t nmemb, void *user)
{
	struct cp_http *h = user;
	size_t n = size * nmemb;

	if (!h->status)
		curl_easy_getinfo(h->cl->curl, CURLINFO_RESPONSE_CODE, &h->status);
	if (h->status / 100 != 2 || h->out_fd < 0) {
		size_t take = n;
		if (h->errlen + take > CP_ERRBODY_MAX)
			take = CP_ERRBODY_MAX - h->errlen;
		h->errbody = realloc(h->errbody, h->errlen + take + 1);
		if (!h->errbody)
			return 0;
		memcpy(h->errbody + h->errlen, data, take);
		h->errlen += take;
		h->errbody[h->errlen] = '\0';
		return n;
	}
	if (out_write_all(h->out_fd, data, n) < 0) {
		h->failed_write = 1;
		return 0;
	}
	return n;
}

static size_t cp_http_read(char *buf, size_t size, size_t nitems, void *user)
{
	struct cp_http *h = user;
	ssize_t n;

	do
		n = read(h->in_fd, buf, size * nitems);
	while (n < 0 && errno == EINTR);
	return n < 0 ? CURL_READFUNC_ABORT : (size_t)n;
}

static void cp_http_run(struct cp_http *h)
{
	struct curl_slist *hdrs = NULL;
	char msg[CURL_ERROR_SIZE] = "";
	CURLcode res;

	if (!h->cl->curl) {
		curl_global_init(CURL_GLOBAL_NOTHING);
		h->cl->curl = curl_easy_init();
		if (!h->cl->curl) {
			h->rc = k8_err_set(&h->err, -ENOMEM, "cannot initialise libcurl");
			return;
		}
	}
	curl_easy_reset(h->cl->curl);
	curl_easy_setopt(h->cl->curl, CURLOPT_UNIX_SOCKET_PATH, h->cl->sock);
	curl_easy_setopt(h->cl->curl, CURLOPT_URL, h->url);
	curl_easy_setopt(h->cl->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h->cl->curl, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	curl_easy_setopt(h->cl->curl, CURLOPT_ERRORBUFFER, msg);
	curl_easy_setopt(h->cl->curl, CURLOPT_WRITEFUNCTION, cp_http_write);
	curl_easy_setopt(h->cl->curl, CURLOPT_WRITEDATA, h);
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (h->in_fd >= 0) {
		hdrs = curl_slist_append(hdrs, "Content-Type: application/x-tar");
		curl_easy_setopt(h->cl->curl, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h->cl->curl, CURLOPT_READFUNCTION, cp_http_read);
		curl_easy_setopt(h->cl->curl, CURLOPT_READDATA, h);
	}
	curl_easy_setopt(h->cl->curl, CURLOPT_CUSTOMREQUEST, h->method);
	curl_easy_setopt(h->cl->curl, CURLOPT_HTTPHEADER, hdrs);
	res = curl_easy_perform(h->cl->curl);
	curl_slist_free_all(hdrs);
	if (!h->status)
		curl_easy_getinfo(h->cl->curl, CURLINFO_RESPONSE_CODE, &h->status);
	if (res == CURLE_COULDNT_CONNECT) {
		h->rc = client_not_running(h->cl, 0, &h->err);
	} else if (h->status && h->status / 100 != 2) {
		json_t *j = json_loadb(h->errbody ? h->errbody : "", h->errlen, 0, NULL);
		json_t *e = json_object_get(j, "error");
		const char *m = json_string_value(json_object_get(e, "message"));
		h->rc = k8_err_set(&h->err, cli_api_errno(json_string_value(json_object_get(e, "code")),
							  h->status),
				   "%s", m ? m : "the daemon refused the copy");
		json_decref(j);
	} else if (h->failed_write) {
		h->rc = k8_err_set(&h->err, -EPIPE, "writing the archive out failed");
	} else if (res != CURLE_OK) {
		h->rc = k8_err_set(&h->err, -ECONNRESET, "the copy was cut short (%s)",
				   msg[0] ? msg : curl_easy_strerror(res));
	} else if (h->out_fd < 0 && h->errbody) {
		h->result = json_loadb(h->errbody, h->errlen, 0, NULL);
	}
}

/* GET .../archive/stat: 0 with *st, or the daemon's error. */
static int cp_stat(struct client *cl, const struct cp_remote *r, const char *path, json_t **st,
		   struct k8_err *err)
{
	cleanup_free char *enc_sb = cli_urlenc(r->sandbox), *enc_id = cli_urlenc(r->ctr),
			  *enc_p = cli_urlenc(path);
	cleanup_free char *p = xasprintf("/v1/sandboxes/%s/containers/%s/archive/stat?path=%s",
					 enc_sb, enc_id, enc_p);
	return client_call(cl, "GET", p, NULL, NULL, NULL, 60000, st, err);
}

/* ---- out: container -> here ---- */

/* "name/rest" with its first component `from` replaced by `to` ("." drops it). */
static char *cp_rebase(const char *p, const char *from, const char *to)
{
	size_t n = strlen(from);

	while (p[0] == '.' && p[1] == '/')
		p += 2;
	if (!strcmp(from, ".") || !strncmp(p, from, n)) {
		const char *rest = strcmp(from, ".") ? p + n : p;
		if (*rest && *rest != '/' && strcmp(from, "."))
			return xasprintf("%s", p); /* another top entry: keep it as it is */
		while (*rest == '/')
			rest++;
		if (!strcmp(to, "."))
			return xasprintf("%s", *rest ? rest : ".");
		return *rest ? xasprintf("%s/%s", to, rest) : xasprintf("%s", to);
	}
	return xasprintf("%s", p);
}

static int cp_extract(int fd, const char *from, const char *to, struct k8_err *err)
{
	struct archive *in = uarchive_reader(0, err), *out;
	struct archive_entry *e;
	int r = 0, rc;

	if (!in)
		return err->code;
	out = archive_write_disk_new();
	archive_write_disk_set_options(out, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
					    ARCHIVE_EXTRACT_SECURE_NODOTDOT |
					    ARCHIVE_EXTRACT_SECURE_SYMLINKS |
					    ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |
					    ARCHIVE_EXTRACT_UNLINK);
	if (archive_read_open_fd(in, fd, 65536) != ARCHIVE_OK) {
		r = k8_err_set(err, -EIO, "reading the archive: %s", archive_error_string(in));
		goto out;
	}
	while ((rc = archive_read_next_header(in, &e)) == ARCHIVE_OK) {
		cleanup_free char *np = cp_rebase(archive_entry_pathname(e), from, to);
		const char *hl = archive_entry_hardlink(e);
		cleanup_free char *nh = hl ? cp_rebase(hl, from, to) : NULL;

		archive_entry_set_pathname(e, np);
		if (nh)
			archive_entry_set_hardlink(e, nh);
		archive_entry_set_perm(e, archive_entry_perm(e) & 0777); /* no setuid from a container */
		if (archive_write_header(out, e) != ARCHIVE_OK) {
			r = k8_err_set(err, -EPERM, "%s: %s", np, archive_error_string(out));
			goto out;
		}
		if (archive_entry_size(e) > 0) {
			const void *buf;
			size_t len;
			la_int64_t off;
			while ((rc = archive_read_data_block(in, &buf, &len, &off)) == ARCHIVE_OK)
				if (archive_write_data_block(out, buf, len, off) != ARCHIVE_OK) {
					r = k8_err_set(err, -EIO, "%s: %s", np, archive_error_string(out));
					goto out;
				}
			if (rc != ARCHIVE_EOF) {
				r = k8_err_set(err, -EIO, "reading the archive: %s",
					       archive_error_string(in));
				goto out;
			}
		}
		if (archive_write_finish_entry(out) != ARCHIVE_OK) {
			r = k8_err_set(err, -EIO, "%s: %s", np, archive_error_string(out));
			goto out;
		}
	}
	if (rc != ARCHIVE_EOF)
		r = k8_err_set(err, -EIO, "reading the archive: %s", archive_error_string(in));
out:
	archive_read_free(in);
	archive_write_free(out);
	return r;
}

/* The extraction, in its worker: the tar on fd[0], str[0] its top name, str[1] the
 * name it is given here (cp_extract). */
static int cp_extract_fn(const struct worker_in *in, uint64_t *value, struct k8_err *err)
{
	return cp_extract(in->fd[0], in->str[0], in->str[1], err);
}
WORKER_JOB(cp_extract, cp_extract_fn);

static int cp_out(struct client *cl, const struct cp_remote *src, const char *dst,
		  struct k8_err *err)
{
	struct cp_http h = { .cl = cl, .method = "GET", .in_fd = -1 };
	cleanup_free char *dcopy = NULL, *dcopy2 = NULL;
	json_t *st = NULL;
	const char *from, *to, *dir;
	struct stat sb;
	int pfd[2], rep, r;
	pid_t pid;
	char cwd[PATH_MAX];

	if (!strcmp(dst, "-")) {
		h.url = cp_url(src, "archive", src->path, NULL);
		h.out_fd = STDOUT_FILENO;
		cp_http_run(&h);
		free(h.url);
		free(h.errbody);
		if (h.rc)
			*err = h.err;
		return h.rc;
	}
	if ((r = cp_stat(cl, src, src->path, &st, err)) < 0)
		return r;
	from = json_string_value(json_object_get(st, "name"));
	from = from ? from : ".";
	if (stat(dst, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		dir = dst;
		to = strcmp(from, ".") ? from : ".";
	} else if (errno == ENOENT || !stat(dst, &sb)) {
		dcopy = xasprintf("%s", dst);
		dcopy2 = xasprintf("%s", dst);
		dir = dirname(dcopy);
		to = basename(dcopy2);
		if (!strcmp(from, ".")) {  /* SRC/. : the contents, into DST (made here) */
			if (mkdir(dst, 0755) < 0 && errno != EEXIST) {
				json_decref(st);
				return k8_err_set(err, -errno, "%s: %s", dst, strerror(errno));
			}
			dir = dst;
			to = ".";
		}
	} else {
		json_decref(st);
		return k8_err_set(err, -errno, "%s: %s", dst, strerror(errno));
	}
	if (!getcwd(cwd, sizeof(cwd)) || chdir(dir) < 0) {
		r = k8_err_set(err, -errno, "%s: %s", dir, strerror(errno));
		json_decref(st);
		return r;
	}
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		r = k8_err_set(err, -errno, "pipe: %s", strerror(errno));
		(void)!chdir(cwd);
		json_decref(st);
		return r;
	}
	/* the jail: files beneath the folder it extracts into (its working directory),
	 * /usr read-only, no capability even as root (worker.h) */
	struct worker w = {
		.name = "kosa8-cp", .job = &worker_job_cp_extract, .userns = -1,
		.keep = { pfd[0] }, .nkeep = 1, .str = { from, to },
		.dirs = { { .fd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC) },
			  { .fd = open("/usr", O_PATH | O_DIRECTORY | O_CLOEXEC), .ro = true } },
		.ndirs = 2,
	};
	if (w.dirs[0].fd < 0 || w.dirs[1].fd < 0)
		pid = k8_err_set(err, -errno, "jailing the extraction: %s", strerror(errno));
	else
		pid = worker_start(&w, &rep, err);
	close(pfd[0]);
	for (int i = 0; i < w.ndirs; i++)
		if (w.dirs[i].fd >= 0)
			close(w.dirs[i].fd);
	if (pid < 0) {
		r = err->code;
		close(pfd[1]);
		(void)!chdir(cwd);
		json_decref(st);
		return r;
	}
	h.url = cp_url(src, "archive", src->path, NULL);
	h.out_fd = pfd[1];
	cp_http_run(&h);        /* a child that ended early leaves it EPIPE */
	close(pfd[1]);
	h.out_fd = -1;
	r = worker_wait(pid, rep, "the extraction", NULL, err);
	close(rep);
	if (h.rc) {
		k8_err_clear(err);
		*err = h.err;
		r = h.rc;
	}
	(void)!chdir(cwd);
	free(h.url);
	free(h.errbody);
	json_decref(st);
	return r;
}

/* ---- in: here -> container ---- */

struct cp_pack {
	const char *src;        /* local path as given */
	const char *top;        /* its name in the archive ("." : its contents) */
	int fd;
	int rc;
	struct k8_err err;
};

static void *cp_pack_thread(void *arg)
{
	struct cp_pack *p = arg;
	struct archive *disk = archive_read_disk_new(), *out = archive_write_new();
	struct archive_entry *e;
	size_t slen = strlen(p->src);
	char *buf = xmalloc(65536);
	int rc;

	while (slen > 1 && p->src[slen - 1] == '/')
		slen--;
	archive_read_disk_set_symlink_physical(disk);
	archive_read_disk_set_standard_lookup(disk);
	archive_write_set_format_pax_restricted(out);
	archive_write_set_bytes_in_last_block(out, 1);
	if (archive_write_open_fd(out, p->fd) != ARCHIVE_OK ||
	    archive_read_disk_open(disk, p->src) != ARCHIVE_OK) {
		p->rc = k8_err_set(&p->err, -EIO, "%s: %s", p->src, archive_error_string(disk));
		goto out;
	}
	for (;;) {
		e = archive_entry_new();
		rc = archive_read_next_header2(disk, e);
		if (rc == ARCHIVE_EOF) {
			archive_entry_free(e);
			break;
		}
		if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
			p->rc = k8_err_set(&p->err, -EIO, "%s", archive_error_string(disk));
			archive_entry_free(e);
			break;
		}
		archive_read_disk_descend(disk);
		const char *path = archive_entry_pathname(e);
		const char *rest = strlen(path) >= slen ? path + slen : "";
		while (*rest == '/')
			rest++;
		cleanup_free char *np = !strcmp(p->top, ".") ? xasprintf("%s", *rest ? rest : ".")
				       : *rest ? xasprintf("%s/%s", p->top, rest) : xasprintf("%s", p->top);
		archive_entry_set_pathname(e, np);
		if (archive_write_header(out, e) != ARCHIVE_OK) {
			p->rc = k8_err_set(&p->err, -EPIPE, "%s", archive_error_string(out));
			archive_entry_free(e);
			break;
		}
		if (archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0) {
			int fd = open(archive_entry_sourcepath(e), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
			ssize_t n;
			if (fd < 0) {
				p->rc = k8_err_set(&p->err, -errno, "%s: %s",
						   archive_entry_sourcepath(e), strerror(errno));
				archive_entry_free(e);
				break;
			}
			while ((n = read(fd, buf, 65536)) > 0)
				if (archive_write_data(out, buf, (size_t)n) < 0)
					break;
			close(fd);
		}
		archive_entry_free(e);
	}
out:
	archive_read_free(disk);
	archive_write_close(out);
	archive_write_free(out);
	close(p->fd);
	free(buf);
	return NULL;
}

static int cp_in(struct client *cl, const char *src, const struct cp_remote *dst,
		 struct k8_err *err)
{
	struct cp_http h = { .cl = cl, .method = "PUT", .out_fd = -1 };
	struct cp_pack pk = { .src = src };
	cleanup_free char *dcopy = NULL, *dcopy2 = NULL, *scopy = NULL;
	const char *dir = dst->path;
	json_t *st = NULL;
	struct stat sb;
	pthread_t t;
	int pfd[2], r;

	if (!strcmp(src, "-")) {
		h.url = cp_url(dst, "archive", dst->path, NULL);
		h.in_fd = STDIN_FILENO;
		cp_http_run(&h);
		goto done;
	}
	if (lstat(src, &sb) < 0)
		return k8_err_set(err, -errno, "%s: %s", src, strerror(errno));
	scopy = xasprintf("%s", src);
	pk.top = basename(scopy);
	{
		size_t n = strlen(src);
		if (n >= 2 && !strcmp(src + n - 2, "/."))
			pk.top = "."; /* SRC/. : its contents */
	}
	r = cp_stat(cl, dst, dst->path, &st, err);
	if (r == 0 && S_ISDIR(json_integer_value(json_object_get(st, "mode")))) {
		dir = dst->path; /* into the folder */
	} else if (r == 0 || r == -ENOENT) {
		if (r == 0 && S_ISDIR(sb.st_mode)) {
			json_decref(st);
			return k8_err_set(err, -EINVAL, "cannot copy the folder %s onto the file %s", src,
					  dst->path);
		}
		k8_err_clear(err);
		dcopy = xasprintf("%s", dst->path);
		dcopy2 = xasprintf("%s", dst->path);
		dir = dirname(dcopy);
		json_decref(st);
		st = NULL;
		/* its folder must exist: say so before packing anything */
		if ((r = cp_stat(cl, dst, dir, &st, err)) < 0)
			return r;
		if (strcmp(pk.top, "."))
			pk.top = basename(dcopy2);
		else
			dir = dst->path; /* the container makes no folder for us: it must exist */
	} else {
		return r;
	}
	json_decref(st);
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return k8_err_set(err, -errno, "pipe: %s", strerror(errno));
	pk.fd = pfd[1];
	h.url = cp_url(dst, "archive", dir, NULL);
	h.in_fd = pfd[0];
	pthread_create(&t, NULL, cp_pack_thread, &pk);
	cp_http_run(&h);
	close(pfd[0]); /* a packer still writing gets EPIPE */
	pthread_join(t, NULL);
	if (!h.rc && pk.rc) {
		h.rc = pk.rc;
		h.err = pk.err;
	}
done:
	r = h.rc;
	if (r)
		*err = h.err;
	json_decref(h.result);
	free(h.url);
	free(h.errbody);
	return r;
}

int cli_cmd_cp(const struct cli_cmd *self, int argc, char **argv, const char *home)
{
	struct k8_err err = { 0 };
	struct cp_remote rs, rd;
	struct cli_args a;
	struct client cl;
	int rc, src_remote, dst_remote;

	static const struct cli_opt none[] = { { NULL, 0, 0, 0 } };

	if (!cli_begin(self, argc, argv, none, 0, 2, 2, home, &a, &cl, &rc))
		return rc;
	src_remote = cp_parse_remote(a.pos[0], &rs);
	dst_remote = cp_parse_remote(a.pos[1], &rd);
	if (src_remote == dst_remote)
		return cli_end(&a, &cl, cli_usage(self->name, "exactly one of SRC and DEST must be "
						  "SANDBOX:CONTAINER:/PATH"));
	if ((src_remote && cli_check_name(rs.sandbox, &err) < 0) ||
	    (dst_remote && cli_check_name(rd.sandbox, &err) < 0))
		return cli_end(&a, &cl, cli_usage(self->name, "%s", err.msg));
	signal(SIGPIPE, SIG_IGN);
	rc = src_remote ? cp_out(&cl, &rs, a.pos[1], &err) : cp_in(&cl, a.pos[0], &rd, &err);
	return cli_end(&a, &cl, rc < 0 ? cli_fail(&err) : CLI_EXIT_OK);
}
