// Package s3store is the session store's backend on S3-compatible object
// storage, through minio-go: AWS S3, MinIO, versitygw and the like.
//
// Objects live in one bucket under a prefix ("s3://BUCKET/PREFIX", see
// [ParseURL]); an object's name is its key with the prefix removed. A Put
// is one PUT request, which S3 makes atomic: the body is read to its end
// (in memory, or a temporary file past 16 MiB) before anything is sent, so
// an error from the reader stores nothing.
//
// [Backend.GetRange] is one GET with a Range header (RFC 9110 section
// 14.2), for the session store's reads of a pack's trailer.
//
// An exclusive Put (a session commit) is a conditional create,
// If-None-Match: * (S3 since August 2024; RFC 9110 section 13.1.2), and
// a 412 Precondition Failed is fs.ErrExist. [New] checks whether the
// server honours the condition by creating a probe object twice;
// [Backend.ConditionalWrites] reports the answer.
//
// On a server that ignores the condition (or with [CommitLease]) an
// exclusive Put takes a lease instead of racing: the object
// "<dir>/.ferry-lease" beside the name (one per session key), written
// with a random owner, read back after [Config.LeaseSettle]; only the
// attempt that reads its own owner back checks that the name is still
// absent, creates it, and deletes the lease. A lease its holder did not
// delete (a crash) is taken over once its stated expiry has passed or
// it has been seen unchanged for [Config.LeaseTTL]. Each such commit
// costs LeaseSettle (2 s by default) and a few requests.
//
// Limitations. The lease assumes what conditional writes do not: that
// the server is strongly consistent for single objects (a read that
// starts after a write completed sees it, as AWS S3 has been since
// December 2020; an eventually consistent server can let two holders
// commit), that a PUT the client gave up on does not land later, and
// that a holder's check and PUT fit in LeaseSettle/2 and 3/4 of it
// (a slower holder gives up and tries again). Node clocks need not
// agree. Objects over 5 GiB (one PUT's limit) cannot be stored.
// Credentials are static keys (from the AWS_* variables through
// [FromEnv], or set in [Config]); instance roles and credential files
// are not read. Names whose base is ".ferry-lease" or that start with
// ".ferry-probe-" are the backend's own: refused, and hidden from List.
package s3store
