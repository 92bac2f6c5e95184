/* SPDX-License-Identifier: Apache-2.0 */
/* broker.c - a sandbox's egress broker: the rules given at create, a placeholder of its
 * own, and its kosa8-broker process (docs/broker.md "Stage 2").
 *
 * The rules and the placeholder are kept in the sandbox's broker.json, which is also the
 * file kosa8-broker reads (--rules): neither is a secret. The secrets reach the process
 * on a pipe at start and over its control socket when they change (rotation), never in
 * argv, the environment or a file of the sandbox. The process runs as the sandbox's
 * broker uid (jail.h, JAIL_BROKER) and listens on a unix socket in a directory of its
 * own, $KOSA8_HOME/run/<id>.broker.d/sock, which kosa8-net (--broker-dir) hands the
 * guest's connections to 10.0.2.4:80: the socket belongs to the sandbox's kosa8-net uid,
 * so nothing else unprivileged reaches it, and the host's loopback is never opened.
 * Started before kosa8-net, stopped with it; a rewind keeps it like kosa8-net. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctype.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "common/guest.h"
#include "daemon/broker.h"
#include "daemon/api_route.h"
#include "daemon/jail.h"
#include "daemon/record.h"
#include "daemon/secret.h"

#define BROKER_REQ_MS 5000

#define BROKER_LOCAL "local-model"

/* Whether a rule is local-model[=MODEL]; *model is the model's name or NULL. */
static bool broker_rule_local(const char *rule, const char **model)
{
	size_t l = sizeof(BROKER_LOCAL) - 1;

	if (strncmp(rule, BROKER_LOCAL, l) || (rule[l] != '\0' && rule[l] != '='))
		return false;
	*model = rule[l] == '=' ? rule + l + 1 : NULL;
	return true;
}

/* The secret a rule uses (into out; empty for local-model, which uses none), or -EINVAL
 * for a rule of no known form. */
static int broker_rule_secret(const char *rule, char *out, size_t n)
{
	const char *eq = strchr(rule, '='), *model;
	size_t kl = eq ? (size_t)(eq - rule) : strlen(rule);

	if (broker_rule_local(rule, &model)) {
		/* a model's name as the store takes it (model.c) */
		if (model && (!*model || strlen(model) > 128 ||
			      strspn(model, "abcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(model)))
			return -EINVAL;
		snprintf(out, n, "%s", "");
		return 0;
	}

	if ((kl == 6 && !strncmp(rule, "openai", 6)) || (kl == 9 && !strncmp(rule, "anthropic", 9))) {
		snprintf(out, n, "%s", eq ? eq + 1 : rule);
		return 0;
	}
	if (strncmp(rule, "header:", 7) || !eq)
		return -EINVAL;
	/* header:HOST:HEADER=SECRET: a host name, a header token */
	const char *host = rule + 7, *c = memchr(host, ':', (size_t)(eq - host));
	if (!c || c == host || c + 1 == eq || c - host > 253)
		return -EINVAL;
	for (const char *p = host; p < c; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
			return -EINVAL;
	for (const char *p = c + 1; p < eq; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
			return -EINVAL;
	snprintf(out, n, "%s", eq + 1);
	return 0;
}

static bool broker_has_rule(const struct sb_broker *b, const char *provider)
{
	size_t i, l = strlen(provider);
	json_t *v;

	json_array_foreach(b->rules, i, v) {
		const char *s = json_string_value(v);
		if (!strncmp(s, provider, l) && (s[l] == '\0' || s[l] == '='))
			return true;
	}
	return false;
}

int broker_from_body(struct daemon *d, json_t *body, json_t **rules, struct k8_err *err)
{
	json_t *list = json_object_get(body, "broker"), *v;
	char name[SECRET_NAME_MAX + 2];
	size_t i;

	*rules = NULL;
	if (!list || json_is_null(list) || (json_is_array(list) && !json_array_size(list))) {
		if (json_is_true(json_object_get(body, "broker_intercept")))
			return k8_err_set(err, -EINVAL, "--broker-intercept needs --broker rules");
		return 0;
	}
	if (!json_is_array(list))
		return k8_err_set(err, -EINVAL, "broker must be a list of rules");
	if (json_array_size(list) > BROKER_MAX_RULES)
		return k8_err_set(err, -E2BIG, "at most %d broker rules", BROKER_MAX_RULES);
	json_array_foreach(list, i, v) {
		const char *s = json_string_value(v);
		char *val = NULL;
		size_t vl = 0;
		const char *model;
		char addr[160];
		if (!s || strlen(s) > 400 || broker_rule_secret(s, name, sizeof(name)) < 0)
			return k8_err_set(err, -EINVAL, "broker rule '%.80s': expected openai[=SECRET], "
					  "anthropic[=SECRET], header:HOST:HEADER=SECRET or "
					  "local-model[=MODEL]", s ? s : "(not a string)");
		if (broker_rule_local(s, &model)) {
			/* the server must run now; its address is looked up again at each start */
			struct k8_err e2 = { 0 };
			if (!d->model_addr)
				return k8_err_set(err, -ENOENT, "broker rule '%s': no model servers "
						  "in this daemon", s);
			if (d->model_addr(d, model, addr, sizeof(addr), &e2) < 0)
				return k8_err_set(err, e2.code, "broker rule '%.80s': %s", s, e2.msg);
			continue;
		}
		if (!secret_name_ok(name))
			return k8_err_set(err, -EINVAL, "broker rule '%.80s': '%.70s' is not a secret "
					  "name", s, name);
		/* The secret must exist now; its value is read again at each start. */
		if (secret_read(d->home, name, &val, &vl, err) < 0)
			return k8_err_set(err, -ENOENT, "broker rule '%.80s': no secret '%s'; set it "
					  "first with `kosa8 secret set %s --stdin`", s, name, name);
		secret_wipe(val, vl);
	}
	json_t *ic = json_object_get(body, "broker_intercept");
	if (ic && !json_is_boolean(ic) && !json_is_null(ic))
		return k8_err_set(err, -EINVAL, "broker_intercept must be true or false");
	if (json_is_true(ic)) {
		bool hosted = false;
		json_array_foreach(list, i, v) {
			const char *model;
			hosted |= !broker_rule_local(json_string_value(v), &model);
		}
		if (!hosted)
			return k8_err_set(err, -EINVAL, "--broker-intercept needs a rule for a "
					  "hosted API (openai, anthropic or header:HOST:...)");
	}
	*rules = json_pack("{s:O,s:b}", "rules", list, "intercept", json_is_true(ic));
	return 0;
}

/* The rule's upstream host (lower case), or false for local-model. */
static bool broker_rule_host(const char *rule, char *out, size_t n)
{
	const char *model;
	size_t kl = strcspn(rule, "=");

	if (broker_rule_local(rule, &model))
		return false;
	if (kl == 6 && !strncmp(rule, "openai", 6))
		snprintf(out, n, "api.openai.com");
	else if (kl == 9 && !strncmp(rule, "anthropic", 9))
		snprintf(out, n, "api.anthropic.com");
	else if (!strncmp(rule, "header:", 7))
		snprintf(out, n, "%.*s", (int)strcspn(rule + 7, ":"), rule + 7);
	else
		return false;
	for (char *p = out; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return true;
}

int broker_intercept_hosts(struct sandbox *sb, char (*hosts)[254], int max)
{
	size_t i;
	json_t *v;
	int n = 0;

	broker_load(sb);
	if (!sb->broker || !sb->broker->intercept)
		return 0;
	json_array_foreach(sb->broker->rules, i, v)
		if (n < max && broker_rule_host(json_string_value(v), hosts[n], sizeof(hosts[n])))
			n++;
	return n;
}

/* Interception's CA, made once per sandbox (a fork makes its own): P-256, ten years,
 * name-constrained to the rules' hosts, so that even its key could vouch for nothing
 * else. broker-ca.key (0600) and broker-ca.crt in the sandbox's directory; the key goes
 * to kosa8-broker on a pipe at each start, never to the VM. */
static int broker_ca_make(struct sandbox *sb, struct k8_err *err)
{
	cleanup_free char *kpath = xasprintf("%s/broker-ca.key", sb->dir);
	cleanup_free char *cpath = xasprintf("%s/broker-ca.crt", sb->dir);
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *crt = X509_new();
	BIO *kb = BIO_new(BIO_s_mem()), *cb = BIO_new(BIO_s_mem());
	unsigned char serial[16];
	char cn[128], nc[4096] = "critical,", h[254];
	BIGNUM *bn = NULL;
	X509V3_CTX v3;
	size_t i, used = strlen(nc);
	json_t *v;
	int r = -ENOMEM;

	snprintf(cn, sizeof(cn), "kosa8 broker CA for sandbox %.64s", sb->name);
	json_array_foreach(sb->broker->rules, i, v) {
		if (!broker_rule_host(json_string_value(v), h, sizeof(h)))
			continue;
		int w = snprintf(nc + used, sizeof(nc) - used, "%spermitted;DNS:%s",
				 used > 9 ? "," : "", h);
		if (w < 0 || (size_t)w >= sizeof(nc) - used)
			break;
		used += (size_t)w;
	}
	if (getrandom(serial, sizeof(serial), 0) != sizeof(serial))
		goto out;
	serial[0] &= 0x7f;
	X509_NAME *name = crt ? X509_get_subject_name(crt) : NULL;
	if (!key || !crt || !kb || !cb || !(bn = BN_bin2bn(serial, sizeof(serial), NULL)) ||
	    !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(crt)) || !X509_set_version(crt, 2) ||
	    !X509_gmtime_adj(X509_getm_notBefore(crt), -3600) ||
	    !X509_gmtime_adj(X509_getm_notAfter(crt), 3650L * 86400) ||
	    !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (unsigned char *)cn, -1, -1, 0) ||
	    !X509_set_issuer_name(crt, name) || !X509_set_pubkey(crt, key))
		goto out;
	X509V3_set_ctx(&v3, crt, crt, NULL, NULL, 0);
	const char *exts[][2] = {
		{ "basicConstraints", "critical,CA:TRUE,pathlen:0" },
		{ "keyUsage", "critical,keyCertSign,cRLSign" },
		{ "subjectKeyIdentifier", "hash" },
		{ "nameConstraints", nc },
	};
	for (size_t k = 0; k < ARRAY_SIZE(exts); k++) {
		X509_EXTENSION *e = X509V3_EXT_conf(NULL, &v3, exts[k][0], exts[k][1]);
		if (!e || !X509_add_ext(crt, e, -1)) {
			X509_EXTENSION_free(e);
			goto out;
		}
		X509_EXTENSION_free(e);
	}
	if (X509_sign(crt, key, EVP_sha256()) <= 0 ||
	    !PEM_write_bio_PrivateKey(kb, key, NULL, NULL, 0, NULL, NULL) ||
	    !PEM_write_bio_X509(cb, crt))
		goto out;
	char *kp, *cp;
	long kl = BIO_get_mem_data(kb, &kp), cl = BIO_get_mem_data(cb, &cp);
	r = write_file_atomic(kpath, kp, (size_t)kl, 0600);
	if (!r)
		r = write_file_atomic(cpath, cp, (size_t)cl, 0644);
	OPENSSL_cleanse(kp, (size_t)kl);
out:
	BN_free(bn);
	BIO_free(kb);
	BIO_free(cb);
	X509_free(crt);
	EVP_PKEY_free(key);
	if (r)
		return k8_err_set(err, r < 0 ? r : -EIO, "making the sandbox's broker CA failed");
	return 0;
}

/* A fork: the source's CA, copied (key 0600). */
static int broker_ca_copy(const char *from, struct sandbox *sb, struct k8_err *err)
{
	static const char *const files[] = { "broker-ca.key", "broker-ca.crt" };
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		cleanup_free char *src = xasprintf("%s/%s", from, files[i]);
		cleanup_free char *dst = xasprintf("%s/%s", sb->dir, files[i]);
		char *t = NULL;
		size_t n = 0;
		int r = read_file(src, 8000, &t, &n);
		if (r == 0)
			r = write_file_atomic(dst, t, n, 0600);
		if (t)
			OPENSSL_cleanse(t, n);
		free(t);
		if (r < 0)
			return k8_err_set(err, r, "copying the broker CA of the fork's source: %s",
					  strerror(-r));
	}
	return 0;
}

void broker_guest_net(struct sandbox *sb, json_t *net)
{
	cleanup_free char *path = NULL, *pem = NULL;
	size_t n;

	broker_load(sb);
	if (!sb->broker || !sb->broker->intercept)
		return;
	path = xasprintf("%s/broker-ca.crt", sb->dir);
	if (read_file(path, 8000, &pem, &n) == 0)
		json_object_set_new(net, "broker_ca", json_stringn(pem, n));
}

static int broker_save(struct sandbox *sb, struct k8_err *err)
{
	cleanup_free char *path = xasprintf("%s/broker.json", sb->dir);
	json_t *o = json_pack("{s:s,s:O}", "placeholder", sb->broker->placeholder, "rules",
			      sb->broker->rules);
	if (sb->broker->intercept)
		json_object_set_new(o, "intercept", json_true());
	char *t = json_dumps(o, JSON_INDENT(2));
	int r = write_file_atomic(path, t, strlen(t), 0600);

	json_decref(o);
	free(t);
	if (r)
		return k8_err_set(err, r, "writing %s: %s", path, strerror(-r));
	return 0;
}

static struct sb_broker *broker_new(json_t *rules)
{
	struct sb_broker *b = xcalloc(1, sizeof(*b));
	unsigned char rnd[16];

	b->rules = rules;
	sidecar_init(&b->sc, "kosa8-broker");
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		abort();                /* never a guessable placeholder */
	snprintf(b->placeholder, sizeof(b->placeholder), "%s", BROKER_PH_PREFIX);
	for (int i = 0; i < 16; i++)
		snprintf(b->placeholder + 6 + 2 * i, 3, "%02x", rnd[i]);
	return b;
}

int broker_create(struct sandbox *sb, json_t *spec, struct k8_err *err)
{
	if (!spec)
		return 0;
	sb->broker = broker_new(json_incref(json_object_get(spec, "rules")));
	sb->broker->intercept = json_is_true(json_object_get(spec, "intercept"));
	const char *from = json_string_value(json_object_get(spec, "ca_from"));
	int r = 0;
	if (sb->broker->intercept)
		r = from ? broker_ca_copy(from, sb, err) : broker_ca_make(sb, err);
	json_decref(spec);
	if (r < 0)
		return r;
	return broker_save(sb, err);
}

int broker_fork(struct sandbox *src, struct sandbox *sb, struct k8_err *err)
{
	json_t *spec = NULL;

	broker_load(src);
	pthread_mutex_lock(&src->lock);
	/* the source's rules and CA (its restored guest trusts that one); a placeholder of
	 * its own */
	if (src->broker)
		spec = json_pack("{s:o,s:b,s:s}", "rules", json_deep_copy(src->broker->rules),
				 "intercept", src->broker->intercept, "ca_from", src->dir);
	pthread_mutex_unlock(&src->lock);
	return broker_create(sb, spec, err);
}

void broker_load(struct sandbox *sb)
{
	cleanup_free char *path = xasprintf("%s/broker.json", sb->dir);
	json_t *o, *rules;
	const char *ph;

	if (sb->broker || access(path, F_OK) < 0)
		return;
	o = json_load_file(path, 0, NULL);
	rules = json_object_get(o, "rules");
	ph = json_string_value(json_object_get(o, "placeholder"));
	if (json_is_array(rules) && ph && strlen(ph) == 38) {
		struct sb_broker *b = broker_new(json_incref(rules));
		snprintf(b->placeholder, sizeof(b->placeholder), "%s", ph);
		b->intercept = json_is_true(json_object_get(o, "intercept"));
		pthread_mutex_lock(&sb->lock);
		if (!sb->broker) {
			sb->broker = b;
			b = NULL;
		}
		pthread_mutex_unlock(&sb->lock);
		if (b) {                /* another thread loaded it first */
			json_decref(b->rules);
			free(b);
		}
	}
	json_decref(o);
}

bool broker_dir(struct daemon *d, struct sandbox *sb, char *out, size_t n)
{
	broker_load(sb);
	if (!sb->broker)
		return false;
	sb_sock_path(d, sb, "broker.d", out, n);
	return true;
}

/* {"NAME": "VALUE", ...} for every secret the rules use that exists, written whole to a
 * pipe (far below its 64 KiB: 16 rules of 4 KiB at most) whose read end is returned. */
static int broker_secrets_pipe(struct daemon *d, struct sb_broker *b, int *rfd,
			       struct k8_err *err)
{
	json_t *o = json_object(), *v;
	char name[SECRET_NAME_MAX + 2], *text;
	size_t i, len;
	int p[2];

	json_array_foreach(b->rules, i, v) {
		char *val = NULL;
		size_t vl = 0;
		struct k8_err e2 = { 0 };
		if (broker_rule_secret(json_string_value(v), name, sizeof(name)) < 0 ||
		    !name[0] || json_object_get(o, name))
			continue;
		/* A secret removed since: the rule answers 503 no_secret until it is set. */
		if (secret_read(d->home, name, &val, &vl, &e2) < 0)
			continue;
		json_object_set_new(o, name, json_stringn(val, vl));
		secret_wipe(val, vl);
	}
	text = json_dumps(o, JSON_COMPACT);
	const char *k;
	json_t *s;
	json_object_foreach(o, k, s)
		OPENSSL_cleanse((char *)json_string_value(s), json_string_length(s));
	json_decref(o);
	if (!text)
		return k8_err_set(err, -ENOMEM, "out of memory");
	len = strlen(text);
	if (pipe2(p, O_CLOEXEC) < 0) {
		OPENSSL_cleanse(text, len);
		free(text);
		return k8_err_set(err, -errno, "pipe: %s", strerror(errno));
	}
	ssize_t w = write(p[1], text, len);
	OPENSSL_cleanse(text, len);
	free(text);
	close(p[1]);
	if (w != (ssize_t)len) {
		close(p[0]);
		return k8_err_set(err, -EIO, "handing the secrets to kosa8-broker failed");
	}
	*rfd = p[0];
	return 0;
}

/* Interception: the CA's certificate and key (PEM) on a pipe, wiped from our buffers. */
static int broker_ca_pipe(struct sandbox *sb, int *rfd, struct k8_err *err)
{
	cleanup_free char *kpath = xasprintf("%s/broker-ca.key", sb->dir);
	cleanup_free char *cpath = xasprintf("%s/broker-ca.crt", sb->dir);
	char *key = NULL, *crt = NULL;
	size_t kl = 0, cl = 0;
	int p[2], r = 0;

	if (read_file(cpath, 8000, &crt, &cl) < 0 || read_file(kpath, 8000, &key, &kl) < 0)
		r = k8_err_set(err, -ENOENT, "the sandbox's broker CA (%s) is missing", cpath);
	else if (pipe2(p, O_CLOEXEC) < 0)
		r = k8_err_set(err, -errno, "pipe: %s", strerror(errno));
	else {
		/* far below a pipe's 64 KiB: written whole before the reader starts */
		if (write(p[1], crt, cl) != (ssize_t)cl || write(p[1], key, kl) != (ssize_t)kl) {
			close(p[0]);
			r = k8_err_set(err, -EIO, "handing the CA to kosa8-broker failed");
		} else {
			*rfd = p[0];
		}
		close(p[1]);
	}
	if (key)
		OPENSSL_cleanse(key, kl);
	free(key);
	free(crt);
	return r;
}

static void broker_event(void *ctx, json_t *ev)
{
	struct sandbox *sb = ctx;
	const char *name = json_string_value(json_object_get(ev, "event"));

	if (name && !strcmp(name, "down") && sb->broker && !sb->broker->sc.closing)
		daemon_log("sandbox %s: kosa8-broker is gone (%s): model API calls fail until "
			   "its next boot", sb->name,
			   json_string_value(json_object_get(ev, "why")));
}

static void broker_pid_save(struct sandbox *sb)
{
	cleanup_free char *path = xasprintf("%s/broker.pid", sb->dir);
	char t[64];
	int n = snprintf(t, sizeof(t), "%d %llu\n", (int)sb->broker->sc.pid,
			 sb->broker->sc.pid_start);
	write_file_atomic(path, t, (size_t)n, 0600);
}

int broker_up(struct daemon *d, struct sandbox *sb, struct k8_err *err)
{
	char dir[4200], sock[4300], tls[4300], ctl[4200], user[32];
	cleanup_free char *exe = k8_beside_self("kosa8-broker");
	cleanup_free char *rules = xasprintf("%s/broker.json", sb->dir);
	cleanup_free char *log = xasprintf("%s/broker.log", sb->dir);
	json_t *cfg;
	char **ca, **resolve;
	const char *argv[64];
	int argc = 0, fd = -1, r, fds[2] = { -1, -1 }, nfds = 1;
	struct sb_broker *b;
	uid_t nuid = 0, buid = 65534;

	if (!broker_dir(d, sb, dir, sizeof(dir)))
		return 0;
	b = sb->broker;
	sb_sock_path(d, sb, "brokerctl", ctl, sizeof(ctl));
	if (sidecar_alive(&b->sc)) {
		if (sidecar_connected(&b->sc))
			return 0;
		return sidecar_connect(&b->sc, ctl, broker_event, sb, err);
	}
	if (access(exe, X_OK) < 0)
		return k8_err_set(err, -ENOENT, "%s is missing (the sandbox has --broker rules); "
				  "build it with `make`", exe);
	snprintf(sock, sizeof(sock), "%s/sock", dir);
	snprintf(tls, sizeof(tls), "%s/tls", dir);
	if ((r = mkdir_p(dir, 0700)))
		return k8_err_set(err, r, "mkdir %s: %s", dir, strerror(-r));
	unlink(sock);
	unlink(tls);
	if (sb->jail_index >= 0) {
		nuid = jail_uid(&d->jail, sb->jail_index, JAIL_NET);
		buid = jail_uid(&d->jail, sb->jail_index, JAIL_BROKER);
	}
	snprintf(user, sizeof(user), "%u:%u", (unsigned)buid, (unsigned)buid);
	if ((r = broker_secrets_pipe(d, b, &fd, err)))
		return r;
	fds[0] = fd;
	if (b->intercept && (r = broker_ca_pipe(sb, &fds[1], err))) {
		close(fd);
		return r;
	}
	if (b->intercept)
		nfds = 2;
	cfg = daemon_config(d);
	ca = daemon_setting_list("KOSA8_BROKER_CA_FILE", cfg, "broker_ca_file");
	resolve = daemon_setting_list("KOSA8_BROKER_RESOLVE", cfg, "broker_resolve");
	json_decref(cfg);
	argv[argc++] = exe;
	argv[argc++] = "--rules";
	argv[argc++] = rules;
	argv[argc++] = "--listen";
	argv[argc++] = sock;
	argv[argc++] = "--control";
	argv[argc++] = ctl;
	argv[argc++] = "--secrets-fd";
	argv[argc++] = "3";
	if (geteuid() == 0) {
		argv[argc++] = "--user";
		argv[argc++] = user;
	}
	if (ca && ca[0]) {
		argv[argc++] = "--ca-file";
		argv[argc++] = ca[0];
	}
	if (b->intercept) {
		argv[argc++] = "--listen-tls";
		argv[argc++] = tls;
		argv[argc++] = "--intercept-ca-fd";
		argv[argc++] = "4";
	}
	char maddr[160];
	size_t ri;
	json_t *rv;
	json_array_foreach(b->rules, ri, rv) {
		const char *model;
		struct k8_err e2 = { 0 };
		if (!broker_rule_local(json_string_value(rv), &model))
			continue;
		/* The server as it runs now; none: the rule answers 503 no_model until the
		 * sandbox's next boot finds one. */
		if (d->model_addr && d->model_addr(d, model, maddr, sizeof(maddr), &e2) == 0) {
			argv[argc++] = "--local-model";
			argv[argc++] = maddr;
		} else {
			daemon_log("sandbox %s: broker rule %s: %s", sb->name,
				   json_string_value(rv), e2.msg[0] ? e2.msg : "no model servers");
		}
	}
	for (int i = 0; resolve && resolve[i] && argc < (int)ARRAY_SIZE(argv) - 3; i++) {
		argv[argc++] = "--resolve";
		argv[argc++] = resolve[i];
	}
	argv[argc] = NULL;
	r = sidecar_start_fds(&b->sc, argv, log, fds, nfds, ctl, broker_event, sb, err);
	close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
	daemon_setting_list_free(ca);
	daemon_setting_list_free(resolve);
	if (r)
		return r;
	/* Only the sandbox's kosa8-net may connect (it made the socket as root, 0600). */
	uid_t o = nuid ? nuid : 65534;
	if (geteuid() == 0 && (chown(dir, o, o) < 0 || chown(sock, o, o) < 0 ||
			       chmod(sock, 0600) < 0 ||
			       (b->intercept && (chown(tls, o, o) < 0 || chmod(tls, 0600) < 0)))) {
		r = k8_err_set(err, -errno, "handing %s to kosa8-net: %s", sock, strerror(errno));
		sidecar_stop(&b->sc);
		return r;
	}
	broker_pid_save(sb);
	daemon_log("sandbox %s: kosa8-broker running (pid %d, %zu rule(s))", sb->name,
		   (int)b->sc.pid, json_array_size(b->rules));
	return 0;
}

static int broker_tell_model(struct daemon *d, struct sandbox *sb);

void broker_adopt(struct daemon *d, struct sandbox *sb)
{
	cleanup_free char *path = xasprintf("%s/broker.pid", sb->dir);
	cleanup_free char *text = NULL;
	char ctl[4200];
	size_t len;
	int pid;
	unsigned long long start;
	struct k8_err err = { 0 };

	broker_load(sb);
	if (!sb->broker || read_file(path, 64, &text, &len) < 0 ||
	    sscanf(text, "%d %llu", &pid, &start) != 2)
		return;
	sb->broker->sc.pid = pid;
	sb->broker->sc.pid_start = start;
	if (!sidecar_alive(&sb->broker->sc))
		return;
	sb_sock_path(d, sb, "brokerctl", ctl, sizeof(ctl));
	if (sidecar_connect(&sb->broker->sc, ctl, broker_event, sb, &err)) {
		daemon_log("sandbox %s: cannot reach kosa8-broker: %s", sb->name, err.msg);
		return;
	}
	/* The model server it was given died with the old daemon (model_reap_orphans): it
	 * answers 503 no_model until `kosa8 model serve` pushes the new address. */
	broker_tell_model(d, sb);
}

void broker_down(struct daemon *d, struct sandbox *sb)
{
	json_t *st = NULL;
	struct k8_err err = { 0 };
	char dir[4200], p[4300];

	if (!sb->broker)
		return;
	/* The counts since it started: one audit record (hosts, requests, refusals). */
	if (sidecar_connected(&sb->broker->sc) &&
	    sidecar_request(&sb->broker->sc, json_pack("{s:s}", "op", "stats"), BROKER_REQ_MS,
			    &st, &err) == 0) {
		json_t *s = json_object_get(st, "stats");
		daemon_audit(d, "sandbox.broker.counts", sb->name,
			     json_pack("{s:O?,s:O?,s:O?,s:O?}", "requests",
				       json_object_get(s, "requests"), "refusals",
				       json_object_get(s, "refusals"), "refused",
				       json_object_get(s, "refused"), "hosts",
				       json_object_get(s, "hosts")));
	}
	json_decref(st);
	sb->broker->sc.closing = true;
	sidecar_stop(&sb->broker->sc);
	sb->broker->sc.closing = false;
	sb_sock_path(d, sb, "brokerctl", p, sizeof(p));
	unlink(p);
	sb_sock_path(d, sb, "broker.d", dir, sizeof(dir));
	snprintf(p, sizeof(p), "%s/sock", dir);
	unlink(p);
	rmdir(dir);
}

void broker_free(struct sandbox *sb)
{
	if (!sb->broker)
		return;
	json_decref(sb->broker->rules);
	json_decref(sb->broker->sc.replies);
	free(sb->broker);
	sb->broker = NULL;
}

json_t *broker_summary(struct sandbox *sb)
{
	if (!sb->broker)
		return NULL;
	return json_pack("{s:O,s:s,s:b}", "rules", sb->broker->rules, "url",
			 "http://" GUEST_BROKER_NAME, "intercept", sb->broker->intercept);
}

json_t *broker_env(struct sandbox *sb)
{
	json_t *env = json_array();
	struct sb_broker *b;

	broker_load(sb);
	b = sb->broker;
	if (!b)
		return env;
	json_array_append_new(env, json_sprintf("KOSA8_BROKER_URL=http://%s", GUEST_BROKER_NAME));
	json_array_append_new(env, json_sprintf("KOSA8_BROKER_PLACEHOLDER=%s", b->placeholder));
	if (broker_has_rule(b, "openai")) {
		json_array_append_new(env, json_sprintf("OPENAI_API_KEY=%s", b->placeholder));
		json_array_append_new(env, json_sprintf("OPENAI_BASE_URL=http://openai.%s/v1",
							GUEST_BROKER_NAME));
	}
	if (broker_has_rule(b, "anthropic")) {
		json_array_append_new(env, json_sprintf("ANTHROPIC_API_KEY=%s", b->placeholder));
		json_array_append_new(env, json_sprintf("ANTHROPIC_BASE_URL=http://anthropic.%s",
							GUEST_BROKER_NAME));
	}
	/* Interception: the sandbox's CA, in every container (the agent writes the files,
	 * src/agent/net.c), named for the usual clients. */
	if (b->intercept) {
		static const char *const bundle[] = { "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
						      "CURL_CA_BUNDLE", "GIT_SSL_CAINFO" };
		for (size_t i = 0; i < ARRAY_SIZE(bundle); i++)
			json_array_append_new(env, json_sprintf("%s=/etc/kosa8/ca-bundle.crt",
								bundle[i]));
		json_array_append_new(env, json_string("NODE_EXTRA_CA_CERTS=/etc/kosa8/broker-ca.crt"));
	}
	/* The local model answers both APIs: it takes the standard variables a hosted
	 * provider's rule has not taken. */
	if (broker_has_rule(b, BROKER_LOCAL)) {
		json_array_append_new(env, json_sprintf("KOSA8_LOCAL_MODEL_URL=http://%s.%s/v1",
							BROKER_LOCAL, GUEST_BROKER_NAME));
		if (!broker_has_rule(b, "openai")) {
			json_array_append_new(env, json_sprintf("OPENAI_API_KEY=%s", b->placeholder));
			json_array_append_new(env, json_sprintf("OPENAI_BASE_URL=http://%s.%s/v1",
								BROKER_LOCAL, GUEST_BROKER_NAME));
		}
		if (!broker_has_rule(b, "anthropic")) {
			json_array_append_new(env, json_sprintf("ANTHROPIC_API_KEY=%s", b->placeholder));
			json_array_append_new(env, json_sprintf("ANTHROPIC_BASE_URL=http://%s.%s",
								BROKER_LOCAL, GUEST_BROKER_NAME));
		}
	}
	return env;
}

static bool broker_uses(const struct sb_broker *b, const char *name)
{
	char s[SECRET_NAME_MAX + 2];
	size_t i;
	json_t *v;

	json_array_foreach(b->rules, i, v)
		if (broker_rule_secret(json_string_value(v), s, sizeof(s)) == 0 && s[0] &&
		    !strcmp(s, name))
			return true;
	return false;
}

static bool broker_uses_secret(struct sandbox *sb, void *name)
{
	return sb->broker && broker_uses(sb->broker, name);
}

int broker_secret_changed(struct daemon *d, const char *name, const char *value, size_t n)
{
	size_t nl;
	struct sandbox **list = sb_collect(d, broker_uses_secret, (void *)name, &nl);
	int pushed = 0;

	for (size_t i = 0; i < nl; i++) {
		struct sandbox *sb = list[i];
		struct k8_err err = { 0 };
		if (sidecar_connected(&sb->broker->sc)) {
			json_t *req = value ? json_pack("{s:s,s:s,s:s%}", "op", "secret", "name", name,
							"value", value, n) :
				json_pack("{s:s,s:s}", "op", "unset", "name", name);
			if (sidecar_request(&sb->broker->sc, req, BROKER_REQ_MS, NULL, &err) == 0)
				pushed++;
			else
				daemon_log("sandbox %s: kosa8-broker did not take the %s of '%s': %s",
					   sb->name, value ? "new value" : "removal", name, err.msg);
		}
		sb_put(d, sb);
	}
	free(list);
	return pushed;
}

/* The model a sandbox's local-model rule names (NULL: the default pick); false when it
 * has no such rule. */
static bool broker_local_rule(const struct sb_broker *b, const char **model)
{
	size_t i;
	json_t *v;

	json_array_foreach(b->rules, i, v)
		if (broker_rule_local(json_string_value(v), model))
			return true;
	return false;
}

/* Tell sb's running broker where its local-model rule's server is now (or that none
 * runs). 0, or a negative errno (not connected, refused). */
static int broker_tell_model(struct daemon *d, struct sandbox *sb)
{
	struct k8_err err = { 0 }, e2 = { 0 };
	const char *model = NULL;
	char addr[160];

	if (!sb->broker || !broker_local_rule(sb->broker, &model))
		return 0;
	bool have = d->model_addr && d->model_addr(d, model, addr, sizeof(addr), &e2) == 0;
	if (!sidecar_connected(&sb->broker->sc))
		return -ENOTCONN;
	json_t *req = json_pack("{s:s,s:s?}", "op", "local-model", "addr", have ? addr : NULL);
	int r = sidecar_request(&sb->broker->sc, req, BROKER_REQ_MS, NULL, &err);
	if (r)
		daemon_log("sandbox %s: kosa8-broker did not take the local model's address: %s",
			   sb->name, err.msg);
	return r;
}

static bool broker_has_local(struct sandbox *sb, void *arg K8_UNUSED)
{
	const char *model;

	return sb->broker && broker_local_rule(sb->broker, &model);
}

int broker_model_changed(struct daemon *d)
{
	size_t nl;
	struct sandbox **list = sb_collect(d, broker_has_local, NULL, &nl);
	int told = 0;

	for (size_t i = 0; i < nl; i++) {
		struct sandbox *sb = list[i];
		if (sidecar_connected(&sb->broker->sc) && broker_tell_model(d, sb) == 0)
			told++;
		sb_put(d, sb);
	}
	free(list);
	return told;
}

int broker_api_status(struct api_call *call)
{
	struct sandbox *sb = sb_get(call->d, api_param(call, "name"), &call->err);
	json_t *st = NULL, *o;
	struct k8_err e2 = { 0 };

	if (!sb)
		return call->err.code;
	broker_load(sb);
	if (!sb->broker) {
		int r = k8_err_set(&call->err, -ENOENT, "sandbox '%s' has no broker; create one "
				   "with --broker PROVIDER=SECRET", sb->name);
		sb_put(call->d, sb);
		return r;
	}
	pthread_mutex_lock(&sb->lock);
	o = broker_summary(sb);
	pthread_mutex_unlock(&sb->lock);
	if (sidecar_connected(&sb->broker->sc) &&
	    sidecar_request(&sb->broker->sc, json_pack("{s:s}", "op", "stats"), BROKER_REQ_MS,
			    &st, &e2) == 0) {
		json_object_set(o, "stats", json_object_get(st, "stats"));
		json_object_set_new(o, "state", json_string("up"));
	} else {
		json_object_set_new(o, "state", json_string("down"));
		if (e2.msg[0])
			json_object_set_new(o, "why", json_string(e2.msg));
	}
	json_decref(st);
	sb_put(call->d, sb);
	call->out = o;
	return 0;
}
