/* coordinator/server/hosts.h — the open HTTP connections of `deltafin serve`: how many there
 * are, per client address, and how long each has had to deliver its request.
 *
 * Owns: a table of the open connections (one record each, from the accept to libmicrohttpd's
 * CLOSED notification) and of client addresses (IPv4 mapped into IPv6, loopback included)
 * with their open connection counts; the accept policy (--max-connections, and
 * --max-connections-per-host so one host that opens and holds connections cannot take every
 * slot); the request deadline (--request-timeout): a connection must deliver a complete
 * request within that time of its accept, or of the end of its previous response, else its
 * socket is shut down (counted in /metrics). Does not own: the listen socket, the accept
 * thread and the daemon (coordinator/server/server.c), the sockets (libmicrohttpd closes
 * them).
 *
 * Thread safety: every function may be called from any thread (one mutex).
 */
#ifndef DF_COORD_SERVER_HOSTS_H
#define DF_COORD_SERVER_HOSTS_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct df_srv_hosts df_srv_hosts;

/* A table for at most `max_conns` open connections, each client address allowed `per_host`
 * of them (0 = no limit), each connection given `request_timeout_s` seconds (> 0) to deliver
 * a request. `wake_fd` (an eventfd, borrowed: it must outlive the table) gets 1 added when a
 * connection closes while the table was full, so the accept thread can listen again. NULL
 * when out of memory. */
df_srv_hosts *df_srv_hosts_new(int per_host, unsigned max_conns, unsigned request_timeout_s,
                               int wake_fd);
/* Frees the table and the records still in it (call after the daemon stopped: libmicrohttpd
 * closes the sockets). NULL-safe; sets *h NULL. */
void df_srv_hosts_free(df_srv_hosts **h);

/* Connections refused so far because their address held the per-host limit. */
int64_t df_srv_hosts_refusals(df_srv_hosts *h);
/* Connections shut down so far because they missed the request deadline. */
int64_t df_srv_hosts_timeouts(df_srv_hosts *h);

/* True when max_conns connections are open (admitted and not yet closed): accept no more. */
bool df_srv_hosts_full(df_srv_hosts *h);

/* The accept policy, for a socket just accepted (fd, its peer address): 0 = admitted (a
 * record is made and the request clock starts; hand fd to MHD_add_connection next), 1 =
 * refused because the address holds the per-host limit (counted), -1 = refused because the
 * table is full or out of memory. On a refusal the caller closes fd. */
int df_srv_hosts_admit(df_srv_hosts *h, int fd, const struct sockaddr *addr, socklen_t len);
/* MHD_add_connection refused the admitted fd (libmicrohttpd has closed it): forget it. */
void df_srv_hosts_unadmit(df_srv_hosts *h, int fd);

/* MHD_OPTION_NOTIFY_CONNECTION, cls = the table: STARTED binds the admitted record to the
 * connection (*socket_context), CLOSED removes it. libmicrohttpd calls CLOSED before it
 * closes the socket, so a socket in the table is always still open. */
void df_srv_hosts_on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                                enum MHD_ConnectionNotificationCode toe);

/* The access handler has the complete request (header and body) of connection mc: its
 * deadline is off while the request is answered. */
void df_srv_hosts_request_received(df_srv_hosts *h, struct MHD_Connection *mc);
/* The response on mc is over (MHD_OPTION_NOTIFY_COMPLETED): the next request on the
 * keep-alive connection has request_timeout_s seconds from now. */
void df_srv_hosts_request_rearm(df_srv_hosts *h, struct MHD_Connection *mc);

/* Shut down (shutdown(2), both ways; libmicrohttpd then closes it) every connection whose
 * request deadline has passed. Returns the milliseconds until the next deadline (>= 1), or
 * -1 when no connection has one. */
int64_t df_srv_hosts_cut_overdue(df_srv_hosts *h);

#endif
