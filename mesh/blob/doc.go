// Package blob stores content-addressed blobs (datasets, checkpoints) on disk and moves them
// between mesh members on ProtocolID: a blob's ID is the SHA-256 of its manifest, the
// manifest lists the SHA-256 of every chunk, and every fetched chunk and manifest is
// verified before it is kept, so a peer serving corrupt bytes costs a refetch, never a
// corrupt file. Fetch spreads chunk requests over several sources; Replicate asks a peer to
// pull a blob it should hold; FetchAtMost fetches a blob whose size a peer announced
// (offender evidence), refused from its manifest when larger.
//
// Which blob is served to whom, and which pull is taken up to what size, is the caller's
// policy (Config.AllowServe, Config.AcceptPull); a blob this node offers a peer (Replicate)
// is served to that peer while the offer lasts.
//
// blob must not decide what to store or where (the node and the engine do), and it must
// not reach peers except through its Host, which serves and opens streams with admitted
// peers only (mesh.Mesh satisfies it). It imports no membership code.
package blob
