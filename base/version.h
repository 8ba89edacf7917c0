/* The release's version, in `blurd --version` and the blurd_build_info metric. Raised by hand when
 * a release is cut (docs/operations.md, "Metrics"). The license, in /openapi.json's info: the
 * repository grants none, so all rights are reserved (an SPDX LicenseRef) until the owners choose
 * one. */
#ifndef BLURD_VERSION_H
#define BLURD_VERSION_H

#define BLURD_VERSION      "0.9.0"
#define BLURD_LICENSE_NAME "Proprietary: all rights reserved"
#define BLURD_LICENSE_SPDX "LicenseRef-Proprietary"

#endif
