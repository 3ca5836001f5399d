// Package api is the client of a meshnode node's local HTTP API and the JSON shapes that
// the node serves and the client decodes: the CLI, the testnet and tests all talk to a node
// through it, so there is one place where requests are built, authenticated and their
// errors turned into Go errors carrying the server's message.
//
// The package also owns the API's token file (created by the node at first start, read by
// clients); both halves of the scheme that keeps the token home (auth.go: the client makes
// the node prove it holds the token before sending anything, then signs each request with
// it; the node's Verifier answers the proof, checks signatures and signs its answers), so
// that the client and every server that speaks to it share one implementation; the
// runtime file a running node writes and how a client tells a stale one; and how a client
// finds a node: --api / MESHNODE_API, the node's data directory (--data-dir /
// MESHNODE_DATA_DIR) and MESHNODE_TOKEN.
//
// It must not import node, nor anything that runs a node: only plain data types of the
// packages whose values the API serves (the job views of consensus, the profile of mesh).
package api
