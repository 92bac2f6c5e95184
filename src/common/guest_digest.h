/* SPDX-License-Identifier: Apache-2.0 */
/* guest_digest.h - the guest image this build was released with.
 *
 * `guest_release_digest` is "sha256:" and the SHA-256 of the guest image's manifest.json
 * (scripts/guest.sh writes it; it names the kernel and the initramfs by their own
 * SHA-256, so this one digest pins both). It is defined only in the generated
 * $(B)/gen/guest_digest.c, made from $(B)/guest/manifest.json, and linked only into the
 * programs that need it (kosa8d, whose main.c hands it to the daemon): whatever links it
 * waits for the guest kernel. Library code, unit tests and fuzz targets never refer to
 * it, so they build without a guest. docs/design.md "Guest image". */
#ifndef K8_COMMON_GUEST_DIGEST_H
#define K8_COMMON_GUEST_DIGEST_H

extern const char guest_release_digest[];

#endif
