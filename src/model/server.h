/* SPDX-License-Identifier: Apache-2.0 */
/* server.h - `kosa8-model serve`: the OpenAI and Anthropic HTTP APIs over one model. */
#ifndef K8_SERVER_H
#define K8_SERVER_H

/* argv after "serve": FILE [--port P] [--host H | --listen-fd N] [--threads N] [--ctx N]
 * [--name NAME] [--user UID:GID | --no-jail].
 * Runs until SIGTERM/SIGINT; returns the exit status. */
int server_main(int argc, char **argv);

#endif
