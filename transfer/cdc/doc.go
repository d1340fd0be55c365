// Package cdc cuts a byte stream into content-defined chunks with FastCDC
// (Xia et al., "FastCDC: a Fast and Efficient Content-Defined Chunking
// Approach for Data Deduplication", USENIX ATC 2016): a gear rolling hash
// with normalized chunking (a stricter mask before the average size, a
// looser one after it), so that an insertion or an append moves only the
// boundaries next to it and chunk sizes cluster around the average.
//
// Boundaries depend only on the bytes and on [Params]: the gear table is
// fixed (derived from SHA-256, see gear.go) and must never change, or every
// stored chunk stops deduplicating against new data. The host and ferry's
// agent must cut with the same Params.
package cdc
