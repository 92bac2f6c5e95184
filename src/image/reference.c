/* SPDX-License-Identifier: Apache-2.0 */
/* reference.c - image references parsed and normalised the way Docker does.
 *
 * Grammar (distribution/reference):
 *   reference := name [ ":" tag ] [ "@" digest ]
 *   name      := [ domain "/" ] component ( "/" component )*
 *   domain    := label ( "." label )* [ ":" port ]   (or "[ipv6]" [ ":" port ])
 *   label     := [A-Za-z0-9] | [A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]
 *   component := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
 *   tag       := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
 *   digest    := "sha256:" 64 lowercase hex   (the only algorithm kosa8 stores)
 * The first component is a domain when it holds a '.' or a ':', is "localhost", or has
 * an upper-case letter; otherwise the domain is docker.io, whose one-component names
 * live under "library/". "index.docker.io" is docker.io. The whole name is <= 255 bytes.
 */
#include "image/image_int.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define REF_DEFAULT_DOMAIN "docker.io"
#define REF_NAME_MAX 255

static bool ref_is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool ref_hex_valid(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

bool ref_digest_valid(const char *s, char *hex)
{
	/* s may come straight from hostile JSON (json_string_value of a missing field) */
	if (!s || strncmp(s, "sha256:", 7) || strlen(s + 7) != 64 || !ref_hex_valid(s + 7, 64))
		return false;
	if (hex)
		memcpy(hex, s + 7, 65);
	return true;
}

bool ref_tag_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 128 || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
			return false;
	return true;
}

/* One path component: [a-z0-9]+ ((\.|_|__|-+)[a-z0-9]+)*; s[0..n). */
static bool ref_component_valid(const char *s, size_t n)
{
	size_t i = 0;

	if (n == 0 || !ref_is_lower_alnum(s[0]))
		return false;
	while (i < n) {
		while (i < n && ref_is_lower_alnum(s[i]))
			i++;
		if (i == n)
			return true;
		/* separator */
		if (s[i] == '.') {
			i++;
		} else if (s[i] == '_') {
			i++;
			if (i < n && s[i] == '_')
				i++;
		} else if (s[i] == '-') {
			while (i < n && s[i] == '-')
				i++;
		} else {
			return false;
		}
		if (i == n || !ref_is_lower_alnum(s[i]))
			return false;
	}
	return true;
}

static bool ref_label_valid(const char *s, size_t n)
{
	if (n == 0 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '-')
			return false;
	return true;
}

static bool ref_domain_valid(const char *s)
{
	const char *port = NULL, *p = s, *end;

	if (*s == '[') {               /* [ipv6]:port */
		end = strchr(s, ']');
		if (!end || end == s + 1)
			return false;
		for (p = s + 1; p < end; p++)
			if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
				return false;
		p = end + 1;
		if (*p == '\0')
			return true;
		if (*p != ':')
			return false;
		port = p + 1;
	} else {
		end = strchr(s, ':');
		if (end)
			port = end + 1;
		else
			end = s + strlen(s);
		while (p < end) {
			const char *dot = memchr(p, '.', (size_t)(end - p));
			const char *le = dot ? dot : end;
			if (!ref_label_valid(p, (size_t)(le - p)))
				return false;
			p = dot ? dot + 1 : end;
			if (dot && p == end)
				return false;   /* trailing dot */
		}
	}
	if (port) {
		size_t n = strlen(port);
		if (n == 0 || n > 5)
			return false;
		for (size_t i = 0; i < n; i++)
			if (!isdigit((unsigned char)port[i]))
				return false;
	}
	return true;
}

int ref_parse(const char *in, struct ref_parts *p, struct k8_err *err)
{
	char buf[600], *at, *name, *slash, *colon, *first_end;
	size_t n;

	memset(p, 0, sizeof(*p));
	if (!in || !*in)
		return k8_err_set(err, -EINVAL, "invalid image reference: it is empty");
	n = strlen(in);
	if (n >= sizeof(buf) - 1)
		return k8_err_set(err, -EINVAL, "invalid image reference '%.64s...': too long", in);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)in[i] <= ' ' || (unsigned char)in[i] >= 0x7f)
			return k8_err_set(err, -EINVAL,
					  "invalid image reference '%s': it contains a space or a "
					  "control or non-ASCII character", in);
	memcpy(buf, in, n + 1);

	/* digest */
	at = strchr(buf, '@');
	if (at) {
		*at = '\0';
		if (strchr(at + 1, '@'))
			return k8_err_set(err, -EINVAL, "invalid image reference '%s': more than one '@'", in);
		if (!strncmp(at + 1, "sha256:", 7)) {
			if (!ref_digest_valid(at + 1, NULL))
				return k8_err_set(err, -EINVAL,
						  "invalid image reference '%s': a sha256 digest is "
						  "'sha256:' and 64 lower-case hex digits", in);
		} else if (strchr(at + 1, ':')) {
			return k8_err_set(err, -EINVAL,
					  "invalid image reference '%s': only sha256 digests are "
					  "supported", in);
		} else {
			return k8_err_set(err, -EINVAL,
					  "invalid image reference '%s': '@' must be followed by "
					  "a digest such as sha256:<64 hex digits>", in);
		}
		snprintf(p->digest, sizeof(p->digest), "%s", at + 1);
	}
	name = buf;

	/* tag: the last ':' after the last '/' */
	slash = strrchr(name, '/');
	colon = strrchr(slash ? slash : name, ':');
	if (colon) {
		*colon = '\0';
		if (!ref_tag_valid(colon + 1))
			return k8_err_set(err, -EINVAL,
					  "invalid image reference '%s': bad tag '%s' (a tag is "
					  "letters, digits, '_', '.' and '-', at most 128, not starting "
					  "with '.' or '-')", in, colon + 1);
		snprintf(p->tag, sizeof(p->tag), "%s", colon + 1);
	}
	if (!*name)
		return k8_err_set(err, -EINVAL, "invalid image reference '%s': no repository name", in);

	/* domain */
	first_end = strchr(name, '/');
	if (first_end) {
		size_t dn = (size_t)(first_end - name);
		bool upper = false, is_domain;
		for (size_t i = 0; i < dn; i++)
			if (isupper((unsigned char)name[i]))
				upper = true;
		is_domain = memchr(name, '.', dn) || memchr(name, ':', dn) ||
			    (dn == 9 && !memcmp(name, "localhost", 9)) || upper;
		if (is_domain) {
			*first_end = '\0';
			if (dn >= sizeof(p->domain) || !ref_domain_valid(name))
				return k8_err_set(err, -EINVAL,
						  "invalid image reference '%s': bad registry host '%s'",
						  in, name);
			memcpy(p->domain, name, dn + 1);
			name = first_end + 1;
		}
	}
	if (!p->domain[0])
		snprintf(p->domain, sizeof(p->domain), "%s", REF_DEFAULT_DOMAIN);
	if (!strcmp(p->domain, "index.docker.io"))
		snprintf(p->domain, sizeof(p->domain), "%s", REF_DEFAULT_DOMAIN);

	/* path components */
	if (!*name)
		return k8_err_set(err, -EINVAL, "invalid image reference '%s': no repository name", in);
	for (const char *c = name; *c;) {
		const char *e = strchr(c, '/');
		size_t cn = e ? (size_t)(e - c) : strlen(c);
		for (size_t i = 0; i < cn; i++)
			if (isupper((unsigned char)c[i]))
				return k8_err_set(err, -EINVAL,
						  "invalid image reference '%s': repository name must "
						  "be lowercase", in);
		if (!ref_component_valid(c, cn))
			return k8_err_set(err, -EINVAL,
					  "invalid image reference '%s': bad name component '%.*s' "
					  "(lower-case letters and digits, separated by '.', '_', '__' "
					  "or '-')", in, (int)cn, c);
		if (!e)
			break;
		c = e + 1;
		if (!*c)
			return k8_err_set(err, -EINVAL, "invalid image reference '%s': ends with '/'", in);
	}
	if (!strcmp(p->domain, REF_DEFAULT_DOMAIN) && !strchr(name, '/')) {
		if (strlen(name) == 64 && ref_hex_valid(name, 64) && !p->tag[0] && !p->digest[0])
			return k8_err_set(err, -EINVAL,
					  "invalid image reference '%s': 64 hex digits is an image "
					  "ID, not a name (write sha256:%s)", in, name);
		int pn = snprintf(p->path, sizeof(p->path), "library/%s", name);
		if (pn < 0 || (size_t)pn >= sizeof(p->path))
			return k8_err_set(err, -EINVAL, "invalid image reference '%s': name too long", in);
	} else {
		size_t pn = strlen(name);
		if (pn >= sizeof(p->path))
			return k8_err_set(err, -EINVAL, "invalid image reference '%s': name too long", in);
		memcpy(p->path, name, pn + 1);
	}
	if (strlen(p->domain) + 1 + strlen(p->path) > REF_NAME_MAX)
		return k8_err_set(err, -EINVAL,
				  "invalid image reference '%s': the name is longer than %d characters",
				  in, REF_NAME_MAX);
	return 0;
}

int ref_format(const struct ref_parts *p, char *out, size_t outlen, struct k8_err *err)
{
	int n;

	if (p->digest[0])
		n = snprintf(out, outlen, "%s/%s%s%s@%s", p->domain, p->path, p->tag[0] ? ":" : "",
			     p->tag, p->digest);
	else
		n = snprintf(out, outlen, "%s/%s:%s", p->domain, p->path,
			     p->tag[0] ? p->tag : "latest");
	if (n < 0 || (size_t)n >= outlen)
		return k8_err_set(err, -ENAMETOOLONG, "image reference %s/%s is too long",
				  p->domain, p->path);
	return 0;
}

int image_ref_normalize(const char *in, char *out, size_t outlen, struct k8_err *err)
{
	struct ref_parts p;
	int r = ref_parse(in, &p, err);

	if (r)
		return r;
	return ref_format(&p, out, outlen, err);
}
