# SPDX-License-Identifier: Apache-2.0
# lib-image.sh - sourced by test-image.sh and node-image.sh (the tests' images, built from
# Debian packages): the cache entry (scripts/k8cache.py), the start and end of a build, the
# Debian mirror this machine is configured with, the trimming of a debootstrap root, and
# packing it as a one-layer OCI image layout with umoci. The script sets $top, $script,
# $fill and $release first, and uses the $mirror, $work and $start that image_begin sets.
# shellcheck shell=sh disable=SC2034,SC2154

# image_reuse NAME KEYFILE...: outside a build, print the checked cache entry NAME-<key>
# (key: the KEYFILEs, this file and $release; built first by running this script again
# with --fill, under the entry's lock, so test.sh's early background build and a test
# that asks for the image meanwhile share one build) and exit. With --fill (run by
# k8cache.py build) return: the script goes on to fill $K8CACHE_OUT.
image_reuse() {
	py=/usr/bin/python3
	[ -x "$py" ] || py=python3
	n=$1
	shift
	if [ "$fill" != --fill ]; then
		k=$("$py" "$top/scripts/k8cache.py" key -f "$top/scripts/lib-image.sh" \
			$(for f in "$@"; do printf -- '-f %s ' "$f"; done) -s "$release")
		e=$("$py" "$top/scripts/k8cache.py" build "$n" "$k" -- "$script" --fill)
		echo "$e/oci"
		exit 0
	fi
	: "${K8CACHE_OUT:?--fill is run by k8cache.py build}"
}

# image_begin NAME TOOL...: what every build does first: root (debootstrap needs it), the
# tools present, sbin on PATH; sets $mirror (for $release), $work (a new directory in
# $K8CACHE_OUT's parent, removed when the script exits) and $start. Uses the script's log().
image_begin() {
	n=$1
	shift
	[ "$(id -u)" = 0 ] || { log "must run as root (debootstrap needs it)"; exit 1; }
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] ||
			{ log "$t is missing: apt-get install $t"; exit 1; }
	done
	PATH=$PATH:/usr/sbin:/sbin
	mirror=$(image_mirror "$release")
	work=$(mktemp -d "$(dirname "$K8CACHE_OUT")/.work-$n.XXXXXX")
	trap 'rm -rf "$work"' EXIT INT TERM
	start=$(date +%s)
}

# image_done LAYOUT: LAYOUT moved into the entry as oci/, and said.
image_done() {
	mv "$1" "$K8CACHE_OUT/oci"
	log "built $n in $(( $(date +%s) - start )) s ($(du -sh "$K8CACHE_OUT" | cut -f1))"
}

# image_mirror RELEASE: KOSA8_DEBIAN_MIRROR, else the first deb822 source, then the
# first one-line source, that serves RELEASE; else deb.debian.org.
image_mirror() {
	m=${KOSA8_DEBIAN_MIRROR:-}
	if [ -z "$m" ]; then
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -r "$f" ] || continue
			m=$(awk '
				/^[ \t]*$/ { if (deb && uri && suite) { print uri; exit } deb = uri = suite = 0; next }
				/^Types:/ && / deb( |$)/ { deb = 1 }
				/^URIs:/ { uri = $2 }
				/^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "'"$1"'") suite = 1 }
				END { if (deb && uri && suite) print uri }' "$f" | head -1)
			[ -n "$m" ] && break
		done
	fi
	if [ -z "$m" ]; then
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -r "$f" ] || continue
			m=$(awk '$1 == "deb" && $3 == "'"$1"'" { print $2; exit }' "$f")
			[ -n "$m" ] && break
		done
	fi
	echo "${m:-http://deb.debian.org/debian}"
}

# image_trim ROOT [EXTRA...]: apt's caches and lists, logs and dpkg backups dropped (and
# the EXTRA paths below ROOT), an empty lists/partial kept for apt.
image_trim() {
	r=$1
	shift
	rm -rf "$r/var/cache/apt/"*.bin "$r/var/cache/apt/archives/"*.deb \
		"$r/var/cache/apt/archives/partial" "$r/var/lib/apt/lists" "$r/var/log/"*.log \
		"$r/var/cache/debconf/"*-old "$r/var/lib/dpkg/"*-old
	for p in "$@"; do rm -rf "${r:?}/$p"; done
	mkdir -p "$r/var/lib/apt/lists/partial"
}

# image_pack LAYOUT TAG ROOT CREATED_BY CMD WORKDIR: ROOT as the one layer of a new OCI
# layout, PATH and LANG set, CMD and WORKDIR as given; progress on stderr.
image_pack() {
	umoci init --layout "$1" >&2
	umoci new --image "$1:$2" >&2
	umoci insert --image "$1:$2" --history.created_by "$4" "$3" / >&2
	umoci config --image "$1:$2" --no-history \
		--config.cmd "$5" \
		--config.env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
		--config.env LANG=C.UTF-8 \
		--config.workingdir "$6" >&2
	umoci gc --layout "$1" >&2
}
