/* The physical limit for each task of the comparison harness (benches/compare/compare.py):
 * a tiny C program that preads the f32 .npy input in blocks of 8 MiB (whole rows), does the
 * minimal arithmetic of the task on all cores (OpenMP), and for write tasks pwrites the
 * output .npy and fsyncs it. No pipelining: a block is read, then computed, then written.
 *
 * Build: cc -O3 -march=native -fopenmp -o limit limit.c
 * Run:   limit TASK IN.npy [OUT.npy [W.npy]]
 *   mean      column means (double sums)                         prints the first three
 *   std       column std, ddof 0 (double sums of x and x^2)      prints the first three
 *   map16     (x*2+1) cast to f16, written
 *   standardize  pass 1 as std, pass 2 (x - mean) / std as f32, written
 *   project   X @ W with W (COLS x K f32) resident, f32 written
 *   gaussian  separable gaussian sigma=2 (radius 8, reflect, as scipy.ndimage), f32 written
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK (8u << 20)

static void die(const char *what) { perror(what); exit(1); }

/* Opens an f32 C-order rank-2 .npy; returns the data offset, fills rows and cols. */
static off_t open_npy(const char *path, int *fd, long *rows, long *cols) {
    *fd = open(path, O_RDONLY);
    if (*fd < 0) die(path);
    unsigned char pre[12];
    if (pread(*fd, pre, 12, 0) != 12 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        fprintf(stderr, "%s: not an .npy file\n", path);
        exit(1);
    }
    size_t hlen = pre[6] == 1 ? (size_t)(pre[8] | pre[9] << 8)
                              : (size_t)(pre[8] | pre[9] << 8 | pre[10] << 16 | (uint32_t)pre[11] << 24);
    off_t off = (pre[6] == 1 ? 10 : 12) + (off_t)hlen;
    char *h = calloc(hlen + 1, 1);
    if (pread(*fd, h, hlen, off - (off_t)hlen) != (ssize_t)hlen) die("header");
    if (!strstr(h, "'<f4'") || strstr(h, "True")) {
        fprintf(stderr, "%s: need little-endian f32 in C order\n", path);
        exit(1);
    }
    char *s = strstr(h, "'shape': (");
    if (!s || sscanf(s + 10, "%ld, %ld", rows, cols) != 2) {
        fprintf(stderr, "%s: need a rank-2 array\n", path);
        exit(1);
    }
    free(h);
    return off;
}

static void read_all(int fd, void *buf, size_t n, off_t at) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)buf + got, n - got, at + (off_t)got);
        if (k <= 0) die("pread");
        got += (size_t)k;
    }
}

static void write_all(int fd, const void *buf, size_t n, off_t at) {
    size_t put = 0;
    while (put < n) {
        ssize_t k = pwrite(fd, (const char *)buf + put, n - put, at + (off_t)put);
        if (k <= 0) die("pwrite");
        put += (size_t)k;
    }
}

/* Creates an output .npy (v1 header padded to 64 bytes); returns the data offset. */
static off_t create_npy(const char *path, int *fd, const char *descr, long rows, long cols) {
    *fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (*fd < 0) die(path);
    char dict[128];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%ld, %ld), }",
                     descr, rows, cols);
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
    char *h = malloc(total);
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    h[8] = (char)((total - 10) & 0xff);
    h[9] = (char)((total - 10) >> 8);
    memcpy(h + 10, dict, (size_t)n);
    memset(h + 10 + n, ' ', total - 10 - (size_t)n - 1);
    h[total - 1] = '\n';
    write_all(*fd, h, total, 0);
    free(h);
    return (off_t)total;
}

/* Column sums of x (and of x^2 when sq is given) over all rows, in double. */
static void column_sums(int fd, off_t off, long rows, long cols, float *buf, long brows, double *sum,
                        double *sq) {
    for (long r = 0; r < rows; r += brows) {
        long n = rows - r < brows ? rows - r : brows;
        read_all(fd, buf, (size_t)n * cols * 4, off + (off_t)r * cols * 4);
#pragma omp parallel
        {
            double *s = calloc((size_t)cols, sizeof(double));
            double *q = sq ? calloc((size_t)cols, sizeof(double)) : NULL;
#pragma omp for schedule(static)
            for (long i = 0; i < n; i++) {
                const float *row = buf + i * cols;
                if (q)
                    for (long j = 0; j < cols; j++) { double v = row[j]; s[j] += v; q[j] += v * v; }
                else
                    for (long j = 0; j < cols; j++) s[j] += row[j];
            }
#pragma omp critical
            for (long j = 0; j < cols; j++) { sum[j] += s[j]; if (q) sq[j] += q[j]; }
            free(s);
            free(q);
        }
    }
}

static long reflect(long i, long n) {
    while (i < 0 || i >= n) i = i < 0 ? -i - 1 : 2 * n - i - 1;
    return i;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: limit mean|std|map16|standardize|project|gaussian IN.npy [OUT.npy [W.npy]]\n");
        return 2;
    }
    const char *task = argv[1];
    int fd, out = -1;
    long rows, cols;
    off_t off = open_npy(argv[2], &fd, &rows, &cols);
    size_t row_bytes = (size_t)cols * 4;
    long brows = (long)(BLOCK / row_bytes) ? (long)(BLOCK / row_bytes) : 1;
    float *buf = aligned_alloc(64, ((size_t)brows * row_bytes + 63) / 64 * 64);
    int writes = strcmp(task, "mean") && strcmp(task, "std");
    if (writes && argc < 4) { fprintf(stderr, "%s needs an output path\n", task); return 2; }

    if (!strcmp(task, "mean") || !strcmp(task, "std")) {
        double *sum = calloc((size_t)cols, sizeof(double));
        double *sq = task[0] == 's' ? calloc((size_t)cols, sizeof(double)) : NULL;
        column_sums(fd, off, rows, cols, buf, brows, sum, sq);
        for (long j = 0; j < 3 && j < cols; j++) {
            double m = sum[j] / rows;
            printf("%.9g ", sq ? sqrt(fmax(sq[j] / rows - m * m, 0)) : m);
        }
        printf("\n");
        return 0;
    }
    if (!strcmp(task, "map16")) {
        off_t o = create_npy(argv[3], &out, "<f2", rows, cols);
        _Float16 *y = aligned_alloc(64, (size_t)brows * cols * 2 + 64);
        for (long r = 0; r < rows; r += brows) {
            long n = rows - r < brows ? rows - r : brows;
            size_t len = (size_t)n * cols;
            read_all(fd, buf, len * 4, off + (off_t)r * row_bytes);
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < len; i++) y[i] = (_Float16)(buf[i] * 2.0f + 1.0f);
            write_all(out, y, len * 2, o + (off_t)r * cols * 2);
        }
    } else if (!strcmp(task, "standardize")) {
        double *sum = calloc((size_t)cols, sizeof(double)), *sq = calloc((size_t)cols, sizeof(double));
        column_sums(fd, off, rows, cols, buf, brows, sum, sq);
        float *mean = malloc(row_bytes), *sd = malloc(row_bytes);
        for (long j = 0; j < cols; j++) {
            double m = sum[j] / rows;
            mean[j] = (float)m;
            sd[j] = (float)sqrt(fmax(sq[j] / rows - m * m, 0));
        }
        off_t o = create_npy(argv[3], &out, "<f4", rows, cols);
        for (long r = 0; r < rows; r += brows) {
            long n = rows - r < brows ? rows - r : brows;
            read_all(fd, buf, (size_t)n * row_bytes, off + (off_t)r * row_bytes);
#pragma omp parallel for schedule(static)
            for (long i = 0; i < n; i++)
                for (long j = 0; j < cols; j++) buf[i * cols + j] = (buf[i * cols + j] - mean[j]) / sd[j];
            write_all(out, buf, (size_t)n * row_bytes, o + (off_t)r * row_bytes);
        }
    } else if (!strcmp(task, "project")) {
        if (argc < 5) { fprintf(stderr, "project needs W.npy\n"); return 2; }
        int wfd;
        long wr, k;
        off_t woff = open_npy(argv[4], &wfd, &wr, &k);
        if (wr != cols) { fprintf(stderr, "W has %ld rows, X %ld columns\n", wr, cols); return 1; }
        float *w = aligned_alloc(64, ((size_t)wr * k * 4 + 63) / 64 * 64);
        read_all(wfd, w, (size_t)wr * k * 4, woff);
        off_t o = create_npy(argv[3], &out, "<f4", rows, k);
        float *y = aligned_alloc(64, ((size_t)brows * k * 4 + 63) / 64 * 64);
        for (long r = 0; r < rows; r += brows) {
            long n = rows - r < brows ? rows - r : brows;
            read_all(fd, buf, (size_t)n * row_bytes, off + (off_t)r * row_bytes);
#pragma omp parallel for schedule(static)
            for (long i = 0; i < n; i++) {
                float *yi = y + i * k;
                for (long j = 0; j < k; j++) yi[j] = 0;
                for (long c = 0; c < cols; c++) {
                    float xv = buf[i * cols + c];
                    const float *wc = w + c * k;
                    for (long j = 0; j < k; j++) yi[j] += xv * wc[j];
                }
            }
            write_all(out, y, (size_t)n * k * 4, o + (off_t)r * k * 4);
        }
    } else if (!strcmp(task, "gaussian")) {
        enum { R = 8 };
        double wd[2 * R + 1], tot = 0;
        for (int i = -R; i <= R; i++) tot += wd[i + R] = exp(-0.5 * i * i / 4.0);
        float w[2 * R + 1];
        for (int i = 0; i <= 2 * R; i++) w[i] = (float)(wd[i] / tot);
        /* each block reads its rows plus R halo rows above and below */
        long hb = brows + 2 * R;
        free(buf);
        buf = aligned_alloc(64, ((size_t)hb * row_bytes + 63) / 64 * 64);
        float *y = aligned_alloc(64, ((size_t)brows * row_bytes + 63) / 64 * 64);
        off_t o = create_npy(argv[3], &out, "<f4", rows, cols);
        for (long r = 0; r < rows; r += brows) {
            long n = rows - r < brows ? rows - r : brows;
            long lo = r - R < 0 ? 0 : r - R, hi = r + n + R > rows ? rows : r + n + R;
            read_all(fd, buf, (size_t)(hi - lo) * row_bytes, off + (off_t)lo * row_bytes);
#pragma omp parallel
            {
                float *t = malloc(row_bytes);
#pragma omp for schedule(static)
                for (long i = 0; i < n; i++) {
                    for (long c = 0; c < cols; c++) t[c] = 0;
                    for (int d = -R; d <= R; d++) {
                        const float *src = buf + (reflect(r + i + d, rows) - lo) * cols;
                        for (long c = 0; c < cols; c++) t[c] += w[d + R] * src[c];
                    }
                    float *yi = y + i * cols;
                    for (long c = 0; c < cols; c++) {
                        float acc = 0;
                        if (c >= R && c + R < cols)
                            for (int d = -R; d <= R; d++) acc += w[d + R] * t[c + d];
                        else
                            for (int d = -R; d <= R; d++) acc += w[d + R] * t[reflect(c + d, cols)];
                        yi[c] = acc;
                    }
                }
                free(t);
            }
            write_all(out, y, (size_t)n * row_bytes, o + (off_t)r * row_bytes);
        }
    } else {
        fprintf(stderr, "unknown task %s\n", task);
        return 2;
    }
    if (fsync(out) != 0) die("fsync");
    close(out);
    return 0;
}
