// Package local is the session store's backend on a filesystem, through
// afero: the OS filesystem for a real store, afero's MemMapFs in tests.
//
// Objects are files named after the object (directories for the slashes),
// 0600 in 0700 directories. A Put writes a temporary file beside the object
// (".tmp-" prefix, hidden from List) and renames it into place, so readers
// never see part of an object. An exclusive Put links the temporary file to
// the object's name with link(2), which fails if the name exists, on a
// store made by [NewDir]; on any other afero.Fs (no hard links) it creates
// the object with O_EXCL under a mutex of the Backend, which is exclusive
// only among users of that one Backend value and, if the process dies
// mid-write, can leave a partial object. Use NewDir for a store on disk.
//
// Limitations: temporary files of a process that died mid-Put are left
// behind (hidden from List); directories are not fsynced.
package local
