/* server: blurd's own HTTP/1.1 front (http.c, on the request syntax of http/http1.c, behind the
 * gate of gate.c). It reads each request completely, refusing what is not strict HTTP/1.1, bodies
 * over the limit and over the buffered-bytes budget before reading them when Content-Length says
 * so, hands it to the api, and while a job runs watches the connection without reading from it, so
 * that HTTP threads never wait on filters, decoders or encoders and a client that leaves cancels
 * its job. It knows nothing about images. */
#ifndef BLURD_SERVER_H
#define BLURD_SERVER_H

#include <stddef.h>

struct api_ctx;
struct api_config;

struct srv_config {
  int listen_fd;         /* from srv_listen */
  int threads;           /* HTTP threads */
  unsigned timeout_s;    /* idle connection timeout */
  unsigned max_conns;    /* connections in total */
  unsigned max_conns_ip; /* connections from one IP address */
  size_t max_body;       /* request body bytes */
  size_t max_buffered;   /* bytes of request bodies (held or declared) and responses held at once */
  unsigned request_timeout_s; /* from the request line to the response, whatever happens */
};

struct srv;

/* Listens on bind:port (an IPv4 address, e.g. "0.0.0.0"; port 0: any free one) before the api
 * starts, so that clients of a restarting server wait in the backlog instead of being refused.
 * Returns the socket, or -1 with a sentence in err. */
int srv_listen(const char *bind, int port, char *err, size_t errlen);
/* Starts serving on cfg->listen_fd (the server's from then on, closed on failure too). Returns
 * NULL with a sentence in err on failure. api must outlive the server. */
struct srv *srv_new(const struct srv_config *cfg, struct api_ctx *api, char *err, size_t errlen);
/* The port it listens on. */
int srv_port(const struct srv *s);
/* Stops accepting connections, answers 503 shutting_down to the requests still arriving (a head
 * or a body not yet whole) and closes the idle connections, then waits up to timeout_s for the
 * requests in flight to get their responses and for their jobs to end. Returns the number of
 * requests and jobs still in flight (0 when all finished). */
int srv_drain(struct srv *s, double timeout_s);
/* Closes every connection and frees s; s may be NULL. */
void srv_free(struct srv *s);

/* The command-line mode (cli.c): each file goes through the api as the body of a POST to an
 * image endpoint would, with the --name value pairs as its query string. */

/* The command line's exit statuses, as docs/operations.md ("Command line") and blurd ENDPOINT
 * --help state them. */
enum cli_status {
  CLI_OK = 0,     /* every file's output was written (or --help was printed) */
  CLI_FAILED = 1, /* a file failed (each is named on stderr), or the run could not start: out of
                     memory, -o DIR could not be made, the api did not start */
  CLI_USAGE = 2,  /* bad usage: an unknown endpoint or flag, a value or the files missing, or
                     parameters the api refuses (checked once, before any file) */
};

/* Runs the command line argv (argv[0]: the endpoint, checked here; then the CLI's flags, --name
 * value parameters and files) on an api started with cfg. Returns the process's exit status. */
enum cli_status cli_main(const struct api_config *cfg, int argc, char **argv);

#endif
