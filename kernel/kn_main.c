/*
 * kn_main.c — nbfork-kernel's command line.
 *
 *   nbfork-kernel -f CONNECTION_FILE     run the kernel (Jupyter starts it so)
 *   nbfork-kernel install [...]           write the kernelspec (kn_install.h)
 *   nbfork-kernel --version | --help
 *
 * Exit status: 0 after a shutdown_request (restart too: the client starts
 * a new kernel), 2 for a usage error or a malformed connection file, 1
 * when the sockets cannot be set up.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kn_connection.h"
#include "kn_install.h"
#include "kn_kernel.h"
#include "kn_log.h"
#include "kn_server.h"
#include "kn_signals.h"
#include "kn_transport.h"
#include "nbf_wire.h"
#include "nbf_param.h"
#include "nbf_workdir.h"

static int usage(FILE *f) {
  fprintf(f,
          "usage: nbfork-kernel -f CONNECTION_FILE\n"
          "       nbfork-kernel install [--user | --prefix DIR] [--name NAME]\n"
          "       nbfork-kernel --version | --help\n"
          "\n"
          "nbfork-kernel is a Jupyter kernel (protocol %s) whose cells are C11.\n"
          "Jupyter starts it with a connection file; install writes the kernelspec.\n"
          "\n"
          "environment:\n"
          "  NBFORK_EXECUTOR      path of the executor binary (default: %s next to\n"
          "                       nbfork-kernel)\n"
          "  NBFORK_KERNEL_DEBUG  1: log every message on stderr (default 0)\n",
          KN_PROTOCOL_VERSION, NBF_WIRE_EXECUTOR_NAME);
  return f == stderr ? 2 : 0;
}

/* Make sure fds 0-2 are open so no pipe or socket lands on them. */
static void keep_std_fds(void) {
  for (int fd = 0; fd < 3; fd++)
    if (fcntl(fd, F_GETFD) < 0)
      open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY); /* takes the lowest free fd */
}

int main(int argc, char **argv) {
  const char *conn_path = NULL;
  if (argc >= 2 && strcmp(argv[1], "install") == 0)
    return kn_install_main(argc - 2, argv + 2);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--version") == 0) {
      printf("nbfork-kernel %s (Jupyter messaging protocol %s)\n", NBFORK_VERSION,
             KN_PROTOCOL_VERSION);
      return 0;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return usage(stdout);
    else if ((strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--connection-file") == 0) &&
             i + 1 < argc)
      conn_path = argv[++i];
    else if (strncmp(argv[i], "--connection-file=", 18) == 0)
      conn_path = argv[i] + 18;
    else if (strncmp(argv[i], "-f=", 3) == 0)
      conn_path = argv[i] + 3;
    else {
      fprintf(stderr, "nbfork-kernel: unknown or incomplete argument '%s'\n", argv[i]);
      return usage(stderr);
    }
  }
  if (!conn_path) {
    fprintf(stderr, "nbfork-kernel: no connection file (-f FILE)\n");
    return usage(stderr);
  }
  keep_std_fds();

  kn_connection_t conn;
  kn_connection_error_t cerr;
  if (kn_connection_load(conn_path, &conn, &cerr) != KN_OK) {
    if (cerr.line > 0)
      fprintf(stderr, "nbfork-kernel: connection file '%s': field '%s': %s (line %d, column %d)\n",
              conn_path, cerr.field, cerr.text, cerr.line, cerr.column);
    else
      fprintf(stderr, "nbfork-kernel: connection file '%s': field '%s': %s\n", conn_path,
              cerr.field, cerr.text);
    return 2;
  }

  char warn[PATH_MAX + 256];
  if (kn_connection_check_mode(conn_path, warn, sizeof warn))
    kn_log(KN_LOG_WARN, "%s", warn);
  /* work directories of executors that died with no one to reap them */
  nbf_workdir_sweep(nbf_param_TMPDIR(), 0);

  kn_signals_block(); /* before ZeroMQ starts its threads */
  char err[512];
  kn_transport_t *t = kn_transport_new(&conn, err, sizeof err);
  kn_connection_clear(&conn);
  if (!t) {
    kn_log(KN_LOG_ERROR, "%s", err);
    return 1;
  }
  int sig_fd = -1;
  if (kn_signals_install(&sig_fd) != KN_OK)
    kn_log(KN_LOG_WARN, "cannot install signal handlers; SIGINT will not interrupt cells");

  char exec_path[PATH_MAX];
  if (nbf_executor_find(exec_path, sizeof exec_path) != 0)
    exec_path[0] = '\0';
  kn_kernel_t *k = kn_kernel_new(kn_transport_io(t), exec_path);
  if (!k) {
    kn_log(KN_LOG_ERROR, "out of memory");
    kn_transport_destroy(&t);
    return 1;
  }
  kn_kernel_status(k, NULL, "starting");
  kn_kernel_ensure_executor(k); /* errors are reported on the first execute */
  kn_result_t r = kn_server_run(k, t, sig_fd);
  kn_kernel_destroy(&k); /* stops the executor */
  kn_transport_destroy(&t);
  if (sig_fd >= 0)
    close(sig_fd);
  return r == KN_OK ? 0 : 1;
}
