/* SPDX-License-Identifier: Apache-2.0 */
/* secret.h - the daemon's secret store for the egress broker (secret.c, docs/broker.md). */
#ifndef K8_DAEMON_SECRET_H
#define K8_DAEMON_SECRET_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/util.h"

#define SECRET_NAME_MAX 63
#define SECRET_VALUE_MAX 4096

struct daemon;

bool secret_name_ok(const char *name);
bool secret_value_ok(const char *v, size_t n);
/* Store (or replace, *replaced) a secret under $home/secrets/NAME, 0600, atomically. */
int secret_set(const char *home, const char *name, const char *value, size_t n,
	       bool *replaced, struct k8_err *err);
/* Overwrite and unlink; -ENOENT when there is none. */
int secret_remove(const char *home, const char *name, struct k8_err *err);
/* Overwrite a file of secrets with zeros, then unlink it (the store's keys use it too).
 * 0, -ENOENT, or -errno of the unlink. */
int secret_wipe_file(const char *path);
/* The value (NUL-terminated, malloc'd): release it with secret_wipe(). */
int secret_read(const char *home, const char *name, char **value, size_t *n,
		struct k8_err *err);
void secret_wipe(char *value, size_t n);
/* {"secrets": [{"name", "updated"}]}: names and dates, never values. */
int secret_list(const char *home, json_t **out, struct k8_err *err);

#endif
