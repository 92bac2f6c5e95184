/* SPDX-License-Identifier: Apache-2.0 */
/* test_net_inbound.c - kosa8-net's publish with a guest address (inbound.c): an engine
 * container's own address (GUEST_CTR4_FIRST..LAST) is taken, anything else in
 * "guest_ip" is refused, and two containers may publish the same port. A real libslirp. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/guest.h"
#include "net/net.h"
#include "t.h"

static int listener(int family)
{
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_storage ss = { .ss_family = (sa_family_t)family };

	if (family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else
		((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
	if (fd < 0 || bind(fd, (struct sockaddr *)&ss, family == AF_INET ?
			   sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) < 0 ||
	    listen(fd, 4) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* publish guest_port 8000 with `gip` (NULL: none) on a new listener of `family` */
static int publish(struct net *n, int family, json_t *gip, json_t **out)
{
	char err[256];
	json_t *req = json_pack("{s:s,s:i}", "op", "publish", "guest_port", 8000);
	int fd = listener(family), r;

	if (gip)
		json_object_set_new(req, "guest_ip", gip);
	*out = NULL;
	r = inbound_publish(n, &fd, req, out, err, sizeof(err));
	if (fd >= 0)
		close(fd);
	json_decref(req);
	return r;
}

int main(void)
{
	struct net n = { .id = "t", .max_flows = 64 };
	char err[256];
	json_t *out;
	struct net_addr a;

	if (engine_init(&n, err, sizeof(err)) < 0) {
		fprintf(stderr, "engine_init: %s\n", err);
		return 1;
	}
	/* the range itself */
	net_addr_parse("10.0.2.16", &a);
	CHECK(engine_is_ctr4(&n, &a));
	net_addr_parse("10.0.2.254", &a);
	CHECK(engine_is_ctr4(&n, &a));
	const char *not_ctr[] = { "10.0.2.15", "10.0.2.2", "10.0.2.3", "10.0.2.4", "10.0.2.255",
				  "10.0.3.16", "10.0.2.0", "fd00::16" };
	for (size_t i = 0; i < sizeof(not_ctr) / sizeof(*not_ctr); i++) {
		net_addr_parse(not_ctr[i], &a);
		CHECK(!engine_is_ctr4(&n, &a));
	}

	/* the VM's own address by default; a container's own by guest_ip */
	CHECK_EQ_INT(publish(&n, AF_INET, NULL, &out), 0);
	CHECK_STR(json_string_value(json_object_get(out, "guest_ip")), GUEST_IP4);
	json_decref(out);
	CHECK_EQ_INT(publish(&n, AF_INET, json_string("10.0.2.16"), &out), 0);
	CHECK_STR(json_string_value(json_object_get(out, "guest_ip")), "10.0.2.16");
	json_decref(out);
	CHECK_EQ_INT(publish(&n, AF_INET, json_string("10.0.2.17"), &out), 0);
	json_decref(out);
	/* the same guest port, three guests: each found by its own address */
	net_addr_parse("10.0.2.16", &a);
	struct inbound_port *p16 = inbound_find_guest(&n, &a, 8000);
	net_addr_parse("10.0.2.17", &a);
	struct inbound_port *p17 = inbound_find_guest(&n, &a, 8000);
	struct inbound_port *pvm = inbound_find_guest(&n, &n.guest4, 8000);
	CHECK(p16 && p17 && pvm && p16 != p17 && p16 != pvm && p17 != pvm);
	net_addr_parse("10.0.2.18", &a);
	CHECK(inbound_find_guest(&n, &a, 8000) == NULL);
	CHECK(inbound_find_guest(&n, &n.guest6, 8000) == NULL);

	/* hostile guest_ip values: refused, nothing published */
	json_t *bad[] = { json_string("10.0.2.15"), json_string("10.0.2.2"),
			  json_string("10.0.2.3"), json_string("10.0.2.255"),
			  json_string("10.0.3.20"), json_string("127.0.0.1"),
			  json_string("0.0.0.0"), json_string("fd00::16"), json_string(""),
			  json_string("10.0.2.16 "), json_stringn("10.0.2.16\0x", 11),
			  json_integer(16), json_true(), json_object(),
			  json_string("10.0.2.000000000000000000000000000000000000000000016") };
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		CHECK_EQ_INT(publish(&n, AF_INET, bad[i], &out), -EINVAL);
		CHECK(out == NULL);
	}
	/* a container address with an IPv6 listener: refused (containers are IPv4 only) */
	out = NULL;
	int r6 = publish(&n, AF_INET6, json_string("10.0.2.20"), &out);
	CHECK(r6 == -EINVAL || r6 == -EAFNOSUPPORT || r6 == -EADDRNOTAVAIL);
	json_decref(out);

	json_t *list = inbound_json(&n);
	CHECK_EQ_INT((long long)json_array_size(list), 3);
	json_decref(list);
	engine_free(&n);
	return T_DONE();
}
