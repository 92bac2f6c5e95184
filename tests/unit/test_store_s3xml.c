/* SPDX-License-Identifier: Apache-2.0 */
/* test_store_s3xml.c - S3's XML answers read as hostile input (src/store/s3xml.c): the
 * answers S3 and s3rver send, then every bound and every construct the subset refuses. */
#include "store/s3xml.h"
#include "t.h"

#include <stdlib.h>

static int parse(enum s3xml_kind k, const char *xml, void *out, struct k8_err *err)
{
	memset(err, 0, sizeof(*err));
	return s3xml_parse(k, xml, strlen(xml), out, err);
}

static void test_list(void)
{
	static struct s3xml_list l;
	struct k8_err err;
	const char *xml =
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
		"<Name>snaps</Name><Prefix>chunks/</Prefix><KeyCount>2</KeyCount>"
		"<IsTruncated>true</IsTruncated>"
		"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
		"<Contents><Key>chunks/ab&amp;c</Key><LastModified>2026-12-06T07:48:06.000Z</LastModified>"
		"<ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>1234</Size>"
		"<StorageClass>STANDARD</StorageClass></Contents>"
		"<Contents><Key>chunks/d&#xe9;&#233;</Key><Size>0</Size></Contents>"
		"</ListBucketResult>";

	CHECK_EQ_INT(parse(S3XML_LIST, xml, &l, &err), 0);
	CHECK_EQ_INT(l.n, 2);
	CHECK(l.truncated);
	CHECK_STR(l.next, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	CHECK_STR(l.o[0].key, "chunks/ab&c");
	CHECK_EQ_INT(l.o[0].size, 1234);
	CHECK_STR(l.o[0].etag, "\"9b2cf535f27731c974343645a3985328\"");
	CHECK_EQ_INT(l.o[0].mtime, 1796543286);
	CHECK_STR(l.o[1].key, "chunks/d\xc3\xa9\xc3\xa9");
	CHECK_EQ_INT(s3xml_check(S3XML_LIST, &l), 0);

	/* an empty page, and s3rver's way of writing one */
	CHECK_EQ_INT(parse(S3XML_LIST, "<ListBucketResult><IsTruncated>false</IsTruncated>"
				       "</ListBucketResult>", &l, &err), 0);
	CHECK_EQ_INT(l.n, 0);
	CHECK_EQ_INT(parse(S3XML_LIST, "<ListBucketResult/>", &l, &err), 0);
	/* cut short without a token: refused (the next page could never be asked for) */
	CHECK_EQ_INT(parse(S3XML_LIST, "<ListBucketResult><IsTruncated>true</IsTruncated>"
				       "</ListBucketResult>", &l, &err), -EBADMSG);
	/* another root */
	CHECK_EQ_INT(parse(S3XML_LIST, "<Error><Code>NoSuchBucket</Code></Error>", &l, &err),
		     -EBADMSG);
	CHECK(strstr(err.msg, "<Error>") != NULL);
	/* a key longer than S3 allows */
	{
		size_t n = 2 * S3XML_KEY_MAX + 200;
		char *big = malloc(n);
		int k = snprintf(big, n, "<ListBucketResult><Contents><Key>");
		memset(big + k, 'a', S3XML_KEY_MAX + 1);
		k += S3XML_KEY_MAX + 1;
		snprintf(big + k, n - (size_t)k, "</Key></Contents></ListBucketResult>");
		CHECK_EQ_INT(parse(S3XML_LIST, big, &l, &err), -E2BIG);
		free(big);
	}
	/* more entries than a page holds */
	{
		size_t n = (S3XML_LIST_MAX + 2) * 40 + 100, o = 0;
		char *big = malloc(n);
		o += (size_t)snprintf(big + o, n - o, "<ListBucketResult>");
		for (int i = 0; i <= S3XML_LIST_MAX; i++)
			o += (size_t)snprintf(big + o, n - o, "<Contents><Key>k%d</Key></Contents>", i);
		snprintf(big + o, n - o, "</ListBucketResult>");
		CHECK_EQ_INT(parse(S3XML_LIST, big, &l, &err), -E2BIG);
		free(big);
	}
	/* sizes: digits only, within int64 */
	CHECK_EQ_INT(parse(S3XML_LIST, "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size>"
				       "</Contents></ListBucketResult>", &l, &err), -EBADMSG);
	CHECK_EQ_INT(parse(S3XML_LIST, "<ListBucketResult><Contents><Key>k</Key><Size>"
				       "99999999999999999999</Size></Contents></ListBucketResult>",
			   &l, &err), -EBADMSG);
	CHECK_EQ_INT(parse(S3XML_LIST, "<ListBucketResult><Contents><Key>k</Key><Size>"
				       "9223372036854775808</Size></Contents></ListBucketResult>",
			   &l, &err), -E2BIG);
	CHECK_EQ_INT(parse(S3XML_LIST, "<ListBucketResult><Contents><Key>k</Key><LastModified>"
				       "yesterday</LastModified></Contents></ListBucketResult>", &l,
			   &err), -EBADMSG);
	/* an object without a key */
	CHECK_EQ_INT(parse(S3XML_LIST, "<ListBucketResult><Contents><Size>1</Size></Contents>"
				       "</ListBucketResult>", &l, &err), -EBADMSG);
}

static void test_refused_xml(void)
{
	static struct s3xml_list l;
	struct k8_err err;
	static const char *bad[] = {
		"",                                                          /* no element */
		"<ListBucketResult>",                                        /* left open */
		"<ListBucketResult></ListBucketResul>",                      /* mismatched */
		"</ListBucketResult>",
		"<ListBucketResult></ListBucketResult><ListBucketResult/>",  /* two roots */
		"text<ListBucketResult/>",                                   /* text outside */
		"<!DOCTYPE x [<!ENTITY a \"b\">]><ListBucketResult/>",         /* a DTD */
		"<ListBucketResult><![CDATA[x]]></ListBucketResult>",
		"<ListBucketResult><?pi x?></ListBucketResult>",
		"<ListBucketResult>&ent;</ListBucketResult>",                /* unknown entity */
		"<ListBucketResult>&#0;</ListBucketResult>",                 /* NUL */
		"<ListBucketResult>&#xD800;</ListBucketResult>",             /* a surrogate */
		"<ListBucketResult>&#x110000;</ListBucketResult>",
		"<ListBucketResult>&#123456789;</ListBucketResult>",
		"<ListBucketResult>&#12</ListBucketResult>",
		"<ListBucketResult>\x01</ListBucketResult>",                 /* a control */
		"<ListBucketResult a=b></ListBucketResult>",                 /* unquoted */
		"<ListBucketResult a=\"b></ListBucketResult>",
		"<ListBucketResult a></ListBucketResult>",
		"<ListBucketResult /x>",
		"<1ListBucketResult/>",
		"<ListBucketResult><!-- open</ListBucketResult>",
		"<?xml version=\"1.0\"",
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int r = parse(S3XML_LIST, bad[i], &l, &err);
		if (r != -EBADMSG)
			fprintf(stderr, "case %zu: %d %s\n", i, r, err.msg);
		CHECK_EQ_INT(r, -EBADMSG);
		CHECK(err.msg[0] != '\0');
	}
	/* what is allowed around the root: a BOM, a declaration, comments, white space */
	CHECK_EQ_INT(parse(S3XML_LIST, "\xef\xbb\xbf<?xml version=\"1.0\"?>\n<!-- c -->"
				       "<a:ListBucketResult x='1' y=\"2\"><!-- c --></a:ListBucketResult>"
				       "\n<!-- end -->\n", &l, &err), 0);
	/* too deep */
	{
		char deep[1024] = "<ListBucketResult>";
		for (int i = 0; i < S3XML_MAX_DEPTH; i++)
			strcat(deep, "<a>");
		CHECK_EQ_INT(parse(S3XML_LIST, deep, &l, &err), -E2BIG);
	}
	/* a value past the walker's text bound */
	{
		size_t n = 10000;
		char *big = malloc(n);
		int k = snprintf(big, n, "<ListBucketResult><Name>");
		memset(big + k, 'x', 5000);
		snprintf(big + k + 5000, n - (size_t)k - 5000, "</Name></ListBucketResult>");
		CHECK_EQ_INT(parse(S3XML_LIST, big, &l, &err), -E2BIG);
		free(big);
	}
	/* past the size of a whole answer: refused before a byte is read */
	CHECK_EQ_INT(s3xml_list("<", (size_t)S3XML_MAX_BYTES + 1, &l, &err), -E2BIG);
}

static void test_error_upload_parts_complete(void)
{
	struct s3xml_error e;
	struct s3xml_upload u;
	static struct s3xml_parts p;
	struct s3xml_complete c;
	struct k8_err err;
	char longmsg[2000] = "<Error><Code>SlowDown</Code><Message>";

	CHECK_EQ_INT(parse(S3XML_ERROR, "<Error><Code>NoSuchKey</Code><Message>The specified key "
				        "does not exist.</Message><Key>x</Key></Error>", &e, &err), 0);
	CHECK_STR(e.code, "NoSuchKey");
	CHECK_STR(e.message, "The specified key does not exist.");
	/* a long message is cut, not refused */
	memset(longmsg + strlen(longmsg), 'm', 1000);
	strcat(longmsg, "</Message></Error>");
	CHECK_EQ_INT(parse(S3XML_ERROR, longmsg, &e, &err), 0);
	CHECK_EQ_INT(strlen(e.message), sizeof(e.message) - 1);

	CHECK_EQ_INT(parse(S3XML_UPLOAD_ID, "<InitiateMultipartUploadResult><Bucket>b</Bucket>"
					    "<Key>k</Key><UploadId>VXBsb2FkIElE</UploadId>"
					    "</InitiateMultipartUploadResult>", &u, &err), 0);
	CHECK_STR(u.id, "VXBsb2FkIElE");
	CHECK_EQ_INT(parse(S3XML_UPLOAD_ID, "<InitiateMultipartUploadResult/>", &u, &err),
		     -EBADMSG);

	CHECK_EQ_INT(parse(S3XML_PARTS, "<ListPartsResult><IsTruncated>true</IsTruncated>"
				        "<NextPartNumberMarker>2</NextPartNumberMarker>"
				        "<Part><PartNumber>1</PartNumber><ETag>\"a\"</ETag>"
				        "<Size>5242880</Size></Part><Part><PartNumber>2</PartNumber>"
				        "<ETag>\"b\"</ETag><Size>7</Size></Part></ListPartsResult>",
			   &p, &err), 0);
	CHECK_EQ_INT(p.n, 2);
	CHECK(p.truncated);
	CHECK_EQ_INT(p.next_marker, 2);
	CHECK_EQ_INT(p.p[0].number, 1);
	CHECK_EQ_INT(p.p[0].size, 5242880);
	CHECK_STR(p.p[1].etag, "\"b\"");
	CHECK_EQ_INT(parse(S3XML_PARTS, "<ListPartsResult><Part><PartNumber>10001</PartNumber>"
				        "<ETag>x</ETag></Part></ListPartsResult>", &p, &err), -E2BIG);
	CHECK_EQ_INT(parse(S3XML_PARTS, "<ListPartsResult><Part><ETag>x</ETag></Part>"
				        "</ListPartsResult>", &p, &err), -EBADMSG);

	CHECK_EQ_INT(parse(S3XML_COMPLETE, "<CompleteMultipartUploadResult><ETag>\"e-3\"</ETag>"
					   "</CompleteMultipartUploadResult>", &c, &err), 0);
	CHECK(!c.failed);
	CHECK_STR(c.etag, "\"e-3\"");
	/* S3 answers 200 and an error when completing fails late */
	CHECK_EQ_INT(parse(S3XML_COMPLETE, "<Error><Code>InternalError</Code><Message>retry"
					   "</Message></Error>", &c, &err), 0);
	CHECK(c.failed);
	CHECK_STR(c.error.code, "InternalError");
}

/* A result that crossed a pipe: counts checked, strings cut at their array's end. */
static void test_check(void)
{
	static struct s3xml_list l;
	static struct s3xml_parts p;
	struct s3xml_error e;

	memset(&l, 'x', sizeof(l));
	l.n = 2;
	CHECK_EQ_INT(s3xml_check(S3XML_LIST, &l), 0);
	CHECK_EQ_INT(strlen(l.o[1].key), S3XML_KEY_MAX);
	CHECK_EQ_INT(strlen(l.next), S3XML_TOKEN_MAX);
	l.n = S3XML_LIST_MAX + 1;
	CHECK_EQ_INT(s3xml_check(S3XML_LIST, &l), -EBADMSG);
	memset(&p, 0, sizeof(p));
	p.n = 0xffffffffu;
	CHECK_EQ_INT(s3xml_check(S3XML_PARTS, &p), -EBADMSG);
	memset(&e, 'y', sizeof(e));
	CHECK_EQ_INT(s3xml_check(S3XML_ERROR, &e), 0);
	CHECK_EQ_INT(strlen(e.code), sizeof(e.code) - 1);
	CHECK_EQ_INT(s3xml_check((enum s3xml_kind)99, &e), -EBADMSG);
	CHECK_EQ_INT(s3xml_size((enum s3xml_kind)99), 0);
}

int main(void)
{
	test_list();
	test_refused_xml();
	test_error_upload_parts_complete();
	test_check();
	return T_DONE();
}
