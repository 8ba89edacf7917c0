/* The upload of an image endpoint: where its image and parameters are in the body (a multipart
 * form, the raw image, or a JSON body with the image in base64), and the checks it passes before
 * its job is queued (an image of a known format, within the budget). */
#include "api_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Does the media type of content_type (before any ';') equal type? */
/* A JSON body: its image is taken out of the object, and the rest are parameters. */
static enum err read_json(const uint8_t *body, size_t len, struct upload *u, char *msg,
                          size_t msglen) {
  enum err e = params_load_json("The JSON body", (const char *)body, len, &u->object, msg, msglen);
  if (e != ERR_OK) return e;
  u->base64 = json_incref(json_object_get(u->object, "image"));
  json_object_del(u->object, "image");
  return ERR_OK;
}

/* The image of a JSON body, decoded from its base64 string into u->owned (the one copy of it). */
static enum err json_image(struct upload *u, char *msg, size_t msglen) {
  static const char *const types[] = {"an object", "an array", "a string", "a number",
                                      "a number",  "true",     "false",    "null"};
  if (!u->base64) {
    snprintf(msg, msglen,
             "The JSON body has no 'image': send the image as a base64 string in it, "
             "{\"image\": \"iVBORw0KGgo...\", ...}.");
    return ERR_MISSING_IMAGE;
  }
  if (!json_is_string(u->base64)) {
    snprintf(msg, msglen, "The JSON body's 'image' is %s: send the image as a base64 string.",
             types[json_typeof(u->base64)]);
    return ERR_MISSING_IMAGE;
  }
  enum err e = base64_decode(json_string_value(u->base64), json_string_length(u->base64), &u->owned,
                             &u->len, msg, msglen);
  json_decref(u->base64);
  u->base64 = NULL;
  u->image = u->owned;
  if (e == ERR_OK && u->len == 0) {
    snprintf(msg, msglen, "The JSON body's 'image' is empty: send the image as a base64 string.");
    e = ERR_MISSING_IMAGE;
  }
  return e;
}

void upload_free(struct upload *u) {
  json_decref(u->object);
  json_decref(u->base64);
  free(u->owned);
  u->object = u->base64 = NULL;
  u->owned = NULL;
}

static enum err find_fields(const struct http_part *parts, int n, struct upload *u, char *msg,
                            size_t msglen) {
  for (int i = 0; i < n; i++) {
    const char *name = parts[i].name;
    if (strcmp(name, "image") == 0 || strcmp(name, "file") == 0) {
      if (u->image) {
        snprintf(msg, msglen, "The form has more than one image field; send one 'image'.");
        return ERR_BAD_MULTIPART;
      }
      u->image = parts[i].data;
      u->len = parts[i].len;
    } else if (strcmp(name, "params") == 0 && !u->json) {
      u->json = (const char *)parts[i].data;
      u->json_len = parts[i].len;
    } else {
      snprintf(msg, msglen,
               "Unexpected form field '%.64s'; the form takes 'image' (or 'file') and "
               "optionally 'params'.",
               name);
      return ERR_BAD_MULTIPART;
    }
  }
  return ERR_OK;
}

/* Finds the image and the params in req's body, by its Content-Type. */
enum err upload_read(const struct api_request *req, struct upload *u, char *msg, size_t msglen) {
  const char *ct = req->content_type;
  memset(u, 0, sizeof(*u));
  if (http_media_is(ct, "multipart/form-data")) {
    struct http_part parts[HTTP_PARTS_MAX];
    int n = 0;
    enum err e = http_multipart_parse(ct, req->body, req->body_len, parts, &n, msg, msglen);
    if (e == ERR_OK) e = find_fields(parts, n, u, msg, msglen);
    http_multipart_free(parts, n);
    return e;
  }
  if (api_upload_type_ok(ct)) {
    u->image = req->body;
    u->len = req->body_len;
    return ERR_OK;
  }
  if (!ct && req->body_len == 0) return ERR_OK; /* no image: reported by the caller */
  char types[512];
  snprintf(msg, msglen,
           "Content-Type '%.64s' is not accepted: send multipart/form-data with an 'image' "
           "field, the raw image as %s (or application/octet-stream), or application/json with "
           "the image in base64.",
           ct ? ct : "(none)", codec_inputs_text(types, sizeof(types), 1));
  return ERR_UNSUPPORTED_MEDIA;
}

struct api_response *upload_json(const struct endpoint *ep, const char *query, const uint8_t *body,
                                 size_t body_len, void *params, uint8_t **owned, size_t *len) {
  char msg[512] = "";
  struct upload u;
  struct http_bodyscan scan = {0};
  memset(&u, 0, sizeof(u));
  /* The server checks the body as it streams in; checked again here, at memory speed, so that
   * jansson never sees a body past the limits whoever handed it over. */
  enum err e = http_bodyscan_feed(&scan, body, body_len, msg, sizeof(msg));
  if (e == ERR_OK) e = read_json(body, body_len, &u, msg, sizeof(msg));
  if (e == ERR_OK)
    e = params_parse_object(ep, query, u.object, "the JSON body", params, msg, sizeof(msg));
  if (e == ERR_OK) e = json_image(&u, msg, sizeof(msg));
  if (e == ERR_OK) *owned = u.owned, *len = u.len, u.owned = NULL;
  upload_free(&u);
  return e == ERR_OK ? NULL : api_error_response(e, msg);
}
