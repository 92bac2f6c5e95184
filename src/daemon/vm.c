/* SPDX-License-Identifier: Apache-2.0 */
/* vm.c - QEMU microvm: the command line, spawning, disks, and image slots.
 *
 * Every VM gets the same minimal device set: virtio-mmio only (no PCI, no ACPI, no legacy
 * devices), one virtio-serial port for the agent, one scratch disk (ext4 in a qcow2, so
 * it costs only what the guest writes), K8_MAX_SLOTS image slots, and a virtio-rng or
 * a virtio-balloon (below).
 *
 * Image slots. microvm cannot hot-plug a disk, yet images reach a running sandbox
 * (`sandbox pull` after `create`). So every VM boots with K8_MAX_SLOTS read-only
 * virtio-blk disks, each an empty qcow2 overlay ("slot") with a large virtual size. A
 * pull builds the image's EROFS disk on the host, adds it as a read-only block node over
 * QMP and makes it the slot overlay's backing file with `blockdev-reopen`; the agent then
 * drops its cache of the device and mounts it. A VM booted later gets the same graph on
 * its command line. Decision and alternatives: docs/design.md "Images in a running VM".
 *
 * The machine (struct vm_machine). microvm without ACPI has 8 virtio-mmio transports
 * and the base set takes all 8. A machine with free page reporting gives the RNG's to a
 * virtio-balloon, which hands back to the host what the guest freed (microvm with
 * acpi=on has 24 transports, but no guest timer under TCG). A saved state holds the
 * machine it ran on, so a restore gets the same one: older checkpoints keep the RNG.
 * docs/design.md "Free page reporting".
 */
#include "daemon/vm.h"
#include "daemon/log.h"
#include "daemon/jail.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#define SLOT_VSIZE "64G"
/* The TCG guest's kernel drops its "rep string ops are fast" flag (REP_GOOD, which a
 * CPU of this family sets) and copies with unrolled moves; see the -cpu line. The kernel
 * marks itself tainted (CPU_OUT_OF_SPEC) for it, which changes nothing else. */
#define VM_TCG_APPEND "clearcpuid=rep_good"

json_t *vm_machine_json(const struct vm_machine *m)
{
	return json_pack("{s:b,s:b}", "balloon", m->balloon, "rtc", m->rtc);
}

int vm_machine_from_json(const json_t *j, struct vm_machine *m)
{
	json_t *b = json_object_get(j, "balloon"), *rtc = json_object_get(j, "rtc");

	*m = VM_MACHINE_V1;
	if (!j)
		return 0;
	/* "rtc" absent: a machine recorded before it was (without one) */
	if (!json_is_object(j) || !json_is_boolean(b) || (rtc && !json_is_boolean(rtc)))
		return -EINVAL;
	m->balloon = json_is_true(b);
	m->rtc = json_is_true(rtc);
	return 0;
}

/* The host's TSC rate in kHz, measured once against CLOCK_MONOTONIC_RAW; 0 when the host
 * does not say its TSC is constant and runs through idle states (then the guest's TSC
 * would not keep time). Under TCG a guest's TSC is the host's plus an offset, and its
 * kernel cannot calibrate it (no HPET, no PM timer, the PIT too slow under emulation): it
 * marks the TSC unstable and keeps time with jiffies, which keeps the periodic tick
 * running even in a NO_HZ_IDLE kernel, 250 wakes a second per idle VM. Told the rate
 * (tsc_early_khz=), it uses the TSC and high-resolution timers, and an idle guest sleeps
 * (docs/design.md "Idle CPU"). */
static unsigned vm_tsc_khz_measured;

static void vm_tsc_measure(void)
{
	cleanup_free char *info = NULL;
	unsigned long long best[3] = { 0 };

	if (read_file("/proc/cpuinfo", 1 << 22, &info, NULL) || !strstr(info, " constant_tsc") ||
	    !strstr(info, " nonstop_tsc"))
		return;
	for (int i = 0; i < 3; i++) {
		struct timespec a, b, nap = { 0, 20 * 1000000L };
		unsigned long long c0, c1, c2, c3, ns;

		c0 = __builtin_ia32_rdtsc();
		clock_gettime(CLOCK_MONOTONIC_RAW, &a);
		c1 = __builtin_ia32_rdtsc();
		nanosleep(&nap, NULL);
		c2 = __builtin_ia32_rdtsc();
		clock_gettime(CLOCK_MONOTONIC_RAW, &b);
		c3 = __builtin_ia32_rdtsc();
		ns = (unsigned long long)(b.tv_sec - a.tv_sec) * 1000000000ull + b.tv_nsec - a.tv_nsec;
		if (c1 - c0 > 100000 || c3 - c2 > 100000 || ns < 10000000) {
			i--;            /* preempted between a clock and its TSC read: again */
			continue;
		}
		best[i] = ((c2 + c3) / 2 - (c0 + c1) / 2) * 1000000ull / ns;
	}
	/* the median of three */
	for (int i = 0; i < 2; i++)
		for (int j = i + 1; j < 3; j++)
			if (best[j] < best[i]) {
				unsigned long long t = best[i];
				best[i] = best[j];
				best[j] = t;
			}
	if (best[1] > 100000 && best[1] < 20000000)     /* 0.1-20 GHz */
		vm_tsc_khz_measured = (unsigned)best[1];
}

unsigned vm_tsc_khz(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, vm_tsc_measure);
	return vm_tsc_khz_measured;
}

/* Run a helper program (no shell) and wait; its stderr tail goes into the error. */
int vm_run_cmd(const char *const argv[], struct k8_err *err)
{
	int pfd[2], status;
	char out[2048];
	size_t have = 0;
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return k8_err_set(err, -errno, "pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return k8_err_set(err, -errno, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR);
		dup2(nul, 0);
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		(void)syscall(SYS_close_range, 3, ~0U, 0);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(pfd[1]);
	for (;;) {
		ssize_t n = read(pfd[0], out + have, sizeof(out) - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
		if (have == sizeof(out) - 1) { /* keep the tail */
			memmove(out, out + 1024, have - 1024);
			have -= 1024;
		}
	}
	out[have] = '\0';
	close(pfd[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !have)
		return k8_err_set(err, -ENOENT, "%s is not installed; run scripts/deps.sh", argv[0]);
	while (have && (out[have - 1] == '\n' || out[have - 1] == ' '))
		out[--have] = '\0';
	return k8_err_set(err, -EIO, "%s failed: %s", argv[0], have ? out : "(no output)");
}

static int copy_file(const char *from, const char *to, struct k8_err *err)
{
	cleanup_close int in = open(from, O_RDONLY | O_CLOEXEC);
	cleanup_close int out = -1;
	struct stat st;
	off_t off = 0;

	if (in < 0 || fstat(in, &st) < 0)
		return k8_err_set(err, -errno, "open %s: %s", from, strerror(errno));
	out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0)
		return k8_err_set(err, -errno, "create %s: %s", to, strerror(errno));
	while (off < st.st_size) {
		ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t)(st.st_size - off), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return k8_err_set(err, n < 0 ? -errno : -EIO, "copy to %s: %s", to,
					  strerror(n < 0 ? errno : EIO));
		off += n;
	}
	return 0;
}

/* A cached template, built once per home: an ext4 scratch disk of `gb` GB, or an empty
 * slot overlay. Built in a temp name and renamed, so a crash leaves no half template. */
static int template_path(const char *home, const char *kind, int gb, char *out, size_t outlen,
			 struct k8_err *err)
{
	cleanup_free char *dir = xasprintf("%s/cache", home);
	cleanup_free char *tmp = NULL, *raw = NULL, *size = NULL;
	int r;

	if (gb)
		snprintf(out, outlen, "%s/%s-%dG.qcow2", dir, kind, gb);
	else
		snprintf(out, outlen, "%s/%s.qcow2", dir, kind);
	if (access(out, R_OK) == 0)
		return 0;
	if ((r = mkdir_p(dir, 0700)) < 0)
		return k8_err_set(err, r, "mkdir %s: %s", dir, strerror(-r));
	tmp = xasprintf("%s.tmp.%d.%lu", out, (int)getpid(), (unsigned long)pthread_self());
	if (!gb) {
		const char *argv[] = { "qemu-img", "create", "-q", "-f", "qcow2", tmp, SLOT_VSIZE, NULL };
		r = vm_run_cmd(argv, err);
	} else {
		raw = xasprintf("%s.raw", tmp);
		size = xasprintf("%dG", gb);
		const char *a1[] = { "truncate", "-s", size, raw, NULL };
		const char *a2[] = { "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "kosa8-scratch", "-E",
			       "lazy_itable_init=1,lazy_journal_init=1", raw, NULL };
		const char *a3[] = { "qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", raw, tmp, NULL };
		r = vm_run_cmd(a1, err);
		if (!r)
			r = vm_run_cmd(a2, err);
		if (!r)
			r = vm_run_cmd(a3, err);
		unlink(raw);
	}
	if (!r && rename(tmp, out) < 0)
		r = k8_err_set(err, -errno, "rename %s: %s", out, strerror(errno));
	if (r)
		unlink(tmp);
	return r;
}

int vm_make_disks(const char *home, const char *dir, int disk_gb, struct k8_err *err)
{
	char tpl[4096];
	int r;

	r = template_path(home, "scratch", disk_gb, tpl, sizeof(tpl), err);
	if (r)
		return k8_err_wrap(err, "preparing the scratch disk");
	cleanup_free char *scratch = xasprintf("%s/scratch.qcow2", dir);
	if ((r = copy_file(tpl, scratch, err)))
		return r;
	r = template_path(home, "slot", 0, tpl, sizeof(tpl), err);
	if (r)
		return k8_err_wrap(err, "preparing image slots");
	for (int i = 0; i < K8_MAX_SLOTS; i++) {
		cleanup_free char *slot = xasprintf("%s/slot%d.qcow2", dir, i);
		if ((r = copy_file(tpl, slot, err)))
			return r;
	}
	return 0;
}

struct argv_b {
	char **v;
	int n, cap;
};

static void av_add(struct argv_b *a, char *s)
{
	if (a->n + 2 > a->cap) {
		a->cap = a->cap ? a->cap * 2 : 64;
		a->v = realloc(a->v, (size_t)a->cap * sizeof(char *));
		if (!a->v)
			abort();
	}
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

static void av_free(struct argv_b *a)
{
	for (int i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
}

/* One argument of QEMU's command line, into the builder `a` (a pointer) in scope. */
#define ADD(...) av_add(a, xasprintf(__VA_ARGS__))

/* The descriptors QEMU is given: source fd in the daemon, and its number in QEMU
 * (3, 4, ... in order of addition). */
#define FDS_MAX (16 + 2 * K8_MAX_SLOTS + 4096)
struct fdmap {
	int src[FDS_MAX];
	bool own[FDS_MAX];              /* opened by vm_spawn: closed after the fork */
	int n;
};

static int fdm_add(struct fdmap *m, int fd, bool own)
{
	if (m->n >= FDS_MAX)
		abort();
	m->src[m->n] = fd;
	m->own[m->n] = own;
	return 3 + m->n++;
}

static void fdm_close(struct fdmap *m)
{
	for (int i = 0; i < m->n; i++)
		if (m->own[i] && m->src[i] >= 0)
			close(m->src[i]);
	m->n = 0;
}

/* A disk file opened by the daemon and handed to QEMU as fd set N (/dev/fdset/N, its
 * -add-fd options added to `a`): QEMU opens nothing by path, so its jail holds none of
 * $KOSA8_HOME. A writable disk's set also holds a read-only fd of it: when a checkpoint
 * freezes the layer QEMU reopens it read-only (and drops its write lock, which a fork
 * sharing the file needs) by taking that fd from the set. Returns the set id. */
static int disk_fd(struct argv_b *a, struct fdmap *m, const char *path, bool rw,
		   struct k8_err *err)
{
	int fd = open(path, (rw ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW), set, ro;

	if (fd < 0)
		return k8_err_set(err, -errno, "open %s: %s", path, strerror(errno));
	set = fdm_add(m, fd, true);
	ADD("-add-fd");
	ADD("fd=%d,set=%d", set, set);
	if (rw) {
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			return k8_err_set(err, -errno, "open %s: %s", path, strerror(errno));
		ro = fdm_add(m, fd, true);
		ADD("-add-fd");
		ADD("fd=%d,set=%d", ro, set);
	}
	return set;
}

/* A listening unix socket at `path` (replacing a stale one), 0600 in the daemon's
 * run directory; QEMU serves it from the descriptor, so it needs no path. */
static int vm_listen(const char *path, struct k8_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return k8_err_set(err, -ENAMETOOLONG, "socket path %s is too long", path);
	strcpy(sa.sun_path, path);
	unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return k8_err_set(err, -errno, "socket: %s", strerror(errno));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0600) < 0 ||
	    listen(fd, 8) < 0) {
		int e = errno;
		close(fd);
		return k8_err_set(err, -e, "listen on %s: %s", path, strerror(e));
	}
	return fd;
}

static int vm_connect(const char *path, struct k8_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return k8_err_set(err, -ENAMETOOLONG, "socket path %s is too long", path);
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return k8_err_set(err, -errno, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return k8_err_set(err, -e, "connect to %s: %s", path, strerror(e));
	}
	return fd;
}

/* QEMU's absolute path, looked up in PATH now: the jail's exec cannot search. */
static int qemu_path(char *out, size_t n, struct k8_err *err)
{
	const char *path = getenv("PATH");
	cleanup_free char *copy = xstrdup(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
	char *save = NULL;

	for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, n, "%s/qemu-system-x86_64", dir);
		if (dir[0] == '/' && access(out, X_OK) == 0)
			return 0;
	}
	return k8_err_set(err, -ENOENT, "qemu-system-x86_64 is not installed; run scripts/deps.sh");
}

/* A QEMU that maps a memory file preloads kosa8-qemu-ram.so (found next to kosa8d): named
 * by the jail's /etc/ld.so.preload, or, unjailed, by LD_PRELOAD in an environment made
 * here (the child may not allocate). */
static int vm_ram_preload(const struct vm_spec *s, char **lib, struct jail_spec *jail,
		       char ***envp, struct k8_err *err)
{
	extern char **environ;
	size_t n = 0, k = 0;

	*lib = k8_beside_self("kosa8-qemu-ram.so");
	if (access(*lib, R_OK) < 0)
		return k8_err_set(err, -ENOENT, "%s is missing: kosa8d needs it to restore a "
				  "memory file; rebuild kosa8 (make)", *lib);
	if (s->jail_uid) {
		jail->preload = *lib;
		return 0;
	}
	while (environ[n])
		n++;
	*envp = xcalloc(n + 2, sizeof(char *));
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11))
			(*envp)[k++] = xstrdup(environ[i]);
	(*envp)[k] = xasprintf("LD_PRELOAD=%s", *lib);
	return 0;
}

/* Whether the migration stream in the file `fd` has a configuration section (QEMU's
 * QEMU_VM_CONFIGURATION, the byte after the magic and the version). A QEMU started to load
 * a devices' state runs with migration.send-configuration=off, which holds for the streams
 * it saves itself, and so for those of a QEMU that loads one of them: the one that loads
 * a stream must expect what was written. Not a stream, or unreadable: true (QEMU says
 * what is wrong with it). */
static bool vm_stream_configured(int fd)
{
	unsigned char h[9];

	if (pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) || memcmp(h, "QEVM", 4))
		return true;
	return h[8] == 0x07;
}

static __attribute__((noreturn)) void child_fail(const char *what)
{
	static const char pre[] = "kosa8d: cannot start QEMU: ";
	const char *e = strerrordesc_np(errno); /* a static string: no locale, no malloc */

	if (!e)
		e = "unknown error";
	if (write(2, pre, sizeof(pre) - 1) < 0 || write(2, what, strlen(what)) < 0 ||
	    write(2, ": ", 2) < 0 || write(2, e, strlen(e)) < 0 || write(2, "\n", 1) < 0)
		_exit(126);
	_exit(126);
}

/* vm_spawn's first step: the machine, its clock and RAM (a memory file QEMU has at fd
 * `ram`, VM_RAM_FD; -1: QEMU's own memory), its accelerator and size, the verified kernel
 * and initramfs (fds 3 and 4), the kernel's command line and the console. */
static void vm_args_machine(struct argv_b *a, const struct vm_spec *s, int ram)
{
	ADD("qemu-system-x86_64");
	ADD("-name");
	ADD("kosa8,process=kosa8-vm");
	ADD("-M");
	/* A memory file: the RAM backend named as the default one is (so its block in a
	 * saved state is "microvm.ram" either way); no JSON description after a devices'
	 * state, which has none. */
	if (ram == VM_RAM_FD)
		ADD("microvm,acpi=off,pit=on,pic=on,rtc=%s,memory-backend=microvm.ram,"
		    "suppress-vmdesc=on", s->machine.rtc ? "on" : "off");
	else
		ADD("microvm,acpi=off,pit=on,pic=on,rtc=%s", s->machine.rtc ? "on" : "off");
	/* The RTC keeps the VM's time, not the host's: it stops with the vCPUs, so the state
	 * of a stopped VM's devices stays the same bytes (checkpoint.c compares two saves). */
	if (s->machine.rtc) {
		ADD("-rtc");
		ADD("base=utc,clock=vm");
	}
	if (ram == VM_RAM_FD) {
		ADD("-object");
		ADD("memory-backend-file,id=microvm.ram,size=%dM,mem-path=/proc/self/fd/%d,"
		    "share=off,x-use-canonical-path-for-ramblock-id=off", s->memory_mib, ram);
	}
	ADD("-accel");
	/* TCG's translation cache defaults to 1 GiB; 128 MiB (config "tcg_tb_mib") keeps
	 * QEMU's own footprint small and inside the host cgroup's allowance. */
	if (strcmp(s->accel, "kvm"))
		ADD("tcg,tb-size=%d", s->tb_mib > 0 ? s->tb_mib : 128);
	else
		ADD("kvm");
	/* Under TCG the guest copies memory without `rep movsb` (no ERMS/FSRM, for the
	 * kernel's copy routines and for glibc) and without `rep movsq` (clearcpuid below):
	 * TCG runs a rep string instruction one element per pass, so the kernel's unrolled
	 * copies are 2-5x faster (docs/shared-folders.md "Speed"). A restored state
	 * keeps the copy routines its kernel picked at boot; they run either way. */
	ADD("-cpu");
	ADD("%s", strcmp(s->accel, "kvm") ? "max,-erms,-fsrm" : "host");
	ADD("-m");
	ADD("%d", s->memory_mib);
	ADD("-smp");
	ADD("%d", s->cpus);
	ADD("-nodefaults");
	ADD("-no-user-config");
	ADD("-nographic");
	ADD("-no-reboot");
	ADD("-sandbox");
	ADD("on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	ADD("-kernel");
	ADD("/proc/self/fd/3");
	ADD("-initrd");
	ADD("/proc/self/fd/4");
	ADD("-append");
	/* random.trust_cpu: the guest's first seed from RDRAND (under TCG QEMU's, from the
	 * host's getrandom). A machine with the balloon has no virtio-rng, and without a
	 * seed the first getrandom() at boot spins on jitter entropy: a second of CPU under
	 * TCG before the agent says HELLO. The host's seed follows in every init. */
	if (strcmp(s->accel, "kvm") && vm_tsc_khz())
		ADD("console=ttyS0 quiet panic=-1 reboot=t random.trust_cpu=on " VM_TCG_APPEND
		    " tsc_early_khz=%u", vm_tsc_khz());
	else if (strcmp(s->accel, "kvm"))
		ADD("console=ttyS0 quiet panic=-1 reboot=t random.trust_cpu=on " VM_TCG_APPEND);
	else
		ADD("console=ttyS0 quiet panic=-1 reboot=t random.trust_cpu=on");
	/* The console goes to a bounded ring buffer, read over QMP when a boot fails: a
	 * guest that prints without end cannot fill the host's disk. */
	ADD("-chardev");
	ADD("ringbuf,id=console,size=65536");
	ADD("-serial");
	ADD("chardev:console");
}

/* A socket QEMU serves at `path` as chardev `id` (the daemon binds it and passes it
 * listening: the daemon, and a daemon that adopts this VM, connects by path; QEMU never
 * sees one). */
static int vm_args_socket(struct argv_b *a, struct fdmap *m, const char *path, const char *id,
			  struct k8_err *err)
{
	int fd = vm_listen(path, err);

	if (fd < 0)
		return fd;
	ADD("-chardev");
	ADD("socket,id=%s,fd=%d,server=on,wait=off", id, fdm_add(m, fd, true));
	return 0;
}

/* vm_spawn's second step: QMP, the agent's port, the shared folders' port and the NIC. */
static int vm_args_channels(struct argv_b *a, struct fdmap *m, const struct vm_spec *s,
			    struct k8_err *err)
{
	int fd = -1, r;

	if ((r = vm_args_socket(a, m, s->qmp_path, "qmp", err)))
		return r;
	ADD("-mon");
	ADD("chardev=qmp,mode=control");
	ADD("-device");
	ADD("virtio-serial-device,max_ports=3");
	if ((r = vm_args_socket(a, m, s->agent_path, "agent", err)))
		return r;
	ADD("-device");
	ADD("virtserialport,chardev=agent,name=kosa8.agent");
	/* Shared folders: FUSE messages between the guest agent and kosa8-fs, which
	 * connects here (and again after a rewind: a new QEMU listens at the same path).
	 * Present in every VM, mounts or not, so every checkpoint has the same devices. */
	if (s->fs_path) {
		if ((r = vm_args_socket(a, m, s->fs_path, "fs", err)))
			return r;
		ADD("-device");
		ADD("virtserialport,chardev=fs,name=kosa8.fs");
	}
	/* The NIC: every frame goes to kosa8-net, which listens at net_path; the daemon
	 * connects and hands QEMU the connected socket. */
	if (s->net_path || s->net_fd > 0) {
		if (s->net_fd > 0 && (fd = fcntl(s->net_fd, F_DUPFD_CLOEXEC, 3)) < 0)
			fd = k8_err_set(err, -errno, "dup: %s", strerror(errno));
		else if (s->net_fd <= 0)
			fd = vm_connect(s->net_path, err);
		if (fd < 0)
			return fd;
		ADD("-netdev");
		ADD("stream,id=net0,server=off,addr.type=fd,addr.str=%d", fdm_add(m, fd, true));
		ADD("-device");
		ADD("virtio-net-device,netdev=net0,mac=" GUEST_MAC);
	}
	return 0;
}

/* vm_spawn's third step: the scratch disk over its layer chain, root first, and the image
 * slots. Each file is an fd set; the backing chain is always explicit (QEMU would
 * otherwise open the paths in the qcow2 headers). */
static int vm_args_disks(struct argv_b *a, struct fdmap *m, const struct vm_spec *s,
			 const char *scratch, struct k8_err *err)
{
	int fd;

	if ((fd = disk_fd(a, m, scratch, true, err)) < 0)
		return fd;
	ADD("-blockdev");
	ADD("driver=file,node-name=scratch-file,filename=/dev/fdset/%d,discard=unmap", fd);
	for (int i = s->nchain - 1; i >= 0; i--) {
		if ((fd = disk_fd(a, m, s->chain[i], false, err)) < 0)
			return fd;
		ADD("-blockdev");
		ADD("driver=file,node-name=l%d-file,filename=/dev/fdset/%d,read-only=on", i, fd);
		ADD("-blockdev");
		if (i == s->nchain - 1)
			ADD("driver=qcow2,node-name=l%d,file=l%d-file,read-only=on", i, i);
		else
			ADD("driver=qcow2,node-name=l%d,file=l%d-file,read-only=on,backing=l%d", i,
			    i, i + 1);
	}
	ADD("-blockdev");
	if (s->nchain > 0)
		ADD("driver=qcow2,node-name=scratch,file=scratch-file,discard=unmap,backing=l0");
	else
		ADD("driver=qcow2,node-name=scratch,file=scratch-file,discard=unmap");
	ADD("-device");
	ADD("virtio-blk-device,id=scratchdev,drive=scratch,serial=scratch");
	for (int i = 0; i < K8_MAX_SLOTS; i++) {
		const struct vm_image *img = NULL;
		cleanup_free char *slot = xasprintf("%s/slot%d.qcow2", s->dir, i);
		for (int j = 0; j < s->nimages; j++)
			if (s->images[j].slot == i)
				img = &s->images[j];
		if (img) {
			if ((fd = disk_fd(a, m, img->disk, false, err)) < 0)
				return fd;
			ADD("-blockdev");
			ADD("driver=raw,node-name=i%dg0,read-only=on,file.driver=file,"
			    "file.filename=/dev/fdset/%d,file.read-only=on", i, fd);
		}
		if ((fd = disk_fd(a, m, slot, false, err)) < 0)
			return fd;
		ADD("-blockdev");
		ADD("driver=file,node-name=slot%d-file,filename=/dev/fdset/%d,read-only=on", i, fd);
		ADD("-blockdev");
		if (img)
			ADD("driver=qcow2,node-name=slot%d,file=slot%d-file,read-only=on,backing=i%dg0",
			    i, i, i);
		else
			ADD("driver=qcow2,node-name=slot%d,file=slot%d-file,read-only=on", i, i);
		ADD("-device");
		ADD("virtio-blk-device,drive=slot%d,serial=slot%d", i, i);
	}
	return 0;
}

/* vm_spawn's last step: the state a restore loads, from QEMU's fd `incoming` (-1: a
 * boot), with its RAM in a memory file at `ram` (-1: in the stream). */
static void vm_args_incoming(struct argv_b *a, const struct vm_spec *s, int incoming, int ram)
{
	if (incoming < 0)
		return;
	/* A devices' state has no configuration section (and says the VM ran): stopped once
	 * loaded, as a checkpoint's stream leaves it. A stream saved by a QEMU started so has
	 * none either. */
	if (ram == VM_RAM_FD)
		ADD("-S");
	if (ram == VM_RAM_FD || !vm_stream_configured(s->incoming_fd)) {
		ADD("-global");
		ADD("migration.send-configuration=off");
	}
	ADD("-incoming");
	ADD("fd:%d", incoming);
}

/* vm_spawn's log: qemu.log, opened with the command line (what ran is the first thing
 * one needs; one line: vm_qemu_said skips it) and whether it is jailed. The fd, or a
 * negative errno. */
static int vm_log_open(const char *log, const struct argv_b *a, const struct vm_spec *s,
		       bool preload, struct k8_err *err)
{
	int logfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (logfd < 0)
		return k8_err_set(err, -errno, "create %s: %s", log, strerror(errno));
	for (int i = 0; i < a->n; i++)
		dprintf(logfd, "%s%s", i ? " " : "", a->v[i]);
	if (s->jail_uid)
		dprintf(logfd, "  # jailed: uid/gid %u, no capabilities, no_new_privs, seccomp, "
			"root: a tmpfs%s\n", (unsigned)s->jail_uid,
			preload ? ", preloads " JAIL_PRELOAD : "");
	else
		dprintf(logfd, "  # NOT jailed%s\n", preload ? ", LD_PRELOAD kosa8-qemu-ram.so" : "");
	return logfd;
}

/* The child between fork and exec: its session, the log for output, the jail, the go
 * from the daemon (`go`, when s->spawned), the descriptors moved to 3, 4, ... (through
 * `floor_fd`, above every source and target), and QEMU (with `envp`, when not NULL). Only
 * async-signal-safe calls: the daemon is multi-threaded. */
static __attribute__((noreturn)) void vm_child(const struct vm_spec *s, struct jail_spec *jail,
					       struct fdmap *m, int logfd, int floor_fd,
					       const char *exe, char **argv, char **envp,
					       const int go[2])
{
	sigset_t none;
	int nul = open("/dev/null", O_RDONLY);
	const char *fail;

	setsid();
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (dup2(nul, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0)
		_exit(126);
	if (s->no_thp)  /* a speed hint: a kernel that refuses it costs only time */
		(void)prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
	if ((fail = jail_qemu_enter(jail)))
		child_fail(fail);
	/* The daemon records this pid first (s->spawned); EOF: it died meanwhile. */
	if (go[0] >= 0) {
		char c;
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(0);
	}
	for (int i = 0; i < m->n; i++) {
		m->src[i] = fcntl(m->src[i], F_DUPFD, floor_fd + i);
		if (m->src[i] < 0)
			child_fail("moving descriptors");
	}
	for (int i = 0; i < m->n; i++)
		if (dup2(m->src[i], 3 + i) < 0)
			child_fail("placing descriptors");
	if (syscall(SYS_close_range, 3 + m->n, ~0U, 0) < 0)
		child_fail("closing descriptors");
	if (envp)
		execve(exe, argv, envp);
	else
		execv(exe, argv);
	child_fail(exe);
}

int vm_spawn(const struct vm_spec *s, pid_t *pidp, struct k8_err *err)
{
	struct argv_b av = { 0 }, *a = &av;
	cleanup_free char *log = s->log ? xstrdup(s->log) : xasprintf("%s/qemu.log", s->dir);
	cleanup_free char *scratch = s->scratch ? NULL : xasprintf("%s/scratch.qcow2", s->dir);
	struct fdmap *m = xcalloc(1, sizeof(*m));
	struct jail_spec jail = { .uid = s->jail_uid, .kvm = !strcmp(s->accel, "kvm") };
	cleanup_free char *preload = NULL;
	char **envp = NULL;
	char exe[4096], desc[256];
	int logfd = -1, r = 0, floor_fd = 0, go[2] = { -1, -1 };
	pid_t pid;

	if ((r = qemu_path(exe, sizeof(exe), err)))
		goto out;
	if (s->ram_fd > 0 && (r = vm_ram_preload(s, &preload, &jail, &envp, err)))
		goto out;
	if (s->jail_uid && (r = jail_prepare(&jail, err)))
		goto out;
	/* 3 and 4: the verified kernel and initramfs; 5: a migration stream; 6: a memory
	 * file (VM_RAM_FD) */
	fdm_add(m, s->kernel_fd, false);
	fdm_add(m, s->initramfs_fd, false);
	int incoming = s->incoming_fd >= 0 ? fdm_add(m, s->incoming_fd, false) : -1;
	int ram = s->ram_fd > 0 && incoming >= 0 ? fdm_add(m, s->ram_fd, false) : -1;
	if (s->ram_fd > 0 && ram != VM_RAM_FD) {
		r = k8_err_set(err, -EINVAL, "a memory file without its devices' state");
		goto out;
	}

	vm_args_machine(a, s, ram);
	if ((r = vm_args_channels(a, m, s, err)) ||
	    (r = vm_args_disks(a, m, s, s->scratch ? s->scratch : scratch, err)))
		goto out;
	/* Last, so the transports of the devices above keep their places. The balloon only
	 * takes what the guest reports free (its pageblocks, 4 MiB here); the host never
	 * inflates it. */
	ADD("-device");
	ADD("%s", s->machine.balloon ? "virtio-balloon-device,free-page-reporting=on"
				     : "virtio-rng-device");
	vm_args_incoming(a, s, incoming, ram);
	if (s->cg && s->cg_name &&
	    cgroup_prepare(s->cg, s->cg_name, s->cpus, (uint64_t)s->memory_mib << 20, jail.cg_fds,
			   &jail.ncg, desc, sizeof(desc)) < 0 && s->cg->version)
		daemon_log("%s: could not prepare cgroup limits", s->cg_name);
	if ((logfd = vm_log_open(log, a, s, preload != NULL, err)) < 0) {
		r = logfd;
		goto out;
	}
	/* Above every source and every target: the child moves sources here first. */
	floor_fd = 3 + m->n;
	for (int i = 0; i < m->n; i++)
		if (m->src[i] >= floor_fd)
			floor_fd = m->src[i] + 1;
	if (logfd >= floor_fd)
		floor_fd = logfd + 1;
	if (s->spawned && pipe2(go, O_CLOEXEC) < 0) {
		r = k8_err_set(err, -errno, "pipe: %s", strerror(errno));
		goto out;
	}
	pid = fork();
	if (pid < 0) {
		r = k8_err_set(err, -errno, "fork: %s", strerror(errno));
		goto out;
	}
	if (pid == 0)
		vm_child(s, &jail, m, logfd, floor_fd, exe, a->v, envp, go);
	*pidp = pid;
	if (go[0] >= 0) {
		close(go[0]);
		go[0] = -1;
		s->spawned(s->spawned_ctx, pid);
		if (write(go[1], "g", 1) != 1)
			r = k8_err_set(err, -errno, "starting QEMU: %s", strerror(errno));
	}
out:
	if (go[0] >= 0)
		close(go[0]);
	if (go[1] >= 0)
		close(go[1]);
	if (logfd >= 0)
		close(logfd);
	for (int i = 0; i < jail.ncg; i++)
		close(jail.cg_fds[i]);
	fdm_close(m);
	free(m);
	av_free(a);
	for (size_t i = 0; envp && envp[i]; i++)
		free(envp[i]);
	free(envp);
	return r;
}

int vm_save_devices(struct qmp *q, int fd, bool release_disks, struct k8_err *err)
{
	json_t *added = NULL;
	json_int_t set;
	char path[40];
	cleanup_close int wfd = -1;
	int r;

	/* QEMU takes an fd set's member only if it is open as it asks: write-only. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if ((wfd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
		return k8_err_set(err, -errno, "reopening the devices' file: %s", strerror(errno));
	if ((r = qmp_exec_fd(q, "add-fd", NULL, wfd, &added, 10000, err)))
		return r;
	set = json_integer_value(json_object_get(added, "fdset-id"));
	json_decref(added);
	snprintf(path, sizeof(path), "/dev/fdset/%lld", (long long)set);
	/* "live" (of a stopped VM) inactivates the disks, as for another QEMU to take them */
	r = qmp_exec(q, "xen-save-devices-state",
		     json_pack("{s:s,s:b}", "filename", path, "live", release_disks), NULL, 30000,
		     err);
	qmp_exec(q, "remove-fd", json_pack("{s:I}", "fdset-id", set), NULL, 10000, NULL);
	return r ? k8_err_wrap(err, "saving the devices' state") : 0;
}

int vm_ram_hva(struct qmp *q, uint64_t *hva, struct k8_err *err)
{
	json_t *ret = NULL;
	const char *said, *at;
	char *end;
	int r;

	r = qmp_exec(q, "human-monitor-command", json_pack("{s:s}", "command-line", "gpa2hva 0"),
		     &ret, 10000, err);
	if (r)
		return r;
	/* "Host virtual address for 0x0 (microvm.ram) is 0x7f...": QEMU's words, checked */
	said = json_string_value(ret);
	at = said ? strstr(said, "(microvm.ram) is 0x") : NULL;
	errno = 0;
	*hva = at ? strtoull(at + 19, &end, 16) : 0;
	if (!at || errno || end == at + 19 || !*hva || *hva % 4096)
		r = k8_err_set(err, -EIO, "QEMU did not say where the guest's RAM is");
	json_decref(ret);
	return r;
}

bool vm_qemu_said(const char *dir, bool first_line, char *out, size_t n)
{
	cleanup_free char *logp = xasprintf("%s/qemu.log", dir);
	cleanup_free char *log = NULL;
	char *msg, *nl;

	if (read_file(logp, 16384, &log, NULL) || !(msg = strchr(log, '\n')) || !*++msg)
		return false;
	if (first_line && (nl = strchr(msg, '\n')))
		*nl = '\0';
	snprintf(out, n, "%s", msg);
	return true;
}

unsigned long long vm_proc_start(pid_t pid)
{
	char path[64], buf[1024];
	cleanup_close int fd = -1;
	ssize_t n;
	char *p;
	unsigned long long start = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return 0;
	p += 2;
	if (*p == 'Z' || *p == 'X')
		return 0;
	/* field 3 is the state; starttime is field 22 */
	for (int field = 3; field < 22 && p; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	if (p)
		start = strtoull(p, NULL, 10);
	return start;
}

bool vm_alive(pid_t pid, unsigned long long start)
{
	if (pid <= 0)
		return false;
	unsigned long long s = vm_proc_start(pid);
	return s && (!start || s == start);
}

int vm_attach_image(struct qmp *q, int slot, const char *disk, struct k8_err *err)
{
	char node[32], slotname[16], slotfile[24], fdset[32];
	static unsigned gen = 1;
	cleanup_close int fd = open(disk, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	json_t *added = NULL;
	int r;

	if (fd < 0)
		return k8_err_set(err, -errno, "open %s: %s", disk, strerror(errno));
	snprintf(node, sizeof(node), "i%dg%u", slot, __atomic_add_fetch(&gen, 1, __ATOMIC_SEQ_CST));
	snprintf(slotname, sizeof(slotname), "slot%d", slot);
	snprintf(slotfile, sizeof(slotfile), "slot%d-file", slot);
	/* QEMU is jailed and opens no path: the disk arrives as an fd set. */
	r = qmp_exec_fd(q, "add-fd", NULL, fd, &added, 10000, err);
	snprintf(fdset, sizeof(fdset), "/dev/fdset/%lld",
		 (long long)json_integer_value(json_object_get(added, "fdset-id")));
	json_decref(added);
	if (r)
		return r;
	r = qmp_exec(q, "blockdev-add",
		     json_pack("{s:s,s:s,s:b,s:{s:s,s:s,s:b}}", "driver", "raw", "node-name", node,
			       "read-only", 1, "file", "driver", "file", "filename", fdset,
			       "read-only", 1),
		     NULL, 10000, err);
	if (r)
		return r;
	r = qmp_exec(q, "blockdev-reopen",
		     json_pack("{s:[{s:s,s:s,s:s,s:b,s:s}]}", "options", "driver", "qcow2",
			       "node-name", slotname, "file", slotfile, "read-only", 1, "backing",
			       node),
		     NULL, 10000, err);
	return r;
}
