/* The release's version, in `blurd --version` and the blurd_build_info metric. Raised by hand when
 * a release is cut (docs/operations.md, "Metrics"). */
#ifndef BLURD_VERSION_H
#define BLURD_VERSION_H

#define BLURD_VERSION "0.9.0"

#endif
