// Package s3store is the session store's backend on S3-compatible object
// storage, through minio-go: AWS S3, MinIO, versitygw and the like.
//
// Objects live in one bucket under a prefix ("s3://BUCKET/PREFIX", see
// [ParseURL]); an object's name is its key with the prefix removed. A Put
// is one PUT request, which S3 makes atomic: the body is read to its end
// (in memory, or a temporary file past 16 MiB) before anything is sent, so
// an error from the reader stores nothing.
//
// An exclusive Put is a conditional create, If-None-Match: * (S3 since
// August 2024; RFC 9110 section 13.1.2), and a 412 Precondition Failed is
// fs.ErrExist. [New] checks whether the server honours the condition by
// creating a probe object twice; [Backend.ConditionalWrites] reports the
// answer. Limitations: on a server that ignores the condition an exclusive
// Put fails with [ErrNoConditionalWrites] rather than racing; the fallback
// the design calls for, a lease object with expiry, is not written yet.
// Objects over 5 GiB (one PUT's limit) cannot be stored. Credentials are
// static keys (from the AWS_* variables through [FromEnv], or set in
// [Config]); instance roles and credential files are not read.
package s3store
