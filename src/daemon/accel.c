/* SPDX-License-Identifier: Apache-2.0 */
/* accel.c - choose KVM or TCG by probing, never by guessing.
 *
 * /dev/kvm existing is not enough: on hosts whose KVM is PVM (kvm_pvm), a stock guest
 * kernel hangs right after real-mode setup. So the probe boots the real guest image under
 * KVM and waits for the agent's HELLO. The verdict is cached in $KOSA8_HOME/accel.json,
 * keyed by the host kernel release and the guest kernel's hash, so only the first daemon
 * start pays for it.
 */
#include "daemon/accel.h"
#include "daemon/daemon.h"
#include "daemon/agentlink.h"
#include "daemon/qmp.h"
#include "daemon/vm.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#define PROBE_TIMEOUT_MS 10000

static int kvm_usable(char *why, size_t n)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	int v;

	if (fd < 0) {
		snprintf(why, n, "/dev/kvm %s", errno == ENOENT ? "does not exist (no hardware "
			 "virtualization, or the kvm module is not loaded)" : strerror(errno));
		return 0;
	}
	v = ioctl(fd, KVM_GET_API_VERSION, 0);
	close(fd);
	if (v != KVM_API_VERSION) {
		snprintf(why, n, "/dev/kvm answered API version %d, not %d", v, KVM_API_VERSION);
		return 0;
	}
	return 1;
}

static bool pvm_loaded(void)
{
	return access("/sys/module/kvm_pvm", F_OK) == 0;
}

/* Boot the guest under KVM in a scratch sandbox dir; 0 when the agent said hello. */
static int probe_boot(struct daemon *d, uint64_t *ms, struct k8_err *err)
{
	cleanup_free char *dir = xasprintf("%s/cache/probe", d->home);
	cleanup_free char *qmp = xasprintf("%s/run/probe.qmp", d->home);
	cleanup_free char *agent = xasprintf("%s/run/probe.agent", d->home);
	struct agentlink link = { .fd = -1 };
	struct qmp q = { .fd = -1 };
	int kfd = -1, ifd = -1, r;
	pid_t pid = 0;
	uint64_t t0 = now_mono_ns();

	rm_rf(dir);
	if ((r = mkdir_p(dir, 0700)))
		return k8_err_set(err, r, "mkdir %s", dir);
	if ((r = vm_make_disks(d->home, dir, 1, err)))
		return r;
	if ((r = guest_verify_open(&d->guest, &kfd, &ifd, err)))
		return r;
	unlink(qmp);
	unlink(agent);
	struct vm_spec spec = { .accel = "kvm", .cpus = 1, .memory_mib = 256, .dir = dir,
				.qmp_path = qmp, .agent_path = agent, .kernel_fd = kfd,
				.initramfs_fd = ifd, .incoming_fd = -1 };
	r = vm_spawn(&spec, &pid, err);
	close(kfd);
	close(ifd);
	if (r)
		goto out;
	r = qmp_connect(&q, qmp, 5000, err);
	if (!r)
		r = link_connect(&link, agent, NULL, NULL, err);
	if (!r)
		r = link_wait_hello(&link, PROBE_TIMEOUT_MS, err);
	*ms = (now_mono_ns() - t0) / 1000000;
	if (r) {
		/* QEMU's own words say most: e.g. "failed to set MSR 0x10a". */
		char msg[1024];
		if (vm_qemu_said(dir, true, msg, sizeof(msg))) {
			err->code = 0;
			k8_err_set(err, -EIO, "%s", msg);
		}
	}
out:
	if (link.fd >= 0)
		link_close(&link);
	if (q.fd >= 0)
		qmp_close(&q);
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	rm_rf(dir);
	return r;
}

static void set(struct daemon *d, const char *accel, const char *fmt, ...) K8_PRINTF(3, 4);
static void set(struct daemon *d, const char *accel, const char *fmt, ...)
{
	va_list ap;
	snprintf(d->accel, sizeof(d->accel), "%s", accel);
	va_start(ap, fmt);
	vsnprintf(d->accel_reason, sizeof(d->accel_reason), fmt, ap);
	va_end(ap);
}

int accel_choose(struct daemon *d, struct k8_err *err)
{
	char why[256];
	struct utsname u;
	cleanup_free char *cache = xasprintf("%s/accel.json", d->home);
	cleanup_free char *text = NULL;
	char key[256];
	uint64_t ms = 0;
	struct k8_err perr = { 0 };

	if (!strcmp(d->accel_opt, "tcg")) {
		set(d, "tcg", "TCG (software emulation) because --accel tcg was given");
		return 0;
	}
	if (!kvm_usable(why, sizeof(why))) {
		if (!strcmp(d->accel_opt, "kvm"))
			return k8_err_set(err, -ENODEV, "--accel kvm: %s", why);
		set(d, "tcg", "TCG (software emulation, ~10-25x slower than KVM): %s", why);
		return 0;
	}
	uname(&u);
	snprintf(key, sizeof(key), "%s %s", u.release, d->guest.kernel_sha);
	if (read_file(cache, 8192, &text, NULL) == 0) {
		json_t *c = json_loads(text, 0, NULL);
		const char *k = json_string_value(json_object_get(c, "key"));
		const char *a = json_string_value(json_object_get(c, "accel"));
		const char *rs = json_string_value(json_object_get(c, "reason"));
		if (k && a && rs && !strcmp(k, key) && (!strcmp(a, "kvm") || !strcmp(a, "tcg")) &&
		    (strcmp(d->accel_opt, "kvm") || !strcmp(a, "kvm"))) {
			set(d, a, "%s (probed earlier; delete %s to probe again)", rs, cache);
			json_decref(c);
			return 0;
		}
		json_decref(c);
	}
	if (!d->guest.kernel[0]) {
		set(d, "tcg", "TCG: the guest image is missing, so KVM could not be probed");
		return 0;
	}
	daemon_log("probing KVM: booting the guest under KVM (up to %d s)", PROBE_TIMEOUT_MS / 1000);
	if (probe_boot(d, &ms, &perr) == 0) {
		set(d, "kvm", "KVM: probed, the guest booted to its agent in %llu ms",
		    (unsigned long long)ms);
	} else {
		if (!strcmp(d->accel_opt, "kvm"))
			return k8_err_set(err, -ENODEV, "--accel kvm: KVM could not boot the guest: %s",
					  perr.msg);
		set(d, "tcg", "TCG (software emulation, ~10-25x slower): /dev/kvm is present%s but "
		    "could not boot the guest kernel (%s)",
		    pvm_loaded() ? " (served by kvm_pvm, which runs only PVM-patched guests)" : "",
		    perr.msg);
	}
	json_t *c = json_pack("{s:s,s:s,s:s}", "key", key, "accel", d->accel, "reason", d->accel_reason);
	char *t = json_dumps(c, JSON_INDENT(2));
	write_file_atomic(cache, t, strlen(t), 0600);
	free(t);
	json_decref(c);
	return 0;
}
