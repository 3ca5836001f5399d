package node

import "github.com/meshnode/meshnode/node/dashboard"

// dashboardRoutes serves the web dashboard at "/" (its assets under "/ui/"). The page is
// static and public; the API calls it makes need the token like any other client's.
func (n *Node) dashboardRoutes() {
	h := dashboard.Handler()
	n.mux.Handle("GET /{$}", h)
	n.mux.Handle("GET /ui/", h)
}
