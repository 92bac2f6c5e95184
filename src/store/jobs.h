/* SPDX-License-Identifier: Apache-2.0 */
/* jobs.h - what kosa8d reads of a bucket's bytes, read in jailed workers (src/common/worker.h):
 * S3's XML answers (an s3_xml_fn for struct s3_conf), a manifest, and the chunks of a pull
 * (a decoder that stays up for the pull and decompresses one chunk per request). Each
 * worker is a child of its own with no file access (Landlock), no network, no capability,
 * no exec; what it answers is fixed-size records kosa8d checks again (s3xml_check,
 * manifest_unpack), and a chunk it hands back is compared with its id by kosa8d, so a
 * worker taken over by a hostile bucket can fail a pull, never pass a chunk off as another.
 * In a process that is not root the workers run as that user (worker.h). */
#ifndef K8_STORE_JOBS_H
#define K8_STORE_JOBS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/util.h"
#include "store/manifest.h"
#include "store/s3xml.h"

/* Every worker runs as the root of `userns` when it is >= 0 (kosa8d: the image store's
 * user namespace, whose ids are none of the host's: image_store_userns), so it is not
 * root on the host, with no capability there either; -1: this process's user, no
 * capability. */

/* s3_xml_fn: read n bytes of XML of `kind` into out in a worker (ctx: an int *, the user
 * namespace; NULL: none). */
int store_job_xml(void *ctx, enum s3xml_kind kind, const char *p, size_t n, void *out,
		  struct k8_err *err);

/* A manifest object's zstd frame (already opened by chunk_unseal) into m, in a worker:
 * decompressed (at most MF_JSON_MAX bytes), parsed and checked there, then unpacked and
 * checked again here. manifest_free(m) after, in every case. */
int store_job_manifest(const uint8_t *z, size_t zn, int userns, struct manifest *m,
		       struct k8_err *err);

/* The decoder of a pull: one worker, two pipes. */
struct store_decoder {
	pid_t pid;
	int to, from, report;
};
int store_decoder_start(struct store_decoder *dec, int userns, struct k8_err *err);
/* One chunk's zstd frame to exactly `want` bytes (at most CHUNK_SIZE_MAX) at out. A
 * frame that is not one, or makes other than `want` bytes, is -EBADMSG naming `what`;
 * a decoder that died is -EIO (it is not started again: the pull fails). */
int store_decoder_run(struct store_decoder *dec, const uint8_t *z, size_t zn, uint8_t *out,
		      size_t want, const char *what, struct k8_err *err);
/* End it (its pipes closed, it reaped). */
void store_decoder_stop(struct store_decoder *dec);

#endif
