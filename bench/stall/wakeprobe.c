/* Who delays a sleeping thread's wake-up on this machine? A thread pinned to CPU sleeps
 * 200 us at a time (as a server thread waits in epoll between requests) and prints every
 * wake-up later than 1 ms; a second thread, pinned to the other CPU, samples the summed
 * CPU time of AGENT_PID's threads (the VM's guest agent is PID 1 here, at nice -10) every
 * 0.3 ms and prints each burst they ran, with the busiest thread and its CPU. Both print CLOCK_MONOTONIC seconds, so `sort -n`
 * interleaves them. SLICE_NS > 0 asks the kernel for that EEVDF slice (sched_setattr's
 * sched_runtime) for the sleeping thread.
 * Build and run: gcc -O2 -pthread -o /tmp/wakeprobe bench/stall/wakeprobe.c &&
 *   /tmp/wakeprobe CPU SLICE_NS SECS AGENT_PID | sort -n
 * (docs/benchmarks.md, "p99.9 at a fixed rate: the VM agent, proven"). */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct sched_attr_v0 {
  uint32_t size, policy;
  uint64_t flags;
  int32_t nice;
  uint32_t priority;
  uint64_t runtime, deadline, period;
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof s, &s);
}

static double end_at;
static int sample_cpu;

static int agent_pid;

/* Field 39 of /proc/PID/task/TID/stat: the CPU the thread last ran on (the thread names
 * this is meant for have no spaces). */
static int last_cpu(int tid) {
  char path[96], b[1024];
  snprintf(path, sizeof path, "/proc/%d/task/%d/stat", agent_pid, tid);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, b, sizeof b - 1);
  close(fd);
  if (n <= 0) return -1;
  b[n] = 0;
  char *p = b;
  for (int field = 1; field < 39 && p; field++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  return p ? atoi(p) : -1;
}

/* The summed CPU time (ns, schedstat) of the agent's threads, and the thread that gained
 * the most since the previous call. */
#define MAX_TASKS 256
static unsigned long long task_ns[MAX_TASKS];
static int task_id[MAX_TASKS];
static unsigned long long agent_ns(int *busiest) {
  char path[96], b[256];
  unsigned long long sum = 0, best = 0;
  snprintf(path, sizeof path, "/proc/%d/task", agent_pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  struct dirent *e;
  int i = 0;
  while ((e = readdir(d)) && i < MAX_TASKS) {
    if (e->d_name[0] == '.') continue;
    int tid = atoi(e->d_name);
    snprintf(path, sizeof path, "/proc/%d/task/%d/schedstat", agent_pid, tid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    if (n <= 0) continue;
    b[n] = 0;
    unsigned long long v = strtoull(b, NULL, 10);
    if (task_id[i] == tid && v - task_ns[i] > best) {
      best = v - task_ns[i];
      *busiest = tid;
    }
    task_id[i] = tid;
    task_ns[i] = v;
    sum += v;
    i++;
  }
  closedir(d);
  return sum;
}

static void *sampler(void *arg) {
  (void)arg;
  pin(sample_cpu);
  unsigned long long prev = 0, acc = 0;
  double start = 0;
  int tid = 0;
  while (now() < end_at) {
    unsigned long long cur = agent_ns(&tid);
    if (prev && cur != prev) {
      if (start == 0) start = now();
      acc += cur - prev;
    } else if (start != 0) {
      printf("%.4f agent ran %.2f ms (thread %d, on cpu %d)\n", start, acc / 1e6, tid, last_cpu(tid));
      start = 0;
      acc = 0;
    }
    prev = cur;
    usleep(300);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s CPU SLICE_NS SECS AGENT_PID\n", argv[0]);
    return 2;
  }
  int cpu = atoi(argv[1]);
  long slice = atol(argv[2]);
  end_at = now() + atof(argv[3]);
  sample_cpu = cpu == 0 ? 1 : 0;
  agent_pid = atoi(argv[4]);
  pthread_t th;
  pthread_create(&th, NULL, sampler, NULL);
  pin(cpu);
  if (slice > 0) {
    struct sched_attr_v0 a = {sizeof a, 0, 0, 0, 0, (uint64_t)slice, 0, 0};
    if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) perror("sched_setattr");
  }
  long n = 0, over1 = 0, over2 = 0;
  double worst = 0;
  while (now() < end_at) {
    double a = now();
    usleep(200);
    double late = now() - a - 200e-6;
    n++;
    if (late > 1e-3) {
      over1++;
      printf("%.4f wake-up late %.2f ms\n", a, late * 1e3);
    }
    if (late > 2e-3) over2++;
    if (late > worst) worst = late;
  }
  pthread_join(th, NULL);
  fprintf(stderr, "cpu %d slice %ld ns: %ld wake-ups, %ld later than 1 ms, %ld later than 2 ms, worst %.2f ms\n",
          cpu, slice, n, over1, over2, worst * 1e3);
  return 0;
}
