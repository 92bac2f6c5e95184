# kosa8 - top-level entry point. `make` builds the host programs, the static guest agent
# and the guest image (kernel cached machine-wide: scripts/k8cache.py; initramfs, manifest).
#   make            everything           make test       unit + integration tests
#   make unit       C unit tests         make san        ASan+UBSan build, unit tests
#   make bench      benchmarks           make fuzz       libFuzzer targets, briefly
#   make check-layers  the daemon's modules depend one way, no cycle, no function over
#                      120 lines (docs/design.md)
#   make bench-density how many idle sandboxes the host holds (long)
#   make proto-variants  guests and a kosa8d of other protocol versions (test_61 builds them)
#   make install    binaries, guest image, man pages, completions, the systemd unit and its
#                   sysusers/tmpfiles entries (PREFIX=/usr/local, DESTDIR; NO_GUEST=1 leaves
#                   the guest out: kosa8d fetches the release's); make uninstall
#   make dist       a release in $(B)/dist: tarball, guest files, install.sh, SHA256SUMS
#                   (SIGN_KEY=ed25519.pem signs it: docs/install.md)
#   WERROR=1        warnings are errors (CI sets it)
B       ?= build
CC      ?= cc
WERROR  ?=
SAN     ?=

WARN    := -Wall -Wextra -Wformat=2 -Wmissing-prototypes -Wstrict-prototypes -Wshadow \
           -Wundef -Wwrite-strings -Wno-unused-parameter -Wno-format-truncation
HARDEN  := -fPIE -fstack-protector-strong -D_FORTIFY_SOURCE=2
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 $(WARN) -D_GNU_SOURCE -Isrc -pthread $(if $(WERROR),-Werror)
LDFLAGS_HOST := -pie -pthread
ifneq ($(SAN),)
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS_HOST += -fsanitize=address,undefined
HARDEN  := -fPIE
endif

LIBS_CLI    := -lcurl -ljansson -lcrypto -larchive -lseccomp -lmicrohttpd
LIBS_DAEMON := -lmicrohttpd -ljansson -larchive -lcrypto -lcurl -lseccomp -lzstd
# libslirp's .pc file requires glib's; we use only its C API, so link it directly.
LIBS_NET    := -lslirp -lseccomp -ljansson
LIBS_FS     := -lseccomp -ljansson

# The sidecars' seccomp helpers and the jailed workers need libseccomp: only kosa8,
# kosa8d, kosa8-net, kosa8-fs, kosa8-broker and the unit tests link them. The reader of
# untrusted archives needs libarchive: the CLI, kosa8d and the tests of what uses it.
SIDECAR_SRC := src/common/sidecar_seccomp.c src/common/worker.c
ARCHIVE_SRC := src/common/uarchive.c
COMMON_SRC := $(filter-out $(SIDECAR_SRC) $(ARCHIVE_SRC),$(wildcard src/common/*.c))
IMAGE_SRC  := $(wildcard src/image/*.c)
STORE_SRC  := $(wildcard src/store/*.c)
DAEMON_SRC := $(filter-out src/daemon/main.c,$(wildcard src/daemon/*.c))
CLI_SRC    := $(wildcard src/cli/*.c)
AGENT_SRC  := $(wildcard src/agent/*.c)
NET_SRC    := $(filter-out src/net/main.c,$(wildcard src/net/*.c))
FS_SRC     := $(filter-out src/fs/main.c,$(wildcard src/fs/*.c))

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))
aobj = $(patsubst %.c,$(B)/agent-obj/%.o,$(1))

# kosa8d's docker.sock (src/daemon/docker_api.c) uses the Docker building blocks, its E2B
# listener (src/daemon/e2b_api.c) the E2B ones.
HOST_LIB_OBJ := $(call obj,$(COMMON_SRC) $(SIDECAR_SRC) $(ARCHIVE_SRC) $(IMAGE_SRC) $(STORE_SRC) $(DAEMON_SRC) $(wildcard src/docker/*.c) $(wildcard src/e2b/*.c)) \
                $(B)/gen/interp_py.o
UNIT_SRC     := $(wildcard tests/unit/test_*.c)
UNIT_BIN     := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))

PROGS := $(B)/bin/kosa8 $(B)/bin/kosa8d $(B)/bin/kosa8-agent $(B)/bin/kosa8-qemu-ram.so
ifneq ($(wildcard src/net/main.c),)
PROGS += $(B)/bin/kosa8-net
endif
ifneq ($(wildcard src/fs/main.c),)
PROGS += $(B)/bin/kosa8-fs
endif

.PHONY: all progs guest FORCE unit test integration san bench fuzz clean deps check-static check-layers bench-density proto-variants install uninstall dist gen-docs
all: progs guest $(B)/tools/k8s3

progs: $(PROGS)

# Each object depends on the headers it includes, as the compiler saw them (-MMD writes
# $@'s .d beside it; -MP keeps a removed header from breaking the build); a header change
# rebuilds only its includers. The .d files are read at the end of this file.
DEPFLAGS := -MMD -MP
# An object without its .d (built before -MMD, or the .d lost) is built again: nothing
# else would tell make which headers it saw, and one built against an older header
# crashed kosa8d. $(call nodep,OBJ) is FORCE then, else nothing.
nodep = $(if $(wildcard $(basename $(1)).d),,FORCE)
.SECONDEXPANSION:

$(B)/obj/%.o: %.c $$(call nodep,$$@)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(HARDEN) $(DEPFLAGS) -c -o $@ $<

# The agent is PID 1 in the guest: static, no sanitizers, no OpenSSL.
AGENT_CFLAGS := -std=gnu11 $(WARN) -D_GNU_SOURCE -Isrc -O2 -g $(if $(WERROR),-Werror)
$(B)/agent-obj/%.o: %.c $$(call nodep,$$@)
	@mkdir -p $(dir $@)
	$(CC) $(AGENT_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(B)/bin/kosa8: $(call obj,$(CLI_SRC) $(COMMON_SRC) $(SIDECAR_SRC) $(ARCHIVE_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_HOST) -o $@ $^ $(LIBS_CLI)

# The daemon checks egress rules with kosa8-net's own parser.
NET_POLICY_OBJ := $(call obj,src/net/addr.c src/net/dns.c src/net/policy.c)
$(B)/bin/kosa8d: $(call obj,src/daemon/main.c) $(HOST_LIB_OBJ) $(NET_POLICY_OBJ) $(B)/gen/guest_digest.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_HOST) -o $@ $^ $(LIBS_DAEMON)

$(B)/bin/kosa8-net: $(call obj,src/net/main.c $(NET_SRC) $(COMMON_SRC) $(SIDECAR_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_HOST) -o $@ $^ $(LIBS_NET) -lcrypto

$(B)/bin/kosa8-fs: $(call obj,src/fs/main.c $(FS_SRC) $(COMMON_SRC) $(SIDECAR_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_HOST) -o $@ $^ $(LIBS_FS) -lcrypto

# Preloaded into a QEMU whose RAM maps a memory file (src/preload/qemu_ram.c says why):
# libc only, found by kosa8d next to itself.
$(B)/bin/kosa8-qemu-ram.so: src/preload/qemu_ram.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -D_GNU_SOURCE -O2 -g -fPIC -shared -fstack-protector-strong \
		$(if $(WERROR),-Werror) -Wl,-z,relro,-z,now -o $@ $<

$(B)/bin/kosa8-agent: $(call aobj,$(AGENT_SRC) src/common/util.c src/common/proto.c)
	@mkdir -p $(dir $@)
	$(CC) -static -o $@ $^ -l:libjansson.a -l:libseccomp.a

# kosa8's S3 client from the command line, for the stores' tests and bench (never installed).
$(B)/tools/k8s3: tests/tools/k8s3.c $(call obj,$(STORE_SRC) $(COMMON_SRC) $(SIDECAR_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(HARDEN) $(LDFLAGS_HOST) -o $@ $^ -lcurl -ljansson -lcrypto -lzstd -lseccomp

# Guest image: kernel (cached by source version + fragment hash), initramfs, manifest.
# guest.sh runs every time (it knows the kernel's cache key) and rewrites a file only when
# its bytes change, so what depends on the manifest is rebuilt only then.
guest: $(B)/guest/manifest.json
$(B)/guest/manifest.json: $(B)/bin/kosa8-agent FORCE
	B=$(B) ./scripts/guest.sh

# The guest image this build is released with (src/common/guest_digest.h): the SHA-256 of
# its manifest.json, compiled into kosa8d, which refuses a bundle's guest of another
# digest (docs/design.md "Guest image"). Only kosa8d's link waits for the guest, and so
# for the kernel: unit tests, the ASan build (`make san`) and the fuzz targets do not.
$(B)/gen/guest_digest.c: $(B)/guest/manifest.json
	@mkdir -p $(dir $@)
	@h=$$(sha256sum $< | cut -c1-64) && \
	printf '%s\n' "/* generated from $< by the Makefile; src/common/guest_digest.h */" \
		'#include "common/guest_digest.h"' \
		"const char guest_release_digest[] = \"sha256:$$h\";" > $@.tmp && mv $@.tmp $@
$(B)/gen/guest_digest.o: $(B)/gen/guest_digest.c src/common/guest_digest.h
	$(CC) $(CFLAGS) $(HARDEN) -c -o $@ $<
FORCE:

# The interpreter's Python, run in a sandbox's containers (src/interp/, docs/interpreter.md):
# kosa8d carries it as two strings (src/daemon/interp.h).
INTERP_PY := src/interp/driver.py src/interp/cell.py
$(B)/gen/interp_py.c: $(INTERP_PY) scripts/embed.sh
	@mkdir -p $(dir $@)
	./scripts/embed.sh $@ interp_driver_py src/interp/driver.py interp_cell_py src/interp/cell.py
$(B)/gen/interp_py.o: $(B)/gen/interp_py.c
	$(CC) $(CFLAGS) $(HARDEN) -c -o $@ $<

# Test builds for the protocol version handshake (docs/protocol.md, "Versions";
# tests/integration/test_61_agent_proto.py), not part of `all`: guests whose agent speaks
# only version 1 (as every agent did before the handshake) or only version 3 (an agent
# of the future), in $(B)/proto/guestN, and a kosa8d that also speaks 3, to take
# checkpoints of that agent. Only the files that read AGENT_PROTO_* / K8D_PROTO_* are
# compiled again.
PROTO_AGENT_SRC := src/agent/chan.c src/agent/req.c src/agent/main.c
PROTO_AGENT_BASE := $(call aobj,$(filter-out $(PROTO_AGENT_SRC),$(AGENT_SRC)) src/common/util.c src/common/proto.c)
define proto_guest
$(B)/proto/agent$(1)-obj/%.o: %.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(AGENT_CFLAGS) $$(DEPFLAGS) -DAGENT_PROTO_MIN=$(1) -DAGENT_PROTO_MAX=$(1) -c -o $$@ $$<
$(B)/proto/agent$(1)/kosa8-agent: $(PROTO_AGENT_BASE) $(patsubst %.c,$(B)/proto/agent$(1)-obj/%.o,$(PROTO_AGENT_SRC))
	@mkdir -p $$(dir $$@)
	$$(CC) -static -o $$@ $$^ -l:libjansson.a -l:libseccomp.a
$(B)/proto/guest$(1)/manifest.json: $(B)/proto/agent$(1)/kosa8-agent
	B=$(B) AGENT=$(B)/proto/agent$(1)/kosa8-agent OUT=$(B)/proto/guest$(1) ./scripts/guest.sh >/dev/null
endef
$(eval $(call proto_guest,1))
$(eval $(call proto_guest,3))
$(B)/proto/obj/agentlink-3.o: src/daemon/agentlink.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(HARDEN) $(DEPFLAGS) -DK8D_PROTO_MAX=3 -c -o $@ $<
# Next to the real kosa8d: it finds its sidecars there.
$(B)/bin/kosa8d-proto3: $(call obj,src/daemon/main.c) $(filter-out $(call obj,src/daemon/agentlink.c),$(HOST_LIB_OBJ)) $(B)/proto/obj/agentlink-3.o $(NET_POLICY_OBJ) $(B)/gen/guest_digest.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_HOST) -o $@ $^ $(LIBS_DAEMON)
proto-variants: progs $(B)/proto/guest1/manifest.json $(B)/proto/guest3/manifest.json $(B)/bin/kosa8d-proto3

$(B)/tests/%: tests/unit/%.c $(HOST_LIB_OBJ) $(call obj,$(NET_SRC) $(FS_SRC) $(SIDECAR_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) $(LDFLAGS_HOST) -o $@ $< $(filter %.o,$^) $(LIBS_DAEMON) $(LIBS_NET)

# kosa8-qemu-ram.so's test preloads it into a child of its own.
$(B)/tests/test_qemu_ram: | $(B)/bin/kosa8-qemu-ram.so

# The containers' seccomp filter is tested on the host (the agent's sec.c, built for it).
$(B)/tests/test_agent_sec: $(call obj,src/agent/sec.c)
# The archive ops' tar reader and writer likewise (pure code; also fuzzed, fuzz_tar).
$(B)/tests/test_agent_tar: $(call obj,src/agent/tar.c)

unit: $(UNIT_BIN)
	@./tests/run-unit.sh $(UNIT_BIN)

# No daemon function over 120 lines (docs/design.md "The daemon's modules"); one allowed
# would be named here (--allow NAME) with its reason. None is.
FUNCLEN_ALLOW :=
check-layers:
	@./scripts/check-layers.sh
	@./scripts/funclen.py --max 120 $(FUNCLEN_ALLOW) src/daemon/*.c

integration: all
	cd tests/integration && /usr/bin/python3 -m pytest -v

test: check-layers unit integration

san:
	$(MAKE) B=build-san SAN=1 unit

# Installs and builds what it needs first (bench/run.sh), like the tests.
bench:
	./bench/run.sh

# How many idle sandboxes this host holds (issue 15): takes the machine for many minutes.
bench-density: all
	cd bench && python3 density.py

fuzz:
	./tests/fuzz/run.sh

clean:
	rm -rf $(B)/bin $(B)/obj $(B)/agent-obj $(B)/tests $(B)/guest $(B)/gen $(B)/gen-obj $(B)/proto \
		$(B)/share $(B)/dist build-san

# ---- install (docs/install.md) ----
# One tree for a checkout's `make install` and a release's tarball (make dist installs into
# a staging DESTDIR): the programs and the guest image side by side in $(PKGLIBDIR), as
# they are in $(B) (kosa8 finds kosa8d next to it, kosa8d its sidecars and ../guest), and
# $(BINDIR)/kosa8 a link to it.
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
PKGLIBDIR   ?= $(PREFIX)/lib/kosa8
MANDIR      ?= $(PREFIX)/share/man
DOCDIR      ?= $(PREFIX)/share/doc/kosa8
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/site-functions
NO_GUEST    ?=
STRIP       ?=
INSTALL_PROGS := kosa8 kosa8d kosa8-net kosa8-fs kosa8-broker kosa8-model containerd-shim-kosa8-v2
# Beside kosa8d, which finds it there (src/preload/qemu_ram.c: QEMU preloads it).
INSTALL_LIBS  := kosa8-qemu-ram.so
GUEST_FILES := manifest.json vmlinux initramfs.cpio SHA256SUMS
GEN_DOCS := $(B)/share/man/man1/kosa8.1 $(B)/share/man/man8/kosa8d.8 \
            $(B)/share/bash-completion/completions/kosa8 $(B)/share/zsh/site-functions/_kosa8

# Man pages and completions from the programs' own help (scripts/docgen.py).
gen-docs: $(GEN_DOCS)
$(GEN_DOCS): $(B)/bin/kosa8 $(B)/bin/kosa8d scripts/docgen.py
	/usr/bin/python3 scripts/docgen.py $(B)/bin $(B)

install: progs $(if $(NO_GUEST),,guest) gen-docs
	install -d $(DESTDIR)$(PKGLIBDIR)/bin $(DESTDIR)$(BINDIR)
	install -m 0755 $(if $(STRIP),-s) $(addprefix $(B)/bin/,$(INSTALL_PROGS)) $(DESTDIR)$(PKGLIBDIR)/bin/
	install -m 0644 $(if $(STRIP),-s) $(addprefix $(B)/bin/,$(INSTALL_LIBS)) $(DESTDIR)$(PKGLIBDIR)/bin/
	ln -sfn $(shell realpath -m --relative-to=$(BINDIR) $(PKGLIBDIR))/bin/kosa8 $(DESTDIR)$(BINDIR)/kosa8
	ln -sfn $(shell realpath -m --relative-to=$(BINDIR) $(PKGLIBDIR))/bin/containerd-shim-kosa8-v2 \
		$(DESTDIR)$(BINDIR)/containerd-shim-kosa8-v2
	$(if $(NO_GUEST),,install -d $(DESTDIR)$(PKGLIBDIR)/guest)
	$(if $(NO_GUEST),,install -m 0644 $(addprefix $(B)/guest/,$(GUEST_FILES)) $(DESTDIR)$(PKGLIBDIR)/guest/)
	install -D -m 0644 $(B)/share/man/man1/kosa8.1 $(DESTDIR)$(MANDIR)/man1/kosa8.1
	install -D -m 0644 $(B)/share/man/man8/kosa8d.8 $(DESTDIR)$(MANDIR)/man8/kosa8d.8
	install -D -m 0644 $(B)/share/bash-completion/completions/kosa8 $(DESTDIR)$(BASHCOMPDIR)/kosa8
	install -D -m 0644 $(B)/share/zsh/site-functions/_kosa8 $(DESTDIR)$(ZSHCOMPDIR)/_kosa8
	install -d $(DESTDIR)$(UNITDIR)
	sed 's|@PKGLIBDIR@|$(PKGLIBDIR)|g' packaging/kosa8.service.in > $(DESTDIR)$(UNITDIR)/kosa8.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/kosa8.service
	install -D -m 0644 packaging/kosa8.sysusers $(DESTDIR)$(SYSUSERSDIR)/kosa8.conf
	install -D -m 0644 packaging/kosa8.tmpfiles $(DESTDIR)$(TMPFILESDIR)/kosa8.conf
	install -d $(DESTDIR)$(DOCDIR)/docs/guides $(DESTDIR)$(DOCDIR)/docs/reference
	install -m 0644 README.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	install -m 0644 docs/guides/*.md $(DESTDIR)$(DOCDIR)/docs/guides/
	install -m 0644 docs/reference/*.md $(DESTDIR)$(DOCDIR)/docs/reference/

# What install wrote; the state in /var/lib/kosa8 and the group kosa8 stay.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/kosa8 $(DESTDIR)$(BINDIR)/containerd-shim-kosa8-v2 \
		$(DESTDIR)$(MANDIR)/man1/kosa8.1 \
		$(DESTDIR)$(MANDIR)/man8/kosa8d.8 $(DESTDIR)$(BASHCOMPDIR)/kosa8 \
		$(DESTDIR)$(ZSHCOMPDIR)/_kosa8 $(DESTDIR)$(UNITDIR)/kosa8.service \
		$(DESTDIR)$(SYSUSERSDIR)/kosa8.conf $(DESTDIR)$(TMPFILESDIR)/kosa8.conf
	rm -rf $(DESTDIR)$(PKGLIBDIR) $(DESTDIR)$(DOCDIR)

# A release (scripts/dist.sh): $(B)/dist/ holds the tarball of `make install` for
# PREFIX=/usr/local (stripped), the guest's files for kosa8d's fetch, install.sh with this
# release's address and (SIGN_KEY given) its verifying key, SHA256SUMS and its signature.
SIGN_KEY ?=
dist: all gen-docs
	B=$(B) SIGN_KEY=$(SIGN_KEY) ./scripts/dist.sh

# kosa8-model (issue 13): the local model engine, its own process (it parses model files).
MODEL_SRC     := $(filter-out src/model/main.c,$(wildcard src/model/*.c))
MODEL_LIB_OBJ := $(call obj,$(MODEL_SRC) src/common/util.c src/common/jail.c)
PROGS += $(B)/bin/kosa8-model
progs: $(B)/bin/kosa8-model
$(B)/bin/kosa8-model: $(call obj,src/model/main.c) $(MODEL_LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_HOST) -o $@ $^ -ljansson -lm -lmicrohttpd -lpthread -lseccomp
$(B)/tests/test_model_%: tests/unit/test_model_%.c $(MODEL_LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) $(LDFLAGS_HOST) -o $@ $< $(filter %.o,$^) -ljansson -lm -lmicrohttpd -lpthread -lseccomp
# kosa8-broker: the egress broker (issue 14), one process per sandbox. docs/broker.md
BROKER_SRC := $(filter-out src/broker/main.c,$(wildcard src/broker/*.c))
LIBS_BROKER := -lssl -lcrypto -ljansson -lseccomp
ifneq ($(wildcard src/broker/main.c),)
PROGS += $(B)/bin/kosa8-broker
progs: $(B)/bin/kosa8-broker
endif
$(B)/bin/kosa8-broker: $(call obj,src/broker/main.c $(BROKER_SRC) $(COMMON_SRC) $(SIDECAR_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_HOST) -o $@ $^ $(LIBS_BROKER)
# Its unit tests link only what they test.
$(B)/tests/test_broker_%: tests/unit/test_broker_%.c $(call obj,$(BROKER_SRC) $(COMMON_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) $(LDFLAGS_HOST) -o $@ $< $(filter %.o,$^) $(LIBS_BROKER)
# The Docker-compatible API's building blocks (issue 12): library only, docs/docker.md.
# Their unit tests link only src/docker, src/common and the image reference parser.
DOCKER_SRC   := $(wildcard src/docker/*.c)
DOCKER_TESTS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(wildcard tests/unit/test_docker_*.c))
$(DOCKER_TESTS): $(B)/tests/%: tests/unit/%.c $(call obj,$(DOCKER_SRC) $(COMMON_SRC) $(ARCHIVE_SRC) src/image/reference.c)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) $(LDFLAGS_HOST) -o $@ $< $(filter %.o,$^) -ljansson -lcrypto -larchive

# containerd-shim-kosa8-v2 (issue 31, docs/containerd.md): its own program, never linked
# into kosa8d. Its messages are our own .proto files (src/shim/proto/, wire-compatible
# subsets of containerd's and ttRPC's), compiled by protoc-c into $(B)/gen/shim at build
# time; the generated C is build output, never committed, and built without our warnings.
SHIM_PROTO   := $(wildcard src/shim/proto/*.proto)
SHIM_GEN_C   := $(patsubst src/shim/proto/%.proto,$(B)/gen/shim/%.pb-c.c,$(SHIM_PROTO))
SHIM_GEN_OBJ := $(patsubst $(B)/gen/shim/%.c,$(B)/gen-obj/shim/%.o,$(SHIM_GEN_C))
SHIM_SRC     := $(filter-out src/shim/main.c,$(wildcard src/shim/*.c))
SHIM_LIB_OBJ := $(call obj,$(SHIM_SRC) src/broker/http.c $(COMMON_SRC) $(SIDECAR_SRC)) $(SHIM_GEN_OBJ)
LIBS_SHIM    := -lprotobuf-c -ljansson -larchive -lcrypto -lseccomp
$(B)/gen/shim/.stamp: $(SHIM_PROTO)
	@mkdir -p $(dir $@)
	protoc-c --c_out=$(B)/gen/shim -Isrc/shim/proto $(SHIM_PROTO)
	@touch $@
$(SHIM_GEN_C): $(B)/gen/shim/.stamp
$(B)/gen-obj/shim/%.o: $(B)/gen/shim/%.c $(B)/gen/shim/.stamp
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=gnu11 -w $(HARDEN) -I$(B)/gen/shim -c -o $@ $<
$(call obj,$(wildcard src/shim/*.c)): CFLAGS += -I$(B)/gen/shim
$(call obj,$(wildcard src/shim/*.c)): $(B)/gen/shim/.stamp
PROGS += $(B)/bin/containerd-shim-kosa8-v2
progs: $(B)/bin/containerd-shim-kosa8-v2
$(B)/bin/containerd-shim-kosa8-v2: $(call obj,src/shim/main.c) $(SHIM_LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_HOST) -o $@ $^ $(LIBS_SHIM)
# Its unit tests link the shim's library.
$(B)/tests/test_shim_%: tests/unit/test_shim_%.c $(SHIM_LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(B)/gen/shim $(LDFLAGS_HOST) -o $@ $^ $(LIBS_SHIM)

# Everything but kosa8d's link, which waits for the guest image (its digest: guest_digest.c
# above) and so for the kernel: scripts/test.sh builds this while the kernel builds in the
# background. (Last in this file: PROGS is complete only here.)
.PHONY: progs-early
progs-early: $(filter-out $(B)/bin/kosa8d,$(PROGS)) $(call obj,src/daemon/main.c) $(HOST_LIB_OBJ) $(NET_POLICY_OBJ)

# The headers each object and unit test was built with (-MMD above): absent before the
# first build, when everything is built anyway.
-include $(wildcard $(B)/obj/src/*/*.d $(B)/agent-obj/src/*/*.d $(B)/proto/*/src/*/*.d \
	$(B)/proto/obj/*.d $(B)/tests/*.d)
