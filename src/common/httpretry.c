/* SPDX-License-Identifier: Apache-2.0 */
/* httpretry.c - what a client of HTTP tries again (httpretry.h). */
#include "common/httpretry.h"

#include <curl/curl.h>

bool http_transient(int cc, long status)
{
	if (cc == CURLE_OK)
		return status == 429 || (status >= 500 && status <= 599);
	switch ((CURLcode)cc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return true;
	default:
		return false;
	}
}
