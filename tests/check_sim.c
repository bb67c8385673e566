/*
 * check_sim: do two runs of one config agree? Compares trajectories per second (the
 * /steps n_traj sum over the last wall_s) and the mean /steps step_s of a metrics
 * file A (e.g. the MPI emulated job) and B (e.g. libra-sim), and fails when either
 * differs by more than the relative tolerance TOL (of A's value).
 *
 *   check_sim A.h5 B.h5 TOL      exit 0 agree, 1 disagree or unreadable, 2 usage
 */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "libra/h5util.h"

struct figures {
    double traj_per_s, mean_step_s;
    size_t steps;
};

static int read_figures(const char *path, struct figures *f)
{
    char err[512];
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) {
        fprintf(stderr, "check_sim: cannot open %s\n", path);
        return -1;
    }
    double *n = NULL, *wall = NULL, *step = NULL;
    size_t rows = 0, r2 = 0, r3 = 0;
    int rc = h5_read_column_f64(file, "steps", "n_traj", &n, &rows, err, sizeof err) ||
             h5_read_column_f64(file, "steps", "wall_s", &wall, &r2, err, sizeof err) ||
             h5_read_column_f64(file, "steps", "step_s", &step, &r3, err, sizeof err);
    H5Fclose(file);
    if (rc || rows == 0 || r2 != rows || r3 != rows) {
        fprintf(stderr, "check_sim: %s: %s\n", path, rc ? err : "no /steps rows");
        free(n), free(wall), free(step);
        return -1;
    }
    double traj = 0, sum = 0;
    for (size_t i = 0; i < rows; i++) traj += n[i], sum += step[i];
    f->traj_per_s = wall[rows - 1] > 0 ? traj / wall[rows - 1] : 0;
    f->mean_step_s = sum / rows;
    f->steps = rows;
    free(n), free(wall), free(step);
    return 0;
}

static int agree(const char *what, double a, double b, double tol)
{
    double rel = a != 0 ? fabs(b - a) / fabs(a) : fabs(b);
    printf("check_sim: %-12s %10.4f vs %10.4f  (%+.1f %%, tolerance %.0f %%) %s\n", what, a, b,
           a != 0 ? 100 * (b - a) / a : 0, 100 * tol, rel <= tol ? "ok" : "FAIL");
    return rel <= tol;
}

int main(int argc, char **argv)
{
    char *end = NULL;
    double tol = argc == 4 ? strtod(argv[3], &end) : -1;
    if (argc != 4 || *end != '\0' || !(tol >= 0)) {
        fprintf(stderr, "usage: check_sim A.h5 B.h5 TOLERANCE (e.g. 0.10)\n");
        return 2;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    struct figures a, b;
    if (read_figures(argv[1], &a) || read_figures(argv[2], &b)) return 1;
    if (a.steps != b.steps) {
        fprintf(stderr, "check_sim: %zu steps in %s, %zu in %s\n", a.steps, argv[1], b.steps, argv[2]);
        return 1;
    }
    int ok = agree("traj/s", a.traj_per_s, b.traj_per_s, tol);
    ok &= agree("mean step s", a.mean_step_s, b.mean_step_s, tol);
    return ok ? 0 : 1;
}
