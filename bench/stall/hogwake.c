/* Does a background thread's scheduling class delay the shard's wake-ups? A thread pinned
 * to CPU 0 blocks in read() on a pipe; a child on CPU 1 writes a timestamp every 100 us;
 * the reader records write-to-wake latency. MODE 0: nothing else on CPU 0; 1: a spinning
 * thread at nice 19 there (the compaction thread's priority); 2: the spinner at
 * SCHED_IDLE; 3: the spinner at nice 0. Prints the count over 1 and 2 ms and p50/p99/p99.9/max.
 * Build and run: gcc -O2 -pthread -o /tmp/hogwake bench/stall/hogwake.c &&
 *   for m in 0 1 2; do /tmp/hogwake $m 50000; done
 * (docs/benchmarks.md, "Read instructions: one allocator refresh per check"). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdint.h>
static int p[2];
static uint64_t now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
static volatile int stop=0;
static int mode; // 0 none, 1 nice19, 2 idle, 3 nice0
static void* hog(void*a){pin(0);
 if(mode==1) setpriority(PRIO_PROCESS,syscall(SYS_gettid),19);
 if(mode==2){struct sched_param sp={0};sched_setscheduler(0,SCHED_IDLE,&sp);}
 volatile uint64_t x=0; while(!stop){x++;} return 0;}
static int cmp(const void*a,const void*b){uint64_t x=*(uint64_t*)a,y=*(uint64_t*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){mode=atoi(argv[1]);int n=atoi(argv[2]);pipe(p);
 pthread_t h; if(mode) pthread_create(&h,0,hog,0);
 uint64_t *lat=malloc(n*8);
 if(fork()==0){pin(1);for(int i=0;i<n;i++){uint64_t t=now();write(p[1],&t,8);usleep(100);}exit(0);}
 pin(0);
 for(int i=0;i<n;i++){uint64_t t;read(p[0],&t,8);lat[i]=now()-t;}
 stop=1; qsort(lat,n,8,cmp);
 int c1=0,c2=0;for(int i=0;i<n;i++){if(lat[i]>1000000)c1++;if(lat[i]>2000000)c2++;}
 printf(">1ms %d >2ms %d ",c1,c2);printf("mode %d n %d p50 %.1f p99 %.1f p99.9 %.1f max %.1f us\n",mode,n,lat[n/2]/1e3,lat[n*99/100]/1e3,lat[n*999/1000]/1e3,lat[n-1]/1e3);
}
