/* SPDX-License-Identifier: Apache-2.0 */
/* dockerfile.h - a Dockerfile parser for the classic builder (POST /build), in two steps:
 *
 *   df_parse()  text -> instructions as written: directives (# escape=), comments, line
 *               continuations, exec (JSON) and shell forms, flags. Pure syntax.
 *   df_step()   one instruction -> what the builder does, with ARG/ENV substitution
 *               where Docker applies it, against a df_state the builder carries through
 *               the file (the base image's Env goes in with df_state_set_env()).
 *
 * and the build-cache key of a step (df_step_key, df_content_digest). Supported:
 * FROM [AS], RUN, COPY [--chown], ADD [--chown] (local sources), ENV, ARG, WORKDIR, USER,
 * CMD, ENTRYPOINT, EXPOSE, LABEL. Other instructions and BuildKit-only flags are refused
 * with a message naming the line (docs/docker.md). Every input is bounded (DF_MAX_*). */
#ifndef K8_DOCKER_DOCKERFILE_H
#define K8_DOCKER_DOCKERFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

#define DF_MAX_SIZE (1 << 20)       /* bytes of Dockerfile */
#define DF_MAX_LINE 65536           /* bytes of one instruction, continuations joined */
#define DF_MAX_INST 1024            /* instructions in one file */
#define DF_MAX_WORDS 1024           /* arguments of one instruction */
#define DF_MAX_EXPANDED 65536       /* bytes of one word after substitution */
#define DF_MAX_ARGS 256             /* build args, ARG and ENV entries in scope */

enum df_kind {
	DF_FROM, DF_RUN, DF_COPY, DF_ADD, DF_ENV, DF_ARG, DF_WORKDIR, DF_USER, DF_CMD,
	DF_ENTRYPOINT, DF_EXPOSE, DF_LABEL,
};

/* A growable vector of owned strings (entries may be NULL where documented). */
struct df_strv {
	char **v;
	size_t n, cap;
};

/* An instruction as written. */
struct df_inst {
	enum df_kind kind;
	unsigned line;            /* first line, 1-based */
	char *original;           /* the instruction, continuation lines joined */
	bool json;                /* exec form: RUN, CMD, ENTRYPOINT, COPY, ADD */
	/* FROM: [image]; RUN/CMD/ENTRYPOINT: the JSON elements, or one string (shell form);
	 * COPY/ADD: sources then destination; WORKDIR/USER: [text]; EXPOSE: the words. */
	struct df_strv words;
	struct df_strv keys, vals;  /* ENV, LABEL, ARG; an ARG without default has val NULL */
	char *as;                 /* FROM ... AS name, or NULL */
	char *chown;              /* COPY/ADD --chown=, or NULL */
};

struct dockerfile {
	struct df_inst *inst;
	size_t n;
	char escape;              /* '\\' or '`' */
};

/* Parse n bytes. Returns 0 with *out set (free with df_free), or -EINVAL/-E2BIG/-ENOTSUP
 * with a message starting "Dockerfile line N: ". Nothing is substituted here. */
int df_parse(const char *text, size_t n, struct dockerfile **out, struct k8_err *err);
void df_free(struct dockerfile *df);
const char *df_kind_name(enum df_kind k);

/* What the builder carries from step to step. */
struct df_state {
	struct df_strv bkeys, bvals;   /* build args given with the request */
	bool used[DF_MAX_ARGS];        /* which of them an ARG consumed */
	struct df_strv mkeys, mvals;   /* ARGs before the first FROM (for FROM lines) */
	struct df_strv akeys, avals;   /* ARGs declared in the current stage */
	struct df_strv env;            /* "K=V": the image's Env (base image, then ENV) */
	struct df_strv stages;         /* stage names so far, "" for an unnamed one */
	char *workdir;                 /* absolute; NULL means "/" (a relative COPY
					* destination and WORKDIR start here) */
	bool in_stage;
	char escape;
};

/* Build args: n pairs; vals[i] NULL means "declared without a value". 0 or -E2BIG. */
int df_state_init(struct df_state *st, const struct dockerfile *df, const char *const *keys,
		  const char *const *vals, size_t n);
void df_state_free(struct df_state *st);
/* After a FROM step: the base image's Config.Env ("K=V" each). 0 or -errno. */
int df_state_set_env(struct df_state *st, const char *const *env, size_t n);
/* After a FROM step: the base image's Config.WorkingDir ("" or NULL: "/"). */
int df_state_set_workdir(struct df_state *st, const char *dir);
/* Names of build args no ARG consumed (Docker warns about them); returns the count,
 * filling at most max pointers into st. */
size_t df_state_unused(const struct df_state *st, const char **names, size_t max);

/* An instruction resolved against the state. */
struct df_step {
	enum df_kind kind;
	unsigned line;
	bool json;
	/* FROM: [image]; RUN/CMD/ENTRYPOINT: as written (the shell expands at run time);
	 * COPY/ADD: sources..., dest; WORKDIR: [absolute path, a relative one joined to the
	 * previous WORKDIR as Docker does]; USER: [value]; EXPOSE: ["80/tcp", ...]. */
	struct df_strv argv;
	struct df_strv keys, vals;     /* ENV, LABEL pairs; ARG name and value (NULL: unset) */
	char *chown;
	char *as;                      /* FROM: stage name, lower-cased as Docker does */
	long from_stage;               /* FROM: index of the earlier stage it names, or -1 */
	struct df_strv run_env;        /* RUN: "K=V" of the build args in scope (not saved) */
	char *key_text;                /* canonical text of the step for the cache key */
};

/* Resolve `in` and apply it to the state (ARG, ENV, FROM change it). 0, or -EINVAL /
 * -ENOTSUP / -E2BIG with a message naming the line. Free *out with df_step_free. */
int df_step(struct df_state *st, const struct df_inst *in, struct df_step *out,
	    struct k8_err *err);
void df_step_free(struct df_step *s);

/* One file a COPY/ADD step takes from the context. */
struct df_copy_file {
	const char *path;              /* relative to the context, '/'-separated */
	uint32_t mode;                 /* st_mode: type and permission bits */
	uint32_t uid, gid;
	uint64_t size;
	const char *link_target;       /* symlinks, else NULL */
	const char *sha256;            /* hex of a regular file's content, else NULL */
};

/* SHA-256 over the files' paths, metadata and content digests, sorted by path (the
 * array is sorted in place), into out[65]. mtime is left out, as Docker does: touching
 * a file does not invalidate the cache. 0 or -EINVAL (a path or digest not text). */
int df_content_digest(struct df_copy_file *files, size_t n, char out[65]);

/* The cache key of a step: SHA-256 of the parent image id, the step's canonical text
 * and, for COPY/ADD, the content digest (NULL otherwise), into out[65]. 0 or -ENOMEM. */
int df_step_key(const char *parent_id, const struct df_step *s, const char *content_digest,
		char out[65]);

/* The shell-word processing Docker applies ($VAR, ${VAR}, ${VAR:-x}, ${VAR:+x},
 * ${VAR-x}, ${VAR+x}, ${VAR:?msg}, quotes, the escape character) of one word against
 * "K=V" entries (later ones win). Returns a malloc'd string, or NULL with a message. */
char *df_expand(const char *word, char escape, const struct df_strv *env, struct k8_err *err);

#endif
