// Command meshnode is the one binary of a meshnode mesh: it joins a mesh, trains, submits
// jobs and runs a local testnet. See README.md.
package main
