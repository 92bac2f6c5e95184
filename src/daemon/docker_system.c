/* SPDX-License-Identifier: Apache-2.0 */
/* docker_system.c - docker.sock's /_ping, /version and /info (docker_system.h,
 * docs/docker.md "The socket"). */
#include "daemon/docker_system.h"
#include "daemon/docker_ctr.h"
#include "daemon/docker_images.h"
#include "daemon/daemon.h"
#include "docker/query.h"

#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static const char *dksys_arch(const struct utsname *u)
{
	if (!strcmp(u->machine, "x86_64"))
		return "amd64";
	if (!strcmp(u->machine, "aarch64"))
		return "arm64";
	return u->machine;
}

int dksys_api_ping(struct api_call *call)
{
	call->text = "OK";
	return 0;
}

int dksys_api_version(struct api_call *call)
{
	struct utsname u;

	uname(&u);
	call->out = json_pack(
		"{s:{s:s},s:[{s:s,s:s,s:{s:s,s:s,s:s,s:s,s:s}}],s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,"
		"s:s}",
		"Platform", "Name", "kosa8 " DOCKER_K8_VERSION,
		"Components", "Name", "Engine", "Version", DOCKER_ENGINE_VERSION, "Details",
		"ApiVersion", DQ_API_VERSION, "MinAPIVersion", DOCKER_MIN_API, "Os", "linux",
		"Arch", dksys_arch(&u), "KernelVersion", u.release,
		"Version", DOCKER_ENGINE_VERSION, "ApiVersion", DQ_API_VERSION, "MinAPIVersion",
		DOCKER_MIN_API, "Os", "linux", "Arch", dksys_arch(&u), "KernelVersion", u.release,
		"GitCommit", "", "GoVersion", "", "BuildTime", "");
	json_object_set_new(call->out, "Experimental", json_false());
	json_array_append_new(json_object_get(call->out, "Components"),
			      json_pack("{s:s,s:s}", "Name", "kosa8", "Version", DOCKER_K8_VERSION));
	return 0;
}

int dksys_api_info(struct api_call *call)
{
	struct daemon *d = call->d;
	struct utsname u;
	char host[256] = "", now[64];
	time_t t = time(NULL);
	struct tm tm;
	json_t *imgs = dki_images(d, &call->err);
	size_t nimg = imgs ? json_array_size(imgs) : 0;

	int nrun, nstop, nctr = dkc_count(d, &nrun, &nstop);

	json_decref(imgs);
	uname(&u);
	gethostname(host, sizeof(host) - 1);
	gmtime_r(&t, &tm);
	strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", &tm);
	/* Containers: the Docker API's own (docker_ctr.c), not kosa8's sandboxes. */
	call->out = json_pack(
		"{s:s,s:i,s:i,s:i,s:i,s:I,s:s,s:[],s:{s:[],s:[],s:n,s:[]},s:b,s:b,s:b,s:b,s:b,"
		"s:b,s:b,s:b,s:i,s:i,s:s,s:s,s:s,s:i,s:s,s:s,s:s,s:s,s:s,s:s}",
		"ID", "", "Containers", nctr, "ContainersRunning", nrun, "ContainersPaused", 0,
		"ContainersStopped", nstop, "Images", (json_int_t)nimg, "Driver", "kosa8",
		"DriverStatus", "Plugins", "Volume", "Network", "Authorization", "Log",
		"MemoryLimit", 1, "SwapLimit", 0, "CpuCfsPeriod", 1, "CpuCfsQuota", 1,
		"CPUShares", 1, "CPUSet", 1, "PidsLimit", 1, "Debug", 0, "NFd", 0,
		"NGoroutines", 0, "SystemTime", now, "LoggingDriver", "json-file",
		"CgroupDriver", "cgroupfs", "NEventsListener", 0, "KernelVersion", u.release,
		"OperatingSystem", "kosa8", "OSVersion", DOCKER_K8_VERSION, "OSType", "linux",
		"Architecture", u.machine, "IndexServerAddress", "https://index.docker.io/v1/");
	json_object_update_new(call->out, json_pack(
		"{s:I,s:I,s:s,s:s,s:[],s:b,s:s,s:{s:{s:s}},s:s,s:{s:s,s:s,s:s,s:b,s:s,s:n},"
		"s:b,s:s,s:[],s:[],s:{s:{},s:[],s:[]}}",
		"NCPU", (json_int_t)sysconf(_SC_NPROCESSORS_ONLN),
		"MemTotal", (json_int_t)sysconf(_SC_PHYS_PAGES) * (json_int_t)sysconf(_SC_PAGESIZE),
		"DockerRootDir", d->home, "Name", host, "Labels", "ExperimentalBuild", 0,
		"ServerVersion", DOCKER_K8_VERSION, "Runtimes", "kosa8", "path", "kosa8d",
		"DefaultRuntime", "kosa8", "Swarm", "NodeID", "", "NodeAddr", "",
		"LocalNodeState", "inactive", "ControlAvailable", 0, "Error", "",
		"RemoteManagers", "LiveRestoreEnabled", 0, "Isolation", "", "SecurityOptions",
		"Warnings", "RegistryConfig", "IndexConfigs", "InsecureRegistryCIDRs", "Mirrors"));
	return 0;
}
