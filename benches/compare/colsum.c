/* The physical limit for a column mean: one thread preads the .npy data in 8 MiB
 * blocks (whole rows) and adds each row into double column sums. Build:
 *   cc -O3 -march=native -o colsum colsum.c
 * Run: colsum FILE.npy ROWS COLS   (f32 data; prints the first three means) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: colsum FILE.npy ROWS COLS\n"); return 2; }
    long rows = atol(argv[2]), cols = atol(argv[3]);
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) { perror("open"); return 1; }
    unsigned char pre[12];
    if (pread(fd, pre, 12, 0) != 12 || memcmp(pre, "\x93NUMPY", 6) != 0) { fprintf(stderr, "not npy\n"); return 1; }
    off_t off = pre[6] == 1 ? 10 + (pre[8] | pre[9] << 8) : 12 + (pre[8] | pre[9] << 8 | pre[10] << 16 | (uint32_t)pre[11] << 24);
    size_t row_bytes = (size_t)cols * 4;
    size_t block_rows = (8u << 20) / row_bytes; if (block_rows == 0) block_rows = 1;
    float *buf = aligned_alloc(64, block_rows * row_bytes);
    double *acc = calloc(cols, sizeof(double));
    for (long r = 0; r < rows; r += block_rows) {
        size_t n = (size_t)(rows - r < (long)block_rows ? rows - r : (long)block_rows);
        size_t want = n * row_bytes, got = 0;
        while (got < want) {
            ssize_t k = pread(fd, (char *)buf + got, want - got, off + (off_t)r * row_bytes + got);
            if (k <= 0) { perror("pread"); return 1; }
            got += k;
        }
        for (size_t i = 0; i < n; i++) {
            const float *row = buf + i * cols;
            for (long j = 0; j < cols; j++) acc[j] += row[j];
        }
    }
    printf("%.9g %.9g %.9g\n", acc[0] / rows, acc[1] / rows, acc[2] / rows);
    return 0;
}
