/*
 * kn_install.h — `nbfork-kernel install [--user | --prefix DIR] [--name NAME]`:
 * write the kernelspec (jupyter_client "Kernel specs") so that
 * `jupyter kernelspec list` shows the kernel:
 *
 *   DATA/kernels/NAME/kernel.json   argv [this binary (absolute), "-f",
 *                                   "{connection_file}"], display_name
 *                                   "C (nbfork)", language "c",
 *                                   interrupt_mode "signal", metadata {}
 *   DATA/kernels/NAME/logo-*.png    copied from the kernelspec/ folder
 *
 * DATA: --user: $JUPYTER_DATA_DIR, else $XDG_DATA_HOME/jupyter, else
 * ~/.local/share/jupyter (as jupyter_core); --prefix DIR:
 * DIR/share/jupyter; default: /usr/local/share/jupyter. NAME defaults to
 * "nbfork" and must match [A-Za-z0-9._-]+.
 */
#ifndef KN_INSTALL_H
#define KN_INSTALL_H

/* Run the install subcommand with argv after "install". Returns the
 * process exit code (0 ok, 2 usage error, 1 failure), after printing what
 * it did or why it failed. */
int kn_install_main(int argc, char **argv);

#endif
