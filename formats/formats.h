/* formats: one file per image format (png.c, jpeg.c, webp.c, heif.c with heif_box.c and
 * heif_tiles.c, avif.c, jxl.c, tiff.c, gif.c, data.c), each ending with the format's descriptor,
 * a struct codec_format_desc named codec_<name>_format, which codecs/codecs.h declares and
 * codecs/table.c lists: the only way codecs/ reaches a format. A format file wraps its library
 * (libpng, libjpeg-turbo, libwebp, libheif, libavif, libjxl, libtiff, giflib) or blurd's own
 * coders in codecs/, with codecs/'s runtime (allocator, output buffer, cancellation hook, limits)
 * and the cost model's codec terms (cost_table.h). Every format file includes this header. */
#ifndef BLURD_FORMATS_H
#define BLURD_FORMATS_H

#include "../codecs/codecs_int.h"
#include "cost_table.h"

#endif
