/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - kosa8-agent: PID 1 of the sandbox VM, its boot duties and the event loop.
 *
 * Theory of operation
 *
 * The kernel starts us from the initramfs. We move to a tmpfs root (pivot_root, which
 * containers need, refuses to work from the initramfs), mount /proc /sys /dev /tmp and
 * cgroup2, mount the scratch disk (virtio-blk serial "scratch") at /scratch and open the
 * virtio-serial port named "kosa8.agent". From then on everything happens in one
 * epoll loop (the shared folders' threads aside, see below); nothing blocks for long
 * (fork+exec of a container process waits for the child to reach execve(), a few
 * milliseconds).
 *
 *   port (edge-triggered)  frames from the host -> req.c / proc.c; our frames leave
 *                          through a bounded queue (chan.c), written when the port
 *                          takes them. The guest driver reports the host end going
 *                          away as POLLHUP and coming back as a wake-up without it:
 *                          we keep every container running and say HELLO again.
 *   signalfd (SIGCHLD)     we are init: every orphan in the VM is ours to reap.
 *                          waitpid(-1) in a loop, each pid handed to a `sync` helper
 *                          (req.c), its process record (proc.c), or dropped.
 *   pipes (level)          each process's stdout/stderr, read only while its stream's
 *                          window (host CREDIT) is open and our queue is not full, so
 *                          a process that prints without end blocks in the guest;
 *                          stdin pipes get EPOLLOUT only while bytes wait for them.
 *   cgroup event files     memory.events / pids.events of each container (EPOLLPRI):
 *                          OOM kills and pids.max hits become EVENT frames.
 *   eventfd (shared folders) the FUSE shuttle's threads (fs.c) finished mounting the
 *                          folders: run/exec requests that waited for them go on.
 *   timeout                the nearest deadline: stop -> SIGKILL, the EOF grace after
 *                          an exec'd process exits, cgroup rmdir retries, disk checks,
 *                          run/exec that waited too long for the shared folders.
 *
 * The only threads are the shared folders' (fs.c): they never touch this loop's state
 * and talk to it through that eventfd. This loop never touches a FUSE path.
 *
 * Objects freed while a batch of epoll events is being handled are parked on dead lists
 * and freed before the next epoll_wait, so a later event of the batch never touches
 * freed memory (its watch just has fd -1).
 *
 * PID 1 must never exit (the kernel would panic): a fatal error is logged on the
 * console and the VM is rebooted, which with QEMU's -no-reboot ends the VM.
 */
#include "agent.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>

static void agent_vlog(const char *prefix, const char *fmt, va_list ap) K8_PRINTF(2, 0);
static void agent_vlog(const char *prefix, const char *fmt, va_list ap)
{
	char buf[1024];
	int n = snprintf(buf, sizeof(buf), "kosa8-agent: %s", prefix);

	if (n < 0)
		return;
	vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	n = (int)strlen(buf);
	if (n < (int)sizeof(buf) - 1)
		buf[n++] = '\n';
	(void)!write(2, buf, (size_t)n);
}

void agent_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	agent_vlog("", fmt, ap);
	va_end(ap);
}

void agent_fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	agent_vlog("fatal: ", fmt, ap);
	va_end(ap);
	sync();
	/* microvm has no ACPI: RB_POWER_OFF would only halt the CPU and leave QEMU
	 * running. A reboot (reboot=t, QEMU -no-reboot) makes QEMU exit, which the
	 * daemon sees at once. */
	reboot(RB_AUTOBOOT);
	reboot(RB_POWER_OFF);
	for (;;)
		pause();
}

uint64_t agent_boottime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int agent_watch(struct agent *a, struct watch *w, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = w };

	if (w->fd < 0)
		return -EBADF;
	if (!events) {
		if (w->registered && epoll_ctl(a->epfd, EPOLL_CTL_DEL, w->fd, NULL) < 0)
			return -errno;
		w->registered = 0;
		w->events = 0;
		return 0;
	}
	if (w->registered && w->events == events)
		return 0;
	if (epoll_ctl(a->epfd, w->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, w->fd, &ev) < 0)
		return -errno;
	w->registered = 1;
	w->events = events;
	return 0;
}

void agent_unwatch(struct agent *a, struct watch *w)
{
	if (w->fd < 0)
		return;
	if (w->registered)
		epoll_ctl(a->epfd, EPOLL_CTL_DEL, w->fd, NULL);
	close(w->fd);
	w->fd = -1;
	w->registered = 0;
	w->events = 0;
}

static void agent_reap(struct agent *a)
{
	struct signalfd_siginfo si;
	int status;
	pid_t pid;

	while (read(a->sig.fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (!req_reaped(a, pid))
			proc_reaped(a, pid, status);
}

void agent_disk_check(struct agent *a)
{
	struct statfs sf;
	uint64_t total, avail;

	if (!a->scratch_ok || statfs(AGENT_SCRATCH, &sf) < 0)
		return;
	total = (uint64_t)sf.f_blocks * (uint64_t)sf.f_frsize / 1024u;
	avail = (uint64_t)sf.f_bavail * (uint64_t)sf.f_frsize / 1024u;
	if (!a->disk_full && avail < total / 100u + 1024u) {
		json_t *ev = json_pack("{s:s,s:I,s:I}", "event", "disk-full", "free_kib",
				       (json_int_t)avail, "total_kib", (json_int_t)total);
		a->disk_full = 1;
		chan_event_json(a, ev);
	} else if (a->disk_full && avail > total / 20u) {
		a->disk_full = 0;
	}
}

/* Tell the host once when the scratch disk is (nearly) full; say it again only after
 * space came back. Checked every second while a container runs, and when one exits. */
static void agent_disk_tick(struct agent *a, uint64_t now, uint64_t *next)
{
	if (!a->scratch_ok || !ctr_running_count(a))
		return;
	if (now < a->disk_check_at) {
		if (a->disk_check_at < *next)
			*next = a->disk_check_at;
		return;
	}
	a->disk_check_at = now + 1000000000ull;
	if (a->disk_check_at < *next)
		*next = a->disk_check_at;
	agent_disk_check(a);
}

static void agent_loop(struct agent *a)
{
	struct epoll_event evs[32];

	for (;;) {
		uint64_t now = now_mono_ns(), next = UINT64_MAX;
		int timeout = -1, n, i;

		proc_tick(a, now, &next);
		ctr_tick(a, now, &next);
		cg_tick(a, now, &next);
		req_tick(a, now, &next);
		agent_disk_tick(a, now, &next);
		proc_gc(a);
		ctr_gc(a);
		if (next != UINT64_MAX) {
			uint64_t ms = next > now ? (next - now + 999999u) / 1000000u : 0;
			timeout = ms > INT_MAX ? INT_MAX : (int)ms;
		}
		n = epoll_wait(a->epfd, evs, (int)ARRAY_SIZE(evs), timeout);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			agent_fatal("epoll_wait: %s", strerror(errno));
		}
		for (i = 0; i < n; i++) {
			struct watch *w = evs[i].data.ptr;

			if (w->fd < 0)
				continue; /* closed earlier in this batch */
			switch (w->kind) {
			case W_CHAN:
				chan_event(a, evs[i].events);
				break;
			case W_SIGNAL:
				agent_reap(a);
				break;
			case W_OUT:
			case W_ERR:
			case W_IN:
				proc_event(a, w, evs[i].events);
				break;
			case W_CGEV:
				ctr_cg_event(a, w);
				break;
			case W_FS:
				fs_event(a);
				break;
			}
		}
	}
}

/* The kernel gives init the console as fds 0-2 when the initramfs has /dev/console;
 * make sure they are open either way, so no later open() lands on 0, 1 or 2. */
static void agent_std_fds(void)
{
	int fd;

	while ((fd = open("/dev/console", O_RDWR | O_NOCTTY)) >= 0 && fd <= 2)
		;
	if (fd > 2)
		close(fd);
	while ((fd = open("/", O_RDONLY)) >= 0 && fd <= 2)
		;
	if (fd > 2)
		close(fd);
}

/* Under TCG, QEMU's microvm without the i8259 PIC (pic=off) leaves the kernel without a
 * working clock event device: the PIT's interrupt cannot be registered, the LAPIC timer
 * fails its verification, and every sleep or timeout in the guest (ours included) waits
 * forever. Say so on the console: the symptom is otherwise a silent hang. */
static void agent_check_timer(void)
{
	char *dev = NULL;

	if (read_file("/sys/devices/system/clockevents/clockevent0/current_device", 4096, &dev, NULL) < 0)
		return;
	if (strncmp(dev, "lapic", 5) && strncmp(dev, "kvm", 3))
		agent_log("warning: the clock event device is '%.*s', not the LAPIC timer: timers may "
			  "never fire (under TCG, start QEMU with -M microvm,pit=on,pic=on)",
			  (int)strcspn(dev, "\n"), dev);
	free(dev);
}

static void agent_setup_signals(struct agent *a)
{
	sigset_t set;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		agent_fatal("sigprocmask: %s", strerror(errno));
	a->sig.kind = W_SIGNAL;
	a->sig.fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (a->sig.fd < 0)
		agent_fatal("signalfd: %s", strerror(errno));
	if (agent_watch(a, &a->sig, EPOLLIN) < 0)
		agent_fatal("epoll_ctl signalfd: %s", strerror(errno));
}

static void agent_init(struct agent *a)
{
	struct utsname u;
	struct rlimit rl = { .rlim_cur = 65536, .rlim_max = 65536 };
	int fd;

	memset(a, 0, sizeof(*a));
	a->pids_max = AGENT_DEF_PIDS;
	a->reserve_mib = AGENT_DEF_RESERVE_MIB;
	a->chan.w.fd = -1;
	a->sig.fd = -1;
	a->fsev.fd = -1;
	if (uname(&u) == 0)
		snprintf(a->kernel, sizeof(a->kernel), "%s", u.release);

	mnt_boot(a);
	agent_check_timer();

	fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "-1000", 5) != 5)
		agent_log("oom_score_adj: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
	setrlimit(RLIMIT_NOFILE, &rl);
	reboot(RB_DISABLE_CAD);

	a->self_pidns = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
	if (a->self_pidns < 0)
		agent_fatal("open /proc/self/ns/pid: %s", strerror(errno));

	cg_boot(a);
	if (mnt_scratch(a) == 0)
		ctr_boot_cleanup(a);

	a->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (a->epfd < 0)
		agent_fatal("epoll_create1: %s", strerror(errno));
	agent_setup_signals(a);
}

int main(int argc, char **argv)
{
	static struct agent agent;

	if (argc > 1 && !strcmp(argv[1], "--version")) {
		printf("kosa8-agent %s (protocol %d..%d)\n", AGENT_VERSION, AGENT_PROTO_MIN,
		       AGENT_PROTO_MAX);
		return 0;
	}
	if (getpid() != 1) {
		fprintf(stderr, "kosa8-agent: this is the guest VM's init (PID 1); it does not run "
				"on a host\n");
		return 2;
	}
	agent_std_fds();
	agent_log("%s starting", AGENT_VERSION);
	agent_init(&agent);
	chan_open(&agent);
	agent.boot_ms = agent_boottime_ms();
	agent_log("ready in %llu ms (kernel %s), port %s", (unsigned long long)agent.boot_ms,
		  agent.kernel, agent.chan.dev);
	agent_loop(&agent);
	return 0;
}
