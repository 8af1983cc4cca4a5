// One call of the JavaScript SDK (@aws-sdk/client-s3, unmodified) through the guard, for
// tests/integration/test_guard_s3_clients.py: node client.mjs OP KEY [BODY]. The endpoint and
// the credentials (the lease's token and the lease) come from LEASEGATE_URL, LEASE_TOKEN and
// LEASE. Prints the result; on an error, "ERROR name: message" and exit 1.
import {
  S3Client, PutObjectCommand, GetObjectCommand, HeadObjectCommand, ListObjectsV2Command, DeleteObjectCommand,
} from "@aws-sdk/client-s3";

const [op, key, body] = process.argv.slice(2);
const s3 = new S3Client({
  endpoint: process.env.LEASEGATE_URL, region: "us-east-1", forcePathStyle: true, maxAttempts: 1,
  credentials: { accessKeyId: process.env.LEASE_TOKEN, secretAccessKey: process.env.LEASE },
});
const Bucket = process.env.BUCKET || "reports";
try {
  if (op === "put") {
    await s3.send(new PutObjectCommand({ Bucket, Key: key, Body: body }));
    console.log("put");
  } else if (op === "get") {
    const r = await s3.send(new GetObjectCommand({ Bucket, Key: key, Range: process.env.RANGE }));
    process.stdout.write(await r.Body.transformToString());
  } else if (op === "head") {
    const r = await s3.send(new HeadObjectCommand({ Bucket, Key: key }));
    console.log(r.ContentLength);
  } else if (op === "list") {
    const r = await s3.send(new ListObjectsV2Command({ Bucket, Prefix: key }));
    console.log((r.Contents || []).map((o) => o.Key).join("\n"));
  } else if (op === "delete") {
    await s3.send(new DeleteObjectCommand({ Bucket, Key: key }));
    console.log("deleted");
  } else {
    throw new Error("unknown op " + op);
  }
} catch (e) {
  console.log("ERROR " + e.name + ": " + e.message);
  process.exit(1);
}
