/* SPDX-License-Identifier: Apache-2.0 */
/* output.c - what the CLI shows: aligned tables, sizes and times, JSON, progress lines.
 *
 * Data goes to stdout; progress and spinners go to stderr and only when stderr is a
 * terminal, so `kosa8 ... > file` and scripts see nothing but results. With --json the
 * progress objects are printed to stdout as JSON lines instead.
 */
#include "cli.h"

#include <poll.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct out_table {
	int ncols;
	int nrows;
	int cap;
	char **cells;   /* (nrows + 1) * ncols, row 0 is the header */
};

struct out_table *out_table_new(int ncols, const char *const *headers)
{
	struct out_table *t = xcalloc(1, sizeof(*t));

	t->ncols = ncols;
	out_table_row(t, headers);
	return t;
}

void out_table_row(struct out_table *t, const char *const *cells)
{
	if (t->nrows == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 16;
		t->cells = realloc(t->cells, (size_t)t->cap * (size_t)t->ncols * sizeof(char *));
		if (!t->cells)
			abort();
	}
	for (int c = 0; c < t->ncols; c++) {
		const char *s = cells[c] && *cells[c] ? cells[c] : "-";
		t->cells[t->nrows * t->ncols + c] = str_escape(s);   /* no byte reaches the tty raw */
	}
	t->nrows++;
}

/* Display width: count UTF-8 lead bytes, not continuation bytes. */
static size_t text_width(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			w++;
	return w;
}

void out_table_print(struct out_table *t, FILE *f)
{
	size_t *width = xcalloc((size_t)t->ncols, sizeof(size_t));

	for (int r = 0; r < t->nrows; r++)
		for (int c = 0; c < t->ncols; c++) {
			size_t w = text_width(t->cells[r * t->ncols + c]);
			if (w > width[c])
				width[c] = w;
		}
	for (int r = 0; r < t->nrows; r++) {
		for (int c = 0; c < t->ncols; c++) {
			const char *s = t->cells[r * t->ncols + c];
			if (c == t->ncols - 1) {
				fputs(s, f);
				break;
			}
			fputs(s, f);
			for (size_t pad = text_width(s); pad < width[c] + 3; pad++)
				fputc(' ', f);
		}
		fputc('\n', f);
	}
	free(width);
}

void out_table_free(struct out_table *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

void out_table_array(const json_t *items, int ncols, const char *const *headers,
		     out_row_fn row)
{
	struct out_table *t = out_table_new(ncols, headers);
	double now = (double)time(NULL);
	const json_t *it;
	size_t i;

	json_array_foreach((json_t *)items, i, it)
		row(t, it, now);
	out_table_print(t, stdout);
	out_table_free(t);
}

const char *out_bytes(uint64_t n, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "kB", "MB", "GB", "TB", "PB" };
	double v = (double)n;
	size_t u = 0;

	while (v >= 1000.0 && u + 1 < ARRAY_SIZE(unit)) {
		v /= 1000.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)n);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

/* "2026-11-03T12:00:05.123Z", "...+01:00", or with a space instead of 'T'. */
static double parse_rfc3339(const char *s)
{
	struct tm tm;
	const char *p;
	double frac = 0;
	long off = 0;

	memset(&tm, 0, sizeof(tm));
	p = strptime(s, "%Y-%m-%d", &tm);
	if (!p || (*p != 'T' && *p != 't' && *p != ' '))
		return -1;
	p = strptime(p + 1, "%H:%M:%S", &tm);
	if (!p)
		return -1;
	if (*p == '.') {
		double scale = 0.1;
		for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10)
			frac += (*p - '0') * scale;
	}
	if (*p == '+' || *p == '-') {
		int sign = *p == '-' ? -1 : 1, hh, mm;
		if (sscanf(p + 1, "%2d:%2d", &hh, &mm) != 2)
			return -1;
		off = sign * (hh * 3600L + mm * 60L);
	} else if (*p != 'Z' && *p != 'z' && *p != '\0') {
		return -1;
	}
	return (double)timegm(&tm) - (double)off + frac;
}

double out_time_parse(const json_t *v)
{
	double x;

	if (json_is_string(v))
		return parse_rfc3339(json_string_value(v));
	if (!json_is_number(v))
		return -1;
	x = json_number_value(v);
	if (x <= 0)
		return -1;
	if (x > 1e17)          /* nanoseconds */
		return x / 1e9;
	if (x > 1e14)          /* microseconds */
		return x / 1e6;
	if (x > 1e11)          /* milliseconds */
		return x / 1e3;
	return x;
}

const char *out_ago(double t, double now, char *buf, size_t len)
{
	double d = now - t;

	if (t < 0) {
		snprintf(buf, len, "-");
		return buf;
	}
	if (d < 0)
		d = 0;
	if (d < 60)
		snprintf(buf, len, "%ds ago", (int)d);
	else if (d < 3600)
		snprintf(buf, len, "%dm ago", (int)(d / 60));
	else if (d < 86400 * 2)
		snprintf(buf, len, "%dh ago", (int)(d / 3600));
	else
		snprintf(buf, len, "%dd ago", (int)(d / 86400));
	return buf;
}

const char *out_localtime(double t, char *buf, size_t len)
{
	time_t tt = (time_t)t; /* t >= 0: truncation is floor */
	struct tm tm;

	if (t < 0 || !localtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "-");
	return buf;
}

const char *out_short_digest(const char *digest, char *buf, size_t len)
{
	const char *colon = digest ? strchr(digest, ':') : NULL;

	if (!digest)
		snprintf(buf, len, "-");
	else if (colon)
		snprintf(buf, len, "%.*s:%.12s", (int)(colon - digest), digest, colon + 1);
	else
		snprintf(buf, len, "%.19s", digest);
	return buf;
}

void out_json(const json_t *v, int pretty)
{
	char *s = json_dumps(v, (pretty ? JSON_INDENT(2) : JSON_COMPACT) | JSON_ENCODE_ANY);

	if (s) {
		fputs(s, stdout);
		fputc('\n', stdout);
		free(s);
	}
	fflush(stdout);
}

/* Not write_full() of common/util.c: that one gives up on EAGAIN without saying how much
 * it wrote, and an inherited stdout may be non-blocking. */
int out_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				/* A non-blocking stdout we inherited: wait until it drains. */
				struct pollfd pfd = { .fd = fd, .events = POLLOUT };
				if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
					return -errno;
				continue;
			}
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

void out_progress_init(struct out_progress *p, int json)
{
	memset(p, 0, sizeof(*p));
	p->json = json;
	p->tty = !json && isatty(2);
}

static void progress_draw(struct out_progress *p, const char *line)
{
	/* \r plus "erase to end of line": a shorter line leaves nothing behind. */
	fprintf(stderr, "\r\033[K%s", line);
	fflush(stderr);
	p->open = 1;
}

/* "sha256:0123456789ab..." stays recognisable; long names keep their end. */
static void shorten_what(const char *raw, char *buf, size_t len)
{
	cleanup_free char *what = str_escape(raw);     /* names a registry chose */
	size_t n = strlen(what);

	if (!strncmp(what, "sha256:", 7) && n > 19)
		snprintf(buf, len, "%.19s\xe2\x80\xa6", what);
	else if (n > 48)
		snprintf(buf, len, "\xe2\x80\xa6%s", what + n - 47);
	else
		snprintf(buf, len, "%s", what);
}

/* Draw every item of the phase: "phase what [=====>    ] 12.3 MB/45.6 MB", one line each,
 * redrawn in place (cursor up over the lines drawn before). */
static void progress_items(struct out_progress *p, const char *phase, const char *what,
			   uint64_t done, uint64_t total, const char *el)
{
	int i;

	for (i = 0; i < p->nitems; i++)
		if (!strcmp(p->items[i].what, what))
			break;
	if (i == p->nitems) {
		if (p->nitems == OUT_PROGRESS_ITEMS)
			i = OUT_PROGRESS_ITEMS - 1; /* many items: the last line takes the rest */
		else
			p->nitems++;
		snprintf(p->items[i].what, sizeof(p->items[i].what), "%s", what);
	}
	p->items[i].done = done;
	p->items[i].total = total;
	if (p->drawn > 1)
		fprintf(stderr, "\033[%dA", p->drawn - 1);
	for (i = 0; i < p->nitems; i++) {
		char w[64], a[32], b[32], bar[24];
		uint64_t d = p->items[i].done, t = p->items[i].total;
		int fill = t ? (int)(20 * (d > t ? t : d) / t) : 0;
		for (int j = 0; j < 20; j++)
			bar[j] = j < fill ? '=' : (j == fill ? '>' : ' ');
		bar[20] = '\0';
		shorten_what(p->items[i].what, w, sizeof(w));
		fprintf(stderr, "\r\033[K%s %s [%s] %s/%s%s%s", phase, w, bar,
			out_bytes(d, a, sizeof(a)), out_bytes(t, b, sizeof(b)),
			i == p->nitems - 1 ? el : "", i == p->nitems - 1 ? "" : "\n");
	}
	fflush(stderr);
	p->drawn = p->nitems;
	p->open = 1;
}

void out_progress_update(struct out_progress *p, const json_t *progress)
{
	const char *phase, *what;
	uint64_t done, total, now;
	char w[64], a[32], b[32], line[256], el[32] = "";

	if (p->json) {
		json_t *wrap = json_pack("{s:O}", "progress", (json_t *)progress);
		out_json(wrap, 0);
		json_decref(wrap);
		return;
	}
	if (!p->tty)
		return;
	phase = json_string_value(json_object_get(progress, "phase"));
	what = json_string_value(json_object_get(progress, "what"));
	done = (uint64_t)json_integer_value(json_object_get(progress, "done"));
	total = (uint64_t)json_integer_value(json_object_get(progress, "total"));
	if (!phase || strspn(phase, "abcdefghijklmnopqrstuvwxyz-_ ") != strlen(phase))
		phase = "working";
	now = now_mono_ns();
	if (strcmp(phase, p->phase)) {
		/* A new phase: keep the last line of the old one on screen. */
		if (p->open)
			fputc('\n', stderr);
		p->open = 0;
		snprintf(p->phase, sizeof(p->phase), "%s", phase);
		p->phase_start_ns = now;
		p->last_draw_ns = 0;
		p->nitems = 0;
		p->drawn = 0;
	} else if (now - p->last_draw_ns < 100000000ull && (total == 0 || done < total)) {
		return; /* at most ten redraws a second, but always the final one */
	}
	p->last_draw_ns = now;
	shorten_what(what ? what : "", w, sizeof(w));
	if (now - p->phase_start_ns >= 1000000000ull)
		snprintf(el, sizeof(el), " (%llus)",
			 (unsigned long long)((now - p->phase_start_ns) / 1000000000ull));
	if (total >= 1024 || done >= 1024) {
		if (total)
			snprintf(line, sizeof(line), "%s %s %s/%s%s", phase, w,
				 out_bytes(done, a, sizeof(a)), out_bytes(total, b, sizeof(b)), el);
		else
			snprintf(line, sizeof(line), "%s %s %s%s", phase, w,
				 out_bytes(done, a, sizeof(a)), el);
	} else if (total) {
		snprintf(line, sizeof(line), "%s %s %llu/%llu%s", phase, w,
			 (unsigned long long)done, (unsigned long long)total, el);
	} else {
		snprintf(line, sizeof(line), "%s %s%s", phase, w, el);
	}
	snprintf(p->line, sizeof(p->line), "%s", line);
	if (!what || !*what || !total) {
		progress_draw(p, line);
		return;
	}
	progress_items(p, phase, what, done, total, el);
}

void out_progress_cb(void *ctx, const json_t *progress)
{
	out_progress_update(ctx, progress);
}

/* End the line on screen, if any, with `tail`: "\n" keeps it, "\r\033[K" erases it. */
static void progress_close(struct out_progress *p, const char *tail)
{
	if (p->tty && p->open) {
		fputs(tail, stderr);
		fflush(stderr);
	}
	p->open = 0;
}

void out_progress_end(struct out_progress *p)
{
	progress_close(p, "\n");
}

void out_spinner(struct out_progress *p, const char *fmt, ...)
{
	static const char spin[] = "|/-\\";
	static unsigned tick;
	char msg[200], line[220];
	va_list ap;

	if (!p->tty)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(line, sizeof(line), "%c %s", spin[tick++ % 4], msg);
	progress_draw(p, line);
}

void out_spinner_clear(struct out_progress *p)
{
	progress_close(p, "\r\033[K");
}
