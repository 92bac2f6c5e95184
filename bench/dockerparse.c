/* SPDX-License-Identifier: Apache-2.0 */
/* dockerparse.c - cost of the Docker layer's parsers on large but legal inputs: a 1000-
 * instruction Dockerfile parsed, resolved and keyed; 10000 context paths against 100
 * .dockerignore patterns; the worst-case glob; 64 MiB of stream frames decoded.
 * Not in run.sh yet (the Docker routes are not wired); run it from the top directory:
 *   cc -O2 -std=gnu11 -D_GNU_SOURCE -Isrc -o build/dockerparse bench/dockerparse.c \
 *      src/docker/dockerfile.c src/docker/dockerignore.c src/docker/stream.c \
 *      src/common/util.c -ljansson -lcrypto && build/dockerparse
 * The stream figure is framing only: payload is handed on by pointer, never copied.
 */
#include "docker/dockerfile.h"
#include "docker/dockerignore.h"
#include "docker/stream.h"
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static int sink(void *c, enum ds_type t, const uint8_t *p, size_t n, bool e){(void)t;(void)p;(void)e;*(size_t*)c+=n;return 0;}
int main(void){
	/* 1000 instructions, ~60 bytes each */
	static char buf[1<<20]; size_t o=0;
	o+=sprintf(buf+o,"FROM python:3.12-slim\nARG V=1\n");
	for(int i=0;i<998;i++) o+=sprintf(buf+o, i%2?"ENV K%d=\"${V:-x}/$K%d\" L=abc\n":"RUN echo step %d && \\\n  true %d\n", i, i-1);
	double t0=now(); int reps=50;
	for(int r=0;r<reps;r++){struct dockerfile *df; struct k8_err e={0}; if(df_parse(buf,o,&df,&e)){puts(e.msg);return 1;}
		struct df_state st; df_state_init(&st,df,NULL,NULL,0);
		for(size_t i=0;i<df->n;i++){struct df_step s; char k[65]; if(df_step(&st,&df->inst[i],&s,&e)){puts(e.msg);return 1;} df_step_key("p",&s,NULL,k); df_step_free(&s);}
		df_state_free(&st); df_free(df);}
	printf("dockerfile: %zu bytes, 1000 instructions parsed+resolved+keyed: %.2f ms each\n", o, (now()-t0)/reps*1e3);
	/* dockerignore: 100 patterns x 10000 paths */
	static char ig[65536]; size_t g=0;
	for(int i=0;i<100;i++) g+=sprintf(ig+g, i%3==0?"**/*.tmp%d\n": i%3==1?"build%d/**\n":"!docs/x%d.md\n", i);
	struct dignore d; struct k8_err e={0}; dignore_parse(ig,g,&d,&e);
	char path[256]; int ex=0; t0=now();
	for(int i=0;i<10000;i++){snprintf(path,sizeof path,"src/dir%d/sub/file%d.c",i%50,i); ex+=dignore_excluded(&d,path);}
	printf("dockerignore: 100 patterns x 10000 paths: %.1f ms (%d excluded)\n",(now()-t0)*1e3,ex);
	dignore_free(&d);
	/* worst case glob */
	static char p4k[4097]; memset(p4k,'a',4096);
	t0=now(); dignore_glob("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b",p4k);
	printf("glob worst case (17 stars, 4096-byte path): %.2f ms\n",(now()-t0)*1e3);
	/* stream decode 64 MiB in 32 KiB frames */
	size_t fl=32768, nf=2048; uint8_t *sb=malloc((fl+8)*nf); for(size_t i=0;i<nf;i++) ds_encode(sb+i*(fl+8),DS_STDOUT,sb,(uint32_t)fl);
	struct ds_decoder dec; ds_decoder_init(&dec,1<<20,0); size_t got=0; t0=now();
	for(size_t off=0; off<(fl+8)*nf; off+=4096) ds_decode(&dec,sb+off,4096,sink,&got,&e);
	printf("stream decode: %zu MiB in 4 KiB reads: %.1f ms\n", got>>20, (now()-t0)*1e3);
	return 0;}
