package wire

// NewChunkWriter is a ChunkWriter that sends with send, for tests.
func NewChunkWriter(send func([]byte) error) *ChunkWriter { return &ChunkWriter{send: send} }
