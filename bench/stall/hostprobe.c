/* Are the vCPUs taken away from the guest? One SCHED_FIFO 99 thread per CPU (0 and 1)
 * sleeps 500 us at a time and prints every wake-up more than 1 ms late, with its
 * CLOCK_REALTIME time; then a count per CPU. At FIFO 99 nothing in the guest's fair or
 * real-time classes delays it, so a late wake-up is the host not running the vCPU (or
 * the guest kernel with interrupts off). Needs root.
 * Build and run: gcc -O2 -pthread -o /tmp/hostprobe bench/stall/hostprobe.c &&
 *   /tmp/hostprobe SECS
 * (docs/benchmarks.md, "Where the 90%-own tail comes from"). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double secs;

static double now(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *probe(void *arg) {
  long cpu = (long)arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set)) perror("affinity");
  struct sched_param p = {.sched_priority = 99};
  if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &p)) perror("SCHED_FIFO");
  double end = now(CLOCK_MONOTONIC) + secs;
  long sleeps = 0, late = 0;
  for (;;) {
    double t0 = now(CLOCK_MONOTONIC);
    if (t0 > end) break;
    struct timespec d = {0, 500000};
    clock_nanosleep(CLOCK_MONOTONIC, 0, &d, NULL);
    double l = now(CLOCK_MONOTONIC) - t0 - 0.0005;
    sleeps++;
    if (l > 0.001) {
      late++;
      printf("%.6f cpu%ld late %.2f ms\n", now(CLOCK_REALTIME), cpu, l * 1e3);
      fflush(stdout);
    }
  }
  printf("cpu%ld: %ld sleeps, %ld late >1ms\n", cpu, sleeps, late);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: hostprobe SECS\n");
    return 2;
  }
  secs = atof(argv[1]);
  pthread_t a, b;
  pthread_create(&a, NULL, probe, (void *)0L);
  pthread_create(&b, NULL, probe, (void *)1L);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  return 0;
}
