/* The table of operations: one line per image endpoint, in the order of its routes. Everything
 * about an operation is in its descriptor (api/ops/NAME.c); this line is what makes it served. */
#include "../api_int.h"

/* clang-format off */
const struct api_op *const api_ops[] = {
    &op_blur,
    &op_convert,
    &op_variance,
    &op_contrast,
    &op_convolve,
    &op_sharpen,
    &op_pixelate,
    NULL,
};
/* clang-format on */
