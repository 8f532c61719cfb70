// Does a process killed while copying into a shared file mapping leave a prefix of the
// copy in the file? (The mapped commitlog's replay needs one: docs/benchmarks.md, "The
// mapped commitlog's crash-test failure".)
//
//   gcc -O2 -pthread bench/stall/torncopy.c -o /tmp/torncopy
//   /tmp/torncopy MODE ROUNDS        MODE 0: memcpy, 1: in-order 8-byte volatile stores
//
// Each round fills a 1 GiB file with 0xEE and syncs it; a child maps it and appends
// copies of 500-12,500 bytes (values 1..200, never 0xEE) one after another while a second
// thread runs fdatasync in a loop (which write-protects the pages it writes back, so
// copies fault); the parent SIGKILLs the child after 5-45 ms and reads the file. A torn
// round: old bytes (0xEE) followed later by new ones. Prints each torn round and a count.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LEN (1UL << 30)
#define PATH "/tmp/torncopy.dat"
static int fd;

static void *syncer(void *arg) {
  (void)arg;
  for (;;) fdatasync(fd);
  return 0;
}

static void ordered(uint8_t *d, const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n && ((uintptr_t)(d + i) & 7)) { *(volatile uint8_t *)(d + i) = s[i]; i++; }
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, s + i, 8);
    *(volatile uint64_t *)(d + i) = v;
  }
  for (; i < n; i++) *(volatile uint8_t *)(d + i) = s[i];
}

static void child(int mode) {
  uint8_t *m = mmap(0, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) _exit(1);
  pthread_t t;
  pthread_create(&t, 0, syncer, 0);
  static uint8_t buf[16384];
  size_t off = 0;
  for (unsigned i = 0;; i++) {
    size_t n = 500 + rand() % 12000;
    if (off + n > LEN) for (;;) pause();
    memset(buf, (i % 200) + 1, n);
    if (mode) ordered(m + off, buf, n); else memcpy(m + off, buf, n);
    off += n;
  }
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: %s MODE ROUNDS\n", argv[0]); return 2; }
  int mode = atoi(argv[1]), rounds = atoi(argv[2]), torn = 0;
  srand(getpid());
  uint8_t *d = malloc(LEN);
  for (int r = 0; r < rounds; r++) {
    fd = open(PATH, O_RDWR | O_CREAT | O_TRUNC, 0644);
    memset(d, 0xEE, LEN);
    if (pwrite(fd, d, LEN, 0) != (ssize_t)LEN || fdatasync(fd)) { perror("fill"); return 1; }
    pid_t p = fork();
    if (p == 0) child(mode);
    struct timespec ts = {0, (5 + rand() % 40) * 1000000L};
    nanosleep(&ts, 0);
    kill(p, SIGKILL);
    waitpid(p, 0, 0);
    if (pread(fd, d, LEN, 0) != (ssize_t)LEN) { perror("read"); return 1; }
    close(fd);
    size_t q = 0;
    while (q < LEN && d[q] != 0xEE) q++;
    size_t z = q;
    while (z < LEN && d[z] == 0xEE) z++;
    if (z < LEN) {
      torn++;
      printf("round %d: written to %zu, old bytes %zu..%zu, written again from %zu\n", r, q, q, z, z);
    }
  }
  unlink(PATH);
  printf("mode %d (%s): %d torn of %d\n", mode, mode ? "in order" : "memcpy", torn, rounds);
  return 0;
}
