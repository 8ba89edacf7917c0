/* POST /convert: decodes the upload and encodes it again (format conversion), with no filter:
 * output parameters only, and no compute on either backend (the job encodes its input). */
#include "../api_int.h"

static const struct param_spec convert_params[] = {OP_OUTPUT_PARAMS(struct blur_params)};

const struct endpoint api_convert_endpoint = {
    "/convert", convert_params, OP_NPARAMS(convert_params), -1, 0, -1, NULL, NULL};

const struct api_op op_convert = {
    "convert",
    "Decodes the upload and encodes it again (format conversion), with no filter.",
    NULL,
    &api_convert_endpoint,
    sizeof(struct blur_params),
    NULL,
    {{NULL, NULL, NULL}},
    NULL,
    {NULL},
};
