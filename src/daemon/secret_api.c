/* SPDX-License-Identifier: Apache-2.0 */
/* secret_api.c - the secrets' API routes (secret_api.h): the store is secret.c's, the
 * running brokers that use a secret are told by broker.c. Above both (secret.c sits
 * below broker.c, which reads it), so neither includes the other's header twice over.
 */
#include "daemon/secret_api.h"
#include "daemon/broker.h"
#include "daemon/daemon.h"
#include "daemon/secret.h"

#include <openssl/crypto.h>

/* ---- API: GET /v1/secrets, POST and DELETE /v1/secrets/{name} (api.h; the table is
 * in api.c). Set and rm are audited, with the name only. ---- */

int secret_api_list(struct api_call *call)
{
	return secret_list(call->d->home, &call->out, &call->err);
}

/* The value in the request body is wiped from the parsed JSON once stored; secret_set
 * checks its size and bytes. */
int secret_api_set(struct api_call *call)
{
	const char *name = api_param(call, "name");
	json_t *v = json_object_get(call->body, "value");
	bool replaced = false;
	int rc;

	if (!json_is_string(v))
		return k8_err_set(&call->err, -EINVAL, "expected {\"value\": \"...\"}");
	rc = secret_set(call->d->home, name, json_string_value(v), json_string_length(v),
			&replaced, &call->err);
	/* Rotation: every running broker using it takes the new value at once. */
	int brokers = rc < 0 ? 0 : broker_secret_changed(call->d, name, json_string_value(v),
							 json_string_length(v));
	OPENSSL_cleanse((char *)json_string_value(v), json_string_length(v));
	if (rc < 0)
		return rc;
	daemon_audit(call->d, "secret.set", NULL, json_pack("{s:s,s:b,s:i}", "name", name,
							     "replaced", replaced, "brokers", brokers));
	call->out = json_pack("{s:s,s:b,s:i}", "name", name, "replaced", replaced, "brokers",
			      brokers);
	return 0;
}

int secret_api_rm(struct api_call *call)
{
	const char *name = api_param(call, "name");
	int rc = secret_remove(call->d->home, name, &call->err);

	if (rc < 0)
		return rc;
	/* Running brokers forget it at once: their rules using it answer 503 no_secret
	 * until `secret set` hands them a value again. */
	int brokers = broker_secret_changed(call->d, name, NULL, 0);
	daemon_audit(call->d, "secret.rm", NULL, json_pack("{s:s,s:i}", "name", name,
							    "brokers", brokers));
	call->out = json_pack("{s:s,s:i}", "name", name, "brokers", brokers);
	return 0;
}
