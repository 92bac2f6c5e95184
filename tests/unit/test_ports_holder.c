/* SPDX-License-Identifier: Apache-2.0 */
/* test_ports_holder.c - who holds a TCP port (src/daemon/ports.c `ports_holder`, named in
 * the error when kosa8d cannot bind a model server's or a published port): this process
 * listens on IPv4 and IPv6 ports and must be found by pid, command and uid; a port
 * nobody listens on, or one only connected from, names no one. */
#include "daemon/ports.h"
#include "t.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static int listener(int family, int *port)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t l = family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ss.ss_family = (sa_family_t)family;
	if (family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
	else
		((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&ss, l) < 0 || listen(fd, 4) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &l) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port :
		      ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

int main(void)
{
	char who[512], want[128];
	int port = 0, fd = listener(AF_INET, &port);

	CHECK(fd >= 0);
	ports_holder(port, who, sizeof(who));
	snprintf(want, sizeof(want), "pid %d (test_ports_hold), uid %u", (int)getpid(),
		 (unsigned)getuid());
	CHECK(strncmp(who, want, strlen(want)) == 0);
	if (strncmp(who, want, strlen(want)))
		fprintf(stderr, "got \"%s\", want \"%s...\"\n", who, want);

	/* ports_bind on it: in use, the holder named */
	struct k8_err err = { 0 };
	int bound = 0;
	CHECK_EQ_INT(ports_bind("127.0.0.1", AF_INET, port, &bound, &err), -EEXIST);
	CHECK(strstr(err.msg, "is in use by pid ") != NULL && strstr(err.msg, want + 4) != NULL);

	/* connected, not listening: no one holds it for a bind */
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	CHECK(c >= 0 && connect(c, (struct sockaddr *)&to, sizeof(to)) == 0);
	close(fd);
	ports_holder(port, who, sizeof(who));
	CHECK_STR(who, "");
	close(c);

	int port6 = 0, fd6 = listener(AF_INET6, &port6);
	if (fd6 >= 0) {         /* a host without IPv6 has nothing to find */
		ports_holder(port6, who, sizeof(who));
		snprintf(want, sizeof(want), "pid %d (", (int)getpid());
		CHECK(strncmp(who, want, strlen(want)) == 0);
		close(fd6);
	}
	/* a small buffer is cut, still a string */
	fd = listener(AF_INET, &port);
	ports_holder(port, who, 8);
	CHECK(strlen(who) == 7);
	close(fd);
	return T_DONE();
}
