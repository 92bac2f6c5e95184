/* SPDX-License-Identifier: Apache-2.0 */
/* httpretry.h - whether an HTTP transfer that failed may succeed if tried again: the one
 * rule of the registry client (src/image/registry.c) and the S3 client (src/store/s3.c). */
#ifndef K8_HTTPRETRY_H
#define K8_HTTPRETRY_H

#include <stdbool.h>

/* cc: the transfer's CURLcode (0: it completed, with HTTP `status`). True for no answer,
 * a connection lost or cut short, a TLS handshake that failed, 429 and any 5xx. Uses
 * libcurl's constants only: links without it. */
bool http_transient(int cc, long status);

#endif
