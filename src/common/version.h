/* SPDX-License-Identifier: Apache-2.0 */
/* version.h - the one version of kosa8: the CLI's `version`, kosa8d's status, the
 * release's file names (`make dist` reads it from here) and the default address kosa8d
 * fetches this release's guest image from (docs/install.md). */
#ifndef K8_COMMON_VERSION_H
#define K8_COMMON_VERSION_H

#define KOSA8_VERSION "0.1.0"

/* Where this release's files are published; config.json "guest_url" overrides the guest's
 * (a mirror, a test's server). */
#define KOSA8_RELEASE_URL "https://kosa8.com/releases/" KOSA8_VERSION
#define KOSA8_GUEST_URL KOSA8_RELEASE_URL "/guest/"

/* Where the system service (kosa8.service) keeps its state and sockets; the CLI's default
 * home when the user has no ~/.kosa8 (docs/install.md). */
#define KOSA8_SYSTEM_HOME "/var/lib/kosa8"

#endif
