// SPDX-License-Identifier: Apache-2.0
// s3server.mjs - the snapshot stores' S3 server for tests and benches: s3rver (pinned in
// scripts/npm-pins, set "s3") on loopback, with every request's AWS Signature V4 checked
// by the AWS SDK's own signer (@smithy/signature-v4), since s3rver 3.7.1 checks only the
// access key of a V4 request. A request whose signature, credential scope or payload hash
// does not match is refused 403 SignatureDoesNotMatch, as S3 does, and counted.
//
//   node s3server.mjs --dir DIR --bucket B --access AK --secret SK [--region R]
//                     [--tls-key K --tls-cert C] [--vhost-suffix s3.localhost]
// prints {"port": N} on stdout once it listens. Unauthenticated control requests on
// /__k8/...: GET stats ({requests, refused, put_bytes, puts, gets, by_method}), POST
// reset, POST fault?method=PUT&after=N&mode=drop|500|delay[&count=C][&ms=M] (the
// request after N matching ones, and every one after it (or the C after it), has its
// connection dropped, gets a 500, or is answered M ms late; mode=none clears).
import { createRequire } from "node:module";
import { createHash } from "node:crypto";
import { PassThrough } from "node:stream";
import fs from "node:fs";

const require = createRequire(process.env.K8_NPM_S3 + "/noop.js");
const S3rver = require("s3rver");
const AWSAccount = require("s3rver/lib/models/account");
const { SignatureV4 } = require("@smithy/signature-v4");
const { Sha256 } = require("@smithy/core/checksum");

const args = {};
for (let i = 2; i < process.argv.length; i += 2)
  args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const region = args.region || "us-east-1";
const secrets = new Map([[args.access, args.secret]]);
AWSAccount.registry.clear();
new AWSAccount(111122223333, "k8test").createKeyPair(args.access, args.secret);

const stats = { requests: 0, refused: 0, put_bytes: 0, puts: 0, gets: 0, by_method: {},
                refusals: [] };
let fault = { mode: "none" };

function refuse(ctx, code, message) {
  stats.refused++;
  if (stats.refusals.length < 20) stats.refusals.push(code + ": " + message);
  ctx.status = 403;
  ctx.type = "application/xml";
  ctx.body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code>` +
    `<Message>${message}</Message></Error>`;
}

async function readBody(req) {
  const parts = [];
  for await (const c of req) parts.push(c);
  return Buffer.concat(parts);
}

// The signature the AWS SDK computes for this request, from the headers it signed.
async function expected(ctx, auth) {
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/s3\/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$/.exec(auth);
  if (!m) return { error: "malformed Authorization header" };
  const [, ak, day, reg, signedList, sig] = m;
  if (!secrets.has(ak)) return { error: "unknown access key" };
  if (reg !== region) return { error: `credential scope region ${reg}, not ${region}` };
  const amzDate = ctx.get("x-amz-date");
  if (!/^\d{8}T\d{6}Z$/.test(amzDate) || amzDate.slice(0, 8) !== day)
    return { error: "x-amz-date missing or not the credential's day" };
  const when = new Date(`${amzDate.slice(0, 4)}-${amzDate.slice(4, 6)}-${amzDate.slice(6, 8)}T` +
    `${amzDate.slice(9, 11)}:${amzDate.slice(11, 13)}:${amzDate.slice(13, 15)}Z`);
  if (Math.abs(Date.now() - when) > 15 * 60 * 1000) return { error: "request time too skewed" };
  const signed = signedList.split(";");
  if (!signed.includes("host") || !signed.includes("x-amz-date") ||
      !signed.includes("x-amz-content-sha256"))
    return { error: "host, x-amz-date and x-amz-content-sha256 must be signed" };
  const headers = {};
  for (const h of signed) {
    if (ctx.get(h) === "" && !(h in ctx.headers)) return { error: `signed header ${h} absent` };
    headers[h] = ctx.headers[h];
  }
  const query = {};
  if (ctx.querystring)
    for (const kv of ctx.querystring.split("&")) {
      const i = kv.indexOf("=");
      const k = decodeURIComponent(i < 0 ? kv : kv.slice(0, i));
      query[k] = i < 0 ? "" : decodeURIComponent(kv.slice(i + 1));
    }
  const [hostname, port] = (ctx.headers.host || "").split(":");
  const signer = new SignatureV4({
    credentials: { accessKeyId: ak, secretAccessKey: secrets.get(ak) },
    region, service: "s3", sha256: Sha256, uriEscapePath: false, applyChecksum: false,
  });
  const out = await signer.sign({ method: ctx.method, protocol: ctx.protocol + ":", hostname,
    port: port ? Number(port) : undefined, path: ctx.path, query, headers },
    { signingDate: when });
  const want = /Signature=([0-9a-f]{64})/.exec(out.headers.authorization)[1];
  return want === sig ? { ok: true } : { error: "signature does not match" };
}

async function control(ctx) {
  if (ctx.path === "/__k8/stats") {
    ctx.type = "application/json";
    ctx.body = JSON.stringify(stats);
  } else if (ctx.path === "/__k8/reset" && ctx.method === "POST") {
    for (const k of ["requests", "refused", "put_bytes", "puts", "gets"]) stats[k] = 0;
    stats.by_method = {};
    stats.refusals = [];
    ctx.body = "{}";
  } else if (ctx.path === "/__k8/fault" && ctx.method === "POST") {
    fault = { mode: ctx.query.mode || "none", method: ctx.query.method || "PUT",
              after: Number(ctx.query.after || 0), seen: 0,
              count: ctx.query.count ? Number(ctx.query.count) : Infinity,
              ms: Number(ctx.query.ms || 1000) };
    ctx.body = "{}";
  } else {
    ctx.status = 404;
  }
}

async function verify(ctx, next) {
  if (ctx.path.startsWith("/__k8/")) return control(ctx);
  stats.requests++;
  stats.by_method[ctx.method] = (stats.by_method[ctx.method] || 0) + 1;
  if (fault.mode !== "none" && ctx.method === fault.method && fault.seen++ >= fault.after &&
      fault.count-- > 0) {
    if (fault.mode === "delay") {
      await new Promise((r) => setTimeout(r, fault.ms));
    } else if (fault.mode === "drop") {
      ctx.req.socket.destroy();
      ctx.respond = false;
      return;
    } else {
      ctx.status = 500;
      ctx.body = "<Error><Code>InternalError</Code><Message>injected</Message></Error>";
      return;
    }
  }
  const auth = ctx.get("authorization");
  if (!auth) return refuse(ctx, "AccessDenied", "anonymous requests are refused here");
  const v = await expected(ctx, auth);
  if (v.error) return refuse(ctx, "SignatureDoesNotMatch", v.error);
  if (ctx.method === "PUT" || ctx.method === "POST") {
    const body = await readBody(ctx.req);
    const claimed = ctx.get("x-amz-content-sha256");
    if (claimed !== "UNSIGNED-PAYLOAD" &&
        createHash("sha256").update(body).digest("hex") !== claimed)
      return refuse(ctx, "XAmzContentSHA256Mismatch", "the body's SHA-256 is not the one signed");
    if (ctx.method === "PUT") {
      stats.puts++;
      stats.put_bytes += body.length;
    }
    // s3rver reads the body from ctx.req as a stream: hand it one of what was read,
    // with what Koa reads of the request (url, method, headers, socket)
    const old = ctx.req, pt = new PassThrough();
    for (const k of ["url", "method", "headers", "rawHeaders", "httpVersion", "socket",
                     "connection", "httpVersionMajor", "httpVersionMinor"])
      pt[k] = old[k];
    pt.end(body);
    ctx.req = ctx.request.req = pt;
  } else if (ctx.method === "GET") {
    stats.gets++;
  }
  return next();
}

const opts = {
  address: "127.0.0.1", port: Number(args.port || 0), silent: true,
  directory: args.dir, configureBuckets: [{ name: args.bucket }],
  serviceEndpoint: args["vhost-suffix"] || "amazonaws.com", vhostBuckets: true,
  allowMismatchedSignatures: false,
};
if (args["tls-key"]) {
  opts.key = fs.readFileSync(args["tls-key"]);
  opts.cert = fs.readFileSync(args["tls-cert"]);
}
const server = new S3rver(opts);
server.middleware.unshift(verify);
server.on("error", (e) => { if (process.env.K8_S3_DEBUG) console.error(e); });
const addr = await server.run();
process.stdout.write(JSON.stringify({ port: addr.port }) + "\n");
