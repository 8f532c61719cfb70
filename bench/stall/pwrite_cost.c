/* CPU per 300-byte commitlog-like entry, written to a 64 MB file on the filesystem of PATH:
 *   mode 0: pwrite of 47 entries at a time, appending to a new file (a new segment);
 *   mode 4: the same into a file already written and synced (a reused segment);
 *   mode 1/2/3: mmap + memcpy into a sparse / fallocated / written file.
 * Build and run: gcc -O2 -o /tmp/pwrite_cost bench/stall/pwrite_cost.c &&
 *   for m in 0 4 1 2 3; do /tmp/pwrite_cost $m target/pwrite-test; done
 * (docs/benchmarks.md, "Saturation writes: bound values straight to cells; commitlog
 * segment reuse"). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static double cpu(){struct timespec t;clock_gettime(CLOCK_PROCESS_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t sz=64<<20; int mode=atoi(argv[1]); const char*p=argv[2];
  char buf[300]; memset(buf,7,300);
  unlink(p); int fd=open(p,O_RDWR|O_CREAT,0644);
  if(mode==2){ posix_fallocate(fd,0,sz);} else if(mode==3){ char z[1<<16]={0}; for(size_t o=0;o<sz;o+=sizeof z) pwrite(fd,z,sizeof z,o); fsync(fd);} 
  if(mode>=1 && mode<=3) ftruncate(fd,sz);
  double c0=cpu(),t0=now(); size_t n=0;
  if(mode==0||mode==4){ // pwrite batches of 47 entries
    char b[47*300]; memset(b,7,sizeof b); size_t off=0;
    if(mode==4){ char z[1<<16]={0}; for(size_t o=0;o<sz;o+=sizeof z) pwrite(fd,z,sizeof z,o); fsync(fd); }
    c0=cpu();t0=now();
    while(off+sizeof b<=sz){ pwrite(fd,b,sizeof b,off); off+=sizeof b; n+=47;}
  } else {
    char*m=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);
    c0=cpu();t0=now();
    for(size_t off=0;off+300<=sz;off+=300){ memcpy(m+off,buf,300); n++; }
    munmap(m,sz);
  }
  double c1=cpu(),t1=now();
  printf("mode %d: %.3f us cpu per 300B entry (%.0f ns/KB), wall %.3f s\n",mode,(c1-c0)/n*1e6,(c1-c0)/(n*300.0)*1024*1e9,t1-t0);
  close(fd); unlink(p); return 0;}
