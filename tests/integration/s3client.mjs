// SPDX-License-Identifier: Apache-2.0
// s3client.mjs - the official AWS client (@aws-sdk/client-s3, pinned in scripts/npm-pins,
// set "s3") reading and writing a bucket on its own, for the stores' tests: what kosa8 put
// there is checked by code that is not kosa8's.
//   node s3client.mjs ENDPOINT BUCKET AK SK ls PREFIX      {"keys": [{"key","size"}]}
//                                          get KEY FILE     the object into FILE
//                                          put KEY FILE     FILE as the object
//                                          rm KEY
import { createRequire } from "node:module";
import fs from "node:fs";

const require = createRequire(process.env.K8_NPM_S3 + "/noop.js");
const { S3Client, ListObjectsV2Command, GetObjectCommand, PutObjectCommand,
        DeleteObjectCommand } = require("@aws-sdk/client-s3");

const [endpoint, bucket, ak, sk, cmd, a, b] = process.argv.slice(2);
const s3 = new S3Client({
  endpoint, region: process.env.K8_S3_REGION || "us-east-1", forcePathStyle: true,
  credentials: { accessKeyId: ak, secretAccessKey: sk },
  // plain requests s3rver understands: no aws-chunked trailers, no checksums it lacks
  requestChecksumCalculation: "WHEN_REQUIRED", responseChecksumValidation: "WHEN_REQUIRED",
});

if (cmd === "ls") {
  const keys = [];
  let token;
  do {
    const r = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: a,
                                                      ContinuationToken: token }));
    for (const o of r.Contents || []) keys.push({ key: o.Key, size: o.Size });
    token = r.IsTruncated ? r.NextContinuationToken : undefined;
  } while (token);
  process.stdout.write(JSON.stringify({ keys }) + "\n");
} else if (cmd === "get") {
  const r = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: a }));
  fs.writeFileSync(b, Buffer.from(await r.Body.transformToByteArray()));
} else if (cmd === "put") {
  await s3.send(new PutObjectCommand({ Bucket: bucket, Key: a, Body: fs.readFileSync(b) }));
} else if (cmd === "rm") {
  await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: a }));
} else {
  process.stderr.write("s3client: unknown command " + cmd + "\n");
  process.exit(2);
}
