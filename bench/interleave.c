/* bench/interleave.c: time commands run by run, interleaved.
 *
 *   cc -O2 -o /tmp/interleave bench/interleave.c
 *   /tmp/interleave 2000 "lockrun:$PWD/target/x86_64-unknown-linux-gnu/release/lockrun /tmp/l1 -- true" \
 *                        "flock:/usr/bin/flock /tmp/l2 true" "true:/usr/bin/true"
 *
 * Each argument after the count is LABEL:ARGV, split on spaces, with an
 * absolute program path (posix_spawn, no PATH search, no shell). Every
 * round runs each command once, in an order reversed every other round, so
 * that a burst of noise on a shared machine hits all of them alike (which
 * hyperfine's blocks of one command at a time do not). After 20 rounds of
 * warm-up, prints the minimum, p10, p25 and p50 of the wall time from
 * spawn to reaped, in microseconds. The commands' stdout goes to
 * /dev/null. */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s ROUNDS LABEL:ARGV...\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[1]), k = argc - 2;
  if (n < 1) return 2;
  char **label = calloc(k, sizeof *label);
  char ***av = calloc(k, sizeof *av);
  for (int i = 0; i < k; i++) {
    char *s = strdup(argv[i + 2]), *c = strchr(s, ':');
    if (!c) { fprintf(stderr, "no LABEL: in %s\n", s); return 2; }
    *c = 0;
    label[i] = s;
    char **a = calloc(256, sizeof *a);
    int j = 0;
    for (char *t = strtok(c + 1, " "); t && j < 255; t = strtok(NULL, " ")) a[j++] = t;
    av[i] = a;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", 1, 0);
  double *t = calloc((size_t)n * k, sizeof *t);
  for (int r = -20; r < n; r++) {
    for (int ii = 0; ii < k; ii++) {
      int i = (r & 1) ? k - 1 - ii : ii, status;
      pid_t pid;
      double a = now_us();
      if (posix_spawn(&pid, av[i][0], &fa, NULL, av[i], environ) != 0) {
        perror(av[i][0]);
        return 1;
      }
      waitpid(pid, &status, 0);
      if (r >= 0) t[(size_t)i * n + r] = now_us() - a;
    }
  }
  for (int i = 0; i < k; i++) {
    double *x = t + (size_t)i * n;
    qsort(x, n, sizeof *x, cmp);
    printf("%-10s min %7.1f p10 %7.1f p25 %7.1f p50 %7.1f\n", label[i], x[0], x[n / 10], x[n / 4], x[n / 2]);
  }
  return 0;
}
