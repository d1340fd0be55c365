package archive

// CreateMask is createMask, for tests.
var CreateMask = createMask
