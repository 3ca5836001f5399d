// Package dashboard is the node's web page: static files embedded in the binary (no CDN, no
// build step) that show the mesh, the raft group and the jobs by polling the same JSON API
// the CLI uses (/v1/status, /v1/peers, /v1/raft, /v1/jobs, /v1/jobs/{id}).
//
// The page holds no secret of its own: it reads the API token from the URL fragment
// (#token=..., which browsers never send to a server) or from a field the user pastes it
// into, keeps it in the tab's sessionStorage and sends it as a bearer token. Without the
// token every API call fails with 401 and the page says so. The package serves files only;
// it must not read node state or talk to the API itself.
package dashboard
