/* Request parameters: each operation's descriptor (api/ops/) has a table that says each
 * parameter's type, range, default and meaning; this file parses requests against such a table,
 * describes it for /methods, and checks a request's estimated cost against the budget. Parameters
 * come from the query string and from a JSON object: the multipart field `params`, or a JSON body
 * (whose `image` key handler.c takes out first); a key given in both must have the same value
 * there, else the request is a 400 — never a silent precedence. Unknown keys are a 400 too, so a
 * typo never passes unnoticed. */
#include "api_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const params_bool_choices[] = {"false", "true", NULL};
const char *const params_colorspace_choices[] = {"keep", "srgb", NULL};

struct pval {            /* a parsed value */
  double num;            /* PT_NUMBER */
  int i;                 /* PT_INT, PT_BOOL, PT_ENUM */
  struct api_kernel k;   /* PT_KERNEL */
  struct api_regions rg; /* PT_REGIONS */
};

static int hexval(int c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

char *params_unescape(const char *s, size_t len) {
  char *out = malloc(len + 1), *o = out;
  if (!out) return NULL;
  for (size_t i = 0; i < len; i++) {
    int c = (unsigned char)s[i];
    if (c == '+') {
      c = ' ';
    } else if (c == '%') {
      if (i + 2 >= len) goto bad;
      int h = hexval((unsigned char)s[i + 1]), l = hexval((unsigned char)s[i + 2]);
      if (h < 0 || l < 0) goto bad;
      c = h * 16 + l;
      i += 2;
    }
    if (c == 0) goto bad;
    *o++ = (char)c;
  }
  *o = 0;
  return out;
bad:
  free(out);
  return NULL;
}

static void list_choices(const char *const *choices, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; choices[i] && n < len; i++)
    n += snprintf(buf + n, len - n, "%s%s", i ? ", " : "", choices[i]);
}

static enum err bad_value(const struct param_spec *s, const char *got, char *msg, size_t msglen) {
  char choices[256];
  switch (s->type) {
  case PT_NUMBER:
    snprintf(msg, msglen, "%s must be a number from %g to %g; got '%.64s'.", s->name, s->min,
             s->max, got);
    return ERR_BAD_PARAMETER;
  case PT_INT:
    snprintf(msg, msglen, "%s must be a whole number from %g to %g; got '%.64s'.", s->name, s->min,
             s->max, got);
    return ERR_BAD_PARAMETER;
  default:
    list_choices(s->choices, choices, sizeof(choices));
    if (strcmp(s->name, "method") == 0) {
      snprintf(msg, msglen, "Unknown method '%.64s'; valid methods: %s.", got, choices);
      return ERR_UNKNOWN_METHOD;
    }
    snprintf(msg, msglen, "%s must be one of %s; got '%.64s'.", s->name, choices, got);
    return ERR_BAD_PARAMETER;
  }
}

/* bad_value's sentence for a JSON value of the wrong type, which names the type given ("got a
 * boolean") in place of a quoted value. */
static enum err wrong_type(const struct param_spec *s, const char *type, char *msg, size_t msglen) {
  enum err e = bad_value(s, "", msg, msglen);
  char *q = strstr(msg, "; got ''.");
  if (q) snprintf(q, msglen - (size_t)(q - msg), "; got %s.", type);
  q = strstr(msg, "method ''");
  if (q) snprintf(msg, msglen, "method must be a method's name (a string); got %s.", type);
  return e;
}

/* Fills k from the JSON array a: an array of rows, or size*size numbers row by row. */
static enum err kernel_from_json(const json_t *a, struct api_kernel *k, char *msg, size_t msglen) {
  size_t n = json_array_size(a), side = n;
  int rows = json_is_array(json_array_get(a, 0));
  while (!rows && side * side > n) side = (side + n / side) / 2; /* integer square root */
  if (n == 0 || (!rows && side * side != n)) {
    snprintf(msg, msglen,
             "kernel has %zu numbers, not a square number: send size*size numbers (9 for 3x3) or "
             "an array of rows.",
             n);
    return ERR_BAD_PARAMETER;
  }
  if (side % 2 == 0 || side > CPU_CONV_MAX) {
    size_t cols = rows ? json_array_size(json_array_get(a, 0)) : side;
    snprintf(msg, msglen, "kernel must be square with an odd side from 1 to %d; got %zux%zu.",
             CPU_CONV_MAX, side, cols);
    return ERR_BAD_PARAMETER;
  }
  for (size_t i = 0; i < side * side; i++) {
    const json_t *row = json_array_get(a, i / side);
    const json_t *v = rows ? json_array_get(row, i % side) : json_array_get(a, i);
    if (rows && json_array_size(row) != side) {
      snprintf(msg, msglen, "kernel must be square: row %zu has %zu numbers, expected %zu.",
               i / side + 1, json_array_size(row), side);
      return ERR_BAD_PARAMETER;
    }
    if (!json_is_number(v) || !(fabs(json_number_value(v)) <= KERNEL_WEIGHT_MAX)) {
      snprintf(msg, msglen,
               "kernel weights must be numbers from %g to %g; row %zu, column %zu is not.",
               -KERNEL_WEIGHT_MAX, KERNEL_WEIGHT_MAX, i / side + 1, i % side + 1);
      return ERR_BAD_PARAMETER;
    }
    k->w[i] = json_number_value(v);
  }
  k->named = -1;
  k->size = (int)side;
  return ERR_OK;
}

/* Parses text as a kernel: one of s's names, or a JSON array. */
static enum err kernel_from_text(const struct param_spec *s, const char *text, struct api_kernel *k,
                                 char *msg, size_t msglen) {
  char names[256];
  if (text[strspn(text, " \t\r\n")] == '[') {
    json_error_t err;
    json_t *a = json_loads(text, 0, &err);
    enum err e = ERR_BAD_PARAMETER;
    if (a)
      e = kernel_from_json(a, k, msg, msglen);
    else
      snprintf(msg, msglen, "kernel is not valid JSON: %s (at character %d).", err.text,
               err.position);
    json_decref(a);
    return e;
  }
  for (int i = 0; s->choices[i]; i++)
    if (strcmp(text, s->choices[i]) == 0) {
      *k = (struct api_kernel){.named = i};
      return ERR_OK;
    }
  list_choices(s->choices, names, sizeof(names));
  snprintf(msg, msglen,
           "kernel must be one of %s, or a JSON array of numbers (an odd square up to %dx%d); "
           "got '%.64s'.",
           names, CPU_CONV_MAX, CPU_CONV_MAX, text);
  return ERR_BAD_PARAMETER;
}

/* Stores rectangle i of rg from its four numbers v[], checking them. */
static enum err region_set(struct api_regions *rg, int i, const double *v, char *msg,
                           size_t msglen) {
  for (int k = 0; k < 4; k++)
    if (!(fabs(v[k]) <= API_REGION_COORD) || v[k] != floor(v[k])) {
      snprintf(msg, msglen,
               "regions: rectangle %d must be four whole numbers x, y, w, h from -%d to %d.", i + 1,
               API_REGION_COORD, API_REGION_COORD);
      return ERR_BAD_PARAMETER;
    }
  if (v[2] < 1 || v[3] < 1) {
    snprintf(msg, msglen,
             "regions: rectangle %d is %gx%g; its width and height must be at least 1 pixel.",
             i + 1, v[2], v[3]);
    return ERR_BAD_PARAMETER;
  }
  for (int k = 0; k < 4; k++) rg->r[i][k] = (int)v[k];
  return ERR_OK;
}

static enum err region_count(size_t n, char *msg, size_t msglen) {
  if (n >= 1 && n <= API_REGIONS_MAX) return ERR_OK;
  snprintf(msg, msglen, "regions has %zu rectangles; give 1 to %d.", n, API_REGIONS_MAX);
  return ERR_BAD_PARAMETER;
}

/* Fills rg from the JSON array a of [x, y, w, h] arrays. */
static enum err regions_from_json(const json_t *a, struct api_regions *rg, char *msg,
                                  size_t msglen) {
  enum err e = region_count(json_array_size(a), msg, msglen);
  for (size_t i = 0; e == ERR_OK && i < json_array_size(a); i++) {
    const json_t *r = json_array_get(a, i);
    double v[4];
    if (!json_is_array(r) || json_array_size(r) != 4) {
      snprintf(msg, msglen, "regions: rectangle %zu must be an array [x, y, w, h].", i + 1);
      return ERR_BAD_PARAMETER;
    }
    for (int k = 0; k < 4; k++)
      v[k] = json_is_number(json_array_get(r, k)) ? json_number_value(json_array_get(r, k)) : NAN;
    e = region_set(rg, (int)i, v, msg, msglen);
  }
  rg->n = e == ERR_OK ? (int)json_array_size(a) : 0;
  return e;
}

/* Parses text as regions: a JSON array, or x,y,w,h;x,y,w,h. */
static enum err regions_from_text(const char *text, struct api_regions *rg, char *msg,
                                  size_t msglen) {
  if (text[strspn(text, " \t\r\n")] == '[') {
    json_error_t err;
    json_t *a = json_loads(text, 0, &err);
    enum err e = ERR_BAD_PARAMETER;
    if (json_is_array(a))
      e = regions_from_json(a, rg, msg, msglen);
    else if (a)
      snprintf(msg, msglen, "regions must be a JSON array of [x, y, w, h] arrays.");
    else
      snprintf(msg, msglen, "regions is not valid JSON: %s (at character %d).", err.text,
               err.position);
    json_decref(a);
    return e;
  }
  size_t n = 0;
  for (const char *t = text; *t;) { /* rectangles separated by ';', numbers by ',' */
    double v[4] = {0};
    enum err e = region_count(n + 1, msg, msglen);
    for (int k = 0; e == ERR_OK && k < 4; k++) {
      char *end = (char *)t;
      errno = 0;
      if (isdigit((unsigned char)*t) || *t == '-') v[k] = strtod(t, &end);
      if (end == t || errno || *end != (k < 3 ? ',' : *end ? ';' : 0)) {
        snprintf(msg, msglen,
                 "regions must be x,y,w,h;x,y,w,h (whole numbers) or a JSON array of [x, y, w, "
                 "h]; rectangle %zu is not.",
                 n + 1);
        return ERR_BAD_PARAMETER;
      }
      t = *end ? end + 1 : end;
    }
    if (e == ERR_OK) e = region_set(rg, (int)n++, v, msg, msglen);
    if (e != ERR_OK) return e;
  }
  rg->n = (int)n;
  return region_count(n, msg, msglen);
}

/* Parses text as a value of s. */
static enum err parse_text(const struct param_spec *s, const char *text, struct pval *v, char *msg,
                           size_t msglen) {
  char *end;
  errno = 0;
  if ((s->type == PT_NUMBER || s->type == PT_INT) &&
      (!(isdigit((unsigned char)text[0]) || text[0] == '-' || text[0] == '.') ||
       text[strspn(text, "0123456789.eE+-")] != 0))
    return bad_value(s, text, msg, msglen); /* decimal only: no blanks, hex, "inf" or "nan" */
  switch (s->type) {
  case PT_NUMBER:
    v->num = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(v->num) || v->num < s->min || v->num > s->max)
      return bad_value(s, text, msg, msglen);
    return ERR_OK;
  case PT_INT: {
    long l = strtol(text, &end, 10);
    if (end == text || *end || errno || l < s->min || l > s->max)
      return bad_value(s, text, msg, msglen);
    v->i = (int)l;
    return ERR_OK;
  }
  case PT_KERNEL:
    return kernel_from_text(s, text, &v->k, msg, msglen);
  case PT_REGIONS:
    return regions_from_text(text, &v->rg, msg, msglen);
  case PT_BOOL:
    if (strcmp(text, "1") == 0) text = "true";
    if (strcmp(text, "0") == 0) text = "false";
    /* fall through */
  case PT_ENUM:
    for (int i = 0; s->choices[i]; i++)
      if (strcmp(text, s->choices[i]) == 0) {
        v->i = i;
        return ERR_OK;
      }
    return bad_value(s, text, msg, msglen);
  }
  return ERR_INTERNAL;
}

/* Parses a JSON value as a value of s: numbers for numbers, booleans for booleans, and strings
 * for anything (as in a query string). */
static enum err parse_json(const struct param_spec *s, json_t *j, struct pval *v, char *msg,
                           size_t msglen) {
  char text[64];
  if (json_is_string(j)) return parse_text(s, json_string_value(j), v, msg, msglen);
  if (s->type == PT_KERNEL && json_is_array(j)) return kernel_from_json(j, &v->k, msg, msglen);
  if (s->type == PT_KERNEL) {
    snprintf(msg, msglen, "kernel must be a kernel's name or a JSON array of numbers.");
    return ERR_BAD_PARAMETER;
  }
  if (s->type == PT_REGIONS && json_is_array(j)) return regions_from_json(j, &v->rg, msg, msglen);
  if (s->type == PT_REGIONS) {
    snprintf(msg, msglen, "regions must be a JSON array of [x, y, w, h] arrays.");
    return ERR_BAD_PARAMETER;
  }
  if (json_is_boolean(j) && s->type == PT_BOOL) {
    v->i = json_is_true(j);
    return ERR_OK;
  }
  if (json_is_integer(j)) {
    snprintf(text, sizeof(text), "%" JSON_INTEGER_FORMAT, json_integer_value(j));
  } else if (json_is_real(j)) {
    snprintf(text, sizeof(text), "%.17g", json_real_value(j));
    if (s->type == PT_INT && json_real_value(j) == floor(json_real_value(j)))
      snprintf(text, sizeof(text), "%.0f", json_real_value(j));
  } else {
    return wrong_type(s,
                      json_is_boolean(j) ? "a boolean"
                      : json_is_null(j)  ? "null"
                      : json_is_array(j) ? "an array"
                                         : "an object",
                      msg, msglen);
  }
  if (s->type == PT_ENUM || s->type == PT_BOOL) return bad_value(s, text, msg, msglen);
  return parse_text(s, text, v, msg, msglen);
}

static void store(const struct param_spec *s, const struct pval *v, void *out) {
  if (s->type == PT_KERNEL)
    memcpy((char *)out + s->offset, &v->k, sizeof(v->k));
  else if (s->type == PT_REGIONS)
    memcpy((char *)out + s->offset, &v->rg, sizeof(v->rg));
  else if (s->type == PT_NUMBER)
    *(double *)((char *)out + s->offset) = v->num;
  else
    *(int *)((char *)out + s->offset) = v->i;
}

const struct param_spec *params_spec(const struct endpoint *ep, const char *name) {
  for (int i = 0; i < ep->nparams; i++)
    if (strcmp(ep->params[i].name, name) == 0) return &ep->params[i];
  return NULL;
}

static enum err unknown(const struct endpoint *ep, const char *name, const char *where, char *msg,
                        size_t msglen) {
  char names[256];
  size_t n = 0;
  names[0] = 0;
  for (int i = 0; i < ep->nparams && n < sizeof(names); i++)
    n += snprintf(names + n, sizeof(names) - n, "%s%s", i ? ", " : "", ep->params[i].name);
  snprintf(msg, msglen, "Unknown parameter '%.64s' in %s; %s accepts: %s.", name, where, ep->path,
           names);
  return ERR_UNKNOWN_PARAMETER;
}

#define MAX_QUERY_PARAMS 32

struct query { /* a decoded query string */
  char *key[MAX_QUERY_PARAMS];
  char *value[MAX_QUERY_PARAMS];
  int n;
};

static void query_free(struct query *q) {
  for (int i = 0; i < q->n; i++) {
    free(q->key[i]);
    free(q->value[i]);
  }
  q->n = 0;
}

static enum err query_parse(const struct endpoint *ep, const char *qs, struct query *q, char *msg,
                            size_t msglen) {
  q->n = 0;
  while (qs && *qs) {
    size_t len = strcspn(qs, "&");
    const char *eq = memchr(qs, '=', len);
    size_t klen = eq ? (size_t)(eq - qs) : len;
    if (len > 0) {
      if (q->n == MAX_QUERY_PARAMS) {
        snprintf(msg, msglen, "The query string has more than %d parameters.", MAX_QUERY_PARAMS);
        return ERR_BAD_PARAMETER;
      }
      q->key[q->n] = params_unescape(qs, klen);
      q->value[q->n] = eq ? params_unescape(eq + 1, len - klen - 1) : strdup("");
      q->n++;
      if (!q->key[q->n - 1] || !q->value[q->n - 1]) {
        snprintf(msg, msglen, "The query string has a malformed percent escape.");
        return ERR_BAD_PARAMETER;
      }
      const char *k = q->key[q->n - 1];
      if (!params_spec(ep, k)) return unknown(ep, k, "the query string", msg, msglen);
      for (int i = 0; i < q->n - 1; i++)
        if (strcmp(q->key[i], k) == 0) {
          snprintf(msg, msglen, "%.64s appears more than once in the query string.", k);
          return ERR_BAD_PARAMETER;
        }
    }
    qs += len + (qs[len] == '&');
  }
  return ERR_OK;
}

enum err params_load_json(const char *what, const char *text, size_t len, json_t **out, char *msg,
                          size_t msglen) {
  json_error_t err;
  json_t *j = json_loadb(text ? text : "", len, JSON_REJECT_DUPLICATES, &err); /* empty body */
  *out = NULL;
  if (!j)
    snprintf(msg, msglen, "%s must be a JSON object: %s (line %d, column %d).", what, err.text,
             err.line, err.column);
  else if (!json_is_object(j)) /* without JSON_DECODE_ANY, the only other value is an array */
    snprintf(msg, msglen, "%s must be a JSON object: it is an array.", what);
  else
    *out = j;
  if (!*out) json_decref(j);
  return *out ? ERR_OK : ERR_BAD_JSON;
}

static int same_value(const struct param_spec *s, const struct pval *a, const struct pval *b) {
  if (s->type == PT_NUMBER) return a->num == b->num;
  if (s->type == PT_REGIONS)
    return a->rg.n == b->rg.n && memcmp(a->rg.r, b->rg.r, sizeof(a->rg.r[0]) * a->rg.n) == 0;
  if (s->type != PT_KERNEL) return a->i == b->i;
  size_t n = a->k.named < 0 ? (size_t)a->k.size * (size_t)a->k.size : 0;
  return a->k.named == b->k.named && a->k.size == b->k.size &&
         memcmp(a->k.w, b->k.w, n * sizeof(a->k.w[0])) == 0;
}

/* Resolves one parameter from its two sources and its default; *given says whether the request
 * had it. */
static enum err resolve(const struct param_spec *s, const struct query *q, json_t *json,
                        const char *where, void *out, int *given, char *msg, size_t msglen) {
  static const struct pval zero;
  struct pval qv = zero, jv = zero;
  const char *qtext = NULL;
  json_t *jval = json ? json_object_get(json, s->name) : NULL;
  enum err e;
  for (int i = 0; i < q->n; i++)
    if (strcmp(q->key[i], s->name) == 0) qtext = q->value[i];
  *given = qtext || jval;
  if (qtext && (e = parse_text(s, qtext, &qv, msg, msglen)) != ERR_OK) return e;
  if (jval && (e = parse_json(s, jval, &jv, msg, msglen)) != ERR_OK) return e;
  if (qtext && jval && !same_value(s, &qv, &jv)) {
    snprintf(msg, msglen,
             "%s is '%.32s' in the query string but has another value in %s; give it once.",
             s->name, qtext, where);
    return ERR_CONFLICTING_PARAMETER;
  }
  if (!qtext && !jval) {
    if (!s->def) {
      snprintf(msg, msglen, "%s is required: %s", s->name, s->doc);
      return ERR_MISSING_PARAMETER;
    }
    if (*s->def && (e = parse_text(s, s->def, &qv, msg, msglen)) != ERR_OK) return ERR_INTERNAL;
  }
  store(s, jval && !qtext ? &jv : &qv, out);
  return ERR_OK;
}

/* A parameter given for a method it does not apply to is a mistake worth a 400. */
static enum err check_applies(const struct endpoint *ep, const int *given, const void *out,
                              char *msg, size_t msglen) {
  if (ep->method_param < 0) return ERR_OK;
  const struct param_spec *mp = &ep->params[ep->method_param];
  int m = *(const int *)((const char *)out + mp->offset);
  for (int i = 0; m < ep->nmethods && i < ep->nparams; i++) {
    const struct param_spec *s = &ep->params[i];
    if (!given[i] || !s->methods || (s->methods >> m & 1)) continue;
    size_t n = (size_t)snprintf(msg, msglen, "%s does not apply to method %s; it applies to",
                                s->name, mp->choices[m]);
    for (int k = 0; k < ep->nmethods && n < msglen; k++)
      if (s->methods >> k & 1) n += (size_t)snprintf(msg + n, msglen - n, " %s", mp->choices[k]);
    if (n < msglen) snprintf(msg + n, msglen - n, ".");
    return ERR_BAD_PARAMETER;
  }
  return ERR_OK;
}

enum err params_parse_object(const struct endpoint *ep, const char *query, json_t *obj,
                             const char *where, void *out, char *msg, size_t msglen) {
  struct query q;
  int given[MAX_PARAMS] = {0};
  const char *key;
  json_t *val;
  enum err e = query_parse(ep, query, &q, msg, msglen);
  json_object_foreach(obj, key, val) {
    if (e == ERR_OK && !params_spec(ep, key)) e = unknown(ep, key, where, msg, msglen);
  }
  for (int i = 0; e == ERR_OK && i < ep->nparams; i++)
    e = resolve(&ep->params[i], &q, obj, where, out, &given[i], msg, msglen);
  if (e == ERR_OK) e = check_applies(ep, given, out, msg, msglen);
  unsigned mask = 0;
  for (int i = 0; i < ep->nparams; i++) mask |= (unsigned)given[i] << i;
  if (e == ERR_OK && ep->given_offset >= 0)
    memcpy((char *)out + ep->given_offset, &mask, sizeof(mask));
  if (e == ERR_OK && ep->check) e = ep->check(out, msg, msglen);
  query_free(&q);
  return e;
}

enum err params_parse(const struct endpoint *ep, const char *query, const char *json,
                      size_t json_len, void *out, char *msg, size_t msglen) {
  json_t *j = NULL;
  if (json && json_len > PARAMS_JSON_MAX) {
    snprintf(msg, msglen, "The params field has %zu bytes; the limit is %d.", json_len,
             PARAMS_JSON_MAX);
    return ERR_BAD_JSON;
  }
  enum err e =
      json ? params_load_json("The params field", json, json_len, &j, msg, msglen) : ERR_OK;
  if (e == ERR_OK) e = params_parse_object(ep, query, j, "params", out, msg, msglen);
  json_decref(j);
  return e;
}

static const char *const type_names[] = {"number", "integer", "boolean",
                                         "string", "kernel",  "regions"};

json_t *params_describe(const struct endpoint *ep, int m) {
  json_t *arr = json_array();
  for (int i = 0; arr && i < ep->nparams; i++) {
    const struct param_spec *s = &ep->params[i];
    if (m >= 0 && s->methods && !(s->methods >> m & 1)) continue;
    json_t *p = json_pack("{s:s, s:s, s:b, s:s}", "name", s->name, "type", type_names[s->type],
                          "required", s->def == NULL, "description", s->doc);
    if (!p) continue;
    if (s->def && *s->def) json_object_set_new(p, "default", json_string(s->def));
    if (s->type == PT_NUMBER || s->type == PT_INT) {
      json_object_set_new(p, "min", json_real(s->min));
      json_object_set_new(p, "max", json_real(s->max));
    }
    if (s->type == PT_KERNEL) json_object_set_new(p, "max_size", json_integer(CPU_CONV_MAX));
    if (s->type == PT_REGIONS) json_object_set_new(p, "max_items", json_integer(API_REGIONS_MAX));
    if (s->type == PT_ENUM || s->type == PT_KERNEL) {
      json_t *c = json_array();
      for (int k = 0; s->choices[k]; k++) json_array_append_new(c, json_string(s->choices[k]));
      json_object_set_new(p, "choices", c);
    }
    json_array_append_new(arr, p);
  }
  return arr;
}
