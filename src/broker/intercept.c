/* SPDX-License-Identifier: Apache-2.0 */
/* intercept.c - kosa8-broker's TLS server for interception mode (--listen-tls): tools that
 * hard-code https://api.openai.com reach the broker instead (kosa8-net answers the rule
 * hosts' names with the broker's address and hands port 443 to this listener), and the
 * broker answers as that host with a certificate signed by the sandbox's own CA.
 *
 * The CA (certificate and private key, PEM) arrives on a pipe (--intercept-ca-fd) at
 * start-up. Every leaf is made then, one per rule host (local-model excepted), all with
 * one fresh P-256 key, valid until the CA expires; the CA's key is freed (OpenSSL wipes
 * key material) before the process serves: a broker compromised later cannot mint a
 * certificate. The SNI picks the leaf; no SNI, or a name without a rule, ends the
 * handshake (unrecognized_name), counted as no_rule. The request's Host is checked
 * against the SNI in proxy.c. */
#include "broker/broker.h"

#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#define CA_PEM_MAX (64 << 10)

static int intercept_ext(X509 *crt, X509 *ca, int nid, const char *value)
{
	X509V3_CTX v3;
	X509V3_set_ctx(&v3, ca, crt, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
	if (!ext)
		return -EINVAL;
	int ok = X509_add_ext(crt, ext, -1);
	X509_EXTENSION_free(ext);
	return ok ? 0 : -ENOMEM;
}

/* A leaf for `host`, signed by the CA. NULL on failure. */
static X509 *intercept_leaf(const char *host, EVP_PKEY *key, X509 *ca, EVP_PKEY *cakey)
{
	X509 *crt = X509_new();
	unsigned char serial[16];
	char san[300];
	BIGNUM *bn = NULL;
	bool ok = crt && RAND_bytes(serial, sizeof(serial)) == 1;

	serial[0] &= 0x7f;                      /* positive */
	if (ok)
		ok = (bn = BN_bin2bn(serial, sizeof(serial), NULL)) &&
		     BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(crt)) &&
		     X509_set_version(crt, 2) &&
		     X509_gmtime_adj(X509_getm_notBefore(crt), -3600) &&
		     X509_set1_notAfter(crt, X509_get0_notAfter(ca)) &&
		     X509_set_issuer_name(crt, X509_get_subject_name(ca)) &&
		     X509_NAME_add_entry_by_txt(X509_get_subject_name(crt), "CN", MBSTRING_ASC,
						(const unsigned char *)host, -1, -1, 0) &&
		     X509_set_pubkey(crt, key);
	snprintf(san, sizeof(san), "DNS:%s", host);
	if (ok)
		ok = intercept_ext(crt, ca, NID_subject_alt_name, san) == 0 &&
		     intercept_ext(crt, ca, NID_basic_constraints, "critical,CA:FALSE") == 0 &&
		     intercept_ext(crt, ca, NID_key_usage, "critical,digitalSignature") == 0 &&
		     intercept_ext(crt, ca, NID_ext_key_usage, "serverAuth") == 0 &&
		     intercept_ext(crt, ca, NID_authority_key_identifier, "keyid") == 0 &&
		     X509_sign(crt, cakey, EVP_sha256()) > 0;
	BN_free(bn);
	if (!ok) {
		X509_free(crt);
		return NULL;
	}
	return crt;
}

/* The SNI callback: the rule host's context, or the end of the handshake. */
static int intercept_sni(SSL *ssl, int *alert, void *arg)
{
	struct broker *b = arg;
	const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);

	for (int i = 0; name && i < b->nrules; i++) {
		if (!b->leaf[i] || strcasecmp(b->rules[i].host, name))
			continue;
		SSL_set_SSL_CTX(ssl, b->leaf[i]);
		SSL_set_app_data(ssl, (void *)(intptr_t)(i + 1));
		return SSL_TLSEXT_ERR_OK;
	}
	*alert = SSL_AD_UNRECOGNIZED_NAME;
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

static int intercept_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
			  const unsigned char *in, unsigned int inlen, void *arg)
{
	(void)ssl;
	(void)arg;
	/* HTTP/1.1 only: a client offering h2 alone gets no ALPN answer and speaks 1.1 */
	for (unsigned int i = 0; i < inlen; i += 1u + in[i]) {
		if (in[i] == 8 && i + 9 <= inlen && !memcmp(in + i + 1, "http/1.1", 8)) {
			*out = in + i + 1;
			*outlen = 8;
			return SSL_TLSEXT_ERR_OK;
		}
	}
	return SSL_TLSEXT_ERR_NOACK;
}

static SSL_CTX *intercept_ctx(struct broker *b)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx)
		return NULL;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_tlsext_servername_callback(ctx, intercept_sni);
	SSL_CTX_set_tlsext_servername_arg(ctx, b);
	SSL_CTX_set_alpn_select_cb(ctx, intercept_alpn, NULL);
	return ctx;
}

int intercept_init(struct broker *b, int fd, struct k8_err *err)
{
	char *pem = malloc(CA_PEM_MAX);
	size_t len = 0;
	int rc = 0;

	if (!pem)
		return k8_err_set(err, -ENOMEM, "out of memory");
	for (;;) {
		ssize_t r = read(fd, pem + len, CA_PEM_MAX - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
		if (len == CA_PEM_MAX)
			break;
	}
	close(fd);
	BIO *bio = BIO_new_mem_buf(pem, (int)len);
	X509 *ca = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
	BIO_free(bio);
	bio = BIO_new_mem_buf(pem, (int)len);
	EVP_PKEY *cakey = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
	BIO_free(bio);
	OPENSSL_cleanse(pem, CA_PEM_MAX);
	free(pem);
	EVP_PKEY *key = EVP_EC_gen("P-256");
	if (!ca || !cakey || X509_check_private_key(ca, cakey) != 1) {
		rc = k8_err_set(err, -EINVAL, "--intercept-ca-fd: expected a PEM certificate and "
				"its private key");
		goto out;
	}
	if (!key || !(b->tls = intercept_ctx(b))) {
		rc = k8_err_set(err, -ENOMEM, "interception: out of memory");
		goto out;
	}
	for (int i = 0; i < b->nrules; i++) {
		if (b->rules[i].kind == RULE_LOCAL)
			continue;
		X509 *leaf = intercept_leaf(b->rules[i].host, key, ca, cakey);
		b->leaf[i] = leaf ? intercept_ctx(b) : NULL;
		if (!b->leaf[i] || SSL_CTX_use_certificate(b->leaf[i], leaf) != 1 ||
		    SSL_CTX_use_PrivateKey(b->leaf[i], key) != 1) {
			X509_free(leaf);
			rc = k8_err_set(err, -EINVAL, "interception: making the certificate of %s "
					"failed: %s", b->rules[i].host,
					ERR_reason_error_string(ERR_get_error()));
			goto out;
		}
		X509_free(leaf);
	}
out:
	X509_free(ca);
	EVP_PKEY_free(cakey);           /* the CA's key is not kept: no later leaf */
	EVP_PKEY_free(key);
	return rc;
}

SSL *intercept_accept(struct broker *b, int fd, int *rule)
{
	SSL *ssl = SSL_new(b->tls);
	*rule = -1;
	if (!ssl || SSL_set_fd(ssl, fd) != 1) {
		SSL_free(ssl);
		return NULL;
	}
	ERR_clear_error();
	if (SSL_accept(ssl) != 1) {
		SSL_free(ssl);
		return NULL;
	}
	intptr_t v = (intptr_t)SSL_get_app_data(ssl);
	if (v < 1 || v > b->nrules) {
		SSL_free(ssl);
		return NULL;
	}
	*rule = (int)v - 1;
	return ssl;
}
