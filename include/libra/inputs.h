/*
 * Where the shipped inputs are read from: the hardware and model profiles, the
 * workload presets, the models, traces and example configs of the source tree's
 * inputs/, which `make install` copies to $(pkgdatadir). The inputs directory is
 * the first of
 *   1. $LIBRA_INPUTS, when set and not empty;
 *   2. the installed data directory as seen from the running program: its own
 *      directory (/proc/self/exe) joined with the path from $(bindir) to
 *      $(pkgdatadir) ("../share/libra"), when that is a directory -- an installed
 *      program, and a staged (DESTDIR) or moved copy of the whole prefix;
 *   3. inputs/ of the source tree the program was built from, when it exists -- a
 *      program run from its build tree, which must not read an older installed copy;
 *   4. $(pkgdatadir) as configured.
 * The config loader tries it after the directory of the file that names a path;
 * commands that take an input file on the command line try it after the working
 * directory.
 */
#ifndef LIBRA_INPUTS_H
#define LIBRA_INPUTS_H

#include <stddef.h>

/* The inputs directory (rules above) into out (n bytes). 0, or -1 if it does not
 * fit. */
int inputs_dir(char *out, size_t n);

/* inputs_dir with the environment value and the program's directory given (NULL:
 * none), so tests can stage an installed tree. */
int inputs_dir_for(const char *env, const char *exe_dir, char *out, size_t n);

/* A relative path that names no file from the working directory but one in the
 * inputs directory: that one, into out (n bytes), and 0. Otherwise (absolute,
 * found as it is, or found nowhere) -1, out untouched. */
int inputs_find(const char *path, char *out, size_t n);

/* The relative path from directory `from` to directory `to`, both absolute
 * ("/p/bin", "/p/share/libra" -> "../share/libra"; equal ones -> "."). Empty and
 * "." components are ignored; -1 if either is relative, holds "..", or out (n
 * bytes) is too small. */
int inputs_relpath(const char *from, const char *to, char *out, size_t n);

#endif
