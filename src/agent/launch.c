/* SPDX-License-Identifier: Apache-2.0 */
/* launch.c - starting a container process: fork into the right PID namespace, join
 * the container's cgroup, set up (run) or join (exec) its other namespaces, become its
 * user and execve() argv searched in the process's own PATH.
 *
 * Parent and child, step by step:
 *   parent  with a network namespace of its own, takes the one made for it while the
 *           VM was idle (net.c, net_spare_take), if one is ready
 *   parent  unshare(CLONE_NEWPID) (run) or setns(<init>/ns/pid) (exec), fork(), then
 *           setns back to its own PID namespace (only children ever change namespace)
 *   child   waits on the sync pipe
 *   parent  writes the child's pid into the cgroup's cgroup.procs, then releases it
 *   child   oom_score_adj 0, namespaces (joining that network one) + rootfs with the
 *           shared folders, resolv.conf and hosts (or setns into the init's), cwd,
 *           the seccomp filter (sec.c, loaded while CAP_SYS_ADMIN is still held, as
 *           runc does without no_new_privs), groups/uid/gid, capabilities (Docker's
 *           default set), stdio, default signals, every other fd close-on-exec, execve()
 *           With a tty ("stdin":"tty"), before its identity: a pty from the container's
 *           own devpts (/dev/ptmx after pivot_root or setns), a new session with the
 *           slave as its controlling terminal (setsid + TIOCSCTTY), the slave chowned to
 *           the container user, the master sent to the parent (SCM_RIGHTS) and closed;
 *           the slave becomes stdin, stdout and stderr
 *   parent  reads the report pipe (close-on-exec in the child): EOF means execve()
 *           succeeded; otherwise an {errno, message} record explains the failure and
 *           the request is answered ok:false (the daemon turns ENOENT into 127).
 * So every limit is in force before the first instruction of the user's program runs.
 */
#include "agent.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>

#define LAUNCH_TIMEOUT_MS 30000
#define LAUNCH_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct launch_msg {
	int32_t err;
	char msg[500];
};

/* Docker's default capabilities for root in a container. CAP_MKNOD is among them
 * although there is no device cgroup here (it needs BPF, which the guest kernel lacks):
 * every file system a container can write to is mounted nodev (overlay root, /dev,
 * /dev/shm, shared folders), so a node it makes cannot be opened (EACCES) and cannot
 * reach the VM's disks; mknod itself works, as tar and package managers expect. */
static const uint64_t launch_caps =
	1ull << CAP_CHOWN | 1ull << CAP_DAC_OVERRIDE | 1ull << CAP_FSETID | 1ull << CAP_FOWNER |
	1ull << CAP_MKNOD | 1ull << CAP_NET_RAW | 1ull << CAP_SETGID | 1ull << CAP_SETUID | 1ull << CAP_SETFCAP |
	1ull << CAP_SETPCAP | 1ull << CAP_NET_BIND_SERVICE | 1ull << CAP_SYS_CHROOT |
	1ull << CAP_KILL | 1ull << CAP_AUDIT_WRITE;

static void launch_fail(int rep, int e, const char *fmt, ...) K8_PRINTF(3, 4) __attribute__((noreturn));
static void launch_fail(int rep, int e, const char *fmt, ...)
{
	struct launch_msg m = { .err = e ? e : EIO };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m.msg, sizeof(m.msg), fmt, ap);
	va_end(ap);
	(void)!write(rep, &m, sizeof(m));
	_exit(127);
}

static const char *launch_getenv(char *const envp[], const char *key)
{
	size_t n = strlen(key);

	for (; *envp; envp++)
		if (!strncmp(*envp, key, n) && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

/* execvpe() semantics, but the search uses the PATH of the process's own environment
 * (glibc's execvpe searches the caller's). Returns the errno to report. */
static int launch_exec(char *const argv[], char *const envp[])
{
	const char *file = argv[0], *path, *p;
	char buf[REQ_MAX_PATH + 256];
	int eacces = 0;

	if (strchr(file, '/')) {
		execve(file, argv, envp);
		return errno;
	}
	path = launch_getenv(envp, "PATH");
	if (!path)
		path = LAUNCH_DEFAULT_PATH;
	for (p = path;; p++) {
		const char *end = strchrnul(p, ':');
		size_t dl = (size_t)(end - p);

		if (dl + strlen(file) + 2 <= sizeof(buf)) {
			if (dl == 0) {
				snprintf(buf, sizeof(buf), "%s", file);
			} else {
				memcpy(buf, p, dl);
				buf[dl] = '/';
				snprintf(buf + dl + 1, sizeof(buf) - dl - 1, "%s", file);
			}
			execve(buf, argv, envp);
			switch (errno) {
			case EACCES:
				eacces = 1;
				break;
			case ENOENT:
			case ENOTDIR:
			case ESTALE:
			case ENODEV:
			case ETIMEDOUT:
				break;
			default:
				return errno;
			}
		}
		p = end;
		if (!*p)
			break;
	}
	return eacces ? EACCES : ENOENT;
}

static int launch_is_num(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* Find the line of /etc/passwd or /etc/group (in the container) whose field 0 is `name`,
 * or whose field 2 is `id` when name is NULL. Fills f[0..3] (pointers into *buf). */
static int launch_dbfind(const char *file, const char *name, unsigned long id, char **buf, char *f[4],
			 char **rest)
{
	char *line, *save = NULL;

	if (!*buf && read_file(file, 1 << 20, buf, NULL) < 0)
		return 0;
	for (line = strtok_r(*buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *s = line;
		int i;

		for (i = 0; i < 4 && s; i++) {
			f[i] = s;
			s = strchr(s, ':');
			if (s)
				*s++ = '\0';
		}
		if (i < 4 || !launch_is_num(f[2]))
			continue;
		if (name ? !strcmp(f[0], name) : strtoul(f[2], NULL, 10) == id) {
			*rest = s ? s : f[3] + strlen(f[3]);
			return 1;
		}
	}
	return 0;
}

/* Resolve "user[:group]" the way Docker does: numbers as they are, names through the
 * image's files; without a group, the user's primary group (or 0); supplementary groups
 * from /etc/group for a user that has a passwd entry. */
static void launch_resolve_user(const char *spec, uid_t *uid, gid_t *gid, gid_t *groups, int *ngroups,
				int rep)
{
	char user[72], *group = NULL, *f[4], *rest, *buf = NULL;
	const char *uname = NULL;
	int have_gid = 0;

	snprintf(user, sizeof(user), "%s", spec);
	group = strchr(user, ':');
	if (group)
		*group++ = '\0';
	*gid = 0;
	*ngroups = 0;
	if (launch_is_num(user)) {
		*uid = (uid_t)strtoul(user, NULL, 10);
		if (launch_dbfind("/etc/passwd", NULL, *uid, &buf, f, &rest)) {
			*gid = (gid_t)strtoul(f[3], NULL, 10);
			uname = f[0];
		}
	} else if (launch_dbfind("/etc/passwd", user, 0, &buf, f, &rest)) {
		*uid = (uid_t)strtoul(f[2], NULL, 10);
		*gid = (gid_t)strtoul(f[3], NULL, 10);
		uname = f[0];
	} else {
		launch_fail(rep, EINVAL, "user %s: not in the image's /etc/passwd", user);
	}
	char name[72];
	snprintf(name, sizeof(name), "%s", uname ? uname : "");
	free(buf);
	buf = NULL;
	if (group && launch_is_num(group)) {
		*gid = (gid_t)strtoul(group, NULL, 10);
		have_gid = 1;
	} else if (group) {
		if (!launch_dbfind("/etc/group", group, 0, &buf, f, &rest))
			launch_fail(rep, EINVAL, "group %s: not in the image's /etc/group", group);
		*gid = (gid_t)strtoul(f[2], NULL, 10);
		have_gid = 1;
		free(buf);
		buf = NULL;
	}
	/* Supplementary groups, as initgroups() makes them: the primary group, then (without
	 * an explicit group, as in Docker's "user:group") every group listing the user. */
	groups[(*ngroups)++] = *gid;
	if (name[0] && !have_gid && read_file("/etc/group", 1 << 20, &buf, NULL) == 0) {
		char *line, *save = NULL;

		for (line = strtok_r(buf, "\n", &save); line && *ngroups < 64;
		     line = strtok_r(NULL, "\n", &save)) {
			char *g[4] = { 0 }, *s = line, *m, *msave = NULL;
			int i;

			for (i = 0; i < 4 && s; i++) {
				g[i] = s;
				s = i < 3 ? strchr(s, ':') : NULL;
				if (s)
					*s++ = '\0';
			}
			if (i < 4 || !launch_is_num(g[2]))
				continue;
			for (m = strtok_r(g[3], ",", &msave); m; m = strtok_r(NULL, ",", &msave))
				if (!strcmp(m, name) && (gid_t)strtoul(g[2], NULL, 10) != *gid)
					groups[(*ngroups)++] = (gid_t)strtoul(g[2], NULL, 10);
		}
	}
	free(buf);
}

/* Inheritable stays empty and ambient is cleared, as in Docker since 20.10.14
 * (CVE-2022-24769): a non-root user exec'ing a file with inheritable file capabilities
 * gains nothing. */
static void launch_identity(const struct agent *a, const struct launch *l, int rep, int pty)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct data[2];
	struct rlimit rl = { .rlim_cur = 1024, .rlim_max = 524288 };
	uint64_t caps = launch_caps & ~l->cap_drop;
	gid_t gid, groups[64];
	uid_t uid;
	int ngroups, e;

	launch_resolve_user(l->user, &uid, &gid, groups, &ngroups, rep);
	/* The terminal is the user's, group tty as devpts made it (Docker does the same). */
	if (pty >= 0 && fchown(pty, uid, (gid_t)-1) < 0)
		launch_fail(rep, errno, "chown of the pty: %s", strerror(errno));
	setrlimit(RLIMIT_NOFILE, &rl);
	if ((e = sec_apply(a, l->no_new_privs)) < 0)
		launch_fail(rep, -e, "loading the seccomp filter: %s", strerror(-e));
	if (setgroups((size_t)ngroups, groups) < 0)
		launch_fail(rep, errno, "setgroups: %s", strerror(errno));
	if (setgid(gid) < 0)
		launch_fail(rep, errno, "setgid %u: %s", (unsigned)gid, strerror(errno));
	for (int cap = 0; cap < 64; cap++)
		if (!(caps & (1ull << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 &&
		    errno != EINVAL)
			launch_fail(rep, errno, "dropping capability %d: %s", cap, strerror(errno));
	if (setuid(uid) < 0)
		launch_fail(rep, errno, "setuid %u: %s", (unsigned)uid, strerror(errno));
	if (uid == 0) {
		memset(data, 0, sizeof(data));
		data[0].effective = data[0].permitted = (uint32_t)caps;
		data[1].effective = data[1].permitted = (uint32_t)(caps >> 32);
		if (syscall(SYS_capset, &hdr, data) < 0)
			launch_fail(rep, errno, "capset: %s", strerror(errno));
	}
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}

/* In the child, inside the container's mount namespace: a pty from its devpts, the
 * slave as the controlling terminal of a new session, the master handed to the parent
 * over `sock`. Returns the slave. */
static int launch_pty(const struct launch *l, int sock, int rep)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} cm;
	struct winsize ws = { .ws_row = l->rows, .ws_col = l->cols };
	char tag = 'm';
	struct iovec iov = { .iov_base = &tag, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
			     .msg_controllen = sizeof(cm.buf) };
	int master, slave, unlock = 0;

	master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (master < 0)
		launch_fail(rep, errno, "open /dev/ptmx in the container: %s", strerror(errno));
	if (ioctl(master, TIOCSPTLCK, &unlock) < 0)
		launch_fail(rep, errno, "unlocking the pty: %s", strerror(errno));
	if ((l->rows || l->cols) && ioctl(master, TIOCSWINSZ, &ws) < 0)
		launch_fail(rep, errno, "setting the pty's size: %s", strerror(errno));
	/* the peer of this master, whatever /dev/pts holds (no path lookup) */
	slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_CLOEXEC);
	if (slave < 0)
		launch_fail(rep, errno, "opening the pty's slave: %s", strerror(errno));
	if (setsid() < 0)
		launch_fail(rep, errno, "setsid: %s", strerror(errno));
	if (ioctl(slave, TIOCSCTTY, 0) < 0)
		launch_fail(rep, errno, "making the pty the controlling terminal: %s", strerror(errno));
	memset(&cm, 0, sizeof(cm));
	cm.h.cmsg_level = SOL_SOCKET;
	cm.h.cmsg_type = SCM_RIGHTS;
	cm.h.cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(&cm.h), &master, sizeof(int));
	if (sendmsg(sock, &mh, MSG_NOSIGNAL) != 1)
		launch_fail(rep, errno, "handing the pty to the agent: %s", strerror(errno));
	close(master);
	close(sock);
	return slave;
}

/* The parent's side of launch_pty: the master, once the child reached execve(). */
static int launch_pty_recv(int sock)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} cm;
	char c;
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
			     .msg_controllen = sizeof(cm.buf) };
	struct cmsghdr *h;
	int fd = -1;

	if (recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) != 1)
		return -EIO;
	h = CMSG_FIRSTHDR(&mh);
	if (!h || h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS ||
	    h->cmsg_len != CMSG_LEN(sizeof(int)))
		return -EIO;
	memcpy(&fd, CMSG_DATA(h), sizeof(int));
	return fd;
}

static void launch_child(const struct agent *a, const struct launch *l, int in_fd, int out_fd,
			 int err_fd, int sync_fd, int rep, const int ns[5],
			 const struct net_spare *spare) __attribute__((noreturn));
static void launch_child(const struct agent *a, const struct launch *l, int in_fd, int out_fd,
			 int err_fd, int sync_fd, int rep, const int ns[5],
			 const struct net_spare *spare)
{
	char msg[400], c;
	int fsfd[FS_MAX_MOUNTS];
	sigset_t none;
	int fd, e;

	/* Until the parent put us into the container's cgroup, do nothing. */
	if (read(sync_fd, &c, 1) != 1)
		_exit(126);
	fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, "0", 1);
		close(fd);
	}
	if (!l->target) {
		if (unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC) < 0)
			launch_fail(rep, errno, "unshare: %s", strerror(errno));
		if (sethostname(l->ctr_id, strlen(l->ctr_id)) < 0)
			launch_fail(rep, errno, "sethostname: %s", strerror(errno));
		if (l->own_netns && !l->ctr_ip[0] &&
		    (e = net_ctr_netns(spare->ns, msg, sizeof(msg))) < 0)
			launch_fail(rep, -e, "%s", msg);
		if (l->ctr_ip[0] &&
		    (e = net_ctr_ipvlan(a, l->ctr_ip, spare, msg, sizeof(msg))) < 0)
			launch_fail(rep, -e, "%s", msg);
		/* Shared folders: copies of the VM's mounts now, attached after pivot_root
		 * (fs.c); /etc/resolv.conf and /etc/hosts first, so a folder mounted on
		 * /etc is the user's alone. */
		if ((e = fs_ctr_clone(a, l, fsfd, msg, sizeof(msg))) < 0)
			launch_fail(rep, -e, "%s", msg);
		if ((e = mnt_ctr_rootfs(l->ctr_id, l->lower, msg, sizeof(msg))) < 0)
			launch_fail(rep, -e, "%s", msg);
		if ((e = net_ctr_files(a, l->ctr_id, l->own_netns, l->ctr_ip, msg, sizeof(msg))) < 0)
			launch_fail(rep, -e, "%s", msg);
		if ((e = fs_ctr_attach(a, l, fsfd, msg, sizeof(msg))) < 0)
			launch_fail(rep, -e, "%s", msg);
		mkdir_p(l->cwd, 0755); /* like Docker's working directory */
	} else {
		if (setns(ns[1], CLONE_NEWNS) < 0 || setns(ns[2], CLONE_NEWUTS) < 0 ||
		    setns(ns[3], CLONE_NEWIPC) < 0 || setns(ns[4], CLONE_NEWNET) < 0)
			launch_fail(rep, errno, "joining the container's namespaces: %s", strerror(errno));
	}
	if (chdir(l->cwd) < 0)
		launch_fail(rep, errno, "chdir %s: %s", l->cwd, strerror(errno));
	if (l->tty)     /* in_fd is then the socket for the master */
		in_fd = out_fd = err_fd = launch_pty(l, in_fd, rep);
	launch_identity(a, l, rep, l->tty ? in_fd : -1);
	if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
		launch_fail(rep, errno, "dup2: %s", strerror(errno));
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Everything the agent holds is O_CLOEXEC already; this covers whatever is not. */
	syscall(SYS_close_range, 3u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */);
	e = launch_exec(l->argv, l->envp);
	launch_fail(rep, e, "exec %s: %s", l->argv[0], strerror(e));
}

static void launch_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static int launch_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

int launch_start(struct agent *a, const struct launch *l, struct launch_out *o, struct k8_err *err)
{
	static const char *const nsname[5] = { "pid", "mnt", "uts", "ipc", "net" };
	int out[2] = { -1, -1 }, errp[2] = { -1, -1 }, in[2] = { -1, -1 };
	int syncp[2] = { -1, -1 }, rep[2] = { -1, -1 }, ns[5] = { -1, -1, -1, -1, -1 };
	struct net_spare spare = { -1, -1 };
	struct launch_msg m;
	struct pollfd pfd;
	pid_t pid;
	ssize_t n;
	int r = 0, i, fe;

	if ((r = sec_build(a)) < 0)
		return k8_err_set(err, r, "building the seccomp filter: %s", strerror(-r));
	if (!l->target && l->own_netns)
		net_spare_take(a, l->ctr_ip[0] != '\0', &spare);
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 || pipe2(syncp, O_CLOEXEC) < 0 ||
	    pipe2(rep, O_CLOEXEC) < 0) {
		r = k8_err_set(err, -errno, "pipe: %s", strerror(errno));
		goto out;
	}
	if (l->tty) {
		/* in[0] the child's end for the master, in[1] ours; out and err unused */
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, in) < 0) {
			r = k8_err_set(err, -errno, "socketpair: %s", strerror(errno));
			goto out;
		}
	} else if (l->want_stdin) {
		if (pipe2(in, O_CLOEXEC) < 0) {
			r = k8_err_set(err, -errno, "pipe: %s", strerror(errno));
			goto out;
		}
	} else if ((in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
		r = k8_err_set(err, -errno, "open /dev/null: %s", strerror(errno));
		goto out;
	}
	if (l->target) {
		for (i = 0; i < 5; i++) {
			char path[64];

			snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)l->target, nsname[i]);
			ns[i] = open(path, O_RDONLY | O_CLOEXEC);
			if (ns[i] < 0) {
				r = k8_err_set(err, errno == ENOENT ? -ESRCH : -errno,
					       "container %s is not running (%s: %s)", l->ctr_id, path,
					       strerror(errno));
				goto out;
			}
		}
		if (setns(ns[0], CLONE_NEWPID) < 0) {
			r = k8_err_set(err, -errno, "setns pid: %s", strerror(errno));
			goto out;
		}
	} else if (unshare(CLONE_NEWPID) < 0) {
		r = k8_err_set(err, -errno, "unshare pid: %s", strerror(errno));
		goto out;
	}
	pid = fork();
	fe = errno;
	if (pid == 0)
		launch_child(a, l, in[0], out[1], errp[1], syncp[0], rep[1], ns, &spare);
	/* Every later fork (cleanup helpers, the next container) must start from our own
	 * PID namespace again; if that is impossible the agent cannot go on. */
	if (setns(a->self_pidns, CLONE_NEWPID) < 0)
		agent_fatal("returning to the agent's PID namespace: %s", strerror(errno));
	if (pid < 0) {
		r = k8_err_set(err, -fe, "fork: %s", strerror(fe));
		goto out;
	}
	launch_close(&out[1]);
	launch_close(&errp[1]);
	launch_close(&in[0]);
	launch_close(&syncp[0]);
	launch_close(&rep[1]);
	if ((r = cg_attach(l->ctr_id, pid)) < 0) {
		k8_err_set(err, r, "joining cgroup kosa8/%s: %s", l->ctr_id, strerror(-r));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		goto out;
	}
	(void)!write(syncp[1], "g", 1);
	launch_close(&syncp[1]);
	pfd = (struct pollfd){ .fd = rep[0], .events = POLLIN };
	while ((r = poll(&pfd, 1, LAUNCH_TIMEOUT_MS)) < 0 && errno == EINTR)
		;
	if (r <= 0) {
		r = k8_err_set(err, -ETIMEDOUT, "the new process did not reach execve() in %d s",
			       LAUNCH_TIMEOUT_MS / 1000);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		goto out;
	}
	while ((n = read(rep[0], &m, sizeof(m))) < 0 && errno == EINTR)
		;
	if (n > 0) {
		m.msg[sizeof(m.msg) - 1] = '\0';
		r = k8_err_set(err, -(m.err > 0 ? m.err : EIO), "%s", m.msg);
		waitpid(pid, NULL, 0);
		goto out;
	}
	r = 0;
	if (l->tty) {
		int master = launch_pty_recv(in[1]);

		launch_close(&in[1]);
		launch_close(&out[0]);
		launch_close(&errp[0]);
		if (master < 0 || (in[1] = fcntl(master, F_DUPFD_CLOEXEC, 3)) < 0) {
			r = k8_err_set(err, master < 0 ? master : -errno,
				       "the pty's master did not arrive");
			if (master >= 0)
				close(master);
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			goto out;
		}
		out[0] = master;
	}
	if (launch_nonblock(out[0]) < 0 || (errp[0] >= 0 && launch_nonblock(errp[0]) < 0) ||
	    (in[1] >= 0 && launch_nonblock(in[1]) < 0))
		agent_log("fcntl O_NONBLOCK: %s", strerror(errno));
	o->pid = pid;
	o->out_fd = steal_fd(&out[0]);
	o->err_fd = steal_fd(&errp[0]);
	o->in_fd = steal_fd(&in[1]);
	o->net = spare;         /* held with the container (ctr.c) */
	spare = (struct net_spare){ -1, -1 };
out:
	launch_close(&out[0]);
	launch_close(&out[1]);
	launch_close(&errp[0]);
	launch_close(&errp[1]);
	launch_close(&in[0]);
	launch_close(&in[1]);
	launch_close(&syncp[0]);
	launch_close(&syncp[1]);
	launch_close(&rep[0]);
	launch_close(&rep[1]);
	for (i = 0; i < 5; i++)
		launch_close(&ns[i]);
	net_ns_retire(&spare.ns);
	net_ns_retire(&spare.pk);
	return r;
}
