// Package netns builds small networks of Linux network namespaces for tests that exec
// real `meshnode join` processes as if on separate machines: hosts on one segment, each
// with its own address (not loopback), and hosts behind a NAT router (iptables
// MASQUERADE, no inbound connection). Every namespace, link and address it creates lives
// inside namespaces it created, named uniquely per network (so parallel runs do not
// clash), and is removed when the test ends, failed or not; nothing is configured in the
// caller's namespace and no packet leaves the machine.
//
// It needs root and the ip command (iptables too for NAT); Require skips the test,
// saying why, where they are missing. It is test support: it takes a testing.TB and
// fails the test on any error.
package netns
