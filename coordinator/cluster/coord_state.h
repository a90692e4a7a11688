/* coordinator/cluster/coord_state.h — what a coordinator state directory says about its
 * coordinator: whether one is running now (it holds STATE/coordinator.lock), its pid and the
 * deltafin subcommand it runs under (run / serve), and what its last STATE/cluster-status.json
 * recorded (endpoint, update time, nodes).
 *
 * Owns: reading those two files without disturbing a coordinator (the lock is never taken,
 * only looked up in /proc/locks), for `deltafin cluster status` and `deltafin doctor`. Does
 * not own: writing them (coordinator/cluster/cluster.c writes the status file,
 * transport/keys.c df_proto_state_claim the lock) nor the state directory's other files
 * (transport/keys.h).
 */
#ifndef DF_COORD_STATE_H
#define DF_COORD_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_t;

typedef struct df_coord_state {
  bool dir_exists;     /* the state directory exists (and is a directory) */
  bool has_status;     /* STATE/cluster-status.json was read and parsed */
  bool running;        /* a live process holds the flock on STATE/coordinator.lock now */
  long pid;            /* the lock holder's pid when running, else the status file's pid
                          (the last coordinator's); 0 = unknown */
  char command[16];    /* the subcommand the coordinator runs (ran) under: "run", "serve";
                          "" = not recorded */
  char endpoint[300];  /* the status file's cluster socket, "tcp://HOST:PORT"; "" = none */
  int64_t updated;     /* when the status file was written, Unix seconds; 0 = none */
  int nodes;           /* node entries in the status file */
  int nodes_ready;     /* of those, with health "ready" */
} df_coord_state;

/* Read what state_dir records about its coordinator into *out (zeroed first). The status file
 * is parsed with jansson; when `status` is not NULL it receives the parsed root object (the
 * caller owns it and frees it with json_decref), or NULL when there is no readable status
 * file. Running is decided by the lock: a FLOCK in /proc/locks on STATE/coordinator.lock's
 * inode (where /proc/locks cannot be read: the pid written in the lock file is alive). The
 * pid and command of a running coordinator come from its lock file and status file, or from
 * /proc/PID/cmdline when its status file is not written yet. Never fails: whatever cannot be
 * read is left unknown (a missing directory gives dir_exists false). */
void df_coord_state_read(const char *state_dir, df_coord_state *out, struct json_t **status);

/* The endpoint's host and port for a TCP connect from this machine: a wildcard host ("*",
 * the default bind, or "0.0.0.0") gives "127.0.0.1" (IPv6 "::" gives "::1"), others their
 * host as written (brackets removed). host is the caller's buffer of cap bytes; *port a TCP
 * port number. Allocates nothing. 0, or -1 (host and *port unset) when `endpoint` is not
 * "tcp://HOST:PORT" with a port in 1..65535 or the host does not fit. */
int df_coord_endpoint_local(const char *endpoint, char *host, size_t cap, int *port);

/* TCP connect to host:port (a name or a numeric address; every address it resolves to is
 * tried) within timeout_ms milliseconds in all, then close. Allocates nothing the caller
 * frees. 0 when a connection was made (err set to ""); -1 with the reason in err (errlen
 * bytes): strerror's text ("Connection refused"), "no answer within N ms", or the resolver's
 * "cannot resolve HOST: ...". Sends nothing; a coordinator logs the closed connection as a
 * failed CURVE handshake. */
int df_coord_tcp_probe(const char *host, int port, int timeout_ms, char *err, size_t errlen);

#endif
